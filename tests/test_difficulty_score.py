"""The difficulty of every environment (issue 30, item 1): the summary score is in [0, 1], grows with
each family's size and horizon on average, and is never lower in A than in I for the same θ; it is
stored on every admitted environment, carried by `vhd envs --json` and the export, and the audit
measures it again, so a forged difficulty is caught even with its field digests re-sealed."""

import json
import shutil
import statistics

import duckdb
import pytest
from typer.testing import CliRunner

from vhd.cli import app
from vhd.mechanisms import registry
from vhd.schemas.hashing import canonical_json, digest_problems, field_digests
from vhd.schemas.records import EnvironmentRecord, ModelRecord
from vhd.tasks.stages.difficulty import VERSION, knob_position, measure, summary_score
from vhd.tasks.stages.sample import draw
from vhd.tasks.stages.solve import solve_models
from vhd.warehouse import Warehouse

DRAWS = 6
runner = CliRunner()


def _solved(family, seed, knobs=None):
    """(the model of draw `seed`, with `knobs` pinned, and its solution)."""
    pinned, theta = draw(family, seed, knobs)
    model = ModelRecord.build(family=family.name, family_version=family.version, knobs=pinned, seed=seed,
                              theta=theta, batch="difficulty-test")
    [solution] = solve_models(family, [model])
    return model, solution


def _measured(family, knobs, seed):
    model, solution = _solved(family, seed, knobs)
    return {p: measure(family, model, solution, p) for p in ("F", "I", "A")}


