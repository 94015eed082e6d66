"""No hidden θ in a refusal (issue 14, item 4).

In presentation A a refusal costs no turn, so a hidden number in its text is free information.
The Worlds name the rule that was broken; the information-hiding gate replays every call
sequence on a twin whose hidden θ is moved and compares the refusal texts position by position.
"""

from __future__ import annotations

import copy
import types

import numpy as np
import pytest

from vhd.mechanisms import registry
from vhd.tasks.sandbox import report as sandbox_report
from vhd.tasks.stages.annotate import make_candidates
from vhd.tasks.stages.check import _twin_difference, check_batch, perturbed
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.setters.skin import interface_of
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.setters.template import render_module
from vhd.tasks.stages.solve import solve_models
from vhd.tasks.stages.synthesize import synthesize

PASSAGE = builtin_passages()[0]
_MODULES: dict[str, tuple] = {}


def module_of(name):
    if name not in _MODULES:
        out = render_module(registry.get(name), PASSAGE)
        module = types.ModuleType("leaks_" + name)
        exec(compile(out.module, "<leaks %s>" % name, "exec"), module.__dict__)
        _MODULES[name] = (out, module)
    return _MODULES[name]


def env_of(name, theta, presentation="A"):
    out, module = module_of(name)
    env = module.create({"params": theta, "presentation": presentation, "episode_seed": 0,
                         "turn_budget": registry.get(name).turn_budget(theta)})
    def call(tool, **arguments):  # a canonical call as the module's player makes it (its names and ids)
        made = interface_of(out).shown({"tool": tool, "arguments": arguments})
        return env.call(made["tool"], made["arguments"])

    return env, call


def twin_of(name, theta):
    """θ with every hidden field moved, as the gate's twin has it."""
    return {k: perturbed(v) if k in registry.get(name).hidden else v for k, v in theta.items()}


# --- the observed leaks, one regression each ---------------------------------------------------


def test_qp_cap_refusal_names_the_rule_not_the_cap():
    theta = {"assets": 3, "factors": 2, "budget": 10, "returns": [12, 9, 4], "caps": [5, 6, 7],
             "exposures": [[2, -1, 0], [0, 1, 3]], "ridge": 2, "risk_aversion": 0.07, "forecast": [12, 9, 4]}
    texts = []
    for params in (theta, twin_of("qp", theta)):  # caps 5, 6, 7 and 6, 7, 8: 6.5 is over project 0's cap in both
        _, call = env_of("qp", params)
        answer = call("allocate", project=0, amount=6.5)
        assert answer["ok"] is False
        texts.append(answer["error"])
    assert texts[0] == texts[1], texts  # was "project 1 takes at most 5 EUR" / "... 6 EUR"
    assert "5" not in texts[0].replace("6.5", "")


def test_qp_budget_is_checked_before_the_hidden_cap():
    """Over the budget and over a cap: the rule the player can check is the one named, in every world."""
    theta = {"assets": 2, "factors": 1, "budget": 5, "returns": [10, 5], "caps": [4, 4], "exposures": [[1, 1]],
             "ridge": 1, "risk_aversion": 0.1, "forecast": [10, 5]}
    texts = []
    for params in (theta, twin_of("qp", theta)):
        _, call = env_of("qp", params)
        answer = [call("allocate", project=1, amount=1.0), call("allocate", project=0, amount=4.5)][-1]  # 5.5 in all
        assert answer["ok"] is False
        texts.append(answer["error"])
    assert texts[0] == texts[1] and "budget" in texts[0]


def test_routing_time_refusal_shows_no_minutes():
    family = registry.get("routing")
    theta = family.sample(family.Params(size=5, horizon=3), np.random.default_rng(3))
    theta["budget"] = min(theta["travel"][0][s] + theta["travel"][s][0] for s in range(1, theta["n_stops"] + 1)) - 1
    twin = twin_of("routing", theta)
    for stop in range(1, theta["n_stops"] + 1):
        answers = [env_of("routing", params)[1]("drive_to", stop=stop) for params in (theta, twin)]
        assert answers[0]["ok"] is False and answers[1]["ok"] is False
        assert answers[0]["error"] == answers[1]["error"], answers  # was "... stop 5 (8 min) and back (24 min) ..."
        assert str(theta["travel"][0][stop]) not in answers[0]["error"].replace("stop %d" % stop, "")


