"""`vhd serve`'s deployments (the nightly refresh, the weekly full audit) are built (never served) and
their schedules match prefect.yaml's."""

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


def test_weekly_verify_deployment_runs_the_full_audit_on_its_cron(tmp_path):
    from vhd.flows.serve import weekly_verify

    deployment = weekly_verify(db_path=str(tmp_path / "w.duckdb"))
    assert deployment.name == "weekly-verify" and deployment.flow_name == "verify"
    assert deployment.entrypoint == "vhd.flows.verify.verify"
    [schedule] = deployment.schedules
    assert schedule.active and schedule.schedule.cron == "0 4 * * 0" and schedule.schedule.timezone == "UTC"
    assert deployment.parameters == {"db_path": str(tmp_path / "w.duckdb"), "full": True}
    with pytest.raises(ValueError):
        weekly_verify(cron="weekly")


def test_prefect_yaml_declares_the_same_deployments():
    from vhd.flows.serve import nightly, weekly_verify

    built = nightly()
    declared, audit = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    weekly = weekly_verify()
    assert (audit["name"], audit["entrypoint"]) == (weekly.name, "vhd/flows/verify.py:verify")
    assert audit["parameters"] == weekly.parameters
    [schedule] = audit["schedules"]
    assert (schedule["cron"], schedule["timezone"]) == (weekly.schedules[0].schedule.cron,
                                                        weekly.schedules[0].schedule.timezone)
    assert declared["name"] == built.name
    assert declared["entrypoint"] == "vhd/flows/refresh.py:refresh"
    [schedule] = declared["schedules"]
    assert (schedule["cron"], schedule["timezone"]) == (built.schedules[0].schedule.cron,
                                                        built.schedules[0].schedule.timezone)
    # no family list to keep up to date: the flow takes every family registered when it runs
    assert "families" not in declared["parameters"] and "families" not in built.parameters


@pytest.mark.parametrize("flag", ["--cron", "--verify-cron"])
def test_a_bad_cron_is_one_line_and_exit_1(tmp_path, flag):
    result = run_vhd("http://127.0.0.1:9", "serve", flag, "every night", "--db", tmp_path / "w.duckdb")
    assert result.returncode == 1 and f"{flag} 'every night'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--help"])
def test_serve_help_explains(flag):
    result = run_vhd("http://127.0.0.1:9", "serve", flag)
    assert result.returncode == 0 and "PREFECT_API_URL" in result.stdout and "--cron" in result.stdout
    assert "--verify-cron" in result.stdout
