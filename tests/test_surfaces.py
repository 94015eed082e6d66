"""One episode, one reward, on every surface (issue 14).

For every family, in presentations I and A, one admitted environment (made by the pipeline's
own stages: sample, solve, render, check, annotate, export) is played on the same trajectories
through every surface a trainer touches — the scorer of `vhd score` and `vhd eval`
(`tasks.score.score`), `vhd.adapters.reward`, the Gym wrapper, a `serve-env` client and
`vhd play` — and every surface gives the same reward: on the empty trajectory (0), π* cut at
every quarter and without its last call (stopping's last call
is the decision to sell: it scored 1 when the surfaces finished the episode with π*'s last
call), refusals only (until the call limit ends the episode), π* with a refusal after
every call (1, refusals use no turn) and π* itself (1).
"""

from __future__ import annotations

import io
import json
import threading

import pytest

from vhd.adapters import reward as adapter_reward
from vhd.adapters.gym import TextToolEnv
from vhd.adapters.http import HttpEnvClient, make_server
from vhd.adapters.play import play
from vhd.mechanisms import registry
from vhd.schemas.errors import SetterError
from vhd.tasks.annotate import annotate, make_candidates
from vhd.tasks.check import check_batch, in_band
from vhd.tasks.export import export_row
from vhd.tasks.passages import builtin_passages
from vhd.tasks.sample import sample_models
from vhd.tasks.score import score
from vhd.mechanisms._runtime import call_limit
from vhd.tasks.setters.template import render_module
from vhd.tasks.solve import solve_models

FAMILIES = registry.names()
REFUSED = {"tool": "no_such_tool", "arguments": {}}


def admitted_environments(family, models_wanted=8):
    """(env, row, setter output, θ) of the first model admitted in both I and A."""
    output = None
    for passage in builtin_passages():
        try:
            output = render_module(family, passage)
            break
        except SetterError:
            continue
    models = sample_models(family, models_wanted, seed=5, batch="surfaces")
    solutions = {s.model_id: s for s in solve_models(family, models)}
    candidates = make_candidates(family, models, solutions, {output.setter_output_id: output},
                                 {m.model_id: output.setter_output_id for m in models}, ("I", "A"))
    for k in range(0, len(candidates), 2):
        pair = candidates[k:k + 2]
        if not all(in_band(family, c) for c in pair):
            continue
        verdicts = check_batch(family, output, pair)
        if all(v.admitted for v in verdicts):
            envs = [annotate(family, v)[0] for v in verdicts]
            return [(env, export_row(env, c.model, output, family), output, c.model.theta)
                    for env, c in zip(envs, pair)]
    raise AssertionError(f"{family.name}: no model of {models_wanted} admitted in both I and A")


def trajectories(row):
    optimal = row["grader"]["reference_trajectory"]
    quarters = [optimal[: len(optimal) * k // 4] for k in (1, 2, 3)]
    interleaved = [step for call in optimal for step in (call, REFUSED)]
    refusals = [REFUSED] * (call_limit(row["grader"]["config"]["turn_budget"]) + 3)
    return {"empty": [], "quarter": quarters[0], "half": quarters[1], "three_quarters": quarters[2],
            "all_but_the_last_call": optimal[:-1], "refusals_only": refusals, "interleaved": interleaved,
            "optimal": optimal}


def gym_reward(env, calls):
    env.reset(seed=0)
    for call in calls:
        _, r, terminated, _, _ = env.step(json.dumps(call))
        if terminated:
            return r
    return env.finish()[0]


def http_reward(url, calls):
    client = HttpEnvClient(url)
    try:
        client.reset()
        for call in calls:
            _, r, terminated, _, _ = client.step(call)
            if terminated:
                return r
        return client.finish()[0]
    finally:
        client.close()


def play_reward(row, calls):
    lines = [f"{c['tool']} {json.dumps(c['arguments'])}" for c in calls] + ["quit"]
    return play(TextToolEnv(row), io.StringIO("\n".join(lines) + "\n"), lambda text: None)


@pytest.mark.parametrize("name", FAMILIES)
def test_every_surface_gives_the_same_reward(name):
    family = registry.get(name)
    for env, row, output, theta in admitted_environments(family):
        played = trajectories(row)
        scored = dict(zip(played, (r["reward"] for r in score(env, output, theta, family, list(played.values())))))
        server = make_server(row)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            for label, calls in played.items():
                surfaces = {"score": scored[label], "adapters.reward": adapter_reward(row["grader"], calls, row["module"]),
                            "gym": gym_reward(TextToolEnv(row), calls), "serve-env": http_reward(url, calls),
                            "play": play_reward(row, calls)}
                assert len(set(surfaces.values())) == 1, (name, env.presentation, label, surfaces)
        finally:
            server.shutdown()
            server.server_close()
        assert scored["empty"] == 0.0 and scored["refusals_only"] == 0.0, (name, env.presentation, scored)
        assert scored["optimal"] == 1.0 and scored["interleaved"] == 1.0, (name, env.presentation, scored)
