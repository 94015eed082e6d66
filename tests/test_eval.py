"""vhd eval on a small diagnostic warehouse built in process: oracle 1, default 0, random and greedy
strictly between on every diagnostic family; episodes stored (migration 004); the `evaluate` and
`report` flows (session Prefect harness) publish artifacts equal to the stored episodes."""

import json

import pytest
from typer.testing import CliRunner

from vhd.cli import app
from vhd.mechanisms import registry
from vhd.schemas.records import EpisodeRecord
from vhd.tasks.stages.annotate import annotate
from vhd.tasks.stages.in_process import check_models
from vhd.tasks.corpus.presets import DIAGNOSTIC_FAMILIES
from vhd.warehouse import Warehouse

MODELS = 3  # per family: 9 candidates (F, I, A of three θ), so that random and greedy have signal in every family
SEED = 14
# routing's A binds for some θ only: its own seed admits every presentation, random above 0 in each
SEEDS = {"routing": 21}


@pytest.fixture(scope="module")
def diagnostic_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("eval") / "vhd.duckdb"
    with Warehouse.open(path) as wh, wh.transaction():
        for name in DIAGNOSTIC_FAMILIES:
            family = registry.get(name)
            run = check_models(family, count=MODELS, seed=SEEDS.get(name, SEED), presentations=("F", "I", "A"))
            rows = [annotate(family, v) for v in run.verdicts]
            solutions = {v.candidate.solution.solution_id: v.candidate.solution for v in run.verdicts}
            wh.insert(run.models)
            wh.insert(list(solutions.values()))
            wh.insert(run.outputs)
            wh.insert([env for env, _, _ in rows])
            wh.insert([c for _, checks, _ in rows for c in checks])
            wh.insert([e for _, _, edges in rows for e in edges])
    return path


