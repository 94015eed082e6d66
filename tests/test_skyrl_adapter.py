"""SkyRL-gym (`vhd.adapters.skyrl`), through the library's own entry point `skyrl_gym.make`: π* plays
to 1.0, a reply without a tool call finishes the episode, and every episode's summed step rewards
equal `vhd score`'s reward (`vhd.adapters.reward`)."""

from __future__ import annotations

import json

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym", reason="skyrl-gym is in the skyrl and test extras")

import vhd.adapters.skyrl as skyrl  # noqa: E402  (registers "vhd")
from family_kit import admitted_environments  # noqa: E402
from vhd.adapters import reward  # noqa: E402
from vhd.mechanisms import registry  # noqa: E402
from vhd.schemas.errors import TrajectoryFormatError  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return [row for name in ("routing", "stopping") for _, row, *_ in admitted_environments(registry.get(name))]


def _hermes(call):
    return f"I will call a tool.\n<tool_call>{json.dumps({'name': call['tool'], 'arguments': call['arguments']})}</tool_call>"


def _play(env, texts):
    """(Σ step rewards, done, the number of steps) of an episode of model replies `texts`."""
    total, done, steps = 0.0, False, 0
    for text in texts:
        out = env.step(text)
        total, done, steps = total + out["reward"], out["done"], steps + 1
        if done:
            break
    return total, done, steps


def test_make_plays_pi_star_to_one_on_every_row(rows):
    for dataset_row in skyrl.dataset_rows(rows):
        env = skyrl_gym.make(dataset_row["env_class"], env_config=None, extras=dataset_row)
        prompt, info = env.init(dataset_row["prompt"])
        assert prompt == dataset_row["prompt"] and prompt[0]["content"].count(env.row["player"]["instruction"]) == 1
        optimal = env.row["grader"]["reference_trajectory"]
        total, done, steps = _play(env, [_hermes(c) for c in optimal])
        assert done and abs(total - 1.0) <= 1e-12 and steps == len(optimal)
        assert env.get_metrics()["reward"] == 1.0 and env.spec.id == "vhd"


def test_every_episode_pays_what_vhd_score_pays(rows):
    """Stopping at once, π* cut in half then a reply without a call, malformed replies between π*'s
    calls (free), and the plain JSON form: each summed reward is `vhd score`'s."""
    for row in rows:
        optimal = row["grader"]["reference_trajectory"]
        half = optimal[: len(optimal) // 2]
        cases = {
            "stop at once": ([], ["I have nothing to do."]),
            "half, then stop": (half, [_hermes(c) for c in half] + ["done"]),
            "malformed between": (optimal, [t for c in optimal for t in (_hermes(c), "<tool_call>{oops</tool_call>")]),
            "plain json": (optimal, [json.dumps(c) for c in optimal]),
        }
        for label, (calls, texts) in cases.items():
            env = skyrl_gym.make("vhd", extras={"extra_info": {"row": json.dumps(row)}})
            env.init(None)
            total, done, _ = _play(env, texts)
            assert done, label
            recorded = [c for c in env.gym.trajectory if c["tool"]]  # malformed replies: recorded as ""
            assert recorded == calls, label
            expected = reward(row["grader"], env.gym.trajectory, row["module"])
            assert abs(total - expected) <= 1e-12 and env.gym.result["reward"] == expected, (label, total, expected)


def test_a_fresh_episode_seed_from_extra_info(rows):
    row = rows[-1]  # stopping: offers differ by seed
    env = skyrl_gym.make("vhd", extras={"extra_info": {"row": row, "episode_seed": 12}})
    _, info = env.init(None)
    assert info["episode_seed"] == 12


def test_actions_and_extras_are_parsed_or_refused_in_one_line():
    assert skyrl.action_of('<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>') == \
        {"tool": "a", "arguments": {"x": 1}}
    assert skyrl.action_of('first <tool_call>{"name": "a"}</tool_call> then <tool_call>{"name": "b"}</tool_call>') == \
        {"tool": "b"}
    assert skyrl.action_of("no call here") is None
    assert skyrl.action_of("{broken") == "{broken"
    with pytest.raises(TrajectoryFormatError, match="needs extras"):
        skyrl_gym.make("vhd", extras={"extra_info": {}})
    with pytest.raises(TrajectoryFormatError, match="model's text"):
        skyrl.action_of(None)
