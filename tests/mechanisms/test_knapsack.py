"""Cross-checks of the knapsack family against plain-Python brute force, its rendered module
and the real admission gates.

The brute force is written from the module docstring's Model section, not from the solver: a
selection is a set of lots, feasible when every resource's total load is within its capacity,
worth the sum of its values; u* is the best value over all 2^n subsets. The only layout
assumption is that of a plan: a 0/1 vector over the lots.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from pydantic import ValidationError

from family_kit import PASSAGES, config, env_of, failed, gated, generated, mutant_verdicts, named, refused, shown
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.tasks.stages.sample import draw

FAM = registry.get("knapsack")
ROOMY = 60  # a turn budget for the tests that look at everything (the family's own affords π* and a few probes)
HIDDEN = ("values", "weights", "capacities")


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in plain Python.


def feasible(theta, chosen):
    return all(sum(theta["weights"][r][i] for i in chosen) <= theta["capacities"][r]
               for r in range(theta["n_resources"]))


def worth(theta, chosen):
    return sum(theta["values"][i] for i in chosen)


def brute_force(theta):
    """(best value, number of feasible subsets) over every subset of the lots."""
    best, count = 0, 0
    n = theta["n_items"]
    for mask in range(2 ** n):
        chosen = [i for i in range(n) if mask >> i & 1]
        if feasible(theta, chosen):
            count += 1
            best = max(best, worth(theta, chosen))
    return best, count


def chosen_of(plan):
    return [i for i, x in enumerate(np.asarray(plan).tolist()) if x == 1]


def index_order_while_fits(theta):
    """The default's docstring: lots 0, 1, 2, … while they fit; stop at the first misfit."""
    chosen = []
    for i in range(theta["n_items"]):
        if not feasible(theta, chosen + [i]):
            break
        chosen.append(i)
    return chosen


def make(values, weights, capacities):
    return {"n_items": len(values), "n_resources": len(capacities), "values": list(values),
            "weights": [list(row) for row in weights], "capacities": list(capacities)}


# ---------------------------------------------------------------------------------------------
# Instances.


def hand_instances():
    return [
        make([10], [[3]], [2]),                                     # the only lot does not fit
        make([10], [[3]], [3]),                                     # exactly full
        make([6, 10, 12], [[1, 2, 3]], [5]),                        # classic 1-d: take lots 1, 2
        make([5, 4, 3], [[4, 3, 2], [1, 2, 3]], [6, 4]),            # two binding resources
        make([1, 9, 9, 9], [[5, 3, 3, 3], [0, 2, 2, 2]], [9, 6]),   # the default stops after a bad lot 0
        make([3, 3, 3], [[0, 0, 0], [1, 1, 1]], [0, 3]),            # zero loads, zero capacity
        make([7, 7, 1, 1], [[2, 2, 1, 1]], [3]),                    # ties: several optima of equal value
    ]


