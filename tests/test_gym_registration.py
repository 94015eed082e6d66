"""The Gym wrapper as Gymnasium's own machinery uses it (issue 17): the id `vhd/TextTool-v0`
registered on import, `gymnasium.make` (with a step limit), `make_vec` in sync and async mode
(the async default, shared memory, returns the true observations), pickling at reset and mid-episode,
`check_env`, π* → 1.0 and the empty trajectory → 0.0 — on an admitted inventory_dp environment
in presentations I and A, made by the pipeline's own stages."""

from __future__ import annotations

import json
import pickle
from importlib.metadata import version
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import vhd.adapters.gym as gym_adapter
from family_kit import admitted_environments
from vhd.adapters import reward
from vhd.mechanisms import registry

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "vhd/TextTool-v0"


@pytest.fixture(scope="module")
def rows():
    return [row for _, row, *_ in admitted_environments(registry.get("inventory_dp"))]


def _play(env, calls):
    """(the sum of the step rewards, the last step's terminated, truncated and info)."""
    env.reset()
    total = 0.0
    for call in calls:
        _, r, terminated, truncated, info = env.step(json.dumps(call))
        total += r
        if terminated or truncated:
            return total, terminated, truncated, info
    raise AssertionError("the episode did not end")


def test_the_id_is_registered_on_import():
    spec = gymnasium.spec(ENV_ID)
    assert spec.entry_point == "vhd.adapters.gym:TextToolEnv"
    assert [w.name for w in spec.additional_wrappers] == ["FinishAtStepLimit"]


def test_make_plays_pi_star_to_one_and_the_empty_trajectory_to_zero(rows):
    for row in rows:
        env = gymnasium.make(ENV_ID, row=row)
        total, terminated, truncated, info = _play(env, row["grader"]["reference_trajectory"])
        assert (info["reward"], terminated, truncated) == (1.0, True, False)
        assert abs(total - 1.0) <= 1e-12
        env.reset()
        r, outcome = env.unwrapped.finish()
        assert r == 0.0 == outcome["reward"] == reward(row["grader"], [], row["module"])


def test_make_by_env_id_needs_exactly_one_source(rows):
    with pytest.raises(Exception, match="exactly one"):
        gymnasium.make(ENV_ID)
    with pytest.raises(Exception, match="exactly one"):
        gymnasium.make(ENV_ID, row=rows[0], env_id="abc")


@pytest.mark.parametrize("cut", [1, 2, "half"])
def test_a_step_limit_finishes_the_episode_and_pays_its_reward(rows, cut):
    row = rows[0]
    optimal = row["grader"]["reference_trajectory"]
    limit = len(optimal) // 2 if cut == "half" else cut
    env = gymnasium.make(ENV_ID, row=row, max_episode_steps=limit)
    total, terminated, truncated, info = _play(env, optimal)
    assert (terminated, truncated, env.unwrapped.steps) == (False, True, limit)
    expected = reward(row["grader"], optimal[:limit], row["module"])  # finished by the module's rule
    assert info["reward"] == expected and abs(total - expected) <= 1e-12
    assert 0.0 <= expected < 1.0  # π* cut short: less than its 1.0
    # a limit longer than π* changes nothing
    env = gymnasium.make(ENV_ID, row=row, max_episode_steps=len(optimal) + 5)
    total, terminated, truncated, info = _play(env, optimal)
    assert (terminated, truncated, info["reward"]) == (True, False, 1.0)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_returns_the_true_observations_and_rewards(rows, mode):
    row = rows[0]
    optimal = row["grader"]["reference_trajectory"]
    single = gymnasium.make(ENV_ID, row=row)
    first, _ = single.reset()
    seeded, _ = single.reset(seed=7)
    expected = [json.loads(single.step(json.dumps(call))[0]) for call in optimal[:3]]
    envs = gymnasium.make_vec(ENV_ID, num_envs=2, vectorization_mode=mode, row=row)
    try:
        observations, infos = envs.reset()
        assert tuple(observations) == (first, first)
        observations, infos = envs.reset(seed=[7, None])  # env 0 a fresh episode, env 1 the stored one
        assert list(infos["episode_seed"]) == [7, row["grader"]["config"]["episode_seed"]]
        assert observations[0] == seeded
        envs.reset(seed=[7, 7])
        for call, want in zip(optimal[:3], expected):
            observations, rewards, terminated, truncated, _ = envs.step((json.dumps(call), json.dumps(call)))
            assert [json.loads(o) for o in observations] == [want, want]
        envs.reset()
        totals, done = [0.0, 0.0], [False, False]
        for call in optimal:  # env 0 plays π*, env 1 refused calls only
            _, rewards, terminated, truncated, infos = envs.step((json.dumps(call), "not json"))
            totals = [t + r for t, r in zip(totals, rewards)]
            if terminated[0]:
                assert infos["reward"][0] == 1.0
                break
        assert abs(totals[0] - 1.0) <= 1e-12
    finally:
        envs.close()


