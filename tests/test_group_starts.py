"""Group starts for GRPO (issue 30 item 4): `reset(seed=k)` is the group hook. A group of N rollouts
reset with one episode seed starts from the same state and meets the same draws, on every surface
that takes a seed — the Gym wrapper, `serve-env`, OpenEnv's environment and SkyRL-gym's — so the
same calls get the same answers and rewards across the group and across the surfaces; another seed
gives other draws (a stochastic family), and no seed gives the stored episode."""

from __future__ import annotations

import json
import threading

import pytest

import vhd.adapters.skyrl  # noqa: F401  (registers "vhd" with skyrl_gym)
from family_kit import admitted_environments
from vhd.adapters.gym import TextToolEnv
from vhd.adapters.http import HttpEnvClient, make_server
from vhd.mechanisms import registry

GROUP = 3  # rollouts per group
SEED = 41


@pytest.fixture(scope="module", params=["stopping", "inventory_dp"])
def row(request):
    """The A row of an admitted environment of a stochastic family (its draws depend on the seed)."""
    return next(row for _, row, *_ in admitted_environments(registry.get(request.param))
                if row["presentation"] == "A")


def _calls(row):
    """The same calls for every rollout: the first half of the stored episode's π* calls (three at
    least), whose answers report the draws (demand, offers) of the episode being played."""
    optimal = row["grader"]["reference_trajectory"]
    return optimal[: max(3, len(optimal) // 2)]


def group(make, row, seed):
    """A group on a reset/step/finish surface (the Gym wrapper, a serve-env client): each rollout's
    first observation, episode seed, answers and reward."""
    out = []
    for _ in range(GROUP):
        env = make()
        first, info = env.reset(seed=seed)
        answers = [json.loads(env.step(call)[0]) for call in _calls(row)]
        out.append((json.loads(first), info["episode_seed"], answers, env.finish()[0]))
        getattr(env, "close", lambda: None)()
    return out


def gym_group(row, seed):
    return group(lambda: TextToolEnv(row), row, seed)


def http_group(row, seed, url):
    return group(lambda: HttpEnvClient(url), row, seed)


def openenv_group(row, seed):
    from vhd.adapters.openenv import VhdAction, VhdEnvironment

    out = []
    for _ in range(GROUP):
        env = VhdEnvironment(row)
        first = env.reset(seed=seed)
        answers = [env.step(VhdAction(type="call_tool", tool_name=c["tool"], arguments=c["arguments"])).result
                   for c in _calls(row)]
        last = env.step(VhdAction(type="finish")) if not env.state.finished else None
        reward = last.reward if last is not None else env.state.result["reward"]
        tools = [t.model_dump() if hasattr(t, "model_dump") else t for t in first.player_tools]
        out.append(({"instruction": first.instruction, "tools": tools}, first.info["episode_seed"],
                    answers, reward))
    return out


def skyrl_group(row, seed):
    import skyrl_gym

    out = []
    for _ in range(GROUP):
        env = skyrl_gym.make("vhd", extras={"extra_info": {"row": row, "episode_seed": seed}})
        prompt, info = env.init(None)
        answers = []
        for call in _calls(row):
            step = env.step(json.dumps(call))
            answers.append(json.loads(step["observations"][0]["content"]) if step["observations"] else None)
        if not env.gym.finished:
            env.step("no more calls")
        out.append((prompt, info["episode_seed"], answers, env.gym.result["reward"]))
    return out


def _without_turns(answers):
    return [{k: v for k, v in a.items() if k != "turns_left"} if isinstance(a, dict) else a for a in answers]


def test_a_group_reset_with_one_seed_meets_the_same_draws_on_every_surface(row):
    server = make_server(row)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        groups = {"gym": gym_group(row, SEED), "serve-env": http_group(row, SEED, url),
                  "openenv": openenv_group(row, SEED), "skyrl": skyrl_group(row, SEED)}
        other = gym_group(row, SEED + 1)
    finally:
        server.shutdown()
        server.server_close()
    for surface, group in groups.items():
        firsts, seeds, answers, rewards = zip(*group)
        assert len(set(map(json.dumps, firsts))) == 1, surface  # one start for the whole group
        assert set(seeds) == {SEED}, (surface, seeds)
        assert all(a == answers[0] for a in answers) and len(set(rewards)) == 1, surface  # the same draws
    reference = groups["gym"][0]
    for surface, group in groups.items():  # the same answers and reward on every surface
        assert _without_turns(group[0][2]) == _without_turns(reference[2]), surface
        assert group[0][3] == reference[3], (surface, group[0][3], reference[3])
    assert other[0][1] == SEED + 1 and other[0][2] != reference[2]  # another seed: other draws


def test_no_seed_is_the_stored_episode(row):
    env = TextToolEnv(row)
    _, info = env.reset()
    assert info["episode_seed"] == row["grader"]["config"]["episode_seed"]
