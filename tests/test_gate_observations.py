"""Regression tests for self-test survivors closed by family-independent gate strength in
reference_agreement: the numbers of every answer compared with the reference World (log-only
state, over-allocated lists), ids just past the true range, amounts at a θ number ± 1e-9."""

import types

from vhd.mechanisms import registry
from vhd.tasks.stages.annotate import make_candidates
from vhd.tasks.stages.check import check_batch, edge_values
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.sandbox import runner
from vhd.tasks.sandbox.runner import _numeric
from vhd.tasks.stages.solve import solve_models
from vhd.tasks.stages.synthesize import synthesize

_CACHE = {}


def _admitted(name, n=2, presentations=("I",)):
    if (name, presentations) not in _CACHE:
        family = registry.get(name)
        models = sample_models(family, n, seed=3, batch="observations")
        solutions = {s.model_id: s for s in solve_models(family, models)}
        outputs, assignment = synthesize(family, models, builtin_passages()[:1])
        candidates = make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs},
                                     assignment, presentations)
        output = outputs[0]
        mine = [c for c in candidates if c.setter_output.setter_output_id == output.setter_output_id]
        admitted = [v.candidate for v in check_batch(family, output, mine) if v.admitted]
        assert admitted, "no admitted candidate to mutate"
        _CACHE[name, presentations] = family, output, admitted
    return _CACHE[name, presentations]


def _verdicts(name, old, new, count=1, keep=lambda theta: True, presentations=("I",)):
    family, output, candidates = _admitted(name, presentations=presentations)
    candidates = [c for c in candidates if keep(c.model.theta)]
    assert candidates
    assert output.module.count(old) >= count, old
    changed = output.model_copy(update={"module": output.module.replace(old, new, count)})
    return check_batch(family, changed, candidates)


def _rejected_by_reference_agreement(name, old, new, count=1, keep=lambda theta: True):
    verdicts = _verdicts(name, old, new, count, keep)
    assert not any(v.admitted for v in verdicts)
    assert all(not g.passed for v in verdicts for g in v.gates if g.name == "reference_agreement")
    return verdicts


def test_numeric_digest_ignores_keys_order_and_wording_but_not_numbers():
    a = {"ok": True, "plan": [{"product": 0, "quantity": 2.0}], "changes": 3, "note": "fine", "turns_left": 5}
    renamed = {"turns_left": 5, "edits": 3, "schedule": [{"qty": 2, "item": 0}], "ok": True, "remark": "all good"}
    assert _numeric(a) == _numeric(renamed)
    assert _numeric(a) != _numeric(dict(a, changes=2))
    assert _numeric(a) != _numeric(dict(a, plan=a["plan"] + [{"product": 1, "quantity": 0.0}]))  # a longer list


def _numbers_by_recursion(value, out):
    """What the runner's `_numbers` computes, written the obvious way: the reference it is tested against."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        out.append("%.10g" % float(value))
    elif isinstance(value, dict):
        for item in value.values():
            _numbers_by_recursion(item, out)
    elif isinstance(value, (list, tuple)):
        out.append("len%d" % len(value))
        for item in value:
            _numbers_by_recursion(item, out)


def test_the_runners_number_walk_finds_what_a_recursive_walk_finds():
    class Count(int):
        pass

    class Table(dict):
        pass

    observations = [
        {"ok": True, "rows": [{"id": 0, "cost": 2.5, "open": False}, {"id": 1, "cost": 1e-12, "open": True}]},
        [[], [[1, 2], (3, None)], "text 7", True, 12345678901234567890],
        {"a": Table(b=Count(3), c=[Count(4), 0.1 + 0.2]), "d": {"e": {"f": [-0.0, 5]}}},
        7, None, "just text", [],
    ]
    for observation in observations:
        mine, reference = [], []
        runner._numbers(observation, mine)
        _numbers_by_recursion(observation, reference)
        assert sorted(mine) == sorted(reference), observation


def test_an_episode_without_numbers_or_answers_reports_everything_else_the_same():
    """The determinism replay asks for neither (it compares each trajectory's digest of every
    answer): its trajectories report the same utility, end, turns, refusals and digest."""
    family, output, candidates = _admitted("inventory_dp")
    module = types.ModuleType("vhd_env")
    exec(compile(output.module, "vhd_env.py", "exec"), module.__dict__)
    config = candidates[0].config()
    calls = [{"tool": output.tool_name("end_day"), "arguments": {}}] * 3 + [{"tool": "no_such_tool", "arguments": {}}]
    full = runner._play(module, config, calls, True)
    bare = runner._play(module, config, calls, True, numbers=False)
    blind = runner._play(module, config, calls, True, numbers=False, answered=False)
    assert len(full["obs_numbers"]) == 4 and bare["obs_numbers"] == [] and blind["answers"] == []
    assert [ok for ok, _ in full["answers"]] == [True, True, True, False] and full["errors"] == 1
    assert {**full, "obs_numbers": []} == bare
    assert {**bare, "answers": []} == blind


def test_edge_values_reach_just_past_every_theta_size_inside_the_schema():
    values = edge_values({"type": "integer", "minimum": 0, "maximum": 11}, {"n_towns": 5, "costs": [1, 2, 3]})
    ordered = sorted(values, reverse=True)  # from both ends inward: the boundaries before a tight budget runs out
    assert values[:4] == [ordered[0], ordered[-1], ordered[1], ordered[-2]] and len(set(values)) == len(values)
    assert {0, 1, 2, 3, 4, 5, 6, 9, 10} <= set(values) and -1 not in values and 12 not in values
    amounts = edge_values({"type": "number", "minimum": 0, "maximum": 100}, {"caps": [7, 40]})
    # θ's numbers from both ends inward, each with its neighbours: every refusal uses a turn now (issue 26)
    assert amounts[:6] == [40.0 + 1e-9, 40.0, 40.0 - 1e-9, 7.0 + 1e-9, 7.0, 7.0 - 1e-9]
    assert {7.0, 7.0 + 1e-9, 7.0 - 1e-9, 40.0 + 1e-9} <= set(amounts)


def test_renamed_observation_keys_and_reworded_text_are_still_admitted():
    """No false rejection: the module words and names its answers its own way."""
    family, output, candidates = _admitted("lp")
    module = output.module.replace('"changes": self._get("changes")', '"edits_so_far": self._get("changes")')
    module = module.replace('{"product": j, "quantity": q}', '{"qty": q, "product": j}')  # ids keep their key (World.IDS)
    assert module != output.module
    verdicts = check_batch(family, output.model_copy(update={"module": module}), candidates)
    assert all(v.admitted for v in verdicts), [v.reason for v in verdicts]


def test_lp_change_counter_counting_down_is_rejected():
    """Survivor (log-only state): `changes` is shown only by view_plan."""
    _rejected_by_reference_agreement("lp", 'self._set("changes", self._get("changes") + 1)',
                                     'self._set("changes", self._get("changes") - 1)')


def test_inventory_lost_column_is_rejected():
    """Survivor (log-only state): the days table's `lost` column, shown only by view_sales."""
    _rejected_by_reference_agreement("inventory_dp", "demand, sold, demand - sold, closing))",
                                     "demand, sold, demand + sold, closing))")


