"""Cross-checks of the weighted-tardiness family against plain-Python brute force, its rendered
module and the real admission gates.

The brute force is written from the module docstring's Model section, not from the solver: the
machine runs a permutation of the jobs back to back from time 0; job j finishing at C costs
weights[j] · max(0, C − due[j]); u* is minus the least total over all n! permutations. A plan
is a sequence of distinct jobs; on release the missing jobs follow in index order. The job sheet
(a sticker) shows each figure as the middle of its block of five.
"""

from __future__ import annotations

import itertools
import math
import sqlite3

import numpy as np
import pytest
from pydantic import ValidationError

from family_kit import PASSAGES, config, env_of, failed, fit, gated, generated, mutant_verdicts, named, refused
import family_kit
from vhd.mechanisms import registry
from vhd.mechanisms._runtime import show_id
from vhd.schemas.errors import InvalidParams
from vhd.tasks.stages.sample import draw

FAM = registry.get("tardiness")
HIDDEN = ("processing", "due", "weights")
ROOMY = 40  # a budget for the tests that look at everything (the family's affords π*, the sheet, n // 2 jobs)


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in plain Python.


def released(theta, seq):
    return list(seq) + [j for j in range(theta["n_jobs"]) if j not in seq]


def cost(theta, order):
    """Weighted tardiness of running `order` back to back from time 0."""
    assert sorted(order) == list(range(theta["n_jobs"]))
    t, total = 0, 0
    for j in order:
        t += theta["processing"][j]
        total += theta["weights"][j] * max(0, t - theta["due"][j])
    return total


def brute_force(theta):
    """(u*, every optimal permutation) over all n! permutations."""
    costs = {perm: cost(theta, perm) for perm in itertools.permutations(range(theta["n_jobs"]))}
    best = min(costs.values())
    return -best, {perm for perm, c in costs.items() if c == best}


