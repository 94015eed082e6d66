"""`vhd refresh --follow RESULTS` (issue 30, item 3): three rounds with a simulated learner move the
corpus where the learner's reward is in the target band, and the report says where they cannot.

The learner is the prober with 60 % of the probe budget it could spare (`probe_then_play(share=0.6)`),
graded in process by the decision reward every surface uses (`advantage.decision_grade`). Each round
it plays the latest version, its rewards go to a results file (JSONL, then CSV), and `--follow`
makes the next version; the test reads the learner's mean reward on the environments each round
made (the manifest's `follow` section names them).
"""

import csv
import json
import statistics

import pytest
from typer.testing import CliRunner

from conftest import run_vhd
from vhd.agents.prober import probe_then_play
from vhd.cli import app
from vhd.mechanisms import registry
from vhd.schemas.records import ModelRecord, SolutionRecord
from vhd.tasks.grading.step_advantages import decision_grade
from vhd.tasks.stages.difficulty import reads_probes
from vhd.tasks.corpus.publish import open_version
from vhd.warehouse import Warehouse

SHARE = 0.6
BAND = (0.3, 0.7)
FAMILIES = ("pandora", "facility", "maintenance")  # maintenance: no probes, the learner plays π* and scores 1
PER_FAMILY = 8
runner = CliRunner()


def learner(db):
    """{env_id: the simulated learner's reward} on the latest version, and that version's manifest."""
    with Warehouse.open(db, read_only=True) as wh:
        version, envs = open_version(wh)
        models = wh.verified(ModelRecord, [e.model_id for e in envs], complete=True)
        solutions = wh.verified(SolutionRecord, [e.solution_id for e in envs], complete=True)
    rewards = {}
    for env in envs:
        family, theta, solution = registry.get(env.family), models[env.model_id].theta, solutions[env.solution_id]
        if env.presentation == "A" and reads_probes(family):
            read, play = probe_then_play(family, theta, "A", env.turn_budget, env.episode_seed, share=SHARE)
            calls = read + play
        else:
            calls = family.simulate(theta, family.solve(theta).policy, env.episode_seed).calls
        expected = {"u_star": solution.u_star, "u_default": solution.u_default, "u_idle": solution.u_idle}
        rewards[env.env_id] = decision_grade(family, env.config(theta), calls, expected)["reward"]
    return rewards, version.manifest


def write_results(path, rewards, fmt):
    if fmt == "jsonl":  # rows as an episode store would hold them: extra keys are ignored
        path.write_text("".join(json.dumps({"env_id": e, "agent": "prober@0.6", "reward": r}) + "\n"
                                for e, r in rewards.items()))
    else:
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["episode", "env_id", "reward"])
            w.writerows([i, e, r] for i, (e, r) in enumerate(rewards.items()))