def test_async_observations_are_live_without_copy(rows):
    row = rows[0]
    envs = gymnasium.make_vec(ENV_ID, num_envs=2, vectorization_mode="async", row=row,
                              vector_kwargs={"copy": False})
    try:
        observations, _ = envs.reset()
        before = tuple(observations)
        assert json.loads(before[0])["instruction"] == row["player"]["instruction"]
        stepped, *_ = envs.step(('{"tool": "no_such_tool", "arguments": {}}',) * 2)
        assert json.loads(stepped[0])["ok"] is False
    finally:
        envs.close()


@pytest.mark.parametrize("at", [0, 5])
def test_pickle_round_trip_continues_the_episode(rows, at):
    for row in rows:
        optimal = row["grader"]["reference_trajectory"]
        env = gymnasium.make(ENV_ID, row=row, max_episode_steps=len(optimal) + 5).unwrapped
        env.reset(seed=11)
        paid = sum(env.step(json.dumps(call))[1] for call in optimal[:at])
        copy = pickle.loads(pickle.dumps(env))
        assert (copy.trajectory, copy.steps, copy.step_limit) == (env.trajectory, env.steps, env.step_limit)
        assert copy.grading.config == env.grading.config and copy.spec.id == ENV_ID
        for call in optimal[at:at + 3]:
            assert copy.step(json.dumps(call))[:3] == env.step(json.dumps(call))[:3]
        assert copy.finish() == env.finish()
        assert abs(paid - (at > 0)) <= 1e-12  # π*'s step rewards: the baseline 1 on the first, then 0
    fresh = pickle.loads(pickle.dumps(gym_adapter.TextToolEnv(rows[0])))  # never reset: reset() first
    with pytest.raises(RuntimeError, match="call reset"):
        fresh.step("{}")
    fresh.reset()
    assert fresh.steps == 0


def test_check_env_passes_on_the_registered_env(rows):
    for row in rows:
        check_env(gymnasium.make(ENV_ID, row=row).unwrapped, skip_render_check=True)


def test_training_md_gymnasium_example_runs(rows):
    """The Gymnasium section of docs/TRAINING.md, run as written with π*'s calls as the policy."""
    text = (ROOT / "docs" / "TRAINING.md").read_text(encoding="utf-8")
    section = text[text.index("## Gymnasium wrapper"):]
    section = section[:section.index("\n## ")]
    assert f"gymnasium {version('gymnasium')}" in section
    code = section[section.index("```python") + len("```python"):]
    code = code[:code.index("```")]
    namespace: dict = {}
    exec(compile(code, "TRAINING.md", "exec"), namespace)
    for row in rows:
        calls = iter(row["grader"]["reference_trajectory"])
        assert namespace["episode"](row, lambda observation: json.dumps(next(calls))) == pytest.approx(1.0, abs=1e-12)
        assert namespace["first_observations"](row, "async") == namespace["first_observations"](row, "sync")


def test_make_by_env_id_loads_the_row_from_the_warehouse(refreshed):
    from typer.testing import CliRunner

    from vhd.adapters import load_row
    from vhd.cli import app

    db, _ = refreshed
    listed = json.loads(CliRunner().invoke(app, ["envs", "--db", str(db), "--json"]).stdout)
    env_id = next(e["env_id"] for e in listed if e["presentation"] in ("I", "A"))
    env = gymnasium.make(ENV_ID, env_id=env_id, db=db)
    assert env.unwrapped.row == load_row(env_id, db)
    assert gymnasium.make(ENV_ID, env_id=env_id[:12], db=db).unwrapped.row == env.unwrapped.row  # a prefix, as the CLI
    total, terminated, truncated, info = _play(env, env.unwrapped.row["grader"]["reference_trajectory"])
    assert (info["reward"], terminated) == (1.0, True) and abs(total - 1.0) <= 1e-12


def test_a_time_limit_applied_by_hand_pays_what_the_decisions_were_worth(rows):
    """An RL library's own TimeLimit (not make's) does not tell the env its limit: the cut episode
    has then been paid 1 + Σ A*_t / span of its calls (π* cut: 1; before issue 27, 0 with the
    baseline on the last step), and `FinishAtStepLimit` around it finishes by the module's rule."""
    from gymnasium.wrappers import TimeLimit

    for row in rows:
        optimal = row["grader"]["reference_trajectory"]
        cut = max(1, len(optimal) // 2)
        for wrap, finished in ((lambda e: TimeLimit(e, cut), False),
                               (lambda e: gym_adapter.FinishAtStepLimit(TimeLimit(e, cut)), True)):
            env = wrap(gym_adapter.TextToolEnv(row))
            env.reset()
            paid, info = [], {}
            for call in optimal[:cut]:
                _, r, terminated, truncated, info = env.step(json.dumps(call))
                paid.append(r)
            assert truncated and not terminated
            assert ("reward" in info) == finished == env.unwrapped.finished
            if not finished:  # π*'s advantages are 0: the baseline alone
                assert abs(sum(paid) - 1.0) <= 1e-12 and abs(paid[0] - 1.0) <= 1e-12
            else:
                assert info["reward"] == pytest.approx(sum(paid), abs=1e-12)
                assert info["reward"] == reward(row["grader"], optimal[:cut], row["module"])
