"""One episode, one reward, on every surface (issue 14).

For every family, in presentations I and A, one admitted environment (made by the pipeline's
own stages: sample, solve, render, check, annotate, export) is played on the same trajectories
through every surface a trainer touches — the scorer of `vhd score` and `vhd eval`
(`tasks.score.score`), `vhd.adapters.reward`, the Gym wrapper, a `serve-env` client and
`vhd play`, SkyRL-gym's env and TRL's environment class (on the trajectories whose calls all
name the row's tools: TRL answers a call of another tool itself) — and every surface gives the
same rewards: the decision reward, the outcome reward
and the step rewards (the Gym wrapper's per-step rewards are the scorer's step rewards, the last
step carrying the rest, and sum to the episode's reward), on the empty trajectory (0), π* cut at
every quarter and without its last call (stopping's last call is the decision to sell: it scored
1 when the surfaces finished the episode with π*'s last call), refusals only (until the call
limit ends the episode), π* with a malformed call after every call (1: a malformed call uses no
turn), decision-heavy random calls of which the world refuses some (each refusal using its turn,
issue 26), a few of those decisions and then π*, a call of every tool with an optional argument
given as an explicit null (malformed: free) and then π* (1), and π* itself (1: the baseline 1 on
its first step, every other step 0). With discounting (γ = 0.9, 0.99) no trajectory's Gym return
beats π*'s, which is 1. In presentation F, whose surfaces are `vhd score` and `vhd play`
(the adapters refuse F), both give the same reward for π*'s plan, the default's, a malformed plan
and no submission.

A skin is names only (issue 29): the same model skinned by two more passages of other worlds (a
different pair for every family, so the test walks over many domains' lexicons) gets the same gate
verdicts, references and trajectories (mapped), the same rewards through the scorer, the grader,
the Gym wrapper and TRL, and its canonical export is the bakery's: one TRL class, π* 1, nothing 0.
"""

from __future__ import annotations

import io
import json
import threading
import types

import numpy as np
import pytest

from family_kit import PASSAGES, admitted_environments, admitted_verdicts
from vhd.adapters import grade as adapter_grade
from vhd.adapters.gym import TextToolEnv
from vhd.adapters.http import HttpEnvClient, make_server
from vhd.adapters.play import play
from vhd.adapters.trl import environment_class
import vhd.adapters.skyrl  # noqa: F401  (registers "vhd" with skyrl_gym)
from vhd.mechanisms import registry
from vhd.tasks.stages.check import CALL_PROFILES, random_calls, to_calls
from vhd.tasks.grading.oracle import reference_module
from vhd.tasks.stages.sample import draw
from vhd.tasks.grading.score import score
from vhd.mechanisms._runtime import call_limit
from vhd.tasks.stages.annotate import annotate, make_candidates
from vhd.tasks.stages.check import check_batch
from vhd.tasks.corpus.export import export_row, with_canonical_tool_names
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.setters.lexicon import PATTERNS
from vhd.tasks.setters.skin import Interface
from vhd.tasks.setters.template import render_module
from vhd.tasks.stages.solve import solve_models

FAMILIES = registry.names()
REFUSED = {"tool": "no_such_tool", "arguments": {}}


def explicit_nulls(row):
    """A call of every tool with an optional argument, each optional argument an explicit null
    (outside every schema: malformed, so free on every surface that passes arguments unchanged)."""
    return [{"tool": t["name"], "arguments": {k: None for k in t["input_schema"].get("properties", {})
                                              if k not in t["input_schema"].get("required", [])}}
            for t in row["player"]["tools"]
            if set(t["input_schema"].get("properties", {})) - set(t["input_schema"].get("required", []))]


