"""The gates can fail: deliberately wrong or misbehaving modules are rejected, and why."""

import dataclasses

import pytest

from vhd.tasks.setters.skin import skin_of, with_skin
from vhd.mechanisms import registry
from vhd.tasks.stages.annotate import make_candidates
from vhd.tasks.stages import check as check_stage
from vhd.tasks.stages.check import check_batch
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.sandbox import Limits
from vhd.tasks.stages.solve import solve_models
from vhd.tasks.stages.synthesize import synthesize

FAMILY = registry.get("inventory_dp")


@pytest.fixture(scope="module")
def batch():
    models = sample_models(FAMILY, 6, seed=1, batch="gates")
    solutions = {s.model_id: s for s in solve_models(FAMILY, models)}
    passages = builtin_passages()[:1]
    outputs, assignment = synthesize(FAMILY, models, passages)
    candidates = make_candidates(FAMILY, models, solutions, {o.setter_output_id: o for o in outputs}, assignment, ("I",))
    return outputs[0], candidates


def _mutate(output, old, new):
    assert old in output.module, old
    return output.model_copy(update={"module": output.module.replace(old, new, 1)})


def _failed(verdicts):
    return {g.name for v in verdicts for g in v.gates if not g.passed}


def test_the_correct_module_is_admitted(batch):
    output, candidates = batch
    verdicts = check_batch(FAMILY, output, candidates)
    admitted = [v for v in verdicts if v.admitted]
    assert len(admitted) >= 4
    for v in verdicts:  # a rejection here can only come from the model's own default band
        assert v.admitted or _failed([v]) == {"default_band"}
    assert all(v.instruction and len(v.tools) >= 10 for v in verdicts)


def test_doubled_holding_cost_is_rejected_by_replay_agreement(batch):
    output, candidates = batch
    wrong = _mutate(output, '-p["holding_cost"] * closing', '-2 * p["holding_cost"] * closing')
    holding = [c for c in candidates if c.model.theta["holding_cost"] > 0]
    assert holding, "the batch must contain θ where the mutation matters"
    verdicts = check_batch(FAMILY, wrong, holding)
    assert not any(v.admitted for v in verdicts)
    assert {"replay_agreement", "dynamics_agreement"} <= _failed(verdicts)


def test_hash_seed_dependence_is_rejected_by_determinism(batch):
    output, candidates = batch
    wrong = _mutate(output, 'return {"day": day, "weekday": day % 7, "days_left": self.p["horizon"] - day}',
                    'return {"day": day, "weekday": day % 7, "days_left": self.p["horizon"] - day, "tag": hash("x")}')
    # the canonical trajectories never call view_calendar; put one in front of π*'s path
    original = wrong.module
    wrong = wrong.model_copy(update={"module": original.replace(
        "        self._world = World(", "        self._tag = hash('salt')\n        self._world = World(", 1).replace(
        'result["turns_left"] = self._budget - self._turns', 'result["turns_left"] = self._budget - self._turns\n'
        '        result["trace"] = self._tag', 1)})
    verdicts = check_batch(FAMILY, wrong, candidates[:2])
    assert "determinism" in _failed(verdicts)
    assert "replay_agreement" not in _failed(verdicts)


def test_a_module_that_does_not_import_fails_executes(batch):
    output, candidates = batch
    broken = output.model_copy(update={"module": output.module + "\nraise RuntimeError('boom')\n"})
    verdicts = check_batch(FAMILY, broken, candidates[:1])
    assert not verdicts[0].admitted
    assert verdicts[0].gates[0].name == "executes" and "boom" in verdicts[0].gates[0].message


def test_an_infinite_loop_is_cut_by_the_wall_limit(batch):
    output, candidates = batch
    looping = output.model_copy(update={"module": output.module + "\nwhile True:\n    pass\n"})
    verdicts = check_batch(FAMILY, looping, candidates[:1], Limits(wall_seconds=2, cpu_seconds=2))
    assert not verdicts[0].admitted and "timeout" in verdicts[0].gates[0].message


def test_an_invalid_call_that_changes_state_is_rejected_by_robustness(batch):
    output, candidates = batch
    wrong = _mutate(output, '            return {"ok": False, "error": "%s: %s" % (name, problem)}',
                    '            self._turns += 1\n            return {"ok": False, "error": "%s: %s" % (name, problem)}')
    verdicts = check_batch(FAMILY, wrong, candidates[:2])
    assert _failed(verdicts) >= {"robustness"}
    assert "state changed" in [g for g in verdicts[0].gates if g.name == "robustness"][0].message