@pytest.mark.parametrize("name", registry.names())
def test_the_score_grows_with_each_knob_on_average_and_i_is_never_harder_than_a(name):
    family = registry.get(name)
    for knob, (lo, hi) in sorted(family.knob_ranges.items()):
        others = {k: (a + b) // 2 for k, (a, b) in family.knob_ranges.items() if k != knob}
        means = {}
        for end, value in (("low", lo), ("high", hi)):
            scores = {"I": [], "A": []}
            for i in range(DRAWS):
                m = _measured(family, {**others, knob: value}, 70_000 + i)
                for p in ("F", "I", "A"):
                    assert m[p]["score"] is None or 0.0 <= m[p]["score"] <= 1.0, (p, m[p])
                if m["A"]["score"] is None:  # no span: a candidate default_band rejects
                    assert m["I"]["score"] is None
                    continue
                assert m["F"]["score"] == m["I"]["score"] <= m["A"]["score"], m
                assert m["I"]["agents"]["prober"]["I"] == 1.0 and m["I"]["hidden_price"] == m["A"]["hidden_price"]
                assert m["A"]["hidden_price"] == pytest.approx(1.0 - m["A"]["agents"]["prober"]["A"])
                for p in ("I", "A"):
                    scores[p].append(m[p]["score"])
            assert scores["A"], f"{name}: no θ with a span at {knob}={value}"
            means[end] = {p: statistics.fmean(v) for p, v in scores.items()}
        for p in ("I", "A"):
            assert means["high"][p] > means["low"][p], f"{name} {p}: the score falls along {knob}: {means}"


def test_the_score_formula():
    family = registry.get("knapsack")
    lows = {k: lo for k, (lo, _) in family.knob_ranges.items()}
    highs = {k: hi for k, (_, hi) in family.knob_ranges.items()}
    assert knob_position(family, lows) == 0.0 and knob_position(family, highs) == 1.0
    assert summary_score(0.0, 1.0) == 0.0 and summary_score(1.0, 0.0) == 1.0
    assert summary_score(0.5, 0.4) == pytest.approx(2 / 3 * 0.5 + 1 / 3 * 0.6)
    assert summary_score(1.0, -1.0) == 1.0 and summary_score(1.0, 2.0) == pytest.approx(2 / 3)  # clipped


def test_a_row_written_before_the_difficulty_column_keeps_verifying():
    """Field digests written before migration 007 name no `difficulty`: accepted at its default only."""
    row = {"env_id": "e", "u_star": 1.0, "difficulty": "{}"}
    sealed = {**row, "field_digests": canonical_json(field_digests({"env_id": "e", "u_star": 1.0}))}
    assert digest_problems(sealed) == []
    forged = {**sealed, "difficulty": '{"score":0.1}'}
    assert digest_problems(forged) == [("difficulty", "has no digest")]


def _stored(db):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT env_id, model_id, presentation, admitted, difficulty FROM environments").fetchall()
    finally:
        con.close()


def test_every_admitted_environment_carries_its_difficulty(refreshed):
    db, summary = refreshed
    rows = _stored(db)
    by_model = {}
    for env_id, model_id, presentation, admitted, text in rows:
        difficulty = json.loads(text)
        if not admitted:
            assert difficulty == {}
            continue
        assert difficulty["presentation"] == presentation and 0.0 <= difficulty["score"] <= 1.0
        assert difficulty["version"] == VERSION and difficulty["state_space"] > 0 and difficulty["span"] > 0
        by_model.setdefault(model_id, {})[presentation] = difficulty["score"]
    assert any(rows) and sum(admitted for *_, admitted, _ in rows) == summary["admitted"]
    for scores in by_model.values():
        if {"I", "A"} <= set(scores):
            assert scores["I"] <= scores["A"]

    listed = json.loads(runner.invoke(app, ["envs", "--json", "--db", str(db)]).stdout)
    stored = {env_id: json.loads(text) for env_id, _, _, admitted, text in rows if admitted}
    assert {r["env_id"]: r["difficulty"] for r in listed} == stored


def test_the_export_and_its_card_carry_the_difficulty(refreshed, tmp_path):
    from vhd.tasks.corpus.export import read_export

    db, _ = refreshed
    out = tmp_path / "export"
    assert runner.invoke(app, ["export", "--out", str(out), "--db", str(db)]).exit_code == 0
    stored = {env_id: json.loads(text) for env_id, _, _, admitted, text in _stored(db) if admitted}
    rows = read_export(out)
    assert rows and all(r["difficulty"]["score"] == stored[r["env_id"]]["score"] for r in rows)
    assert all(r["difficulty"]["prober_A"] == stored[r["env_id"]]["agents"]["prober"]["A"] for r in rows)
    card = (out / "README.md").read_text()
    assert "difficulty: mean (min–max)" in card and "`difficulty` (struct" in card


def test_a_forged_difficulty_with_resealed_digests_is_caught(refreshed, tmp_path):
    db = tmp_path / "forged.duckdb"
    shutil.copy(refreshed[0], db)
    con = duckdb.connect(str(db))
    env_id, text = con.execute("SELECT env_id, difficulty FROM environments WHERE admitted LIMIT 1").fetchall()[0]
    forged = json.loads(text)
    forged["score"] = round(1.0 - forged["score"], 6)
    con.execute("UPDATE environments SET difficulty = ? WHERE env_id = ?", [canonical_json(forged), env_id])
    con.close()
    with Warehouse.open(db) as wh:  # a forger re-seals the row: its digests match the forged value
        [row] = wh.stored_rows(EnvironmentRecord, "env_id", [env_id])
        row.pop("field_digests")
        wh.con.execute("UPDATE environments SET field_digests = ? WHERE env_id = ?",
                       [canonical_json(field_digests(row)), env_id])
        [resealed] = wh.stored_rows(EnvironmentRecord, "env_id", [env_id])
    assert digest_problems(resealed) == []
    result = runner.invoke(app, ["verify", "--db", str(db), "--json", "--no-resolve"])
    assert result.exit_code == 1
    findings = json.loads(result.stdout)["findings"]
    assert any(f["env_id"] == env_id and f["field"] == "difficulty" and "measured again" in f["problem"]
               for f in findings), findings


@pytest.mark.parametrize("name", ["routing", "knapsack", "facility"])
def test_the_cheap_episode_path_is_the_decision_reward_vhd_eval_gives(name):
    """Where the prober's plan is not a plan of θ, a deterministic family's reward is read off the
    family's World without advantage tables: it equals `decision_grade`'s on the same calls."""
    from vhd.tasks.stages import difficulty
    from vhd.tasks.grading.step_advantages import decision_grade
    from vhd.tasks.stages.sample import episode_seed
    from vhd.tasks.stages.solve import unpack_policy

    family, compared = registry.get(name), 0
    for seed in range(8_000, 8_012):
        model, solution = _solved(family, seed)
        theta = model.theta
        if solution.u_star - max(solution.u_default, solution.u_idle) <= 0:
            continue
        episode, budget = episode_seed(seed), family.turn_budget(theta)
        read, play = difficulty.read_then_play(family, theta, budget, episode, unpack_policy(solution.policy))
        config = {"params": theta, "presentation": "A", "episode_seed": episode, "turn_budget": budget}
        cheap = difficulty._expected_reward(difficulty._played(family, config, read + play), solution)
        expected = {"u_star": solution.u_star, "u_default": solution.u_default, "u_idle": solution.u_idle}
        assert cheap == pytest.approx(decision_grade(family, config, read + play, expected)["reward"], abs=1e-9)
        compared += 1
    assert compared >= 6


@pytest.mark.parametrize("name", ["knapsack", "routing", "lp"])
def test_the_greedy_figures_are_what_the_greedy_agent_scores(name):
    """`agents.greedy` is the greedy agent as `vhd eval` plays it (in I its heuristic's plan of θ, in A
    the probes it affords and the heuristic's plan of what it read), graded on the family's own World
    (deterministic families: one episode is the expectation); a family without a heuristic has none."""
    from vhd.agents.prober import probe_then_play
    from vhd.tasks.grading.step_advantages import decision_grade
    from vhd.tasks.stages.greedy import greedy_policy
    from vhd.tasks.stages.sample import episode_seed

    family, compared = registry.get(name), 0
    for seed in range(8_100, 8_108):
        model, solution = _solved(family, seed)
        theta = model.theta
        measured = {p: measure(family, model, solution, p) for p in "IA"}
        if measured["A"]["score"] is None:
            continue
        episode, budget = episode_seed(seed), family.turn_budget(theta)
        expected = {"u_star": solution.u_star, "u_default": solution.u_default, "u_idle": solution.u_idle}
        for presentation in "IA":
            plan_of = lambda known: greedy_policy(family, known)  # noqa: E731
            read, play = probe_then_play(family, theta, presentation, budget, episode, plan_of)
            config = {"params": theta, "presentation": presentation, "episode_seed": episode, "turn_budget": budget}
            played = decision_grade(family, config, read + play, expected)["reward"]
            stored = measured[presentation]["agents"]["greedy"][presentation]
            assert stored == pytest.approx(played, abs=1e-9), (seed, presentation, stored, played)
            assert 0.0 <= stored <= 1.0
        compared += 1
    assert compared >= 5
    stopping = registry.get("stopping")
    assert _measured(stopping, {}, 8_200)["A"]["agents"]["greedy"] is None