def test_lp_over_allocated_resource_list_is_rejected():
    """Survivor (over-allocation): `_used` twice as long, zipped down in the checks but listed by view_resource_use."""
    _rejected_by_reference_agreement("lp", 'used = [0.0] * self.p["resources"]',
                                     'used = [0.0] * (2 * self.p["resources"])')


def test_rostering_over_allocated_grid_is_rejected():
    _rejected_by_reference_agreement("rostering", 'for s in range(self.p["n_staff"]):',
                                     'for s in range(2 * self.p["n_staff"]):')


def test_facility_town_zero_refused_is_rejected():
    """Survivor (index checks): town 0 refused; the edge sequence surveys town 0."""
    _rejected_by_reference_agreement("facility", "if not 0 <= town < m:", "if not 0 < town < m:")


def test_scheduling_job_range_doubled_is_rejected():
    """Survivor (index checks): ids in [n, 2n) accepted behind a wider schema. (Where n_jobs is
    already one past the schema's maximum id, no schema-valid call can reach the check: there
    the mutant is equivalent.)"""
    maximum = registry.get("scheduling").tool("inspect_job").input_schema["properties"]["job"]["maximum"]
    _rejected_by_reference_agreement("scheduling", 'n = self.p["n_jobs"]', 'n = 2 * self.p["n_jobs"]',
                                     count=2, keep=lambda theta: theta["n_jobs"] <= maximum)


def test_qp_cap_tolerance_is_rejected():
    """Survivor (tolerance): `>` → `>=` at cap + TOL; the edge sequence allocates caps[0] + 1e-9."""
    _rejected_by_reference_agreement("qp", "if amount > cap + self.TOL:", "if amount >= cap + self.TOL:")


def test_lp_demand_tolerance_is_rejected():
    _rejected_by_reference_agreement("lp", "if plan[product] > demand + self.TOLERANCE:",
                                     "if plan[product] >= demand + self.TOLERANCE:")


def test_scale_cost_skips_an_id_bound_past_the_fitted_schema():
    """Equivalent, not a survivor: the schemas fitted to a judged θ (`World.limits`, issue 16)
    accept job ids 0 … n − 1 and machine ids 0 … m − 1, so `0 <= job < n` and `0 <= job < 2n`
    accept the same calls, and so do the machine bounds. For a θ the World cannot start on, the
    family's own schemas are used: there an n inside their range is mutated."""
    import numpy as np

    from vhd.tasks.stages.check.mutants import mutants

    family, output, candidates = _admitted("scheduling")
    theta = candidates[0].model.theta
    equivalent = []
    made = mutants(family, output, theta, 1.0, np.random.default_rng(0), [theta], equivalent)
    assert any("_job bounds ids by n_jobs" in e for e in equivalent)
    assert any("_machine bounds ids by n_machines" in e for e in equivalent)
    assert not any(m.operator == "scale_cost" and "2 * self.p['n_jobs']" in m.module for m in made)
    unstartable = dict(theta, n_jobs=6, n_machines=2)  # 6 jobs, but θ's processing times are for another count
    inside = []
    mutants(family, output, unstartable, 1.0, np.random.default_rng(0), [unstartable], inside)
    assert not any("bounds ids" in e for e in inside)