def test_rostering_availability_and_shift_limit_read_the_same():
    """Which hidden rule binds (availability or the shift limit) is not told: one text for both."""
    family = registry.get("rostering")
    base = family.sample(family.Params(size=4, horizon=4), np.random.default_rng(5))
    unavailable, limited = copy.deepcopy(base), copy.deepcopy(base)
    for theta in (unavailable, limited):
        theta["availability"][0][2][0] = 1  # staff 0 works day 2's early shift first, in both worlds
    unavailable["availability"][0][0][0], unavailable["max_shifts"][0] = 0, base["horizon"]
    limited["availability"][0][0][0], limited["max_shifts"][0] = 1, 1
    texts = []
    for theta in (unavailable, limited):
        _, call = env_of("rostering", theta)
        assert call("assign_shift", staff=0, day=2, shift=0)["ok"]
        answer = call("assign_shift", staff=0, day=0, shift=0)
        assert answer["ok"] is False
        texts.append(answer["error"])
    assert texts[0] == texts[1], texts  # was "... is not available for the early shift on day 0" / "... shift limit"


# --- the gate ----------------------------------------------------------------------------------


def candidates_of(name, count, seed=2):
    family = registry.get(name)
    models = sample_models(family, count, seed=seed, batch="leaks")
    solutions = {s.model_id: s for s in solve_models(family, models)}
    outputs, assignment = synthesize(family, models, [PASSAGE])
    return outputs[0], make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs},
                                       assignment, ("A",))


def hiding(verdicts):
    return [next(g for g in v.gates if g.name == "information_hiding") for v in verdicts]


def mutated(output, old, new):
    assert output.module.count(old) == 1, old
    return output.model_copy(update={"module": output.module.replace(old, new)})


def test_a_refusal_that_shows_a_hidden_cap_is_rejected():
    family = registry.get("qp")
    output, candidates = candidates_of("qp", 3)
    leaky = mutated(output, '"%r %s is over project %s\'s cap (%s lists the caps)"',
                    '("%r %s is over project %s\'s cap of " + str(self.p["caps"][project]) + " (%s lists the caps)")')
    for gate in hiding(check_batch(family, leaky, candidates, every_candidate=True)):
        assert not gate.passed and "refusal of" in gate.message and "it leaks them" in gate.message, gate.message


def test_a_stochastic_refusal_that_shows_the_lead_time_is_rejected():
    family = registry.get("inventory_dp")
    output, candidates = candidates_of("inventory_dp", 2)
    leaky = mutated(output, 'with %d more, on hand, in transit and ordered today would exceed it"',
                    'with %d more, on hand, in transit and ordered today would exceed it (lead time %d)"')
    leaky = mutated(leaky, '% (self._count(self.p["capacity"]), quantity))',
                    '% (self._count(self.p["capacity"]), quantity, self.p["lead_time"]))')
    for gate in hiding(check_batch(family, leaky, candidates, every_candidate=True)):
        assert not gate.passed and "refusal of" in gate.message, gate.message


def test_an_observation_with_an_argument_that_shows_hidden_demand_is_rejected():
    """view_date takes a day, so the first-look check never calls it; the replayed sequences do."""
    family = registry.get("rostering")
    output, candidates = candidates_of("rostering", 2)
    leaky = mutated(output, 'entry = {"shift": j, "name": name, "staff": staff, "heads": heads[j]}',
                    'entry = {"shift": j, "name": name, "staff": staff, "heads": heads[j], '
                    '"hint": self.p["demand"][day][j]}')
    gates = hiding(check_batch(family, leaky, candidates, every_candidate=True))
    assert any(not g.passed and "view_date" in g.message and "differs" in g.message for g in gates), \
        [g.message for g in gates]


