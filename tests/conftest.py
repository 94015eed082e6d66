"""Shared fixtures. Prefect's home and the warehouse live in temp dirs; telemetry is off;
one Prefect test harness (its embedded server takes seconds to start) serves each pytest
process (each pytest-xdist worker has its own home and server)."""

import json
import os
import subprocess
import sys
import tempfile

_HOME = tempfile.mkdtemp(prefix="vhd-prefect-home-")
os.environ["PREFECT_HOME"] = _HOME
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.pop("VHD_DB", None)

import pytest  # noqa: E402

# tests/data/ holds data, not tests: a family and its test as a contributor writes them, which
# tests/test_add_family.py drops into a copy of the tree (a conftest.py there would shadow this one)
collect_ignore = ["data"]


@pytest.fixture(scope="session")
def prefect_server():
    """The API URL of one Prefect test server shared by the whole session."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


def run_vhd(api_url, *args):
    """The real `vhd` console entry point in a fresh process, talking to the session's server."""
    env = {**os.environ, "PREFECT_API_URL": api_url}
    return subprocess.run([sys.executable, "-m", "vhd.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.fixture(scope="session")
def refreshed(prefect_server, tmp_path_factory):
    """A warehouse built once by `vhd refresh` (10 θ → up to 20 environments) and its summary."""
    db = tmp_path_factory.mktemp("warehouse") / "vhd.duckdb"
    result = run_vhd(prefect_server, "refresh", "--families", "inventory_dp", "--per-family", "10", "--seed", "3",
                     "--batch", "t1", "--db", db, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return db, json.loads(result.stdout)
