"""vhd eval on a small diagnostic warehouse built in process (no Prefect): oracle 1, default 0,
random and greedy strictly between on every diagnostic family; episodes stored (migration 004)."""

import json

import pytest
from typer.testing import CliRunner

from vhd.cli import app
from vhd.mechanisms import registry
from vhd.schemas.records import EpisodeRecord
from vhd.tasks.annotate import annotate
from vhd.tasks.pipeline import check_models
from vhd.tasks.presets import DIAGNOSTIC_FAMILIES
from vhd.warehouse import Warehouse

MODELS = 1  # per family: 3 candidates (F, I, A); seed 14 gives every family an instance where random and greedy have signal
SEED = 14


@pytest.fixture(scope="module")
def diagnostic_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("eval") / "vhd.duckdb"
    with Warehouse.open(path) as wh, wh.transaction():
        for name in DIAGNOSTIC_FAMILIES:
            family = registry.get(name)
            run = check_models(family, count=MODELS, seed=SEED, presentations=("F", "I", "A"))
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
    assert all(set(cells) == {"F", "I", "A"} for cells in oracle["families"].values())
    assert all(v == 1.0 for cells in oracle["families"].values() for v in cells.values())
    assert oracle["mean"] == {"F": 1.0, "I": 1.0, "A": 1.0} and oracle["gaps"] == {"F-I": 0.0, "I-A": 0.0}
    default = _eval(diagnostic_db, "--agent", "default", "--presentations", "I,A")
    assert all(set(cells) == {"I", "A"} for cells in default["families"].values())
    assert all(v == 0.0 for cells in default["families"].values() for v in cells.values())


@pytest.mark.parametrize("agent, episodes", [("random", 4), ("greedy", 1)])
def test_random_and_greedy_fall_strictly_between(diagnostic_db, agent, episodes):
    out = _eval(diagnostic_db, "--agent", agent, "--episodes", str(episodes))
    means, rows = _family_means(diagnostic_db, agent)
    assert all(0.0 < m < 1.0 for m in means.values()), means
    # the printed table is the stored episodes' table
    for family, cells in out["families"].items():
        for p, value in cells.items():
            stored = [e.reward for e in rows if e.family == family and e.presentation == p]
            assert value == pytest.approx(sum(stored) / len(stored))
            assert out["n"][family][p] == len(stored)


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