def listed(x):
    """The job sheet's estimate, from the docstring: the middle of the block of five holding x
    (1–5 shows 3, 6–10 shows 8, 11–15 shows 13, …)."""
    low = 5 * ((x - 1) // 5) + 1
    return low + 2


def wspt(theta):
    """Smith's rule from the default's docstring, on the sheet's estimates: p/w ascending
    (cross-multiplied), ties by index."""
    order = list(range(theta["n_jobs"]))
    p, w = [listed(x) for x in theta["processing"]], [listed(x) for x in theta["weights"]]
    for i in range(len(order)):  # plain insertion sort with an exact comparison
        k = i
        while k > 0:
            a, b = order[k - 1], order[k]
            pa, wa, pb, wb = p[a], w[a], p[b], w[b]
            if pb * wa < pa * wb or (pb * wa == pa * wb and b < a):
                order[k - 1], order[k] = b, a
                k -= 1
            else:
                break
    return order


def make(processing, due, weights, horizon=5):
    return {"n_jobs": len(processing), "horizon": horizon, "processing": list(processing), "due": list(due),
            "weights": list(weights)}


def _id(theta):
    return "p%s-d%s-w%s" % (theta["processing"], theta["due"], theta["weights"])


# ---------------------------------------------------------------------------------------------
# Instances.

TINY = [
    make([1, 1, 1], [1, 2, 3], [1, 1, 1]),          # index order meets every due date: 0
    make([3, 2, 1], [1, 1, 1], [1, 1, 1]),          # all late: SPT is optimal
    make([5, 1, 1], [5, 7, 7], [1, 1, 1]),          # exact WSPT (1, 2, 0) makes job 0 late; index order is optimal
    make([4, 2, 6, 3], [4, 7, 8, 12], [2, 5, 1, 3]),
    make([2, 7, 3, 4, 1], [5, 9, 6, 10, 2], [4, 1, 3, 2, 5]),
    make([10, 1, 1, 1, 1, 1], [10, 3, 3, 3, 3, 3], [10, 1, 1, 1, 1, 1]),
    make([3, 3, 3, 3, 3, 3, 3], [3, 6, 9, 12, 15, 18, 21], [1, 2, 3, 4, 5, 6, 7]),  # reversed weights
]


def random_tiny(count, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(rng.integers(3, 8))
        p = [int(x) for x in rng.integers(1, 11, size=n)]
        out.append(make(p, [int(x) for x in rng.integers(1, sum(p) + 1, size=n)],
                        [int(x) for x in rng.integers(1, 11, size=n)]))
    return out


def sampled_instances():
    rng = np.random.default_rng(2024)
    return [FAM.sample(FAM.Params(size=n, horizon=h), rng) for n in (3, 4, 5, 6, 7) for h in (1, 4, 7, 10)]


ALL = TINY + random_tiny(30, 7) + sampled_instances()


# ---------------------------------------------------------------------------------------------
# The solver against brute force.


@pytest.mark.parametrize("theta", ALL, ids=[_id(t) for t in ALL])
def test_solver_matches_brute_force_over_all_permutations(theta):
    sol = FAM.solve(theta)
    u_star, optima = brute_force(theta)
    assert sol.u_star == u_star
    assert sol.certificate.status == "optimal" and sol.certificate.state_space == 2 ** theta["n_jobs"]
    seq = sol.policy.tolist()
    assert np.issubdtype(sol.policy.dtype, np.integer)
    assert sorted(seq) == list(range(theta["n_jobs"]))  # π* is a full permutation
    assert tuple(seq) in optima
    assert FAM.evaluate(theta, sol.policy) == u_star == -cost(theta, seq)
    assert sol.u_default == -cost(theta, wspt(theta)) <= u_star
    assert sol.u_idle == -cost(theta, list(range(theta["n_jobs"]))) <= u_star
    rng = np.random.default_rng(len(seq))
    for _ in range(5):
        assert FAM.evaluate(theta, FAM.random_policy(theta, rng)) <= u_star


def test_hand_instances_have_the_expected_optima():
    assert FAM.solve(TINY[0]).u_star == 0 and FAM.solve(TINY[0]).u_idle == 0
    # all jobs late whatever the order: shortest first, C = 1, 3, 6 against due 1
    assert FAM.solve(TINY[1]).u_star == -((1 - 1) + (3 - 1) + (6 - 1))
    sol = FAM.solve(TINY[2])
    # the sheet reads every time and weight 3: the default's ratios tie and it keeps index order,
    # which is optimal here (exact WSPT, 1, 2, 0, would finish job 0 at 7 > 5)
    assert sol.u_star == 0 and sol.u_idle == 0 and sol.u_default == 0
    assert FAM.default_policy(TINY[2]).tolist() == [0, 1, 2]


def test_solver_depends_on_processing_due_and_weights():
    theta = make([4, 2, 6, 3], [4, 7, 8, 12], [2, 5, 1, 3])
    u = FAM.solve(theta).u_star
    for changed in (dict(theta, processing=[4, 2, 9, 3]), dict(theta, due=[4, 7, 2, 12]),
                    dict(theta, weights=[2, 5, 9, 3])):
        u2 = FAM.solve(changed).u_star
        assert u2 == brute_force(changed)[0] and u2 != u, changed


def test_default_is_smiths_rule_on_the_sheet_and_ignores_due_dates():
    for theta in ALL:
        order = FAM.default_policy(theta).tolist()
        assert order == wspt(theta)
        assert FAM.default_policy(dict(theta, due=[1] * theta["n_jobs"])).tolist() == order
        ratios = [listed(theta["processing"][j]) / listed(theta["weights"][j]) for j in order]
        assert ratios == sorted(ratios)
    assert FAM.default_policy(make([6, 4, 2], [1, 1, 1], [2, 2, 9])).tolist() == [2, 1, 0]  # reads 8/3, 3/3, 3/8
    # misled: the sheet reads 3/3, 8/8, 3/3, every ratio ties and index order stays (exact: 2, 9/7, 4/5)
    assert FAM.default_policy(make([2, 9, 4], [1, 1, 1], [1, 7, 5])).tolist() == [0, 1, 2]


def test_idle_releases_at_once_in_index_order():
    theta = TINY[3]
    idle = FAM.idle_policy(theta)
    assert idle.size == 0
    assert FAM.evaluate(theta, idle) == -cost(theta, [0, 1, 2, 3])
    assert FAM.simulate(theta, idle, 0).calls == [{"tool": "release_schedule", "arguments": {}}]


def test_partial_plans_append_the_rest_in_index_order():
    theta = TINY[4]
    for seq in ([3], [4, 1], [2, 0, 4], [1, 2, 3, 4, 0]):
        assert FAM.evaluate(theta, np.array(seq)) == -cost(theta, released(theta, seq))


def test_random_policy_is_a_uniform_permutation_and_varies():
    theta = make([1, 2, 3, 4], [1, 2, 3, 4], [1, 1, 1, 1])
    assert (FAM.random_policy(theta, np.random.default_rng(3)) == FAM.random_policy(theta, np.random.default_rng(3))).all()
    rng = np.random.default_rng(3)
    counts = {}
    for _ in range(2400):
        perm = tuple(FAM.random_policy(theta, rng).tolist())
        assert sorted(perm) == [0, 1, 2, 3]
        counts[perm] = counts.get(perm, 0) + 1
    assert len(counts) == 24 and min(counts.values()) > 60 and max(counts.values()) < 140


@pytest.mark.parametrize("plan", [[0, 0, 1], [0, 1, 2, 3], [3], [-1], [[0, 1, 2]], [0.5, 1.0]])
def test_evaluate_rejects_invalid_plans(plan):
    theta = make([1, 2, 3], [1, 2, 3], [1, 1, 1])
    with pytest.raises(ValueError):
        FAM.evaluate(theta, np.array(plan))


def test_solve_across_knob_ranges():
    for seed in range(12):
        knobs, theta = draw(FAM, seed)
        sol = FAM.solve(theta)
        assert FAM.turn_budget(theta) < 300
    big = FAM.sample(FAM.Params(size=10, horizon=20), np.random.default_rng(0))
    sol = FAM.solve(big)
    assert len(FAM.simulate(big, sol.policy, 0).calls) <= FAM.turn_budget(big)


# ---------------------------------------------------------------------------------------------
# The reference simulator.


@pytest.mark.parametrize("theta", TINY + sampled_instances()[8:14], ids=[_id(t) for t in TINY + sampled_instances()[8:14]])
def test_simulate_schedules_the_plan_then_releases(theta):
    sol = FAM.solve(theta)
    rng = np.random.default_rng(11)
    for plan in (sol.policy, FAM.default_policy(theta), FAM.idle_policy(theta), FAM.random_policy(theta, rng),
                 np.array([theta["n_jobs"] - 1])):
        seq = plan.tolist()
        for seed in (0, 1, 2**31 - 1):
            ep = FAM.simulate(theta, plan, seed)
            assert ep.utility == FAM.evaluate(theta, plan) == -cost(theta, released(theta, seq))
            assert ep.decisions == seq
            assert ep.calls == [{"tool": "schedule_next", "arguments": {"job": j}} for j in seq] + [
                {"tool": "release_schedule", "arguments": {}}]
            assert len(ep.calls) <= FAM.turn_budget(theta)


# ---------------------------------------------------------------------------------------------
# sample and Params.


def test_sample_is_deterministic_per_seed():
    params = FAM.Params(size=7, horizon=6)
    a = FAM.sample(params, np.random.default_rng(5))
    assert a == FAM.sample(params, np.random.default_rng(5))
    others = [FAM.sample(params, np.random.default_rng(s)) for s in (6, 7, 8)]
    assert all(o != a for o in others) and len({repr(o) for o in others}) == 3


@pytest.mark.parametrize("size,horizon", [(3, 1), (4, 5), (7, 10), (10, 3), (10, 20)])
def test_sample_respects_params(size, horizon):
    rng = np.random.default_rng(size * 100 + horizon)
    for _ in range(20):
        theta = FAM.sample(FAM.Params(size=size, horizon=horizon), rng)
        assert set(theta) == {"n_jobs", "horizon", *HIDDEN}
        assert theta["n_jobs"] == size and theta["horizon"] == horizon
        assert all(len(theta[k]) == size for k in HIDDEN)
        assert all(type(v) is int for k in HIDDEN for v in theta[k])
        assert all(1 <= p <= 10 for p in theta["processing"]) and all(1 <= w <= 10 for w in theta["weights"])
        window = max(1, math.ceil(horizon * sum(theta["processing"]) / 10))
        assert all(1 <= d <= window for d in theta["due"])


def test_horizon_sets_due_date_tightness():
    def mean_ratio(h):
        rng = np.random.default_rng(h)
        thetas = [FAM.sample(FAM.Params(size=8, horizon=h), rng) for _ in range(200)]
        return np.mean([np.mean(t["due"]) / sum(t["processing"]) for t in thetas])
    assert abs(mean_ratio(2) - 0.1) < 0.03 and abs(mean_ratio(10) - 0.5) < 0.05


@pytest.mark.parametrize("knobs", [dict(size=2), dict(size=11), dict(horizon=0), dict(horizon=21), dict(size="many")])
def test_params_out_of_bounds_raise(knobs):
    with pytest.raises(ValidationError):
        FAM.Params(**knobs)
    with pytest.raises(InvalidParams):
        FAM.params(knobs)


def test_params_edges_and_family_declarations():
    for knobs in (dict(size=3, horizon=1), dict(size=10, horizon=20)):
        params = FAM.params(knobs)
        assert (params.size, params.horizon) == (knobs["size"], knobs["horizon"])
    for knob, (lo, hi) in FAM.knob_ranges.items():
        field = FAM.Params.model_fields[knob]
        assert field.metadata[0].ge <= lo <= hi <= field.metadata[1].le
    assert FAM.stochastic is False and FAM.group == "probe_budgeted" and set(FAM.hidden) == set(HIDDEN)
    assert {r for t in FAM.tools for r in t.reveals} == set(HIDDEN)
    assert len(FAM.tools) >= 10


def test_solve_refuses_sizes_past_its_limit_before_allocating():
    """40 jobs are refused with InvalidParams naming n_jobs, before the DP allocates 2^40 states."""
    rng = np.random.default_rng(40)
    forty = make([int(x) for x in rng.integers(1, 11, size=40)], [int(x) for x in rng.integers(1, 100, size=40)],
                 [int(x) for x in rng.integers(1, 11, size=40)])
    with pytest.raises(InvalidParams, match=r"tardiness θ\['n_jobs'\] = 40: expected a whole number in 1 … 10"):
        FAM.solve(forty)


@pytest.mark.parametrize("theta,field", [
    (make([1, 2, 3], [1.5, 2, 3], [1, 1, 1]), "due"),
    (make([1, 2.5, 3], [1, 2, 3], [1, 1, 1]), "processing"),
    (make([1, 2, 3], [1, 2, 3], [1, 0, 1]), "weights"),
    (make([1, 2, 3], [1, 2], [1, 1, 1]), "due"),
    (make([1, 2, 3], [1, 2, 3], [1, 1, 1], horizon=0.5), "horizon"),
])
def test_solve_refuses_theta_that_is_not_of_the_declared_form(theta, field):
    with pytest.raises(InvalidParams, match=r"tardiness θ\['%s'\]" % field):
        FAM.solve(theta)


def test_a_solver_that_runs_out_of_memory_is_a_solver_error_with_a_reason(monkeypatch):
    from vhd.mechanisms import tardiness
    from vhd.schemas.errors import SolverError

    def exhausted(theta):
        raise MemoryError()

    monkeypatch.setattr(tardiness, "_subset_dp", exhausted)
    with pytest.raises(SolverError, match=r"dynamic programming over job subsets failed: out of memory"):
        FAM.solve(TINY[0])


# ---------------------------------------------------------------------------------------------
# The rendered module, in process.

MODULE_THETAS = [FAM.sample(FAM.Params(size=n, horizon=h), np.random.default_rng(s))
                 for s, n, h in ((1, 6, 5), (2, 9, 7), (3, 10, 10), (4, 4, 3))]


@pytest.mark.parametrize("k", range(len(MODULE_THETAS)))
def test_the_module_plays_a_plan_in_one_turn_per_job_and_one_to_release(k):
    out, _ = generated(FAM, k)
    theta = MODULE_THETAS[k]
    sol = FAM.solve(theta)
    rng = np.random.default_rng(k)
    for plan in (sol.policy, FAM.default_policy(theta), FAM.idle_policy(theta), FAM.random_policy(theta, rng)):
        for presentation in ("I", "A"):
            env = env_of(FAM, k, theta, presentation)
            for call in FAM.simulate(theta, plan, k).calls:
                assert not env.done
                result = env.call(out.tool_name(call["tool"]), call["arguments"])
                assert result["ok"], result
            outcome = env.outcome()
            assert outcome["terminal"] and env.done
            assert outcome["utility"] == FAM.evaluate(theta, plan)
            assert outcome["turns_used"] == len(plan) + 1


def test_probes_and_observations_report_theta():
    theta = MODULE_THETAS[0]
    out, _ = generated(FAM, 0)
    env = env_of(FAM, 0, theta, "A", budget=ROOMY)
    call = lambda tool, **args: env.call(out.tool_name(tool), args)
    fresh = {t.name: call(t.name) for t in FAM.tools if t.role == "observe"}
    assert fresh["view_sequence"]["sequence"] == [] and fresh["view_completion_time"]["completion_time"] == 0
    assert fresh["view_tardiness"]["weighted_tardiness"] == 0 and fresh["view_inspected"]["jobs"] == []
    job = call("inspect_job", job=3)
    assert (job["processing_time"], job["due"], job["weight"]) == tuple(theta[k][3] for k in HIDDEN)
    assert [j["job"] for j in call("view_inspected")["jobs"]] == [3]
    assert [j["inspected"] for j in call("list_unscheduled")["unscheduled"]] == [j == 3 for j in range(6)]
    before = env.call(out.tool_name("view_log"), {})["turns_left"]
    sheet = call("get_job_sheet")
    assert before - sheet["turns_left"] == 3 and sheet["exact"] is False
    assert [(j["estimated_processing_time"], j["estimated_due"], j["estimated_weight"]) for j in sheet["jobs"]] == [
        tuple(map(listed, job)) for job in zip(*(theta[k] for k in HIDDEN))]
    assert [j["job"] for j in call("view_inspected")["jobs"]] == [3]  # the sheet inspects nothing
    seq = FAM.solve(theta).policy.tolist()
    for j in seq[:4]:
        assert call("schedule_next", job=j)["ok"]
    ends = list(itertools.accumulate(theta["processing"][j] for j in seq[:4]))
    # no side channel (issue 26): a completion time sums the times before it, so it shows only once they are read
    known = next((k for k, j in enumerate(seq[:4]) if j != 3), 4)  # job 3 alone is inspected
    assert [s["completes_at"] for s in call("view_sequence")["sequence"]] == ends[:known] + [None] * (4 - known)
    assert call("view_completion_time")["completion_time"] is None and call("view_tardiness")["late_jobs"] is None
    for j in seq[:4]:
        assert call("inspect_job", job=j)["ok"]
    assert [s["completes_at"] for s in call("view_sequence")["sequence"]] == ends
    assert call("view_completion_time")["completion_time"] == ends[-1]
    late = sum(theta["weights"][j] * max(0, e - theta["due"][j]) for j, e in zip(seq[:4], ends))
    assert call("view_tardiness")["weighted_tardiness"] == late
    assert [j["job"] for j in call("list_unscheduled")["unscheduled"]] == sorted(seq[4:])
    assert call("unschedule_last")["unscheduled"] == seq[3]
    assert call("view_log", limit=2)["log"][0]["action"] == "unschedule"
    assert call("clear_schedule")["ok"] and call("view_sequence")["sequence"] == []
    done = call("release_schedule")
    assert done["appended_in_index_order"] == list(range(6)) and env.done
    assert env.outcome()["utility"] == -cost(theta, list(range(6)))


def test_invalid_calls_are_reported_and_leave_state_unchanged():
    theta = make([4, 2, 6, 3], [4, 7, 8, 12], [2, 5, 1, 3])
    out, _ = generated(FAM, 1)
    env = env_of(FAM, 1, theta, "I")
    tool_names = [t.name for t in FAM.tools]
    call = lambda tool, args: env.call(out.tool_name(tool) if tool in tool_names else tool, args)
    assert call("unschedule_last", {})["ok"] is False and call("clear_schedule", {})["ok"] is False
    assert call("schedule_next", {"job": 2})["ok"]
    bad = [
        ("schedule_next", {"job": 2}),       # already scheduled
        ("schedule_next", {"job": 4}),       # no job 4 (n = 4): the fitted schema refuses
        ("schedule_next", {"job": 10}),      # beyond the schema maximum
        ("schedule_next", {"job": -1}),
        ("schedule_next", {"job": "1"}),
        ("schedule_next", {"job": 1.5}),
        ("schedule_next", {}),
        ("schedule_next", {"job": 1, "extra": 1}),
        ("inspect_job", {"job": 7}),
        ("view_log", {"limit": 0}),
        ("release_schedule", {"now": True}),
        ("no_such_tool", {}),
    ]
    for tool, args in bad:  # the world's refusals use a turn each, the malformed calls none
        refused(env, named(FAM, out, tool), args)
    assert "already in the sequence" in call("schedule_next", {"job": 2})["error"]
    assert call("schedule_next", {"job": 0})["ok"] and call("release_schedule", {})["ok"] and env.done
    before = env.state_digest()
    assert call("schedule_next", {"job": 1})["ok"] is False and env.state_digest() == before
    assert env.outcome().items() >= {"utility": float(-cost(theta, [2, 0, 1, 3])), "terminal": True, "turns_used": 7}.items()


def test_a_world_refuses_after_release_even_when_called_directly():
    theta = make([1, 2, 3], [1, 2, 3], [1, 1, 1])
    _, module = generated(FAM, 0)
    import sqlite3
    world = module.World(sqlite3.connect(":memory:", isolation_level=None), theta, 0, module.SKIN)
    world.tool_release_schedule()
    with pytest.raises(module.AgentError):
        world.tool_schedule_next(job=0)
    with pytest.raises(ValueError):
        module.World(sqlite3.connect(":memory:"), {"n_jobs": 3}, 0, module.SKIN)


def test_running_out_of_turns_releases_the_sequence_as_it_stands():
    theta = MODULE_THETAS[1]
    out, _ = generated(FAM, 2)
    env = env_of(FAM, 2, theta, "I", budget=3)
    order = FAM.default_policy(theta).tolist()
    assert env.call(out.tool_name("schedule_next"), {"job": order[0]})["ok"]
    assert env.call(out.tool_name("view_sequence"), {})["ok"]
    assert env.call(out.tool_name("schedule_next"), {"job": order[1]})["ok"]
    assert env.done
    assert env.outcome().items() >= {"utility": float(-cost(theta, released(theta, order[:2]))), "terminal": True,
                                     "turns_used": 3}.items()
    assert env.call(out.tool_name("schedule_next"), {"job": order[2]})["ok"] is False
    # a three-turn sheet does not fit in two remaining turns and is refused without a charge
    env = env_of(FAM, 2, theta, "A", budget=4)
    assert env.call(out.tool_name("inspect_job"), {"job": 0})["ok"]
    assert env.call(out.tool_name("inspect_job"), {"job": 1})["ok"]
    assert env.call(out.tool_name("get_job_sheet"), {})["ok"] is False and not env.done


def test_presentation_a_hides_the_numbers_that_i_states():
    theta = MODULE_THETAS[2]
    other = dict(theta, processing=[p + 100 for p in theta["processing"]], due=[d + 700 for d in theta["due"]],
                 weights=[w + 300 for w in theta["weights"]])
    for k in range(len(PASSAGES)):
        out, _ = generated(FAM, k)
        i_text, a_text = env_of(FAM, k, theta, "I").instruction, env_of(FAM, k, theta, "A").instruction
        assert env_of(FAM, k, other, "A").instruction == a_text  # A reads the same whatever the hidden fields are
        assert env_of(FAM, k, other, "I").instruction != i_text
        for j in range(theta["n_jobs"]):
            line = "job %d: processing %d; due %d; weight %d" % (j, theta["processing"][j], theta["due"][j],
                                                               theta["weights"][j])
            assert line in i_text and line not in a_text
        assert "processing %d" % theta["processing"][0] not in a_text and "job 0:" not in a_text
        assert out.tool_name("inspect_job") in a_text and out.tool_name("get_job_sheet") in a_text
        # the no-argument observations of a fresh episode do not move with the hidden numbers either
        for spec in FAM.tools:
            if spec.role == "observe":
                a = env_of(FAM, k, theta, "A").call(out.tool_name(spec.name), {})
                b = env_of(FAM, k, other, "A").call(out.tool_name(spec.name), {})
                assert a == b, spec.name


# ---------------------------------------------------------------------------------------------
# Through the real gates.


def test_the_gates_admit_the_family_in_both_presentations():
    verdicts = gated(FAM).verdicts
    assert len(verdicts) == 12
    for presentation in ("I", "A"):
        mine = [v for v in verdicts if v.candidate.presentation == presentation]
        assert sum(fit(v) for v in mine) >= 5, [v.reason for v in mine]
    for v in verdicts:  # a rejection may only come from the model's own default band
        assert v.admitted or failed([v]) == {"default_band"}, v.reason
        assert v.instruction and len(v.tools) == len(FAM.tools)
    hiding = [g for v in verdicts if v.candidate.presentation == "A" for g in v.gates if g.name == "information_hiding"]
    assert hiding and all(g.passed and "leak check not run" not in g.message for g in hiding)


def test_a_doubled_weight_in_the_world_is_rejected():
    verdicts = mutant_verdicts(FAM, gated(FAM), "return sum(weight * max(0, end - due)",
                               "return sum(2 * weight * max(0, end - due)")
    assert verdicts and not any(v.admitted for v in verdicts)
    assert "default_band" not in failed(verdicts)  # the candidates were played
    assert {"replay_agreement", "dynamics_agreement"} <= failed(verdicts)


def test_a_world_that_releases_without_job_zero_is_rejected():
    # release forgets to append job 0 when it is unscheduled: π* (a full permutation) still
    # agrees, but the idle plan (release at once) and any plan missing job 0 do not. The last
    # output whose θ lies in the default band (the gates play no other candidate).
    run = gated(FAM)
    banded = {v.candidate.setter_output.setter_output_id for v in run.verdicts if "default_band" in failed([v])}
    which = max(i for i, output in enumerate(run.outputs) if output.setter_output_id not in banded)
    verdicts = mutant_verdicts(FAM, run, "WHERE job_id NOT IN (SELECT job_id FROM %s) ORDER BY job_id\"",
                               "WHERE job_id NOT IN (SELECT job_id FROM %s) AND job_id > 0 ORDER BY job_id\"", which)
    assert verdicts and not any(v.admitted for v in verdicts)
    assert "default_band" not in failed(verdicts)  # the candidates were played
    assert "dynamics_agreement" in failed(verdicts)


# ---------------------------------------------------------------------------------------------
# Decision rewards (exact advantages), from the Model: the decision process with no turn limit,
# searched breadth-first over the sequences its accepted decisions reach.


def sequence_moves(theta, seq):
    """The sequences one accepted decision leads to: append a job, take back the last, clear."""
    out = [seq + (j,) for j in range(theta["n_jobs"]) if j not in seq]
    return out + ([seq[:-1], ()] if seq else [])


_REACHABLE: dict = {}  # (θ, state) → V*


def best_reachable(theta, seq, memo=_REACHABLE):
    """V*(seq): the best −ΣwT of a release reachable from the open sequence."""
    key = (_id(theta), seq)
    if key not in memo:
        seen, frontier = {seq}, [seq]
        while frontier:
            frontier = [q for s in frontier for q in sequence_moves(theta, s) if q not in seen and not seen.add(q)]
        memo[key] = max(-cost(theta, released(theta, s)) for s in seen)
    return memo[key]


ADVANTAGE_THETA = make([4, 2, 6, 3], [4, 7, 8, 12], [2, 5, 1, 3])


def _random_calls(theta, rng, length):
    """Random calls (some refused, some probes) and the brute force's A* of each, with the final
    sequence and whether it was released."""
    n, seq, calls, expected, done = theta["n_jobs"], (), [], [], False
    for _ in range(length):
        j = int(rng.integers(0, n + 1))  # job n does not exist: refused
        tool = str(rng.choice(["schedule_next", "unschedule_last", "clear_schedule", "inspect_job", "view_sequence",
                               "release_schedule"], p=[.5, .15, .05, .1, .15, .05]))
        args = {"job": j} if tool in ("schedule_next", "inspect_job") else {}
        calls.append({"tool": tool, "arguments": args})
        after = seq
        if done or tool in ("inspect_job", "view_sequence"):
            expected.append(0)
            continue
        if tool == "release_schedule":
            expected.append(-cost(theta, released(theta, seq)) - best_reachable(theta, seq))
            done = True
            continue
        if tool == "schedule_next" and j < n and j not in seq:
            after = seq + (j,)
        elif tool == "unschedule_last" and seq:
            after = seq[:-1]
        elif tool == "clear_schedule":
            after = ()
        expected.append(best_reachable(theta, after) - best_reachable(theta, seq))  # 0 if refused
        seq = after
    return calls, expected, seq, done


def _config(theta, budget=None):
    return config(FAM, theta, budget=budget)


def test_every_decision_has_the_brute_force_advantage_and_they_sum_to_u_less_u_star():
    from vhd.tasks.grading.step_advantages import step_advantages

    theta = ADVANTAGE_THETA
    u_star = brute_force(theta)[0]
    assert best_reachable(theta, ()) == u_star
    # a specific non-optimal action: the longest, lightest job 2 first can be taken back, so Q* = V*
    bad = (2,)
    assert best_reachable(theta, bad) == u_star and cost(theta, released(theta, bad)) + u_star > 0
    steps = step_advantages(FAM, _config(theta), [{"tool": "schedule_next", "arguments": {"job": 2}},
                                                  {"tool": "release_schedule", "arguments": {}}])
    assert steps.per_call == [0.0, float(-cost(theta, [2, 0, 1, 3]) - u_star)] and steps.finish == 0.0
    rng = np.random.default_rng(19)
    for _ in range(12):
        calls, expected, seq, done = _random_calls(theta, rng, 14)
        steps = step_advantages(FAM, _config(theta, budget=ROOMY), calls)
        finish = 0 if done else -cost(theta, released(theta, seq)) - best_reachable(theta, seq)
        assert steps.per_call == [float(a) for a in expected] and steps.finish == finish
        assert steps.utility == -cost(theta, released(theta, seq)) and steps.total == steps.utility - u_star


def test_running_out_of_turns_adds_the_release_advantage_to_the_last_call():
    from vhd.tasks.grading.step_advantages import step_advantages

    theta = ADVANTAGE_THETA
    u_star = brute_force(theta)[0]
    calls = [{"tool": "schedule_next", "arguments": {"job": 3}}, {"tool": "view_sequence", "arguments": {}},
             {"tool": "schedule_next", "arguments": {"job": 2}}, {"tool": "schedule_next", "arguments": {"job": 0}}]
    steps = step_advantages(FAM, _config(theta, budget=3), calls)  # released as 3, 2, then 0, 1
    u = -cost(theta, [3, 2, 0, 1])
    assert steps.per_call == [0.0, 0.0, float(u - u_star), 0.0] and steps.finish == 0.0 and steps.utility == u
    assert u < u_star


# ---------------------------------------------------------------------------------------------
# Issue 16: schemas fitted to the instance, and what one probe call shows in presentation A.


def test_job_arguments_are_bounded_by_the_instance():
    """"item maximum 49 for 6 lots": the schemas the module shows and checks stop at job n − 1, in
    both presentations (the instruction tells n), and the World behind them still refuses what a
    direct call gets wrong."""
    theta = MODULE_THETAS[0]  # 6 jobs
    n = theta["n_jobs"]
    out, module = generated(FAM, 0)
    for presentation in ("I", "A"):
        env = env_of(FAM, 0, theta, presentation)
        schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
        for tool in ("inspect_job", "schedule_next"):
            job = schemas[out.tool_name(tool)]["job"]
            assert (job["minimum"], job["maximum"]) == (0, n - 1)
        before = env.state_digest()
        for tool in ("inspect_job", "schedule_next"):
            refused = env.call(out.tool_name(tool), {"job": n})
            assert refused["ok"] is False and "argument 'job' must be <= %d, got %d" % (n - 1, n) in refused["error"]
        assert env.state_digest() == before
        assert env.call(out.tool_name("schedule_next"), {"job": n - 1})["ok"]
    world = module.World(sqlite3.connect(":memory:", isolation_level=None), theta, 0, module.SKIN)
    with pytest.raises(module.AgentError, match="there are 6 jobs"):
        world.tool_schedule_next(job=6)


def test_in_a_one_probe_call_shows_one_job_or_the_sheet_estimates():
    """inspect_job shows one job's exact figures; the job sheet (3 turns) shows every figure's
    estimate, the middle of its block of five, off by at most 2, as the A instruction states; the
    default plays Smith's rule on those estimates, so a sheet that misleads it costs it."""
    theta = make([2, 9, 4, 10], [4, 16, 9, 21], [1, 7, 5, 6], horizon=8)
    out, _ = generated(FAM, 1)
    env = env_of(FAM, 1, theta, "A")
    call = lambda tool, **args: env.call(out.tool_name(tool), args)
    assert "off by at most 2" in env.instruction and "from 1 to 80% of the total processing time" in env.instruction
    job = call("inspect_job", job=1)
    assert {k: job[k] for k in ("job", "processing_time", "due", "weight")} == {"job": 1, "processing_time": 9,
                                                                              "due": 16, "weight": 7}
    assert [j["job"] for j in call("view_inspected")["jobs"]] == [1]
    sheet = call("get_job_sheet")
    rows = [(j["estimated_processing_time"], j["estimated_due"], j["estimated_weight"]) for j in sheet["jobs"]]
    assert rows == [(3, 3, 3), (8, 18, 8), (3, 8, 3), (8, 23, 8)] and sheet["exact"] is False
    assert all(abs(e - x) <= 2 for row, *exact in zip(rows, *(theta[k] for k in HIDDEN)) for e, x in zip(row, exact))
    assert [j for j in sheet["jobs"] if {"processing_time", "due", "weight"} & set(j)] == []
    sheet_read = FAM.belief(theta, [{"tool": "get_job_sheet", "arguments": {}}])
    assert [tuple(sheet_read[k][j] for k in HIDDEN) for j in range(4)] == rows
    # what the sheet says is what the default plays: every ratio reads 1, so index order stays,
    # where the exact ratios (2, 9/7, 4/5, 10/6) would put job 2 first
    assert FAM.default_policy(theta).tolist() == [0, 1, 2, 3] == wspt(theta)
    # nothing read: 5 time units and weight 5 a job, due at the middle of 1 … ceil(8 · 20 / 10) = 16
    blind = FAM.belief(theta, [])
    assert (blind["processing"], blind["weights"], blind["due"]) == ([5] * 4, [5] * 4, [8] * 4)


# ---------------------------------------------------------------------------------------------
# A world that writes its jobs as codes (issue 29 item 2).


def coded_world():
    """(output, module, style, key): the first world that writes jobs as codes and names the job
    argument by its own word (`family_kit.coded_world`)."""
    out, module, styles, renamed = family_kit.coded_world(FAM, "job")
    return out, module, styles["job"], renamed["job"]


def test_a_coded_world_takes_and_writes_job_codes():
    """An unknown code (or a bare number) is malformed and uses no turn; the first code is job 0,
    and the answers, the refusals and the instruction write codes."""
    out, module, style, key = coded_world()
    job = lambda k: show_id(style, k)  # noqa: E731
    theta = MODULE_THETAS[0]  # 6 jobs
    assert job(0).endswith("-01")
    env = module.create({"params": theta, "presentation": "I", "episode_seed": 0, "turn_budget": ROOMY})
    assert "numbered %s to %s. The machine" % (job(0), job(5)) in env.instruction
    assert "\n  job %s: processing %d; due %d" % (job(2), theta["processing"][2], theta["due"][2]) in env.instruction
    schema = {t["name"]: t["input_schema"]["properties"] for t in env.tools}[out.tool_name("schedule_next")]
    assert schema[key]["enum"] == [job(j) for j in range(6)]
    assert schema[key]["description"].endswith("(a code, %s for the first)" % job(0))
    for wrong in (job(6), job(0).lower(), 0, 1, job(0)[:-2] + "1"):
        answer = env.call(out.tool_name("schedule_next"), {key: wrong})
        assert answer["ok"] is False and "turns_left" not in answer, (wrong, answer)
    assert env.call(out.tool_name("schedule_next"), {"job": job(0)})["ok"] is False  # the canonical name is unknown
    assert env.outcome()["turns_used"] == 0
    inspected = env.call(out.tool_name("inspect_job"), {key: job(0)})
    assert inspected[key] == job(0) and inspected["due"] == theta["due"][0] and "label" not in inspected
    first = env.call(out.tool_name("schedule_next"), {key: job(3)})
    assert first["ok"] and (first["scheduled"], first["position"], first["sequence"]) == (job(3), 0, [job(3)])
    again = env.call(out.tool_name("schedule_next"), {key: job(3)})
    assert "job %s is already in the sequence, at position 0" % job(3) in again["error"]
    assert env.call(out.tool_name("schedule_next"), {key: job(0)})["sequence"] == [job(3), job(0)]
    assert [s[key] for s in env.call(out.tool_name("view_sequence"), {})["sequence"]] == [job(3), job(0)]
    assert [j[key] for j in env.call(out.tool_name("list_unscheduled"), {})["unscheduled"]] == [
        job(j) for j in (1, 2, 4, 5)]
    taken = env.call(out.tool_name("unschedule_last"), {})
    assert (taken["unscheduled"], taken["sequence"]) == (job(0), [job(3)])
    assert env.call(out.tool_name("view_log"), {"limit": 1})["log"][0][key] == job(0)
    done = env.call(out.tool_name("release_schedule"), {})
    assert done["appended_in_index_order"] == [job(j) for j in (0, 1, 2, 4, 5)]
    assert done["sequence"] == [job(j) for j in (3, 0, 1, 2, 4, 5)]
