"""A refresh killed with SIGKILL at any point loses no committed row, duplicates none and leaves no
environment without lineage; the rerun ends with exactly the rows of an uninterrupted run."""

import os
import signal
import subprocess
import sys
import time

import duckdb
import pytest

ARGS = ("refresh", "--families", "inventory_dp,knapsack,lp", "--per-family", "3", "--seed", "5", "--batch", "crash")
KEYS = {"models": "model_id", "solutions": "solution_id", "setter_outputs": "setter_output_id",
        "environments": "env_id", "checks": "check_id",
        "lineage_edges": "child_id || ':' || parent_id || ':' || relation",
        "corpus_versions": "version"}
TABLES = tuple(KEYS)


def _start(api_url, db):
    env = {**os.environ, "PREFECT_API_URL": api_url}
    return subprocess.Popen([sys.executable, "-m", "vhd.cli", *ARGS, "--db", str(db)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _rows(db):
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = {t: con.execute(f"SELECT {key} FROM {t}").fetchall() for t, key in KEYS.items()}
        orphans = con.execute("""SELECT count(*) FROM environments e WHERE NOT EXISTS
                                 (SELECT 1 FROM lineage_edges x
                                  WHERE x.child_id = e.env_id AND x.relation = 'graded_by')
                                 OR NOT EXISTS (SELECT 1 FROM checks c WHERE c.env_id = e.env_id)""").fetchall()[0][0]
    finally:
        con.close()
    return {t: [r[0] for r in v] for t, v in rows.items()}, orphans


@pytest.fixture(scope="module")
def reference(prefect_server, tmp_path_factory):
    db = tmp_path_factory.mktemp("crash") / "whole.duckdb"
    process = _start(prefect_server, db)
    opened = _wait_for(db, process)
    assert process.wait(timeout=600) == 0
    return _rows(db)[0], time.perf_counter() - opened


def _wait_for(db, process):
    """When the warehouse file appears (the work starts after Prefect and the imports)."""
    while not db.exists():
        assert process.poll() is None, "refresh ended before it opened the warehouse"
        time.sleep(0.01)
    return time.perf_counter()


@pytest.mark.parametrize("fraction", [0.2, 0.4, 0.55, 0.7, 0.9])
def test_sigkill_then_rerun_loses_and_duplicates_nothing(prefect_server, reference, tmp_path, fraction):
    whole, seconds = reference
    db = tmp_path / "killed.duckdb"
    process = _start(prefect_server, db)
    _wait_for(db, process)
    time.sleep(seconds * fraction)  # a fraction of the way through the work
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    if db.exists():
        before, orphans = _rows(db)
        assert orphans == 0, "an environment was committed without its lineage or checks"
        assert all(len(set(v)) == len(v) for v in before.values())
    else:
        before = {t: [] for t in TABLES}
    assert _start(prefect_server, db).wait(timeout=600) == 0
    after, orphans = _rows(db)
    assert orphans == 0
    for table in TABLES:
        assert len(set(after[table])) == len(after[table]), f"duplicates in {table}"
        assert set(before[table]) <= set(after[table]), f"a committed row of {table} was lost"
        if table != "corpus_versions":
            assert set(after[table]) == set(whole[table]), f"{table} differs from an uninterrupted run"
