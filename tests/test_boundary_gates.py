"""Regression tests for self-test survivors closed by the families' near-boundary call sequences
(`Family.boundary_calls`, played by the reference_agreement gate) and by the equivalent-site rule."""

import numpy as np
import pytest

from vhd.mechanisms import registry
from vhd.tasks.stages.annotate import make_candidates
from vhd.tasks.stages.check import check_batch
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.stages.check.mutants import mutants
from vhd.tasks.stages.solve import solve_models
from vhd.tasks.stages.synthesize import synthesize


def _admitted(name, n=3):
    family = registry.get(name)
    models = sample_models(family, n, seed=2, batch="boundary")
    solutions = {s.model_id: s for s in solve_models(family, models)}
    outputs, assignment = synthesize(family, models, builtin_passages()[:1])
    candidates = make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs}, assignment,
                                 ("I",))
    output = outputs[0]
    mine = [c for c in candidates if c.setter_output.setter_output_id == output.setter_output_id]
    admitted = [v.candidate for v in check_batch(family, output, mine) if v.admitted]
    assert admitted, "no admitted candidate to mutate"
    return family, output, admitted


def _rejected_by_reference_agreement(family, output, candidates, old, new):
    assert old in output.module, old
    wrong = output.model_copy(update={"module": output.module.replace(old, new, 1)})
    verdicts = check_batch(family, wrong, candidates)
    assert not any(v.admitted for v in verdicts)
    assert all(not g.passed for v in verdicts for g in v.gates if g.name == "reference_agreement")


@pytest.fixture(scope="module")
def knapsack():
    return _admitted("knapsack")


@pytest.fixture(scope="module")
def rostering():
    return _admitted("rostering")


def _exact_fills(theta, seed=0):
    """How many of the boundary sequences fill their resource to the unit (the correct World's adds)."""
    weights, caps = np.array(theta["weights"]), np.array(theta["capacities"])
    exact = 0
    sequences = registry.get("knapsack").boundary_calls(theta, np.random.default_rng(seed))
    for r, calls in enumerate(sequences[:len(caps)]):  # one per resource (the last: lots added twice)
        load = np.zeros(len(caps), dtype=int)
        for call in calls[:-1]:
            item = call["arguments"]["item"]
            if (load + weights[:, item] <= caps).all():
                load += weights[:, item]
        assert (load <= caps).all()
        exact += int(load[r] == caps[r])
    return exact


def _fills_exactly(theta):
    return _exact_fills(theta) > 0


def test_knapsack_boundary_sequence_fills_a_resource_exactly():
    models = sample_models(registry.get("knapsack"), 3, seed=2, batch="boundary")
    assert sum(_exact_fills(m.theta) for m in models) > 0


def test_knapsack_exact_fit_refused_is_rejected(knapsack):
    """Self-test survivor: `>` → `>=` in add_item's capacity test refuses only a lot that fills a
    resource to the unit, which random calls almost never build. (On a θ where no subset of lots
    fills any resource exactly the mutant is equivalent: nothing can observe it.)"""
    family, output, candidates = knapsack
    exact = [c for c in candidates if _fills_exactly(c.model.theta)]
    assert exact
    _rejected_by_reference_agreement(family, output, exact, "if any(u + w > c for u, w, c in zip(used, loads, caps)):",
                                     "if any(u + w >= c for u, w, c in zip(used, loads, caps)):")


def test_rostering_without_rest_rule_is_rejected(rostering):
    """Self-test survivor: the night-then-early rest rule dropped (both directions)."""
    _rejected_by_reference_agreement(*rostering, "if shift == 0 and day > 0 and self._shift_of(staff, day - 1) == k - 1:",
                                     "if False:")


def test_rostering_shift_limit_off_by_one_is_rejected(rostering):
    _rejected_by_reference_agreement(*rostering, "if not available or self._worked(staff) >= limit:",
                                     "if not available or self._worked(staff) > limit:")


def test_scale_cost_skips_fields_that_are_zero_in_a_judged_theta(knapsack):
    family, output, candidates = knapsack
    theta = dict(candidates[0].model.theta)
    field = "n_items"  # read by _item (add_item, remove_item): 2·0 = 0 where it is zeroed
    zeroed = dict(theta, **{field: 0})
    equivalent: list[str] = []
    made = mutants(family, output, theta, 1.0, np.random.default_rng(0), [theta, zeroed], equivalent)
    assert any(field in e for e in equivalent)
    assert not any(m.operator == "scale_cost" and (f"2 * self.p['{field}']" in m.module
                                                   or f'2 * self.p["{field}"]' in m.module) for m in made)


def test_pandora_without_opening_cap_is_rejected():
    """Self-test survivor: the `max_open` check dropped; the boundary sequence opens every box."""
    family, output, candidates = _admitted("pandora")
    # where max_open = n_boxes the check can never fire (the mutant is equivalent there)
    capped = [c for c in candidates if c.model.theta["max_open"] < c.model.theta["n_boxes"]]
    assert capped
    old = next(line.strip() for line in output.module.splitlines()
               if "if used >= self.p[" in line and "max_open" in line)
    _rejected_by_reference_agreement(family, output, capped, old, "if False:")


def test_flip_operator_leaves_the_returned_observation_dict_alone():
    from vhd.tasks.stages.check.mutants import _outside_messages
    import ast

    method = ast.parse("def tool_end(self):\n    day = self.day + 1\n    out = {'left': self.h - day}\n"
                       "    out.update({'next': day + 1})\n    return out\n").body[0]
    flips = [n for n in _outside_messages(method) if isinstance(n, ast.BinOp)]
    assert [ast.unparse(n) for n in flips] == ["self.day + 1"]


