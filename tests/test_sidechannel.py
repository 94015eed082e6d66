"""The `sidechannel` agent (issue 26): a generic learner from refusals, decision answers and
observations. On a planted leak it infers what leaks and plays on it; on the real, closed worlds
what it chooses to call depends on nothing unread; in I it plays π*."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from vhd.agents import SCRIPTED, trajectory
from vhd.agents.prober import probe_then_play
from vhd.agents.sidechannel import Worlds, infer_then_play
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.tasks.grading.step_advantages import decision_grade
from vhd.tasks.stages.check.budget import reserved_turns
from vhd.tasks.stages.check import to_calls
from vhd.tasks.stages.check.sequences import twin_theta
from vhd.tasks.grading.oracle import reference_module
from vhd.tasks.corpus.presets import preset
from vhd.tasks.stages.sample import draw
from vhd.tasks.stages.solve import pack_policy

PAPER = sorted({slot.family for slot in preset("paper", registry.all()).slots})


@pytest.fixture
def leaky_facility(monkeypatch):
    """facility whose site list also shows every opening and service cost: a planted side channel."""
    family = registry.get("facility")
    module, _ = reference_module(family)
    honest = module.World.tool_list_sites

    def list_sites(self):
        return {**honest(self), "costs": [list(self.p["opening_costs"]), self.p["service_costs"]]}

    monkeypatch.setattr(module.World, "tool_list_sites", list_sites)
    return family


def test_planted_leak_is_found_inferred_and_played(leaky_facility):
    family, gained = leaky_facility, 0.0
    for seed in range(1, 4):
        knobs, theta = draw(family, seed, {"size": 4, "horizon": 5})
        run = infer_then_play(family, theta, knobs, family.turn_budget(theta), episode_seed=7)
        assert [c["tool"] for c in run.explored] == ["list_sites"]
        assert run.eliminated == run.candidates - 1  # none of the draws fits; the refined belief does
        assert {h: run.nearest[h] for h in family.hidden} == {h: theta[h] for h in family.hidden}
        read, _ = probe_then_play(family, theta, "A", family.turn_budget(theta), 7)
        prober = family.evaluate(theta, family.solve(family.belief(theta, read)).policy)
        mine = family.evaluate(theta, run.plan)
        assert mine == family.solve(theta).u_star >= prober
        gained += mine - prober
    assert gained > 0


def test_without_the_leak_it_plays_as_the_prober():
    family = registry.get("facility")
    knobs, theta = draw(family, 1, {"size": 4, "horizon": 5})
    run = infer_then_play(family, theta, knobs, family.turn_budget(theta), episode_seed=7)
    read, play = probe_then_play(family, theta, "A", family.turn_budget(theta), 7)
    assert (run.explored, run.eliminated) == ([], 0)
    assert run.calls == read + play


@pytest.mark.parametrize("name", PAPER)
def test_what_it_calls_depends_on_nothing_unread(name):
    """θ and its twin (every hidden number the probes did not show moved) get the same probes and
    the same exploration blocks; where the answers tell no candidate apart, the same plan."""
    family = registry.get(name)
    compared = 0
    for seed in range(7_000, 7_006):
        knobs, theta = draw(family, seed)
        budget = family.turn_budget(theta)
        run = infer_then_play(family, theta, knobs, budget, episode_seed=3)
        other = twin_theta(family, theta, run.read)
        try:
            other_policy = family.solve(other).policy
        except InvalidParams:  # the twin moved a number past its range (a coordinate of 30 to 31)
            continue
        if reserved_turns(family, other, other_policy) != reserved_turns(
                family, theta, family.solve(theta).policy):
            continue  # π*'s turns are kept back, as the prober keeps them: a different reserve reads differently
        twin_run = infer_then_play(family, other, knobs, budget, episode_seed=3)
        assert twin_run.read == run.read
        assert twin_run.chosen == run.chosen
        if run.eliminated == twin_run.eliminated == 0:
            assert np.array_equal(run.plan, twin_run.plan)
        compared += 1
        if compared == 2:
            break
    assert compared >= 1


def test_answers_are_the_reference_worlds():
    family = registry.get("knapsack")
    knobs, theta = draw(family, 3)
    worlds = Worlds(family, family.turn_budget(theta), 0)
    env = worlds.create(theta)
    assert worlds.call(env, {"tool": "list_items", "arguments": {}})["ok"] is True
    before = worlds.state(env)
    add, remove = {"tool": "add_item", "arguments": {"item": 0}}, {"tool": "remove_item", "arguments": {"item": 0}}
    issued, answers = worlds.block(env, [add], {json.dumps(add, sort_keys=True): remove})
    assert issued == ([add, remove] if json.loads(answers[0])["ok"] else [add])
    assert worlds.state(env) == before  # undone, the log apart


@pytest.mark.parametrize("name", ["knapsack", "stopping"])
def test_in_i_it_plays_pi_star(name):
    family = registry.get(name)
    knobs, theta = draw(family, 11)
    solution = family.solve(theta)
    _, output = reference_module(family)
    budget = family.turn_budget(theta)
    table = SimpleNamespace(
        env=SimpleNamespace(presentation="I", episode_seed=5, turn_budget=budget, reference_trajectory=[]),
        model=SimpleNamespace(theta=theta, knobs=knobs), solution=SimpleNamespace(policy=pack_policy(solution.policy)[0]),
        setter_output=output, family=family)
    calls = trajectory("sidechannel", table)
    assert calls == to_calls(output, family.simulate(theta, solution.policy, 5).calls)
    config = {"params": theta, "presentation": "I", "episode_seed": 5, "turn_budget": budget}
    expected = {"u_star": solution.u_star, "u_default": solution.u_default, "u_idle": solution.u_idle}
    if solution.u_star > max(solution.u_default, solution.u_idle):
        assert decision_grade(family, config, family.simulate(theta, solution.policy, 5).calls, expected)["reward"] == 1.0
    assert "sidechannel" in SCRIPTED
