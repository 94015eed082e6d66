"""What a person at the terminal sees (issue 17, item 7): `vhd refresh` of every family prints a
few progress lines and the summary table, not one Prefect log line per task (those go to
$PREFECT_HOME/logs/vhd.log); its Prefect runs are named after batch, families and modules and its
summary artifact names the warehouse and the stage seconds; `vhd envs` prints whole ids when piped
and prefixes `vhd audit` resolves on a terminal; no `--help` shows a `<bool>`."""

import io
import json
import os
import re
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from conftest import run_vhd
from vhd.cli import app
from vhd.flows.progress import RefreshDisplay, listening, report
from vhd.mechanisms import registry

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(scope="module")
def whole_refresh(prefect_server, tmp_path_factory):
    """`vhd refresh` of every registered family, one θ each, with its default output (not a terminal)."""
    db = tmp_path_factory.mktemp("terminal") / "vhd.duckdb"
    env = {key: os.environ.pop(key) for key in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS") if key in os.environ}
    os.environ["COLUMNS"] = "100"  # the table's width, hence its line count, is not the runner's terminal's
    try:
        result = run_vhd(prefect_server, "refresh", "--per-family", "1", "--batch", "tty", "--db", db)
    finally:
        os.environ.pop("COLUMNS")
        os.environ.update(env)
    assert result.returncode == 0, result.stderr[-3000:]
    return db, result


@pytest.mark.registry
def test_a_refresh_of_every_family_prints_a_few_lines_and_ends_with_the_summary_table(whole_refresh):
    db, result = whole_refresh
    lines = result.stdout.splitlines()
    names = registry.names()
    # a line a family in the summary table, and at most 14 more (was 30 lines for 16 families)
    assert len(lines) + len(result.stderr.splitlines()) <= 14 + len(names), result.stdout + result.stderr
    assert result.stderr == ""  # no Prefect log line on the screen
    assert lines[0].startswith(f"refresh of {len(names)} families") and "logs/vhd.log" in lines[0]
    progress = [i for i, line in enumerate(lines) if "families done:" in line]
    title = next(i for i, line in enumerate(lines) if line.strip().startswith("refresh ") and i > 0)
    assert progress and max(progress) < title  # the progress lines come first, then the summary table
    rows = [line for line in lines[title:] if line.startswith("│")]
    assert sorted(row.split("│")[1].strip() for row in rows) == sorted(registry.names())
    assert lines[-1].startswith("corpus version v1")
    log = Path(os.environ["PREFECT_HOME"]) / "logs" / "vhd.log"
    assert "Task run 'check inventory_dp module " in log.read_text()  # Prefect's lines went to the file


@pytest.mark.registry
def test_prefect_runs_are_named_and_the_summary_artifact_names_warehouse_and_stage_seconds(whole_refresh,
                                                                                            prefect_server):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter, ArtifactFilterFlowRunId, FlowRunFilter, FlowRunFilterId,
    )

    db, result = whole_refresh
    run_id = re.search(r"refresh ([0-9a-f-]{36})", result.stdout).group(1)
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(run_id)
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])), limit=200)
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
    names = registry.names()
    assert flow_run.name == f"refresh tty: {len(names)} families ({names[0]}, {names[1]}, …)"
    names = {t.name for t in tasks}
    assert {f"sample {f}" for f in registry.names()} <= names and "audit" in names
    checks = [n for n in names if n.startswith("check ")]
    assert {n.split()[1] for n in checks} == set(registry.names())
    assert all(re.fullmatch(r"check \w+ module [0-9a-f]{12}", n) for n in checks)
    [summary] = [a for a in artifacts if a.key == "refresh-summary"]
    assert f"warehouse `{db}`" in summary.data and "seconds per stage: sample " in summary.data


@pytest.mark.registry
def test_envs_piped_prints_whole_ids(whole_refresh, monkeypatch):
    db, _ = whole_refresh
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    piped = run_vhd("http://127.0.0.1:9", "envs", "--db", db)
    assert piped.returncode == 0, piped.stderr
    header, *rows = piped.stdout.splitlines()
    assert header.split("\t")[0] == "env_id"
    ids = [row.split("\t")[0] for row in rows]
    assert all(re.fullmatch(r"[0-9a-f]{64}", i) for i in ids)
    as_json = run_vhd("http://127.0.0.1:9", "envs", "--db", db, "--json")
    assert ids == [r["env_id"] for r in json.loads(as_json.stdout)]


@pytest.mark.registry
def test_envs_on_a_terminal_prints_prefixes_that_resolve(whole_refresh, monkeypatch):
    from vhd.warehouse import Warehouse

    db, _ = whole_refresh
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws as on a terminal
    monkeypatch.setenv("COLUMNS", "70")  # a narrow one: the id column is not cut
    shown = run_vhd("http://127.0.0.1:9", "envs", "--db", db)
    assert shown.returncode == 0, shown.stderr
    prefixes = [m.group(1) for line in ANSI.sub("", shown.stdout).splitlines()
                if (m := re.match(r"│ ([0-9a-f]+) +│", line))]
    full = [r["env_id"] for r in json.loads(run_vhd("http://127.0.0.1:9", "envs", "--db", db, "--json").stdout)]
    assert len(prefixes) == len(full) and all(len(p) >= 16 for p in prefixes)
    with Warehouse.open(db, read_only=True) as wh:
        assert [wh.resolve_env_id(p) for p in prefixes] == full
    audited = run_vhd("http://127.0.0.1:9", "audit", prefixes[0], "--db", db, "--json")
    assert audited.returncode == 0 and json.loads(audited.stdout)["chain"][0]["id"] == full[0]


def _commands(group, path=()):
    """Every command's path under `group`, a group's subcommands included."""
    for name, command in group.commands.items():
        yield (*path, name)
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))


def test_no_help_shows_a_bool_metavar():
    runner = CliRunner()
    commands = [(), *_commands(typer.main.get_command(app))]
    assert ("refresh",) in commands and ("passages", "add") in commands
    for command in commands:
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "160"})
        assert result.exit_code == 0, (command, result.output)
        assert "<bool>" not in result.output, (command, result.output)
    assert "--json" in runner.invoke(app, ["envs", "--help"], env={"COLUMNS": "160"}).output


def test_the_bool_check_sees_typers_own_label():
    """A control: plain typer labels a flag `<bool>`, so the check above would see one."""
    plain = typer.Typer()

    @plain.command()
    def one(flag: bool = typer.Option(False, "--flag")) -> None:
        pass

    @plain.command()
    def two() -> None:
        pass

    assert "<bool>" in CliRunner().invoke(plain, ["one", "--help"], env={"COLUMNS": "160"}).output


def test_plain_progress_is_a_line_at_each_quarter_but_the_last():
    out = io.StringIO()
    keys = [f"family{i}" for i in range(16)]
    with RefreshDisplay(Console(file=out, width=100), live=False) as display, listening(display):
        for key in keys:
            report("planned", key, total=2)
        for key in keys:
            report("started", key)
            report("advanced", key, admitted=1, rejected=0, done=1)
            report("finished", key, admitted=1, rejected=1, done=2)
    lines = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["4/16 families done", "8/16 families done",
                                                      "12/16 families done"]
    assert "12 admitted, 12 rejected" in lines[-1] and "ETA" in lines[-1]
    report("finished", "nobody listens", admitted=0, rejected=0, done=0)  # no listener: nothing happens