def test_lp_reset_not_counted_is_rejected():
    """Survivor (log-only state): reset_plan's change count, seen only by view_plan after a reset
    (the look sequence: π*'s first half, reset_plan, every observation)."""
    family, output, _ = _admitted("lp")
    old = 'self._set("changes", self._get("changes") + 1)'
    at = output.module.rindex(old)  # the second one: tool_reset_plan's
    assert "def tool_reset_plan" in output.module[at - 400:at]
    module = output.module[:at] + 'self._set("changes", self._get("changes") - 1)' + output.module[at + len(old):]
    verdicts = check_batch(family, output.model_copy(update={"module": module}), _admitted("lp")[2])
    assert not any(v.admitted for v in verdicts)
    assert all(not g.passed for v in verdicts for g in v.gates if g.name == "reference_agreement")


def test_drop_check_skips_a_raise_the_next_statement_repeats():
    """Equivalent, not a survivor: an `if …: raise AgentError(detailed)` followed by
    `raise AgentError(short)` is refused all the same without the first. (Knapsack's refusal had
    that shape until its detailed text, which named hidden loads, was removed; the shape is
    planted here in its add_item.)"""
    import numpy as np

    from vhd.tasks.stages.check.mutants import mutants

    family, output, candidates = _admitted("knapsack")
    short = ('raise AgentError("lot %s does not fit: it would push some resource past its capacity" '
             '% self.ref("item", item))')
    line = next(x for x in output.module.splitlines() if x.strip() == short)
    indent = line[: len(line) - len(line.lstrip())]
    planted = (f"{indent}if item >= 0:\n{indent}    raise AgentError(\"lot %s does not fit (detailed)\" "
               f"% self.ref(\"item\", item))\n{line}")
    output = output.model_copy(update={"module": output.module.replace(line, planted, 1)})
    equivalent = []
    made = mutants(family, output, candidates[0].model.theta, 1.0, np.random.default_rng(0),
                   [c.model.theta for c in candidates], equivalent)
    assert any(e.startswith("drop_check: tool_add_item refuses") for e in equivalent)
    assert all("does not fit (detailed)" in m.module for m in made if m.operator == "drop_check")


def test_a_tailed_sequence_is_played_by_the_clock_to_the_end_and_past_it():
    from vhd.tasks.stages.check import reference_module, tailed
    from vhd.tasks.sandbox.runner import PAST_END, _play

    family, output, candidates = _admitted("inventory_dp")
    module, reference = reference_module(family)
    config = candidates[0].config()
    run = _play(module, config, tailed(family, reference, [], config["turn_budget"]), None)
    days = candidates[0].model.theta["horizon"]
    assert run["terminal"] is True and run["turns_used"] == days
    assert len(run["obs_numbers"]) == days + PAST_END and run["errors"] == PAST_END  # the days, then refusals
    # the same calls as an explicit list: the answers of the days agree call by call
    clock = reference.tool_name(family.tools_with_role("clock")[0].name)
    plain = _play(module, config, [{"tool": clock, "arguments": {}}] * (days + PAST_END), None)
    assert plain["obs_numbers"] == run["obs_numbers"] and plain["utility"] == run["utility"]


def test_a_misstated_i_instruction_is_rejected_in_i_only():
    """instruction_agreement (checker 9): the I instruction doubles every lot's value. Its I
    candidates are rejected on that gate alone (the World plays right); its A candidates, whose
    instruction does not state the values, are admitted. The selftest judges such a mutant where it
    changes the instruction (before this gate, 20 of its 30 survivors were instruction mutants)."""
    verdicts = _verdicts("knapsack", 'lots = ["  lot %s: value %d; loads %s" % (self.ref("item", i), p["values"][i],',
                         'lots = ["  lot %s: value %d; loads %s" % (self.ref("item", i), 2 * p["values"][i],',
                         presentations=("I", "A"))
    by = {p: [v for v in verdicts if v.candidate.presentation == p] for p in ("I", "A")}
    assert by["I"] and by["A"] and all(v.admitted for v in by["A"])
    for v in by["I"]:
        assert [g.name for g in v.gates if not g.passed] == ["instruction_agreement"], v.reason
        assert "states numbers the family's World does not" in v.reason


def test_a_misstated_a_instruction_is_rejected():
    """The A instruction states tardiness's due-date window as horizon × 10 % of the total
    processing time: stating one more percent per horizon step is rejected in A."""
    verdicts = _verdicts("tardiness", '10 * p["horizon"])]', '11 * p["horizon"])]', presentations=("I", "A"))
    assert all(v.admitted for v in verdicts if v.candidate.presentation == "I")
    rejected = [v for v in verdicts if v.candidate.presentation == "A"]
    assert rejected and all([g.name for g in v.gates if not g.passed] == ["instruction_agreement"] for v in rejected)