def test_a_state_change_on_a_later_invalid_call_is_rejected_by_robustness(batch):
    """The fuzz digests the state once before its invalid calls and once after each: a change made
    only by the fifth refused call is still caught (each call's "before" is the last "after")."""
    output, candidates = batch
    wrong = _mutate(output, '            return {"ok": False, "error": "%s: %s" % (name, problem)}',
                    '            self._refused = getattr(self, "_refused", 0) + 1\n'
                    '            if self._refused == 5:\n'
                    '                self._turns += 1\n'
                    '            return {"ok": False, "error": "%s: %s" % (name, problem)}')
    verdicts = check_batch(FAMILY, wrong, candidates[:1])
    robustness = [g for g in verdicts[0].gates if g.name == "robustness"][0]
    assert not robustness.passed and "state changed" in robustness.message


def test_skipped_argument_validation_is_rejected_by_robustness(batch):
    output, candidates = batch
    wrong = _mutate(output, "problem = schema_problem(spec[\"input_schema\"], arguments)", "problem = None")
    verdicts = check_batch(FAMILY, wrong, candidates[:2])
    assert "robustness" in _failed(verdicts)
    assert all(g.passed for v in verdicts for g in v.gates if g.name in ("replay_agreement", "dynamics_agreement"))


@pytest.fixture(scope="module")
def hidden_batch(batch):
    output, _ = batch
    models = sample_models(FAMILY, 3, seed=4, batch="hiding")
    solutions = {s.model_id: s for s in solve_models(FAMILY, models)}
    return output, make_candidates(FAMILY, models, solutions, {output.setter_output_id: output},
                                   {m.model_id: output.setter_output_id for m in models}, ("A",))


def test_presentation_a_passes_information_hiding(hidden_batch):
    output, candidates = hidden_batch
    gates = [g for v in check_batch(FAMILY, output, candidates) for g in v.gates if g.name == "information_hiding"]
    assert gates and all(g.passed and "invariant" in g.message for g in gates)


def test_a_leaking_instruction_is_rejected_by_information_hiding(hidden_batch):
    output, candidates = hidden_batch
    leaky = _mutate(output, '        if presentation == "I":', '        lines.append("fee: %d" % p["order_fee"])\n'
                    '        if presentation == "I":')
    for verdict in check_batch(FAMILY, leaky, candidates):
        gate = [g for g in verdict.gates if g.name == "information_hiding"][0]
        assert not gate.passed and "instruction" in gate.message


def test_a_leaking_observation_is_rejected_by_information_hiding(hidden_batch):
    output, candidates = hidden_batch
    leaky = _mutate(output, '"ordered_today": self._get("pending"), "capacity"',
                    '"ordered_today": self._get("pending"), "hint": self.p["price"], "capacity"')
    for verdict in check_batch(FAMILY, leaky, candidates):
        gate = [g for g in verdict.gates if g.name == "information_hiding"][0]
        assert not gate.passed and "observation tool" in gate.message


def test_free_probes_are_rejected_by_information_hiding(hidden_batch):
    output, candidates = hidden_batch
    skin = skin_of(output.module)
    free_skin = dict(skin, tools=[dict(tool, turn_cost=0) for tool in skin["tools"]])
    free = output.model_copy(update={"module": with_skin(output.module, free_skin)})
    assert free.module != output.module
    for verdict in check_batch(FAMILY, free, candidates):
        gate = [g for g in verdict.gates if g.name == "information_hiding"][0]
        assert not gate.passed and "≥ 1 turn" in gate.message


def test_a_tool_schema_that_is_not_json_schema_is_rejected_by_interface(batch):
    output, candidates = batch
    skin = skin_of(output.module)
    first = next(tool for tool in skin["tools"] if any(p.get("minimum") == 1 for p in tool["input_schema"]["properties"].values()))
    key = next(k for k, p in first["input_schema"]["properties"].items() if p.get("minimum") == 1)
    first["input_schema"]["properties"][key]["exclusiveMinimum"] = "zero"  # the runtime ignores it
    wrong = output.model_copy(update={"module": with_skin(output.module, skin)})
    verdicts = check_batch(FAMILY, wrong, candidates[:1])
    interface = next(g for g in verdicts[0].gates if g.name == "interface")
    assert not interface.passed and "JSON Schema 2020-12" in interface.message