@pytest.mark.parametrize("name", registry.names())
def test_every_family_module_passes_the_replayed_twin(name):
    family = registry.get(name)
    output, candidates = candidates_of(name, 2, seed=7)
    for gate in hiding(check_batch(family, output, candidates, every_candidate=True)):
        compared = "refusals" if family.stochastic else "answers and refusals"
        assert gate.passed and f"instruction, {compared} invariant to the hidden θ not read" in gate.message, gate.message
        assert "(0 call sequences" not in gate.message


def test_comparison_stops_where_the_worlds_part():
    roles = {"act": "decision", "look": "observe", "tick": "clock", "peek": "probe"}
    calls = [{"tool": t, "arguments": {}} for t in ("act", "act", "act")]
    same = [[True, "a"], [False, "no: 3"], [True, "b"]]
    assert _twin_difference(same, [[True, "a"], [False, "no: 4"], [True, "b"]], calls, roles, False)
    assert not _twin_difference(same, [[False, "no"], [False, "no: 4"], [True, "b"]], calls, roles, False)
    # stochastic: once the clock's answers differ, a different rule may bind, but one rule reads the same
    calls = [{"tool": t, "arguments": {}} for t in ("tick", "act", "act", "act")]
    mine = [[True, "day 1"], [False, "storage full"], [False, "cash 3"], [True, "end"]]
    assert not _twin_difference(mine, [[True, "day 2"], [False, "cash short"], [False, "cash 3"], [True, "end"]],
                                calls, roles, True)
    assert _twin_difference(mine, [[True, "day 2"], [False, "storage full"], [False, "cash 4"], [True, "end"]],
                            calls, roles, True)
    # every accepted answer, before and after decisions (deterministic families: the twin moved only
    # what no call of the sequence read), but not the answer of the call that ends the episode
    calls = [{"tool": t, "arguments": {}} for t in ("look", "act", "look", "tick")]
    mine = [[True, "x"], [True, "y"], [True, "z"], [True, "end"]]
    assert _twin_difference(mine, [[True, "x2"], [True, "y"], [True, "z"], [True, "end"]], calls, roles, False)
    assert _twin_difference(mine, [[True, "x"], [True, "y"], [True, "z2"], [True, "end"]], calls, roles, False)
    assert _twin_difference(mine, [[True, "x"], [True, "y2"], [True, "z"], [True, "end"]], calls, roles, False)
    assert not _twin_difference(mine, [[True, "x"], [True, "y"], [True, "z"], [True, "end2"]], calls, roles, False)
    assert not _twin_difference(mine, [[True, "x"], [True, "y"], [True, "z2"], [True, "end"]], calls, roles, True)
    # a family without a belief: the twin moved what a probe read, so answers are compared up to it
    calls = [{"tool": t, "arguments": {}} for t in ("look", "peek", "look", "tick")]
    assert not _twin_difference(mine, [[True, "x"], [True, "y2"], [True, "z2"], [True, "end"]], calls, roles, False,
                                blind=True)
    assert _twin_difference(mine, [[True, "x2"], [True, "y"], [True, "z"], [True, "end"]], calls, roles, False,
                            blind=True)
    assert not _twin_difference(mine, [[True, "x2"], [True, "y"], [True, "z"], [True, "end"]], calls, roles, True)


def test_the_parent_refuses_answers_not_of_the_runners_shape():
    record = {"key": "k", "describe": {"instruction": "x", "tools": []}, "trajectories": [
        {"utility": 1.0, "terminal": True, "turns_used": 1, "errors": 1, "first_error": "no", "obs_digest": "0",
         "obs_numbers": [], "answers": [[True, "0123456789ab"], [False, "no"]], "exception": None}]}
    sandbox_report._episode(record, "k")
    for answers in ([[1, "x"]], [[False, "x" * (sandbox_report.MAX_REFUSAL + 1)]], [["x"]], "x"):
        bad = copy.deepcopy(record)
        bad["trajectories"][0]["answers"] = answers
        with pytest.raises(sandbox_report._Forged):
            sandbox_report._episode(bad, "k")