def test_knapsack_without_duplicate_lot_check_is_rejected(knapsack):
    """Self-test survivor: add_item's "already in the selection" check dropped; the boundary
    sequence adds lots that fit twice over twice each. (Where no lot fits twice over, the
    capacity check refuses the repeat anyway and the mutant is equivalent.)"""
    family, output, candidates = knapsack
    twice = [c for c in candidates if (2 * np.array(c.model.theta["weights"]).T
                                       <= np.array(c.model.theta["capacities"])).all(axis=1).any()]
    assert twice
    _rejected_by_reference_agreement(family, output, twice, 'raise AgentError("lot %s is already in the selection" % self.ref("item", item))',
                                     "pass")


def test_rostering_second_rest_direction_dropped_is_rejected(rostering):
    """Self-test survivor: `shift == k - 1` → `shift == k + 1` (early first, then the night before)."""
    _rejected_by_reference_agreement(*rostering, "if shift == k - 1 and day + 1 < p[\"horizon\"]",
                                     "if shift == k + 1 and day + 1 < p[\"horizon\"]")


def test_rostering_without_already_works_check_is_rejected(rostering):
    _rejected_by_reference_agreement(*rostering, "if current is not None:", "if False:")


@pytest.fixture(scope="module")
def energy_storage():
    return _admitted("energy_storage")


def test_energy_storage_capacity_check_on_charge_is_rejected(energy_storage):
    """Self-test survivor: the capacity check on charge doubled (charging at the power limit is
    refused by the power check first; the second sequence charges below it)."""
    _rejected_by_reference_agreement(*energy_storage, 'if soc + scheduled + units > p["capacity"]:',
                                     'if soc + scheduled + units > 2 * p["capacity"]:')


def test_energy_storage_opposite_direction_checks_are_rejected(energy_storage):
    family, output, candidates = energy_storage
    _rejected_by_reference_agreement(family, output, candidates, "if scheduled < 0:", "if False:")
    _rejected_by_reference_agreement(family, output, candidates, "if scheduled > 0:", "if False:")


def _tool(source):
    import ast

    return ast.parse(source).body[0]


def test_same_refusals_proves_a_guard_the_fitted_schema_makes_dead():
    """A guard that refuses no schema-valid call (or the same calls once mutated) is an equivalent
    site; one that reads state, a reassigned argument or a float is never called equivalent."""
    import ast

    from vhd.tasks.stages.check.mutants import _same_refusals

    theta = {"max_price": 66, "prices": [3, 4, 5]}
    ranges = [{"offer": {"price": ("integer", 0, 66)}}]
    offer = _tool("def tool_offer(self, price):\n    if price > self.p['max_price']:\n"
                  "        raise AgentError('too high')\n    return price\n")
    guard = offer.body[0]
    read = guard.test.comparators[0]
    doubled = ast.BinOp(ast.Constant(2), ast.Mult(), read)
    assert _same_refusals(offer, [theta], ranges, guard.body[0], None)  # dropped: it never refused
    assert _same_refusals(offer, [theta], ranges, read, doubled)  # 2·V refuses nothing either
    flipped = ast.Compare(guard.test.left, [ast.GtE()], guard.test.comparators)
    assert not _same_refusals(offer, [theta], ranges, guard.test, flipped)  # price = V now refused
    wider = [{"offer": {"price": ("integer", 0, 67)}}]
    assert not _same_refusals(offer, [theta], wider, guard.body[0], None)  # 67 reaches the check
    assert not _same_refusals(offer, [theta], [{"offer": {"price": ("number", 0, 66)}}], guard.body[0], None)

    stateful = _tool("def tool_offer(self, price):\n    if price > self._get('cap'):\n"
                     "        raise AgentError('too high')\n")
    assert not _same_refusals(stateful, [theta], ranges, stateful.body[0].body[0], None)
    moved = _tool("def tool_offer(self, price):\n    price = price * 2\n    if price > self.p['max_price']:\n"
                  "        raise AgentError('too high')\n")
    assert not _same_refusals(moved, [theta], ranges, moved.body[1].body[0], None)
    level = _tool("def tool_offer(self, price):\n    n = len(self.p['prices'])\n    if price >= n:\n"
                  "        raise AgentError('no such level')\n")
    assert _same_refusals(level, [theta], [{"offer": {"price": ("integer", 0, 2)}}], level.body[1].body[0], None)
    assert not _same_refusals(level, [theta], [{"offer": {"price": ("integer", 0, 3)}}], level.body[1].body[0], None)


@pytest.mark.parametrize("name, site, message", [
    ("negotiation", "drop_check: tool_make_offer's", "prices run from 0"),
    ("dynamic_pricing", "drop_check: tool_set_price's", "the menu has levels"),
    ("routing", "drop_check: tool_drive_to's `stop == 0`", "is the depot; use %s to end the round")])
def test_range_checks_behind_fitted_schemas_are_equivalent_sites(name, site, message):
    """Self-test survivors (negotiation's price bound, dynamic_pricing's level bound, routing's
    "stop 0 is the depot"): dead behind the schemas fitted to every judged θ, so not mutated."""
    family = registry.get(name)
    models = sample_models(family, 3, seed=2, batch="equivalent")
    outputs, _ = synthesize(family, models, builtin_passages()[:1])
    equivalent: list[str] = []
    made = mutants(family, outputs[0], models[0].theta, 0.0, np.random.default_rng(0), [m.theta for m in models],
                   equivalent)
    assert any(e.startswith(site) for e in equivalent), equivalent
    assert message in outputs[0].module
    assert all(message in m.module for m in made if m.operator == "drop_check")