def test_a_dropped_domain_check_is_rejected_by_reference_agreement(batch):
    """Every replayed plan is valid, so only random schema-valid calls reach the capacity check."""
    output, candidates = batch
    wrong = _mutate(output, 'if on_hand + in_transit + pending + quantity > self.p["capacity"]:', 'if False:')
    verdicts = check_batch(FAMILY, wrong, candidates)
    assert not any(v.admitted for v in verdicts if v.references and "default_band" not in _failed([v]))
    failed = _failed(verdicts)
    assert "reference_agreement" in failed
    gate = next(g for v in verdicts for g in v.gates if g.name == "reference_agreement" and not g.passed)
    assert gate.message.startswith("random call sequence") and "reference" in gate.message


def _out_of_band(candidate):
    """The candidate with its solution's default moved to π*'s value: outside every band."""
    solution = candidate.solution.model_copy(update={"u_default": candidate.solution.u_star})
    return dataclasses.replace(candidate, solution=solution, env_id=candidate.env_id + ":oob")


def test_a_theta_outside_the_band_is_rejected_without_playing_its_module(batch):
    output, candidates = batch
    broken = _mutate(output, "def create(config):", "def create(config):\n    raise RuntimeError('played')\n")
    far = _out_of_band(candidates[0])
    assert not check_stage.in_band(FAMILY, far) and check_stage.in_band(FAMILY, candidates[0])
    verdict, played = check_batch(FAMILY, broken, [far, candidates[0]])
    assert verdict.reason.startswith("default_band: default sits at 1.000")  # not the module's failure
    assert all(g.message.startswith(check_stage.NOT_RUN) for g in verdict.gates if g.name != "default_band")
    assert played.reason.startswith("executes: create() raised")  # the in-band one is played
    # the LLM setter's probe plays every candidate: a broken module is found whatever θ
    (probed,) = check_batch(FAMILY, broken, [far], every_candidate=True)
    assert probed.gates[0].name == "executes" and "played" in probed.gates[0].message


def test_needed_checks_stop_where_the_verdicts_and_the_band_reach_the_slot(batch):
    _, candidates = batch
    far = _out_of_band(candidates[1])
    ordered = [candidates[0], far, *candidates[2:]]
    assert check_stage.needed_checks(FAMILY, ordered, {}, 2) == [candidates[0], far, candidates[2]]
    # stored verdicts count as they are; a stored rejection needs one more candidate
    assert check_stage.needed_checks(FAMILY, ordered, {candidates[0].env_id: False}, 2) == [far, *candidates[2:4]]
    assert check_stage.needed_checks(FAMILY, ordered, {c.env_id: True for c in ordered[:3]}, 2) == []


@pytest.mark.parametrize("name", registry.names())
def test_random_calls_draw_what_rng_choice_draws(name):
    """The random call sequences are drawn from a searched table instead of `Generator.choice`:
    the same calls from the same generator, registry-wide and for every role profile, and the
    generator left in the same state (the sequences drawn after them are the same too)."""
    import numpy as np
    from vhd.tasks.stages.check.sequences import CALL_PROFILES, _random_value, random_calls

    family = registry.get(name)
    knobs = family.Params().model_dump()

    def by_choice(rng, weights, length):  # what random_calls drew with rng.choice
        scale = max([int(v) for v in knobs.values() if isinstance(v, int)] + [4])
        tools = list(family.tools)
        p = np.array([weights[t.role] / sum(1 for u in tools if u.role == t.role) for t in tools])
        calls = []
        for _ in range(length):
            spec = tools[int(rng.choice(len(tools), p=p / p.sum()))]
            properties, required = spec.input_schema.get("properties", {}), set(spec.input_schema.get("required", []))
            calls.append({"tool": spec.name, "arguments": {key: _random_value(prop, rng, scale)
                                                           for key, prop in properties.items()
                                                           if key in required or rng.random() < 0.5}})
        return calls

    for seed in range(3):
        for weights in CALL_PROFILES:
            mine, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
            assert random_calls(family, knobs, mine, 80, weights) == by_choice(theirs, weights, 80)
            assert mine.random() == theirs.random()
