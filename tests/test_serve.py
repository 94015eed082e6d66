"""`vhd serve`'s deployment is built (never served) and its schedule matches prefect.yaml's."""

from pathlib import Path

import pytest
import yaml

from conftest import run_vhd


ROOT = Path(__file__).resolve().parents[1]


def test_nightly_deployment_runs_refresh_on_the_cron(tmp_path):
    from vhd.flows.serve import nightly

    deployment = nightly(cron="0 3 * * *", db_path=str(tmp_path / "w.duckdb"), per_family=7)
    assert deployment.name == "nightly" and deployment.flow_name == "refresh"
    assert deployment.entrypoint == "vhd.flows.refresh.refresh"
    [schedule] = deployment.schedules
    assert schedule.active and schedule.schedule.cron == "0 3 * * *" and schedule.schedule.timezone == "UTC"
    # every family registered when a run starts (the flow's default), so a new family needs no edit here
    assert deployment.parameters == {"per_family": 7, "db_path": str(tmp_path / "w.duckdb")}
    assert nightly(families=["knapsack"]).parameters["families"] == ["knapsack"]
    assert "batch" not in deployment.parameters  # each night's run takes its date as the batch


def test_prefect_yaml_declares_the_same_deployment():
    from vhd.flows.serve import nightly

    built = nightly()
    [declared] = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    assert declared["name"] == built.name
    assert declared["entrypoint"] == "vhd/flows/refresh.py:refresh"
    [schedule] = declared["schedules"]
    assert (schedule["cron"], schedule["timezone"]) == (built.schedules[0].schedule.cron,
                                                        built.schedules[0].schedule.timezone)
    # no family list to keep up to date: the flow takes every family registered when it runs
    assert "families" not in declared["parameters"] and "families" not in built.parameters


def test_a_bad_cron_is_one_line_and_exit_1(tmp_path):
    result = run_vhd("http://127.0.0.1:9", "serve", "--cron", "every night", "--db", tmp_path / "w.duckdb")
    assert result.returncode == 1 and "--cron 'every night'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--help"])
def test_serve_help_explains(flag):
    result = run_vhd("http://127.0.0.1:9", "serve", flag)
    assert result.returncode == 0 and "PREFECT_API_URL" in result.stdout and "--cron" in result.stdout