def random_instances(seed, count):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n, m = int(rng.integers(1, 11)), int(rng.integers(1, 5))
        weights = rng.integers(0, 9, size=(m, n))
        capacities = [int(c) for c in rng.integers(0, max(2, int(weights.sum()) // m), size=m)]
        out.append(make([int(v) for v in rng.integers(0, 30, size=n)], weights.tolist(), capacities))
    return out


def sampled_instances():
    return [FAM.sample(FAM.Params(size=n, horizon=m), np.random.default_rng(100 * n + m))
            for n in (2, 4, 6, 8, 10) for m in (1, 3, 6)]


TINY = hand_instances() + random_instances(2024, 40) + sampled_instances()


def _id(theta):
    return "n%d-m%d-c%s" % (theta["n_items"], theta["n_resources"], "_".join(map(str, theta["capacities"]))[:20])


IDS = [f"{k}-{_id(t)}" for k, t in enumerate(TINY)]


# ---------------------------------------------------------------------------------------------
# The MILP solver against brute force.


@pytest.mark.parametrize("theta", TINY, ids=IDS)
def test_u_star_equals_brute_force_over_every_subset(theta):
    sol = FAM.solve(theta)
    best, _ = brute_force(theta)
    assert sol.u_star == best
    assert sol.policy.shape == (theta["n_items"],) and np.issubdtype(sol.policy.dtype, np.integer)
    assert set(sol.policy.tolist()) <= {0, 1}
    chosen = chosen_of(sol.policy)
    assert feasible(theta, chosen) and worth(theta, chosen) == best
    assert FAM.evaluate(theta, sol.policy) == sol.u_star
    cert = sol.certificate
    assert cert.status == "optimal" and cert.state_space == 2 ** theta["n_items"]
    assert 0.0 <= cert.gap <= 1e-9 and cert.bound >= best - 1e-6 and cert.bound < best + 1
    assert "HiGHS" in cert.solver


@pytest.mark.parametrize("theta", TINY, ids=IDS)
def test_reference_and_random_plans_are_valid_and_never_beat_u_star(theta):
    sol = FAM.solve(theta)
    default, idle = FAM.default_policy(theta), FAM.idle_policy(theta)
    assert chosen_of(default) == index_order_while_fits(theta)
    assert not idle.any() and idle.shape == (theta["n_items"],)
    assert sol.u_default == worth(theta, index_order_while_fits(theta)) == FAM.evaluate(theta, default)
    assert sol.u_idle == 0.0 == FAM.evaluate(theta, idle)
    rng = np.random.default_rng(7)
    for _ in range(10):
        plan = FAM.random_policy(theta, rng)
        assert feasible(theta, chosen_of(plan))
        assert FAM.evaluate(theta, plan) == worth(theta, chosen_of(plan)) <= sol.u_star
    assert sol.u_star >= sol.u_default >= sol.u_idle


def test_default_stops_at_the_first_misfit_and_is_beaten():
    theta = make([1, 9, 9, 9], [[5, 3, 3, 3], [0, 2, 2, 2]], [9, 6])
    assert chosen_of(FAM.default_policy(theta)) == [0, 1]  # lot 2 no longer fits the first resource
    sol = FAM.solve(theta)
    assert sol.u_default == 10 and sol.u_star == 27 and chosen_of(sol.policy) == [1, 2, 3]


def test_random_policy_is_seeded_and_differs_between_calls():
    theta = FAM.sample(FAM.Params(size=12, horizon=3), np.random.default_rng(3))
    a = FAM.random_policy(theta, np.random.default_rng(5))
    b = FAM.random_policy(theta, np.random.default_rng(5))
    assert (a == b).all()
    rng = np.random.default_rng(5)
    plans = {tuple(FAM.random_policy(theta, rng).tolist()) for _ in range(30)}
    assert len(plans) > 10
    assert all(feasible(theta, chosen_of(p)) for p in plans)


@pytest.mark.parametrize("plan", [[1, 1, 1], [1, 0], [1, 0, 2], [0, 0, -1], [[1, 0, 0]]])
def test_evaluate_rejects_invalid_plans(plan):
    theta = make([6, 10, 12], [[1, 2, 3]], [5])
    with pytest.raises(ValueError):
        FAM.evaluate(theta, np.array(plan))


def test_solver_depends_on_values_weights_and_capacities():
    theta = make([6, 10, 12, 7], [[1, 2, 3, 2], [2, 1, 1, 3]], [5, 4])
    u = FAM.solve(theta).u_star
    assert u == brute_force(theta)[0]
    for changed in (dict(theta, values=[6, 10, 12, 30]), dict(theta, capacities=[6, 4]),
                    dict(theta, capacities=[5, 1]), dict(theta, weights=[[1, 2, 4, 2], [2, 1, 1, 3]])):
        u2 = FAM.solve(changed).u_star
        assert u2 == brute_force(changed)[0]
        assert u2 != u, changed


def test_solve_is_exact_across_knob_ranges():
    for seed in range(12):
        knobs, theta = draw(FAM, seed)
        sol = FAM.solve(theta)
        assert sol.certificate.gap <= 1e-9
        if theta["n_items"] <= 10:
            assert sol.u_star == brute_force(theta)[0]
    big = FAM.sample(FAM.Params(size=14, horizon=11), np.random.default_rng(0))
    assert FAM.solve(big).certificate.gap <= 1e-9  # its time is in bench/solve_scaling.py, not a test
    assert FAM.turn_budget(big) < 300


# ---------------------------------------------------------------------------------------------
# The reference simulator.


@pytest.mark.parametrize("theta", TINY[:7] + sampled_instances()[6:12], ids=[_id(t) for t in TINY[:7] + sampled_instances()[6:12]])
def test_simulate_adds_the_plan_in_index_order_then_submits(theta):
    sol = FAM.solve(theta)
    rng = np.random.default_rng(11)
    for plan in (sol.policy, FAM.default_policy(theta), FAM.idle_policy(theta), FAM.random_policy(theta, rng)):
        chosen = chosen_of(plan)
        for seed in (0, 1, 2**31 - 1):
            ep = FAM.simulate(theta, plan, seed)
            assert ep.utility == FAM.evaluate(theta, plan) == worth(theta, chosen)
            assert ep.decisions == chosen
            assert ep.calls == [{"tool": "add_item", "arguments": {"item": i}} for i in chosen] + [
                {"tool": "submit_selection", "arguments": {}}]
            assert len(ep.calls) <= FAM.turn_budget(theta)


# ---------------------------------------------------------------------------------------------
# sample and Params.


def test_sample_is_deterministic_per_seed():
    params = FAM.Params(size=9, horizon=4)
    a = FAM.sample(params, np.random.default_rng(5))
    assert a == FAM.sample(params, np.random.default_rng(5))
    others = [FAM.sample(params, np.random.default_rng(s)) for s in (6, 7, 8)]
    assert all(o != a for o in others) and len({repr(o) for o in others}) == 3


@pytest.mark.parametrize("size,horizon", [(1, 1), (6, 1), (6, 5), (11, 11), (14, 11), (50, 12), (100, 1)])
def test_sample_respects_params(size, horizon):
    rng = np.random.default_rng(size * 100 + horizon)
    for _ in range(10):
        theta = FAM.sample(FAM.Params(size=size, horizon=horizon), rng)
        assert set(theta) == {"n_items", "n_resources", "values", "weights", "capacities"}
        assert theta["n_items"] == size and theta["n_resources"] == horizon
        assert len(theta["values"]) == size and len(theta["capacities"]) == horizon
        assert len(theta["weights"]) == horizon and all(len(row) == size for row in theta["weights"])
        assert all(type(v) is int and v >= 10 for v in theta["values"])
        assert all(type(w) is int and 0 <= w <= 20 for row in theta["weights"] for w in row)
        for i in range(size):
            assert sum(theta["weights"][r][i] for r in range(horizon)) > 0
        for r in range(horizon):
            total = sum(theta["weights"][r])
            assert type(theta["capacities"][r]) is int
            assert theta["capacities"][r] == max(1, theta["capacities"][r])
            assert theta["capacities"][r] <= max(1, 0.6 * total)
            assert theta["capacities"][r] >= min(0.4 * total - 1, 1)


@pytest.mark.parametrize("knobs", [dict(size=0), dict(size=101, horizon=1), dict(size=51, horizon=2), dict(horizon=0),
                                   dict(horizon=13), dict(size="many")])
def test_params_out_of_bounds_raise(knobs):
    with pytest.raises(ValidationError):
        FAM.Params(**knobs)
    with pytest.raises(InvalidParams):
        FAM.params(knobs)


def test_params_edges_and_knob_ranges():
    for knobs in (dict(size=1, horizon=1), dict(size=50, horizon=12), dict(size=100, horizon=1)):
        params = FAM.params(knobs)
        assert (params.size, params.horizon) == (knobs["size"], knobs["horizon"])
    assert FAM.knob_ranges == {"size": (6, 14), "horizon": (1, 11)}
    assert FAM.stochastic is False and FAM.group == "near_ood" and set(FAM.hidden) == set(HIDDEN)
    assert len(FAM.tools) >= 10


# ---------------------------------------------------------------------------------------------
# The rendered module, in process.

MODULE_THETAS = [FAM.sample(FAM.Params(size=n, horizon=m), np.random.default_rng(s))
                 for s, n, m in ((1, 6, 5), (2, 9, 2), (3, 11, 11), (4, 14, 1))]


@pytest.mark.parametrize("k", range(len(MODULE_THETAS)))
def test_the_module_plays_a_plan_in_one_turn_per_lot_and_one_to_submit(k):
    out, _ = generated(FAM, k)
    theta = MODULE_THETAS[k]
    sol = FAM.solve(theta)
    rng = np.random.default_rng(k)
    for plan in (sol.policy, FAM.default_policy(theta), FAM.idle_policy(theta), FAM.random_policy(theta, rng)):
        for presentation in ("I", "A"):
            env = env_of(FAM, k, theta, presentation)
            for call in FAM.simulate(theta, plan, k).calls:
                assert not env.done
                result = env.call(*shown(out, call))
                assert result["ok"], result
            outcome = env.outcome()
            assert outcome["terminal"] and env.done
            assert outcome["utility"] == FAM.evaluate(theta, plan)
            assert outcome["turns_used"] == len(chosen_of(plan)) + 1


def test_probes_and_observations_report_theta():
    theta = MODULE_THETAS[0]
    out, _ = generated(FAM, 0)
    env = env_of(FAM, 0, theta, "A", budget=ROOMY)
    call = lambda tool, **args: env.call(out.tool_name(tool), args)
    lot = call("inspect_item", item=3)
    assert lot["ok"] and lot["value"] == theta["values"][3]
    assert list(lot["loads"].values()) == [theta["weights"][r][3] for r in range(theta["n_resources"])]
    assert call("view_headroom")["ok"] is False  # the capacities are not read yet
    caps = call("read_capacities")
    assert [r["capacity"] for r in caps["resources"]] == theta["capacities"]
    plan = FAM.solve(theta).policy
    assert len(chosen_of(plan)) >= 2
    for i in chosen_of(plan):
        assert call("add_item", item=i)["ok"]
    # the sums count the inspected lots of the selection only (lot 3 at most) and name the others
    sel = call("view_selection")
    counted = [i for i in chosen_of(plan) if i == 3]
    assert sel["selected"] == chosen_of(plan) and sel["not_counted"] == [i for i in chosen_of(plan) if i != 3]
    assert sel["value"] == worth(theta, counted)
    assert list(sel["load"].values()) == [sum(theta["weights"][r][i] for i in counted)
                                          for r in range(theta["n_resources"])]
    listed = call("list_items")["lots"]
    assert [x["selected"] for x in listed] == [bool(x) for x in plan.tolist()]
    assert [x["inspected"] for x in listed] == [i == 3 for i in range(theta["n_items"])]
    assert [x["item"] for x in call("view_inspected")["lots"]] == [3]
    for i in chosen_of(plan):
        assert call("inspect_item", item=i)["ok"]
    sel = call("view_selection")
    assert sel["value"] == FAM.evaluate(theta, plan) and sel["not_counted"] == []
    used = [sum(theta["weights"][r][i] for i in chosen_of(plan)) for r in range(theta["n_resources"])]
    assert list(sel["load"].values()) == used
    headroom = call("view_headroom")
    assert list(headroom["headroom"].values()) == [c - u for c, u in zip(theta["capacities"], used)]
    assert headroom["not_counted"] == []
    assert call("view_log", limit=2)["log"][0]["action"] == "add"
    assert call("remove_item", item=chosen_of(plan)[0])["ok"]
    assert call("clear_selection")["ok"] and call("view_selection")["value"] == 0


def test_invalid_calls_are_reported_and_leave_state_unchanged():
    theta = make([5, 4, 3], [[4, 3, 2], [1, 2, 3]], [6, 4])
    out, _ = generated(FAM, 1)
    env = env_of(FAM, 1, theta, "I", budget=20)
    call = lambda tool, args: env.call(out.tool_name(tool) if tool in [t.name for t in FAM.tools] else tool, args)
    assert call("add_item", {"item": 0})["ok"]
    bad = [
        ("add_item", {"item": 0}),          # already selected
        ("add_item", {"item": 1}),          # 4 + 3 > 6 on the first resource
        ("add_item", {"item": 3}),          # no lot 3 (n = 3): the World refuses
        ("add_item", {"item": 99}),         # beyond the schema maximum
        ("add_item", {"item": -1}),
        ("add_item", {"item": "0"}),
        ("add_item", {}),
        ("add_item", {"item": 2, "extra": 1}),
        ("remove_item", {"item": 1}),       # not selected
        ("view_log", {"limit": 0}),
        ("no_such_tool", {}),
    ]
    for tool, args in bad:  # the world's three refusals use a turn each, the malformed calls none
        refused(env, named(FAM, out, tool), args)
    assert "capacity" in call("add_item", {"item": 1})["error"]
    assert call("remove_item", {"item": 0})["ok"]
    before = env.state_digest()
    assert call("clear_selection", {})["ok"] is False and env.state_digest() == before
    assert call("submit_selection", {})["ok"] and env.done
    before = env.state_digest()
    assert call("add_item", {"item": 2})["ok"] is False and env.state_digest() == before
    assert env.outcome().items() >= {"utility": 0.0, "terminal": True, "turns_used": 8}.items()


def test_in_i_the_headroom_and_the_sums_count_every_lot_from_the_start():
    """I states every capacity and lot (issue 16: view_headroom was refused, "read_capacities
    first"): the headroom is shown at once and the selection's sums count every lot."""
    theta = make([5, 4, 3], [[4, 3, 2], [1, 2, 3]], [6, 4])
    out, _ = generated(FAM, 1)
    env = env_of(FAM, 1, theta, "I", budget=ROOMY)
    call = lambda tool, **args: env.call(out.tool_name(tool), args)
    assert call("view_headroom") == {"headroom": {"floor space": 6, "handling hours": 4}, "not_counted": [],
                                     "ok": True, "turns_left": ROOMY - 1}
    assert call("add_item", item=2)["ok"]
    assert call("view_selection")["value"] == 3 and call("view_selection")["not_counted"] == []
    assert list(call("view_headroom")["headroom"].values()) == [4, 1]
    assert [lot["item"] for lot in call("view_inspected")["lots"]] == [0, 1, 2]
    a = env_of(FAM, 1, theta, "A")  # in A the capacities are still read first
    assert a.call(out.tool_name("view_headroom"), {})["ok"] is False


def test_the_instruction_counts_one_lot_and_one_resource_in_the_singular():
    one = make([3], [[2]], [4])
    for presentation in "IA":
        text = env_of(FAM, 0, one, presentation).instruction
        assert "1 candidate lot of" in text and "uses some units of the limited resource floor space." in text
        assert "1 limited resources" not in text and "1 candidate lots" not in text
    text = env_of(FAM, 0, make([5, 4, 3], [[4, 3, 2], [1, 2, 3]], [6, 4]), "I").instruction
    assert "3 candidate lots of" in text and "each of 2 limited resources: floor space, handling hours." in text


def test_running_out_of_turns_submits_the_selection_as_it_stands():
    theta = MODULE_THETAS[1]
    out, _ = generated(FAM, 2)
    env = env_of(FAM, 2, theta, "I", budget=3)
    chosen = chosen_of(FAM.default_policy(theta))
    assert len(chosen) >= 2
    assert env.call(out.tool_name("add_item"), {"item": chosen[0]})["ok"]
    assert env.call(out.tool_name("view_selection"), {})["ok"]
    assert env.call(out.tool_name("add_item"), {"item": chosen[1]})["ok"]
    assert env.done
    assert env.outcome().items() >= {"utility": float(worth(theta, chosen[:2])), "terminal": True, "turns_used": 3}.items()
    assert env.call(out.tool_name("add_item"), {"item": chosen[-1]})["ok"] is False


def test_presentation_a_hides_the_numbers_that_i_states():
    theta = MODULE_THETAS[0]
    other = dict(theta, values=[v + 1000 for v in theta["values"]],
                 weights=[[w + 500 for w in row] for row in theta["weights"]],
                 capacities=[c + 7000 for c in theta["capacities"]])
    for k in range(len(PASSAGES)):
        out, _ = generated(FAM, k)
        i_text, a_text = env_of(FAM, k, theta, "I").instruction, env_of(FAM, k, theta, "A").instruction
        # A reads the same whatever the hidden fields are; I does not
        assert env_of(FAM, k, other, "A").instruction == a_text
        assert env_of(FAM, k, other, "I").instruction != i_text
        for i, v in enumerate(theta["values"]):
            assert "lot %d: value %d;" % (i, v) in i_text and "value %d" % v not in a_text
        caps = ", ".join(str(c) for c in theta["capacities"])
        assert all(" %d" % c in i_text for c in theta["capacities"]), caps
        assert out.tool_name("inspect_item") in a_text and out.tool_name("read_capacities") in a_text
        assert "lot 0: value" not in a_text


def test_a_refused_lot_never_shows_a_hidden_load():
    """A refusal names the broken rule, never an uninspected lot's load or the load so far: worlds
    that differ only in hidden θ give the same refusal text."""
    small = make([5, 4, 3], [[4, 3, 2], [1, 2, 3]], [6, 4])
    large = make([50, 40, 30], [[5, 2, 2], [0, 1, 1]], [6, 4])  # lot 1 misfits on resource 0 for another reason
    out, _ = generated(FAM, 1)
    texts = []
    for theta in (small, large):
        env = env_of(FAM, 1, theta, "A")
        call = lambda tool, **args: env.call(out.tool_name(tool), args)
        assert call("read_capacities")["ok"] and call("add_item", item=0)["ok"]
        refused = call("add_item", item=1)
        assert refused["ok"] is False
        texts.append(refused["error"])
    assert texts[0] == texts[1]
    assert "capacity" in texts[0] and not re.search(r"\d+ \+ \d+|> capacity \d", texts[0])
    for number in ("3", "4", "6", "7"):  # lot 1's load, the load so far, the capacity, their sum
        assert not re.search(r"(?<![\w-])%s(?![\w-])" % number, texts[0].replace("lot 1", "")), texts[0]


def test_before_an_inspection_the_selection_shows_no_hidden_value_or_load():
    small = make([5, 4, 3], [[4, 3, 2], [1, 2, 3]], [6, 4])
    large = make([50, 40, 30], [[5, 2, 2], [0, 1, 1]], [7, 5])
    out, _ = generated(FAM, 2)
    answers = []
    for theta in (small, large):
        env = env_of(FAM, 2, theta, "A")
        call = lambda tool, **args: env.call(out.tool_name(tool), args)
        assert call("add_item", item=0)["ok"]
        selection = call("view_selection")
        assert selection["value"] == 0 and selection["not_counted"] == [0]
        assert call("read_capacities")["ok"]
        headroom = call("view_headroom")
        assert list(headroom["headroom"].values()) == theta["capacities"] and headroom["not_counted"] == [0]
        answers.append({k: v for k, v in selection.items() if k != "turns_left"})
    assert answers[0] == answers[1]


@pytest.mark.parametrize("theta,field", [
    (make([1, 1], [[1.9, 1.9]], [2.5]), "weights"),     # rounded, both lots fit (2.0); the true optimum is 1
    (make([1.5, 0.5], [[1, 1]], [2]), "values"),
    (make([1, 1], [[1, 1]], [2.5]), "capacities"),
    (make([1, 1], [[1, 1]], [-1]), "capacities"),
    (make([1, -1], [[1, 1]], [2]), "values"),
    (make([1, 1], [[1, float("nan")]], [2]), "weights"),
    (make([1, 1], [[1, 1]], [True]), "capacities"),
])
def test_solve_refuses_theta_that_is_not_whole_and_non_negative(theta, field):
    with pytest.raises(InvalidParams, match=r"knapsack θ\['%s'\].*whole number" % field):
        FAM.solve(theta)


def test_solve_refuses_sizes_past_its_limits_and_malformed_theta():
    too_many = make([1] * 101, [[1] * 101], [10])
    with pytest.raises(InvalidParams, match=r"n_items.*1 … 100"):
        FAM.solve(too_many)
    with pytest.raises(InvalidParams, match=r"n_items.*1 … 50"):  # two resources: at most 50 lots
        FAM.solve(make([1] * 51, [[1] * 51] * 2, [10, 10]))
    with pytest.raises(InvalidParams, match=r"n_resources.*1 … 12"):
        FAM.solve(make([1], [[1]] * 13, [1] * 13))
    with pytest.raises(InvalidParams, match=r"weights.*2 entries"):
        FAM.solve(dict(make([1, 1], [[1, 1]], [2]), weights=[[1]]))
    with pytest.raises(InvalidParams, match="lacks the field 'values'"):
        FAM.solve({k: v for k, v in make([1], [[1]], [1]).items() if k != "values"})
    # a whole number written as a float is the number itself
    assert FAM.solve(make([3.0, 2], [[2.0, 1]], [2.0])).u_star == 3.0


def test_the_largest_sizes_solve_exactly():
    """Issue 16: 100 lots on one resource (Pisinger's size; the 0/1 optimum checked by the dynamic
    programme over capacities) and 50 lots on two resources, both at a zero MIP gap."""
    for seed in range(3):
        theta = FAM.sample(FAM.Params(size=100, horizon=1), np.random.default_rng(seed))
        solution = FAM.solve(theta)
        best = [0] * (theta["capacities"][0] + 1)
        for v, w in zip(theta["values"], theta["weights"][0]):
            for c in range(len(best) - 1, w - 1, -1):
                best[c] = max(best[c], best[c - w] + v)
        assert solution.u_star == best[-1] and solution.certificate.gap <= 1e-9
    theta = FAM.sample(FAM.Params(size=50, horizon=2), np.random.default_rng(5))
    solution = FAM.solve(theta)
    assert solution.certificate.gap <= 1e-9 and FAM.evaluate(theta, solution.policy) == solution.u_star


# ---------------------------------------------------------------------------------------------
# Through the real gates.


def test_the_gates_admit_the_family_in_both_presentations():
    verdicts = gated(FAM).verdicts
    assert len(verdicts) == 12
    for presentation in ("I", "A"):
        mine = [v for v in verdicts if v.candidate.presentation == presentation]
        assert sum(v.admitted for v in mine) >= 5, [v.reason for v in mine]
    for v in verdicts:  # a rejection may only come from the model's own default band
        assert v.admitted or failed([v]) == {"default_band"}, v.reason
        assert v.instruction and len(v.tools) == len(FAM.tools)


def test_a_doubled_value_in_the_world_is_rejected():
    verdicts = mutant_verdicts(FAM, gated(FAM), "SELECT COALESCE(SUM(c.value), 0)",
                               "SELECT COALESCE(SUM(2 * c.value), 0)")
    assert verdicts and not any(v.admitted for v in verdicts)
    assert "default_band" not in failed(verdicts)  # the candidates were played
    assert {"replay_agreement", "no_policy_beats_optimum", "dynamics_agreement"} <= failed(verdicts)


def test_a_world_where_lot_zero_is_worthless_is_rejected():
    # the module's utility leaves lot 0 out; the default always starts with lot 0 when it fits
    verdicts = mutant_verdicts(FAM, gated(FAM), "JOIN %s s ON s.item_id = c.item_id\"",
                               "JOIN %s s ON s.item_id = c.item_id AND c.item_id > 0\"", which=-1)
    assert verdicts and not any(v.admitted for v in verdicts)
    assert "default_band" not in failed(verdicts)  # the candidates were played
    assert failed(verdicts) & {"replay_agreement", "dynamics_agreement"}


# ---------------------------------------------------------------------------------------------
# Decision rewards (exact advantages), from the Model: the decision process with no turn limit,
# searched breadth-first over the selections its accepted decisions reach.


def knapsack_moves(theta, chosen):
    """The selections one accepted decision leads to: add a lot that fits, remove one, clear."""
    out = [chosen | {i} for i in range(theta["n_items"]) if i not in chosen and feasible(theta, sorted(chosen | {i}))]
    return out + [chosen - {i} for i in chosen] + ([frozenset()] if chosen else [])


def best_reachable(theta, chosen):
    """V*(S): the best value of a submission reachable from the open selection S."""
    seen, frontier = {chosen}, [chosen]
    while frontier:
        frontier = [t for s in frontier for t in knapsack_moves(theta, s) if t not in seen and not seen.add(t)]
    return max(worth(theta, s) for s in seen)


ADVANTAGE_THETA = make([5, 4, 3, 6, 1], [[4, 3, 2, 5, 1], [1, 2, 3, 2, 4]], [7, 5])


def _random_calls(theta, rng, length):
    """Random calls (some refused, some probes) and the brute force's A* of each, with the final
    selection and whether it was submitted."""
    n, chosen, calls, expected, submitted = theta["n_items"], frozenset(), [], [], False
    for _ in range(length):
        i = int(rng.integers(0, n + 1))  # lot n does not exist: refused
        tool = str(rng.choice(["add_item", "add_item", "add_item", "remove_item", "clear_selection", "inspect_item",
                               "view_selection", "submit_selection"], p=[.25, .15, .1, .2, .05, .1, .1, .05]))
        args = {"item": i} if tool in ("add_item", "remove_item", "inspect_item") else {}
        calls.append({"tool": tool, "arguments": args})
        after = chosen
        if submitted or tool in ("inspect_item", "view_selection"):
            expected.append(0)
            continue
        if tool == "submit_selection":
            expected.append(worth(theta, chosen) - best_reachable(theta, chosen))
            submitted = True
            continue
        if tool == "add_item" and i < n and i not in chosen and feasible(theta, sorted(chosen | {i})):
            after = chosen | {i}
        elif tool == "remove_item" and i in chosen:
            after = chosen - {i}
        elif tool == "clear_selection":
            after = frozenset()
        expected.append(best_reachable(theta, after) - best_reachable(theta, chosen))  # 0 if refused
        chosen = after
    return calls, expected, chosen, submitted


def _config(theta, budget=None):
    return config(FAM, theta, budget=budget)


def test_every_decision_has_the_brute_force_advantage_and_they_sum_to_u_less_u_star():
    from vhd.tasks.grading.step_advantages import step_advantages

    theta = ADVANTAGE_THETA
    u_star = brute_force(theta)[0]
    assert best_reachable(theta, frozenset()) == u_star == 9  # two optima: lots {0, 1} and {2, 3}
    # a specific non-optimal action: adding lot 4 (in no optimum) can be undone, so Q* = V*
    bad = frozenset({4})
    assert best_reachable(theta, bad) == u_star and worth(theta, bad) - u_star == -8
    steps = step_advantages(FAM, _config(theta), [{"tool": "add_item", "arguments": {"item": 4}},
                                                  {"tool": "submit_selection", "arguments": {}}])
    assert steps.per_call == [0.0, -8.0] and steps.finish == 0.0 and steps.utility == 1.0
    rng = np.random.default_rng(19)
    for _ in range(12):
        calls, expected, chosen, submitted = _random_calls(theta, rng, 14)
        steps = step_advantages(FAM, _config(theta, budget=ROOMY), calls)
        finish = 0 if submitted else worth(theta, chosen) - best_reachable(theta, chosen)
        assert steps.per_call == [float(a) for a in expected] and steps.finish == finish
        assert steps.utility == worth(theta, chosen) and steps.total == steps.utility - u_star


def test_running_out_of_turns_adds_the_submission_advantage_to_the_last_call():
    from vhd.tasks.grading.step_advantages import step_advantages

    theta = ADVANTAGE_THETA
    calls = [{"tool": "add_item", "arguments": {"item": 0}}, {"tool": "view_selection", "arguments": {}},
             {"tool": "add_item", "arguments": {"item": 2}}, {"tool": "add_item", "arguments": {"item": 3}}]
    steps = step_advantages(FAM, _config(theta, budget=3), calls)
    assert steps.per_call == [0.0, 0.0, 8.0 - 9.0, 0.0] and steps.finish == 0.0 and steps.utility == 8.0


def test_lot_arguments_are_bounded_by_the_instance():
    """Issue 16: "item maximum 49 for 6 lots" — the schemas the module shows and checks stop at n − 1."""
    theta = MODULE_THETAS[0]
    out, _ = generated(FAM, 0)
    for presentation in ("I", "A"):
        env = env_of(FAM, 0, theta, presentation)
        schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
        for tool in ("inspect_item", "add_item", "remove_item"):
            assert schemas[out.tool_name(tool)]["item"]["maximum"] == theta["n_items"] - 1
        refused = env.call(out.tool_name("add_item"), {"item": theta["n_items"]})
        assert refused["ok"] is False and f"must be <= {theta['n_items'] - 1}" in refused["error"]