def trajectories(row, family, output):
    optimal = row["grader"]["reference_trajectory"]
    quarters = [optimal[: len(optimal) * k // 4] for k in (1, 2, 3)]
    interleaved = [step for call in optimal for step in (call, REFUSED)]
    refusals = [REFUSED] * (call_limit(row["grader"]["config"]["turn_budget"]) + 3)
    randoms = world_refused(row, family, output)
    decisions = {output.tool_name(t.name) for t in family.tools_with_role("decision")}
    costly = [call for call in randoms if call["tool"] in decisions][:3]
    nulls = explicit_nulls(row)
    return {"empty": [], "quarter": quarters[0], "half": quarters[1], "three_quarters": quarters[2],
            "all_but_the_last_call": optimal[:-1], "refusals_only": refusals, "interleaved": interleaved,
            "world_refusals": randoms, "decisions_then_optimal": costly + optimal,
            "nulls_then_optimal": nulls + optimal, "optimal": optimal}


def _module(source):
    module = types.ModuleType("surfaces_module")
    exec(compile(source, "<surfaces>", "exec"), module.__dict__)
    return module


def world_refused(row, family, output, length=30):
    """Random calls (decision-heavy) kept while the episode goes on, until `length` are kept: the
    world refuses many of them, each refusal using its turn (issue 26), so the turns run out."""
    module, rng, kept = _module(row["module"]), np.random.default_rng(26), []
    for call in to_calls(output, random_calls(family, family.Params().model_dump(), rng, 400, CALL_PROFILES[1])):
        env = module.create(row["grader"]["config"])
        for step in kept + [call]:
            env.call(step["tool"], step["arguments"])
        if not env.done or len(kept) + 1 == length:
            kept.append(call)
        if len(kept) == length:
            break
    return kept


def world_refusals(module, config, calls):
    """How many of `calls` the world refuses, each using its turn (its refusal tells the turns left;
    a malformed call's does not), on a fresh episode of `module`."""
    env = module.create(config)
    return sum(1 for call in calls if not env.done and "turns_left" in (answer := env.call(call["tool"], call["arguments"]))
               and answer["ok"] is False)


@pytest.mark.registry
def test_the_random_trajectory_has_refusals_by_the_world_in_most_families():
    """`world_refused` plays what the issue asks of every surface: refusals that use their turn.
    (A World may have none a player can reach: negotiation's are all behind its fitted schemas.)"""
    found = {}
    for family in registry.all():
        module, output = reference_module(family)
        _, theta = draw(family, 3)
        config = {"params": theta, "presentation": "A", "episode_seed": 3, "turn_budget": family.turn_budget(theta)}
        row = {"module": output.module, "grader": {"config": config}}
        found[family.name] = world_refusals(module, config, world_refused(row, family, output))
    assert sum(count > 0 for count in found.values()) >= len(found) - 2, found  # 15 of 16 when written


def discounted(rewards, gamma):
    return sum(r * gamma ** t for t, r in enumerate(rewards))


def _episode(env, calls):
    """(the episode's reward, the rewards of its steps, its outcome reward) through a reset/step/finish API."""
    env.reset()
    paid = []
    for call in calls:
        _, r, terminated, _, info = env.step(call)
        paid.append(r)
        if terminated:
            assert abs(sum(paid) - info["reward"]) <= 1e-12, (paid, info)
            return info["reward"], paid, info["outcome_reward"]
    r, info = env.finish()
    return r, paid, info["outcome_reward"]


def gym_rewards(env, calls):
    return _episode(env, [json.dumps(call) for call in calls])


def http_rewards(url, calls):
    client = HttpEnvClient(url)
    try:
        return _episode(client, calls)
    finally:
        client.close()


def skyrl_reward(row, calls):
    """SkyRL-gym (`skyrl_gym.make("vhd")`): each call as the model's JSON text, then a reply
    without a call if the episode is still running; the summed step rewards."""
    import skyrl_gym

    env = skyrl_gym.make("vhd", extras={"extra_info": {"row": row}})
    env.init(None)
    total, done = 0.0, False
    for text in [json.dumps(call) for call in calls] + ["no more calls"]:
        out = env.step(text)
        total, done = total + out["reward"], out["done"]
        if done:
            return total
    raise AssertionError("the episode did not end")


def trl_reward(row, calls):
    """TRL's environment class (`vhd.adapters.trl`): each call by its typed method, then get_reward().
    Only for calls of the row's tools: TRL answers a call of another tool itself."""
    env = environment_class(row["player"]["tools"], family=row["family"])()
    env.reset(**row)
    for call in calls:
        getattr(env, call["tool"])(**call["arguments"])
    return env.get_reward()


def play_reward(row, calls):
    lines = [f"{c['tool']} {json.dumps(c['arguments'])}" for c in calls] + ["quit"]
    return play(TextToolEnv(row), io.StringIO("\n".join(lines) + "\n"), lambda text: None)


@pytest.mark.parametrize("name", FAMILIES)
def test_every_surface_gives_the_same_rewards(name):
    family = registry.get(name)
    for env, row, output, theta, solution in admitted_environments(family):
        played = trajectories(row, family, output)
        scored = dict(zip(played, score(env, output, theta, family, solution, list(played.values()))))
        server = make_server(row)
        # serve_forever polls for shutdown() every 0.5 s by default: that wait, twice per family
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        through_trl = []
        try:
            for label, calls in played.items():
                mine = scored[label]
                graded = adapter_grade(row["grader"], calls, row["module"])
                assert [graded[k] for k in ("reward", "outcome_reward", "step_rewards")] == \
                    [mine[k] for k in ("reward", "outcome_reward", "step_rewards")], (name, label, graded, mine)
                assert len(mine["step_rewards"]) == len(calls)
                gym, http = gym_rewards(TextToolEnv(row), calls), http_rewards(url, calls)
                surfaces = {"score": mine["reward"], "adapters": graded["reward"], "gym": gym[0], "serve-env": http[0],
                            "play": play_reward(row, calls)}
                if {c["tool"] for c in calls} <= {t["name"] for t in row["player"]["tools"]}:
                    surfaces["trl"] = trl_reward(row, calls)
                    through_trl.append(label)
                assert len(set(surfaces.values())) == 1, (name, env.presentation, label, surfaces)
                summed = skyrl_reward(row, calls)  # a SkyRL trainer sums the step rewards: equal to rounding
                assert abs(summed - mine["reward"]) <= 1e-12, (name, env.presentation, label, summed, mine["reward"])
                assert gym[2] == http[2] == mine["outcome_reward"], (name, label, gym, http, mine)
                for stepped in (gym[1], http[1]):  # the per-step rewards are the scorer's, but the last step's
                    assert stepped[:-1] == mine["step_rewards"][:len(stepped) - 1], (name, label, stepped, mine)
                for gamma in (0.9, 0.99):  # discounted, no trajectory's return beats π*'s, which is 1
                    assert discounted(gym[1], gamma) <= 1.0 + 1e-9, (name, label, gamma, gym[1])
        finally:
            server.shutdown()
            server.server_close()
        assert {"empty", "half", "optimal", "nulls_then_optimal"} <= set(through_trl), through_trl
        rewards = {label: row["reward"] for label, row in scored.items()}
        assert rewards["empty"] == 0.0 and rewards["refusals_only"] == 0.0, (name, env.presentation, rewards)
        assert rewards["optimal"] == 1.0 and rewards["interleaved"] == 1.0, (name, env.presentation, rewards)
        optimal = scored["optimal"]["step_rewards"]
        assert optimal == [1.0] + [0.0] * (len(optimal) - 1) and scored["optimal"]["outcome_reward"] == 1.0
        assert rewards["nulls_then_optimal"] == 1.0, (name, env.presentation, rewards)  # nulls are malformed: free
        if explicit_nulls(row):
            nulls_first = scored["nulls_then_optimal"]["step_rewards"]
            assert nulls_first == [1.0] + [0.0] * (len(nulls_first) - 1)


def other_skins(family, count=2):
    """`count` built-in passages of other domains than the bakery's, a different pair per family
    (so the registry-wide test walks over many worlds' lexicons)."""
    k = FAMILIES.index(family.name)
    picked = []
    for step in range(len(PASSAGES)):
        passage = PASSAGES[(27 + 11 * k + 37 * step) % len(PASSAGES)]
        if passage.domain not in {p.domain for p in picked} | {"bakery"}:
            picked.append(passage)
        if len(picked) == count:
            return picked
    raise AssertionError("not enough domains")


def _renamed(calls, source, target):
    """Calls of one skin as another's player makes them: its tool names, argument names and ids
    (a made-up tool stays as it is)."""
    family = registry.get(source.family)
    mine, theirs = Interface.of(family, source), Interface.of(family, target)
    return [theirs.shown(mine.canonical(call)) if call["tool"] in mine.names else call for call in calls]


def _api(tool):
    """A tool without its passage-worded descriptions: its name and its arguments' schemas."""
    schema = tool["input_schema"]
    return tool["name"], {**schema, "properties": {k: {x: y for x, y in v.items() if x != "description"}
                                                   for k, v in schema.get("properties", {}).items()}}


def _gates(verdict):
    return [(gate.name, gate.passed) for gate in verdict.gates]


@pytest.mark.parametrize("name", FAMILIES)
def test_every_skin_gives_the_same_verdicts_and_rewards(name):
    """Issue 29 item 2: a skin is names only. The model admitted in the bakery, skinned by two
    passages of other worlds (other tool names, descriptions, tables), gets every gate's verdict,
    the same references and reference trajectory (mapped), and the same rewards for the same
    trajectories (mapped) from the scorer, the adapters' grader, the Gym wrapper and TRL; its
    canonical export is the bakery's API (one TRL class per family), where π* scores 1 and nothing 0."""
    family = registry.get(name)
    base, baseline = admitted_environments(family), admitted_verdicts(family)
    env0, _, output0, _, _ = base[0]
    models = [m for m in sample_models(family, 8, seed=5, batch="surfaces") if m.model_id == env0.model_id]
    solutions = {s.model_id: s for s in solve_models(family, models)}
    for passage in other_skins(family):
        output = render_module(family, passage)
        named = name in PATTERNS  # a family the lexicon does not name keeps its canonical names in every world
        assert ({b.name for b in output.interface} != {b.name for b in output0.interface}) == named, passage.domain
        mapping = {m.model_id: output.setter_output_id for m in models}
        pair = make_candidates(family, models, solutions, {output.setter_output_id: output}, mapping, ("I", "A"))
        verdicts = check_batch(family, output, pair)
        assert [_gates(v) for v in verdicts] == [_gates(v) for v in baseline], (name, passage.domain)
        for verdict, (env0, row0, _, theta, solution) in zip(verdicts, base):
            assert verdict.admitted, (name, passage.domain, verdict.reason)
            env = annotate(family, verdict)[0]
            assert env.presentation == env0.presentation and env.env_id != env0.env_id
            assert (env.u_star, env.u_default, env.u_idle) == (env0.u_star, env0.u_default, env0.u_idle)
            for which in ("reference_trajectory", "default_trajectory"):
                assert getattr(env, which) == _renamed(getattr(env0, which), output0, output), (name, which)
            row = export_row(env, models[0], output, family, solution)
            played = {label: _renamed(calls, output0, output)
                      for label, calls in trajectories(row0, family, output0).items()}
            mine = score(env, output, theta, family, solution, list(played.values()))
            theirs = score(env0, output0, theta, family, solution,
                           [_renamed(calls, output, output0) for calls in played.values()])
            for label, a, b in zip(played, mine, theirs):
                assert [a[k] for k in ("reward", "outcome_reward", "step_rewards")] == \
                    [b[k] for k in ("reward", "outcome_reward", "step_rewards")], (name, passage.domain, label)
            for label in ("empty", "half", "refusals_only", "world_refusals", "optimal"):
                calls, expected = played[label], mine[list(played).index(label)]["reward"]
                assert adapter_grade(row["grader"], calls, row["module"])["reward"] == expected, (name, label)
                assert gym_rewards(TextToolEnv(row), calls)[0] == expected, (name, label)
            # the canonical export: the bakery's API, the same TRL class, π* 1 and nothing 0 through it
            canonical, canonical0 = with_canonical_tool_names(row), with_canonical_tool_names(row0)
            assert [_api(t) for t in canonical["player"]["tools"]] == [_api(t) for t in canonical0["player"]["tools"]]
            assert canonical["grader"]["reference_trajectory"] == canonical0["grader"]["reference_trajectory"]
            Environment = environment_class(canonical["player"]["tools"], family=canonical["family"],
                                            canonical=canonical["grader"]["interface"])
            assert Environment is environment_class(canonical0["player"]["tools"], family=canonical0["family"],
                                                     canonical=canonical0["grader"]["interface"])
            for calls, expected in ((canonical["grader"]["reference_trajectory"], 1.0), ([], 0.0)):
                env_trl = Environment()
                env_trl.reset(**canonical)
                for call in calls:
                    getattr(env_trl, call["tool"])(**call["arguments"])
                assert env_trl.get_reward() == expected, (name, passage.domain, expected)


def span(family, theta, policy, seed):
    """u* − max(u_default, u_idle) on one episode seed, u_idle what finishing at once realizes."""
    module, _ = reference_module(family)
    env = module.create({"params": theta, "presentation": "I", "episode_seed": seed, "turn_budget": 1})
    idle = env.finish()["utility"]
    realized = [family.simulate(theta, p, seed).utility for p in (policy, family.default_policy(theta))]
    return realized[0] - max(realized[1], idle)


@pytest.mark.parametrize("name", FAMILIES)
def test_a_fresh_episode_is_graded_by_the_same_decision_reward(name):
    """reset(seed) plays a new episode of the same θ: π*'s calls for that episode's draws score 1
    (decision and outcome reward), through the Gym wrapper and a serve-env session alike."""
    family = registry.get(name)
    env, row, output, theta, solution = admitted_environments(family)[1]  # presentation A
    policy = family.solve(theta).policy
    server = make_server(row)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    client = HttpEnvClient(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        for seed in (env.episode_seed + 1, 7, 12345):
            best = to_calls(output, family.simulate(theta, policy, seed).calls)
            for surface in (TextToolEnv(row), client):
                _, info = surface.reset(seed=seed)
                assert info["episode_seed"] == seed
                rewards = [surface.step(call)[1] for call in best]
                r, info = surface.finish()
                assert r == 1.0 and abs(sum(rewards) - 1.0) <= 1e-12, (name, seed, r, rewards)
                # the outcome reward's references are this episode's: π* realizes its u* (1, or 0 if the
                # default or idling does as well on these draws: the luck the decision reward leaves out)
                assert info["outcome_reward"] == (1.0 if span(family, theta, policy, seed) > 0 else 0.0), (name, seed)
    finally:
        client.close()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("name", FAMILIES)
def test_canonical_tool_names_give_one_tool_set_and_the_same_rewards(name):
    """`vhd export --tool-names canonical`: the family's canonical names in place of the passage's,
    the same tool set for every environment of the family, and the same rewards for the same
    decisions (π* 1, nothing 0) through the grader and the Gym wrapper."""
    from vhd.tasks.corpus.export import with_canonical_tool_names

    family = registry.get(name)
    canonical = [tool.name for tool in family.tools]
    for env, row, output, theta, solution in admitted_environments(family):
        renamed = with_canonical_tool_names(row)
        assert [t["name"] for t in renamed["player"]["tools"]] == canonical
        assert [t["description"] for t in renamed["player"]["tools"]] == [t["description"] for t in row["player"]["tools"]]
        for skinned, canon in row["grader"]["interface"].items():  # the instruction names the canonical tools
            if skinned != canon and skinned in row["player"]["instruction"]:
                assert skinned not in renamed["player"]["instruction"] and canon in renamed["player"]["instruction"]
        optimal = renamed["grader"]["reference_trajectory"]
        assert adapter_grade(renamed["grader"], optimal, renamed["module"])["reward"] == 1.0
        assert gym_rewards(TextToolEnv(renamed), optimal)[0] == 1.0 and gym_rewards(TextToolEnv(renamed), [])[0] == 0.0


def admitted_f_environment(family, seeds=(14, 15, 16, 17)):
    """(env, export row, θ, solution, setter output) of the first admitted F environment of the
    pipeline's own stages (sample, solve, render, the F gates, annotate, export)."""
    from vhd.tasks.stages.annotate import annotate
    from vhd.tasks.corpus.export import export_row
    from vhd.tasks.stages.in_process import check_models

    for seed in seeds:
        run = check_models(family, count=1, seed=seed, presentations=("F",))
        for verdict in run.verdicts:
            if verdict.admitted:
                env = annotate(family, verdict)[0]
                c = verdict.candidate
                return (env, export_row(env, c.model, c.setter_output, family, c.solution), c.model.theta, c.solution,
                        c.setter_output)
    raise AssertionError(f"{family.name}: no F environment admitted on seeds {seeds}")


@pytest.mark.parametrize("name", FAMILIES)
def test_play_gives_vhd_scores_reward_in_presentation_f(name):
    """Presentation F has two surfaces, `vhd score` (`tasks.score.score`) and `vhd play`
    (`play_written`; the adapters refuse F): the same reward for π*'s plan (1), the default's
    (0), a plan of the wrong length (0) and no submission (0)."""
    from vhd.adapters.play import play_written

    family = registry.get(name)
    env, row, theta, solution, output = admitted_f_environment(family)
    optimal, default = env.reference_trajectory, env.default_trajectory
    plans = {"optimal": optimal, "default": default, "empty": [],
             "wrong_length": [{"tool": "submit_plan", "arguments": {"plan": [0]}}]}
    scored = dict(zip(plans, score(env, output, theta, family, solution, list(plans.values()))))
    assert [scored[k]["reward"] for k in plans] == [1.0, 0.0, 0.0, 0.0], (name, scored)
    for label, calls in plans.items():
        lines = [f"{c['tool']} {json.dumps(c['arguments'])}" for c in calls] + ["quit"]
        played = play_written(row, io.StringIO("\n".join(lines) + "\n"), lambda text: None)
        assert played == scored[label]["reward"], (name, label, played, scored[label])