@pytest.fixture(scope="module")
def rounds(prefect_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("follow")
    db = root / "vhd.duckdb"
    first = run_vhd(prefect_server, "refresh", "--families", ",".join(FAMILIES), "--presentations", "A",
                    "--per-family", PER_FAMILY, "--seed", 11, "--batch", "follow-0", "--db", db, "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    history = []
    after, _ = learner(db)
    for number, fmt in ((1, "jsonl"), (2, "csv"), (3, "jsonl")):
        rewards = after  # the latest version is the one the previous round's learner played: the same rewards
        results = root / f"round{number}.{fmt}"
        write_results(results, rewards, fmt)
        out = run_vhd(prefect_server, "refresh", "--follow", results, "--per-family", PER_FAMILY, "--seed", 11,
                      "--batch", f"follow-{number}", "--db", db, "--json")
        assert out.returncode == 0, out.stderr[-3000:]
        summary = json.loads(out.stdout)
        after, manifest = learner(db)
        history.append((rewards, summary, after, manifest))
    return db, history


def _mean(rewards, ids):
    return statistics.fmean(rewards[i] for i in ids) if ids else None


def test_three_rounds_land_the_learner_in_the_band_or_say_why_not(rounds):
    db, history = rounds
    _, summary, after, manifest = history[-1]
    follow = summary["follow"]
    assert manifest["follow"] == follow, "the version's manifest records the plan the run followed"
    assert follow["band"] == list(BAND) and follow["presentations"] == ["A"]
    landed, reported = [], []
    for name in FAMILIES:
        row = follow["families"][name]
        mean = _mean(after, row["env_ids"])
        if mean is not None and BAND[0] <= mean <= BAND[1]:
            landed.append(name)
            assert row["status"].startswith("aimed at"), row["status"]
            assert len(row["env_ids"]) == PER_FAMILY
        else:  # where the knobs do not allow it, the report says so
            assert row["status"].startswith(("not aimed at", "short")), (name, mean, row["status"])
            reported.append(name)
    # the learner plays π* where there is nothing to read: reward 1 everywhere, which no θ moves
    assert "maintenance" in reported
    assert "does not move with the knobs" in follow["families"]["maintenance"]["status"]
    assert {"pandora", "facility"} <= set(landed), (landed, {n: follow["families"][n]["status"] for n in reported})


def test_each_round_moves_toward_the_band(rounds):
    """A family that started outside the band ends inside it: the rounds moved it."""
    _, history = rounds
    first_rewards = history[0][0]
    with Warehouse.open(rounds[0], read_only=True) as wh:
        families = {e.env_id: e.family for e in wh.environments()}
    moved = []
    for name in ("pandora", "facility"):
        start = _mean(first_rewards, [e for e in first_rewards if families[e] == name])
        row = history[-1][1]["follow"]["families"][name]
        end = _mean(history[-1][2], row["env_ids"])
        if end is not None and BAND[0] <= end <= BAND[1] and not BAND[0] <= start <= BAND[1]:
            moved.append(name)
        if end is not None:
            assert abs(end - 0.5) <= abs(start - 0.5) + 0.2, (name, start, end)
    assert moved, "no family started outside the band and ended inside it"


def test_the_run_and_the_manifest_record_why_each_environment_was_made(rounds):
    db, history = rounds
    _, summary, _, manifest = history[-1]
    with Warehouse.open(db, read_only=True) as wh:
        run = next(r for r in wh.runs() if r.run_id == summary["run_id"])
        envs = {e.env_id: e for e in wh.environments()}
    plan = run.parameters["follow"]["plan"]
    for name, row in manifest["follow"]["families"].items():
        assert plan[name]["coefficients"] == row["coefficients"]
        for env_id in row["env_ids"]:
            env = envs[env_id]
            assert env.run_id == summary["run_id"] and env.family == name
            b0, b1, b2 = row["coefficients"]
            d = env.difficulty
            predicted = min(1.0, max(0.0, b0 + b1 * d["knob_position"] + b2 * (1 - d["agents"]["prober"]["A"])))
            assert row["aim"][0] <= predicted <= row["aim"][1], (env_id, predicted)
    assert run.parameters["follow"]["results_digest"] == manifest["follow"]["results_digest"]


@pytest.mark.parametrize("content, problem", [
    (None, "no such file"),
    ("", "holds no rows"),
    ('{"env_id": "x"}\n', "no env_id and reward keys"),
    ("not json at all\n", "does not name env_id and reward"),
    ('{"env_id": "x", "reward": 2}\n', "is not in [0, 1]"),
    ('{"env_id": "x", "reward": "high"}\n', "is not a number"),
    ("env_id,reward\nnope,0.5\n", "not environments of this warehouse"),
])
def test_a_bad_results_file_is_one_line_and_nothing_is_stored(rounds, tmp_path, content, problem):
    db, _ = rounds
    results = tmp_path / "results.jsonl"
    if content is not None:
        results.write_text(content)
    with Warehouse.open(db, read_only=True) as wh:
        before = (wh.counts(), wh.version_names(), len(wh.runs()))
    out = runner.invoke(app, ["refresh", "--follow", str(results), "--db", str(db)])
    assert out.exit_code == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0] and "expected" in lines[0], out.stderr
    with Warehouse.open(db, read_only=True) as wh:
        assert (wh.counts(), wh.version_names(), len(wh.runs())) == before


def test_follow_options_that_do_not_go_together_are_refused(rounds, tmp_path):
    db, _ = rounds
    results = tmp_path / "r.csv"
    results.write_text("env_id,reward\n")
    for args, problem in ((["--follow-band", "0.2:0.4"], "--follow-band needs --follow"),
                          (["--follow", str(results), "--difficulty", "0.1:0.2"], "drop --difficulty"),
                          (["--follow", str(results), "--follow-band", "0.6:0.2"], "low end is above the high end")):
        out = runner.invoke(app, ["refresh", *args, "--db", str(db)])
        assert out.exit_code == 1 and problem in out.stderr, out.stderr