def _eval(db, *args):
    result = CliRunner().invoke(app, ["eval", "--db", str(db), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _family_means(db, agent):
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.episodes(agent)
    means = {}
    for family in DIAGNOSTIC_FAMILIES:
        rewards = [e.reward for e in rows if e.family == family]
        assert rewards, f"no {agent} episodes of {family}"
        means[family] = sum(rewards) / len(rewards)
    return means, rows


def test_oracle_scores_one_and_default_zero_everywhere(diagnostic_db):
    oracle = _eval(diagnostic_db, "--agent", "oracle")
    assert set(oracle["families"]) == set(DIAGNOSTIC_FAMILIES)
    assert all(set(cells) == {"F", "I", "A"} for cells in oracle["families"].values()), oracle["families"]
    assert all(v == 1.0 for cells in oracle["families"].values() for v in cells.values())
    assert oracle["mean"] == {"F": 1.0, "I": 1.0, "A": 1.0} and oracle["gaps"] == {"F-I": 0.0, "I-A": 0.0}
    default = _eval(diagnostic_db, "--agent", "default", "--presentations", "I,A")
    assert all(set(cells) == {"I", "A"} for cells in default["families"].values())
    assert all(v == 0.0 for cells in default["families"].values() for v in cells.values()), default["families"]


@pytest.mark.parametrize("agent, episodes", [("random", 8), ("greedy", 1)])
def test_random_and_greedy_fall_strictly_between(diagnostic_db, agent, episodes):
    out = _eval(diagnostic_db, "--agent", agent, "--episodes", str(episodes))
    means, rows = _family_means(diagnostic_db, agent)
    assert all(0.0 < m < 1.0 for m in means.values()), sorted(means.items())
    # the printed table is the stored episodes' table
    for family, cells in out["families"].items():
        for p, value in cells.items():
            stored = [e.reward for e in rows if e.family == family and e.presentation == p]
            assert value == pytest.approx(sum(stored) / len(stored))
            assert out["n"][family][p] == len(stored)


def test_prober_scores_one_where_theta_is_told_and_less_in_a(diagnostic_db):
    """The prober (issue 16): π* in F and I; in A it reads what its budget affords and plays the optimum
    of what it read, which on these environments loses reward."""
    out = _eval(diagnostic_db, "--agent", "prober")
    assert all(cells["F"] == cells["I"] == 1.0 for cells in out["families"].values()), out["families"]
    assert out["mean"]["A"] < 1.0 and out["gaps"]["I-A"] > 0.0


def test_episodes_are_stored_with_lineage_and_rerun_adds_no_rows(diagnostic_db):
    first = _eval(diagnostic_db, "--agent", "oracle", "--presentations", "I", "--per-cell", "1")
    with Warehouse.open(diagnostic_db, read_only=True) as wh:
        before = wh.counts()["episodes"]
        episodes = [e for e in wh.episodes("oracle") if e.presentation == "I"]
        env_ids = {e.env_id for e in wh.environments()}
    _eval(diagnostic_db, "--agent", "oracle", "--presentations", "I", "--per-cell", "1")
    with Warehouse.open(diagnostic_db, read_only=True) as wh:
        assert wh.counts()["episodes"] == before
    assert first["episodes"] == len(DIAGNOSTIC_FAMILIES)
    for e in episodes:
        assert e.env_id in env_ids and e.episode_id == e.expected_id()
        assert e.tool_calls and e.tokens == {"input": 0, "output": 0} and e.observations["terminal"] is True
        assert e.corpus_version == "" and e.reward == 1.0


@pytest.mark.parametrize("args, message", [
    (["--agent", "nobody"], "unknown agent 'nobody'"),
    (["--agent", "oracle", "--presentations", "I,X"], "unknown presentations"),
    (["--agent", "oracle", "--episodes", "0"], "--episodes must be"),
    (["--agent", "oracle", "--preset", "nope"], "unknown preset"),
])
def test_bad_input_is_one_line_and_exit_1(diagnostic_db, args, message):
    result = CliRunner().invoke(app, ["eval", "--db", str(diagnostic_db), *args])
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output


def test_report_writes_the_stored_episodes_tables_and_plots(diagnostic_db, tmp_path):
    """Runs after the eval tests of this module, so oracle/default/random/greedy episodes are stored."""
    from vhd.agents.evaluate import summary

    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", "--db", str(diagnostic_db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    names = {"tables.json", "fia_bars.png", "reward_by_family.png", "score_vs_size.png", "score_vs_horizon.png",
             "index.html"}
    assert names <= {p.name for p in out.iterdir()}
    assert all((out / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names if n.endswith(".png"))
    tables = json.loads((out / "tables.json").read_text())
    with Warehouse.open(diagnostic_db, read_only=True) as wh:
        stored = wh.episodes()
    assert set(tables) == {e.agent for e in stored} >= {"oracle", "default", "random", "greedy"}
    for agent, table in tables.items():
        expected = json.loads(json.dumps(summary([e for e in stored if e.agent == agent])))
        assert table == expected
    page = (out / "index.html").read_text()
    assert all(f"agent {a}" in page for a in tables) and "fia_bars.png" in page
    bad = CliRunner().invoke(app, ["report", "--db", str(diagnostic_db), "--out", str(out), "--agent", "nobody"])
    assert bad.exit_code == 1 and "no stored episodes of agent(s) ['nobody']" in bad.output


def _artifacts(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    return {a.key: a for a in found}


def test_evaluate_flow_publishes_artifacts_equal_to_the_stored_episodes(diagnostic_db, prefect_server, tmp_path):
    """The flow through the session harness: greedy in batches of 3, its report; then `vhd report --flow`."""
    from vhd.agents.evaluate import summary
    from vhd.agents.report import family_rows
    from vhd.flows.evaluate import evaluate, report

    state = evaluate(agent="greedy", db_path=str(diagnostic_db), batch_size=3, report_dir=str(tmp_path / "r"),
                     image_url="http://127.0.0.1:8000/r", return_state=True)
    out = state.result()
    with Warehouse.open(diagnostic_db, read_only=True) as wh:
        stored, admitted = wh.episodes("greedy"), wh.environments(admitted=True)
    assert out["episodes"] == len(stored) == len(admitted)  # one episode per environment; a rerun adds no rows
    expected = summary(stored)
    assert json.loads(json.dumps(out["summary"])) == json.loads(json.dumps(expected))
    found = _artifacts(state.state_details.flow_run_id)
    assert set(found) == {"eval-greedy-fia", "eval-greedy-families", "eval-greedy-report", "eval-greedy-report-fia-bars",
                          "eval-greedy-report-reward-by-family", "eval-greedy-report-score-vs-size",
                          "eval-greedy-report-score-vs-horizon"} == set(out["artifacts"].values())
    assert found["eval-greedy-families"].type == "table"
    assert json.loads(found["eval-greedy-families"].data) == json.loads(json.dumps(family_rows(expected)))
    fia = found["eval-greedy-fia"].data
    for family, row in expected["families"].items():
        cells = " | ".join(f"{row[p]['mean']:.3f} ± {row[p]['ci95']:.3f} (n={row[p]['n']})" for p in "FIA")
        assert f"| {family} | {cells} | {row['mean']:.3f} |" in fia
    assert " | ".join(f"{expected['mean'][p]:.3f}" for p in "FIA") in fia
    assert f"F-I {expected['gaps']['F-I']:+.3f}" in fia and f"I-A {expected['gaps']['I-A']:+.3f}" in fia
    page = found["eval-greedy-report"].data
    assert all(f"`{(tmp_path / 'r' / name).resolve()}`" in page and (tmp_path / "r" / name).exists()
               for name in ("tables.json", "fia_bars.png", "index.html"))
    assert "![fia_bars](http://127.0.0.1:8000/r/fia_bars.png)" in page and fia in page
    assert found["eval-greedy-report-fia-bars"].type == "image"
    assert found["eval-greedy-report-fia-bars"].data == "http://127.0.0.1:8000/r/fia_bars.png"
    assert json.loads((tmp_path / "r" / "tables.json").read_text()) == {"greedy": json.loads(json.dumps(expected))}

    state = report(out=str(tmp_path / "all"), db_path=str(diagnostic_db), return_state=True)
    with Warehouse.open(diagnostic_db, read_only=True) as wh:
        everything = wh.episodes()
    assert state.result()["episodes"] == len(everything)
    page = _artifacts(state.state_details.flow_run_id)["eval-report"].data
    assert all(f"# vhd eval: agent `{a}`" in page for a in {e.agent for e in everything}) and "![" not in page


def test_eval_flow_flag_runs_the_flow_and_bad_input_fails_before_prefect(diagnostic_db, prefect_server):
    out = _eval(diagnostic_db, "--agent", "oracle", "--presentations", "F", "--flow")
    assert out["artifacts"] == {"fia": "eval-oracle-fia", "families": "eval-oracle-families"}
    assert all(cells == {"F": 1.0} for cells in out["families"].values())
    result = CliRunner().invoke(app, ["eval", "--db", str(diagnostic_db), "--agent", "oracle", "--report-dir", "x"])
    assert result.exit_code == 1 and "--report-dir needs --flow" in result.output


def test_batches_keep_one_family_each_and_artifact_keys_are_key_safe(diagnostic_db):
    from vhd.agents.evaluate import batches
    from vhd.flows.evaluate import artifact_key

    with Warehouse.open(diagnostic_db, read_only=True) as wh:
        envs = wh.environments()
    cut = batches(envs, 2)
    assert all(len(b) <= 2 and len({e.family for e in b}) == 1 for b in cut)
    assert sorted(e.env_id for b in cut for e in b) == sorted(e.env_id for e in envs)
    assert artifact_key("openai:http://h:8000/v1:Qwen2.5", "fia") == "eval-openai-http-h-8000-v1-qwen2-5-fia"
