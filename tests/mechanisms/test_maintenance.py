"""Cross-checks of the machine-maintenance family against plain-Python brute force, its rendered
module and the real admission gates.

Everything here is written from the module docstring's Model section, not from `_Model` or
`_bellman`: a day that starts in condition c with action a (0 run, 1 maintain, 2 replace) pays
revenue[c] and wears by wear_weights[c] (running a working machine), pays downtime_penalty and stays
failed (running a failed one), pays maintenance_cost and restores repair_steps states, or pays
replacement_cost and starts tomorrow new; salvage[c] after the last day. The brute force is an
expectimax over the full scenario tree in exact Fractions, the exact expectation of a plan table
over every wear path, the maximum over every plan table of a few tiny instances, and a replay on
the docstring's tickets (random.Random(seed).random(), one a day, inverse CDF of the wear row).
The only layout assumption is that of a plan: an integer table [day, condition] → action code.
"""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import pytest
from pydantic import ValidationError

from family_kit import (PASSAGES, env_of, failed, gated, generated, mutant_verdicts, named, refused,
                        worlds_after_each_call)
from vhd.mechanisms import maintenance as mt
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.tasks.grading.step_advantages import step_advantages
from theta_cases import bumped, smallest_theta

FAM = registry.get("maintenance")
TOL = 1e-9
RUN, MAINTAIN, REPLACE = 0, 1, 2


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in plain Python.


def failed_condition(theta):
    return theta["n_conditions"] - 1


def allowed(theta, c):
    return (RUN, REPLACE) if c == failed_condition(theta) else (RUN, MAINTAIN, REPLACE)


def outcomes(theta, c, action):
    """[(probability, today's cash, tomorrow's condition)] of one day."""
    if action == MAINTAIN:
        assert c < failed_condition(theta)
        return [(Fraction(1), -theta["maintenance_cost"], max(0, c - theta["repair_steps"]))]
    if action == REPLACE:
        return [(Fraction(1), -theta["replacement_cost"], 0)]
    if c == failed_condition(theta):
        return [(Fraction(1), -theta["downtime_penalty"], c)]
    row = theta["wear_weights"][c]
    return [(Fraction(w, sum(row)), theta["revenue"][c], k) for k, w in enumerate(row) if w > 0]


def expectimax(theta, day=0, c=None):
    """The optimum over the full scenario tree (no memo, no policy table)."""
    c = theta["initial_condition"] if c is None else c
    if day == theta["horizon"]:
        return Fraction(theta["salvage"][c])
    return max(sum(p * (cash + expectimax(theta, day + 1, k)) for p, cash, k in outcomes(theta, c, a))
               for a in allowed(theta, c))


def expectation(theta, table, day=0, c=None):
    """Exact expected utility of a plan table over every wear path."""
    c = theta["initial_condition"] if c is None else c
    if day == theta["horizon"]:
        return Fraction(theta["salvage"][c])
    return sum(p * (cash + expectation(theta, table, day + 1, k))
               for p, cash, k in outcomes(theta, c, int(table[day][c])))


def tickets(theta, seed):
    rng = random.Random(seed)
    return [rng.random() for _ in range(theta["horizon"])]


def play(theta, table, seed):
    """Replay a plan on the docstring's tickets: (utility, decisions, canonical calls)."""
    c, cash, decisions, calls = theta["initial_condition"], 0, [], []
    for day, u in enumerate(tickets(theta, seed)):
        a = int(table[day][c])
        decisions.append(a)
        if a == MAINTAIN:
            calls.append({"tool": "schedule_maintenance", "arguments": {}})
            cash, c = cash - theta["maintenance_cost"], max(0, c - theta["repair_steps"])
        elif a == REPLACE:
            calls.append({"tool": "replace_machine", "arguments": {}})
            cash, c = cash - theta["replacement_cost"], 0
        elif c == failed_condition(theta):
            cash -= theta["downtime_penalty"]
        else:
            row = theta["wear_weights"][c]
            cash += theta["revenue"][c]
            c = next(k for k in range(len(row)) if sum(row[:k + 1]) > u * sum(row))
        calls.append({"tool": "end_day", "arguments": {}})
    return cash + theta["salvage"][c], decisions, calls


def all_tables(theta):
    rows = list(itertools.product(*[allowed(theta, c) for c in range(theta["n_conditions"])]))
    for table in itertools.product(rows, repeat=theta["horizon"]):
        yield [list(row) for row in table]


# ---------------------------------------------------------------------------------------------
# Instances.


def make(horizon, start, revenue, wear, maintenance, steps, replacement, penalty, salvage):
    return {"horizon": horizon, "n_conditions": len(salvage), "initial_condition": start, "revenue": list(revenue),
            "wear_weights": [list(r) for r in wear], "maintenance_cost": maintenance, "repair_steps": steps,
            "replacement_cost": replacement, "downtime_penalty": penalty, "salvage": list(salvage)}


HAND = [
    make(3, 0, [10, 4], [[5, 3, 2], [0, 6, 4]], 3, 1, 12, 2, [6, 3, 0]),
    make(3, 1, [9, 5], [[7, 2, 1], [2, 4, 3]], 4, 1, 15, 6, [5, 2, 1]),  # row sums 10 and 9, wear can go back
    make(3, 2, [12, 8, 3], [[6, 3, 1, 0], [0, 5, 4, 1], [0, 0, 3, 7]], 2, 2, 20, 5, [10, 6, 2, 1]),
    make(3, 3, [12, 8, 3], [[6, 3, 1, 0], [0, 5, 4, 1], [0, 0, 3, 4]], 6, 1, 9, 8, [4, 3, 2, 0]),  # starts failed
    make(4, 0, [20, 2], [[1, 1, 1], [0, 1, 2]], 1, 1, 5, 3, [0, 0, 0]),
    make(2, 1, [7, 7, 7], [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]], 1, 3, 1, 0, [0, 0, 0, 0]),  # no wear
    make(4, 0, [3, 1], [[0, 0, 5], [0, 0, 5]], 2, 1, 2, 0, [1, 1, 1]),  # every run fails the machine
]


def random_instances(seed, count):
    """Random tiny θ: 3 or 4 conditions, 2 … 4 days, random rows (any direction), random costs."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        n, horizon = int(rng.integers(3, 5)), int(rng.integers(2, 5 if k % 2 else 4))
        wear = []
        for _ in range(n - 1):
            row = [int(x) for x in rng.integers(0, 6, size=n)]
            row[-1] += 1 if sum(row) == 0 else 0
            wear.append(row)
        out.append(make(horizon, int(rng.integers(0, n)), [int(x) for x in rng.integers(0, 15, size=n - 1)], wear,
                        int(rng.integers(0, 8)), int(rng.integers(1, n)), int(rng.integers(0, 25)),
                        int(rng.integers(0, 8)), [int(x) for x in rng.integers(0, 10, size=n)]))
    return out


TINY = (HAND + random_instances(2024, 12)
        + [FAM.sample(FAM.Params(size=3, horizon=3), np.random.default_rng(s)) for s in (1, 2)]
        + [FAM.sample(FAM.Params(size=4, horizon=3), np.random.default_rng(s)) for s in (3, 4)])


def _id(theta):
    return f"n{theta['n_conditions']}-h{theta['horizon']}-c{theta['initial_condition']}"


# ---------------------------------------------------------------------------------------------
# The Bellman solver against brute force.


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_u_star_equals_expectimax_and_references_equal_plain_expectation(theta):
    sol = FAM.solve(theta)
    exact = expectimax(theta)
    assert abs(sol.u_star - float(exact)) <= TOL, (sol.u_star, float(exact))
    shape = (theta["horizon"], theta["n_conditions"])
    assert sol.policy.shape == shape and np.issubdtype(sol.policy.dtype, np.integer)
    for day in range(theta["horizon"]):
        for c in range(theta["n_conditions"]):
            assert int(sol.policy[day, c]) in allowed(theta, c)
    assert expectation(theta, sol.policy) == exact
    assert abs(FAM.evaluate(theta, sol.policy) - sol.u_star) <= TOL
    assert sol.certificate.status == "optimal" and sol.certificate.state_space == shape[0] * shape[1]
    default, idle = FAM.default_policy(theta), FAM.idle_policy(theta)
    assert abs(sol.u_default - float(expectation(theta, default))) <= TOL
    assert abs(sol.u_idle - float(expectation(theta, idle))) <= TOL
    rng = np.random.default_rng(len(theta["revenue"]) * 100 + theta["horizon"])
    for policy in (default, idle, FAM.random_policy(theta, rng), FAM.random_policy(theta, rng)):
        value = expectation(theta, policy)
        assert abs(FAM.evaluate(theta, policy) - float(value)) <= TOL and value <= exact


ENUMERATED = [HAND[0], HAND[1], HAND[2], random_instances(7, 1)[0] | {"horizon": 2}]


@pytest.mark.parametrize("theta", ENUMERATED, ids=[_id(t) for t in ENUMERATED])
def test_u_star_is_the_maximum_over_every_plan_table(theta):
    horizon = 2 if theta["n_conditions"] == 4 else theta["horizon"]
    theta = dict(theta, horizon=horizon)
    best, count = None, 0
    for table in all_tables(theta):
        value = expectation(theta, table)
        if count % 97 == 0:
            assert abs(FAM.evaluate(theta, np.array(table, dtype=np.int64)) - float(value)) <= TOL
        best = value if best is None or value > best else best
        count += 1
    assert count == math.prod(len(allowed(theta, c)) for c in range(theta["n_conditions"])) ** horizon >= 324
    assert best == expectimax(theta) and abs(FAM.solve(theta).u_star - float(best)) <= TOL


def test_reference_policies_match_their_docstrings():
    theta = HAND[2]
    default, idle = FAM.default_policy(theta), FAM.idle_policy(theta)
    assert default.tolist() == [[RUN, RUN, RUN, REPLACE]] * 3  # replace only a failed machine
    assert idle.tolist() == [[RUN] * 4] * 3
    rng = np.random.default_rng(3)
    tables = [FAM.random_policy(SIM[1], rng) for _ in range(5)]
    assert len({t.tobytes() for t in tables}) == 5
    for table in tables:
        assert not (table[:, -1] == MAINTAIN).any() and set(np.unique(table)) <= {RUN, MAINTAIN, REPLACE}
        assert 0.5 <= float((table[:, :-1] == RUN).mean()) <= 0.7


def test_the_optimum_uses_work_when_it_pays_and_ties_go_to_run():
    sol = FAM.solve(HAND[4])  # revenue 20 new, 2 worn, maintenance 1: maintain every worn day but the last
    assert sol.policy[:-1, 1].tolist() == [MAINTAIN] * 3 and sol.policy[-1, 1] == RUN
    assert sol.policy[:, 2].tolist() == [REPLACE] * 3 + [RUN]  # replace a failed machine, except on the last day
    no_wear = FAM.solve(HAND[5])  # nothing ever wears: running is optimal and every work day a loss
    assert not no_wear.policy[:, :-1].any() and no_wear.u_star == 14
    free = dict(HAND[5], maintenance_cost=0, revenue=[0, 0, 0])  # maintaining ties with running: run wins
    assert not FAM.solve(free).policy[:, :-1].any()


@pytest.mark.parametrize("field,value", [("revenue", [10, 5]), ("maintenance_cost", 4), ("replacement_cost", 13),
                                         ("downtime_penalty", 3), ("salvage", [7, 3, 0]), ("repair_steps", 2),
                                         ("wear_weights", [[4, 4, 2], [0, 6, 4]])])
def test_the_solver_depends_on_every_parameter(field, value):
    # 5 days from condition 1: π* maintains, replaces and (on the last day) lets a failed machine stand
    theta = make(5, 1, [10, 4], [[5, 3, 2], [0, 6, 4]], 3, 1, 12, 2, [6, 3, 0])
    if field == "repair_steps":
        theta = make(5, 2, [10, 6, 4], [[5, 3, 1, 1], [0, 5, 3, 2], [0, 0, 6, 4]], 3, 1, 12, 2, [6, 4, 3, 0])
        value = 2
    changed = dict(theta, **{field: value})
    u, u2 = FAM.solve(theta).u_star, FAM.solve(changed).u_star
    assert abs(u - float(expectimax(theta))) <= TOL and abs(u2 - float(expectimax(changed))) <= TOL
    worse = field in ("maintenance_cost", "replacement_cost", "downtime_penalty", "wear_weights")
    assert (u2 < u - 1e-6) if worse else (u2 > u + 1e-6), (field, u, u2)


def test_evaluate_rejects_invalid_plans():
    theta = HAND[0]
    good = FAM.default_policy(theta)
    assert FAM.evaluate(theta, good.astype(np.int64)) == FAM.evaluate(theta, good)
    bad = [good[:2], good[:, :2], good.astype(float), np.full(good.shape, 3), np.full(good.shape, -1),
           np.full(good.shape, 10**6), good[None]]
    maintained = good.copy()
    maintained[1, -1] = MAINTAIN  # a failed machine cannot be maintained
    for plan in bad + [maintained]:
        with pytest.raises(ValueError):
            FAM.evaluate(theta, plan)
        with pytest.raises(ValueError):
            FAM.simulate(theta, plan, 0)


# ---------------------------------------------------------------------------------------------
# The reference simulator.


SIM = [FAM.sample(FAM.Params(size=s, horizon=h), np.random.default_rng(k)) for k, s, h in
       ((11, 4, 20), (12, 8, 45), (13, 12, 30), (14, 6, 60))]


def _plans(theta, rng):
    return {"star": FAM.solve(theta).policy, "default": FAM.default_policy(theta), "idle": FAM.idle_policy(theta),
            "random": FAM.random_policy(theta, rng)}


@pytest.mark.parametrize("theta", SIM + HAND[:4], ids=[_id(t) for t in SIM + HAND[:4]])
def test_simulate_matches_plain_replay(theta):
    rng = np.random.default_rng(99)
    for name, policy in _plans(theta, rng).items():
        for seed in (0, 1, 7, 12345, 2**31 - 1):
            episode = FAM.simulate(theta, policy, seed)
            utility, decisions, calls = play(theta, policy, seed)
            assert episode.utility == utility and episode.decisions == decisions and episode.calls == calls, name
    assert mt.World.tickets(theta, 5) == tickets(theta, 5)


@pytest.mark.parametrize("which", [0, 1, 3])
def test_simulate_average_is_close_to_evaluate(which):
    theta = SIM[which]
    rng = np.random.default_rng(314 + which)
    seeds = [int(s) for s in rng.integers(0, 2**31 - 1, size=800)]
    for name, policy in _plans(theta, rng).items():
        values = np.array([FAM.simulate(theta, policy, s).utility for s in seeds])
        se = values.std(ddof=1) / math.sqrt(len(values))
        assert se > 0 and abs(values.mean() - FAM.evaluate(theta, policy)) <= 4 * se + 1e-9, name


# ---------------------------------------------------------------------------------------------
# sample and Params.


def test_sample_is_deterministic_and_respects_params():
    params = FAM.Params(size=9, horizon=50)
    a = FAM.sample(params, np.random.default_rng(5))
    assert a == FAM.sample(params, np.random.default_rng(5)) != FAM.sample(params, np.random.default_rng(6))
    for s in range(30):
        n, horizon = 3 + s % 14, 3 + 6 * s
        theta = FAM.sample(FAM.Params(size=n, horizon=horizon), np.random.default_rng(s))
        assert set(theta) == set(mt.World.PARAMS)
        assert theta["n_conditions"] == n and theta["horizon"] == horizon
        assert 0 <= theta["initial_condition"] <= (n - 1) // 2
        assert len(theta["revenue"]) == n - 1 and theta["revenue"] == sorted(theta["revenue"], reverse=True)
        assert min(theta["revenue"]) >= 1 and len(theta["salvage"]) == n and theta["salvage"][-1] == 0
        assert theta["salvage"] == sorted(theta["salvage"], reverse=True)
        assert len(theta["wear_weights"]) == n - 1
        for c, row in enumerate(theta["wear_weights"]):
            assert len(row) == n and sum(row) == mt.WEIGHT_TOTAL and min(row) >= 0 and not any(row[:c])
            assert row[c] >= 0.15 * mt.WEIGHT_TOTAL  # deterioration probability at most 0.8 (+ sudden failure)
        assert 1 <= theta["repair_steps"] <= max(1, (n - 1) // 3)
        assert theta["replacement_cost"] > theta["maintenance_cost"] >= 0 and theta["downtime_penalty"] >= 0
        flat = [theta[k] for k in theta if not isinstance(theta[k], list)]
        flat += [x for k in ("revenue", "salvage") for x in theta[k]] + [w for r in theta["wear_weights"] for w in r]
        assert all(type(x) is int for x in flat)
        FAM.solve(theta)  # every sampled θ solves
        assert FAM.turn_budget(theta) == 2 * horizon + 14


@pytest.mark.parametrize("knobs", [{"size": 2}, {"size": 17}, {"horizon": 2}, {"horizon": 201}, {"size": "many"}])
def test_params_out_of_bounds_raise(knobs):
    with pytest.raises(ValidationError):
        FAM.Params(**knobs)
    with pytest.raises(InvalidParams):
        FAM.params(knobs)


def test_knob_ranges_lie_inside_params_and_the_top_solves():
    for name, (lo, hi) in FAM.knob_ranges.items():
        FAM.params({name: lo})
        FAM.params({name: hi})
    top = {name: hi for name, (_, hi) in FAM.knob_ranges.items()}
    theta = FAM.sample(FAM.params(top), np.random.default_rng(0))
    assert FAM.solve(theta).certificate.gap <= 1e-9  # its time is in bench/solve_scaling.py, not a test


# ---------------------------------------------------------------------------------------------
# The rendered module (tests/test_contract.py renders every passage and replays the reference plans).


@pytest.mark.parametrize("k", range(len(SIM)))
def test_the_module_plays_every_plan_one_turn_a_call_to_the_plain_replay(k):
    out, _ = generated(FAM, k)
    assert len(FAM.tools) >= 10
    theta = SIM[k]
    rng = np.random.default_rng(k)
    for name, plan in _plans(theta, rng).items():
        for presentation, seed in (("I", k), ("A", 1000 + k)):
            env = env_of(FAM, k, theta, presentation, seed)
            episode = FAM.simulate(theta, plan, seed)
            for call in episode.calls:
                assert not env.done and env.call(out.tool_name(call["tool"]), call["arguments"])["ok"]
            outcome = env.outcome()
            assert outcome["terminal"] and outcome["utility"] == episode.utility == play(theta, plan, seed)[0], name
            assert outcome["turns_used"] == len(episode.calls)


def test_probes_and_observations_report_theta_and_state():
    theta = HAND[2]
    out, _ = generated(FAM, 3)
    env = env_of(FAM, 3, theta, "A", seed=4, budget=60)
    call = lambda tool, **args: env.call(out.tool_name(tool), args)
    costs = call("get_cost_sheet")
    assert (costs["maintenance_cost"], costs["repair_steps"], costs["replacement_cost"]) == (2, 2, 20)
    assert costs["downtime_penalty_per_day"] == 5 and costs["salvage_by_condition"] == [10, 6, 2, 1]
    assert call("get_revenue_table")["revenue_by_condition"] == [12, 8, 3]
    report = call("get_reliability_report")
    assert report["turns_left"] == 60 - 4  # two probes of 1 turn, the report costs 2
    assert report["wear_probabilities"][1]["to_condition_probabilities"] == [0.0, 0.5, 0.4, 0.1]
    assert report["daily_deterioration_probability_by_condition"] == pytest.approx([0.4, 0.5, 0.7], abs=1e-12)
    machine = call("view_machine")
    assert (machine["condition"], machine["failed"], machine["work_scheduled_today"]) == (2, False, "none")
    assert call("schedule_maintenance")["work_scheduled_today"] == "maintenance"
    assert call("view_machine")["work_scheduled_today"] == "maintenance"
    closed = call("end_day")
    assert (closed["condition"], closed["work"], closed["cash"]) == (0, "maintenance", -2)
    assert call("view_cash")["cash"] == -2 and call("view_calendar")["day"] == 1
    day1 = call("end_day")  # runs in condition 0: earns 12, wears by the day-1 ticket
    u, row = tickets(theta, 4)[1], theta["wear_weights"][0]
    assert day1["revenue"] == 12 and day1["condition"] == next(k for k in range(4) if sum(row[:k + 1]) > u * 10)
    log = call("view_work_log", last_days=theta["horizon"])["days"]  # every day (the schema stops at H)
    assert [d["work"] for d in log] == ["ran", "maintenance"] and log[1]["condition_after"] == 0
    assert call("replace_machine")["ok"] and call("end_day")["cash"] == -2 + 12 - 20 + 10  # salvage of a new one
    assert env.done and env.outcome()["utility"] == 0


def test_the_inspection_is_a_noisy_estimate_that_leaves_the_dynamics_alone():
    theta = make(6, 0, [10, 6, 3], [[5, 5, 0, 0], [0, 6, 3, 1], [0, 0, 3, 7]], 3, 1, 12, 2, [6, 4, 2, 0])
    exact = [0.5, 0.4, 0.7]
    out, _ = generated(FAM, 5)
    env = env_of(FAM, 5, theta, "A", seed=21, budget=400)
    spec = FAM.tool("inspect_machine")
    assert spec.noisy and spec.turn_cost == 1 and FAM.tool("get_reliability_report").turn_cost == 2
    assert "estimate" in spec.description and spec.reveals == FAM.tool("get_reliability_report").reveals
    reports = [env.call(out.tool_name("inspect_machine"), {}) for _ in range(200)]
    estimates = np.array([r["estimated_daily_deterioration_probability_by_condition"] for r in reports])
    assert [r["inspection"] for r in reports[:3]] == [1, 2, 3] and len({tuple(e) for e in estimates}) == 200
    assert np.all(np.abs(estimates.mean(axis=0) - exact) < 4 * 0.08 / math.sqrt(200))
    assert 0.05 < float(estimates.std(axis=0).mean()) < 0.11
    again = env_of(FAM, 5, theta, "A", seed=21, budget=400)
    assert again.call(out.tool_name("inspect_machine"), {})["estimated_daily_deterioration_probability_by_condition"] \
        == estimates[0].tolist()
    other = env_of(FAM, 5, theta, "A", seed=22, budget=400).call(out.tool_name("inspect_machine"), {})
    assert other["estimated_daily_deterioration_probability_by_condition"] != estimates[0].tolist()
    plan = FAM.solve(theta).policy
    for call in FAM.simulate(theta, plan, 21).calls:
        assert env.call(out.tool_name(call["tool"]), call["arguments"])["ok"]
    assert env.done and env.outcome()["utility"] == play(theta, plan, 21)[0]


def test_invalid_calls_are_reported_and_leave_state_unchanged():
    theta = HAND[3]  # starts failed
    out, _ = generated(FAM, 1)
    env = env_of(FAM, 1, theta, "I")
    tools = {t.name for t in FAM.tools}
    call = lambda tool, args: env.call(out.tool_name(tool) if tool in tools else tool, args)
    for tool, args in (("schedule_maintenance", {}), ("cancel_work", {}), ("view_work_log", {"last_days": 0}),
                       ("view_work_log", {"last_days": 1.5}), ("end_day", {"now": 1}), ("no_such_tool", {})):
        refused(env, named(FAM, out, tool), args)  # the world's use a turn, malformed ones none
    assert call("replace_machine", {})["ok"]
    before = env.state_digest()
    assert call("replace_machine", {})["ok"] is False and env.state_digest() == before
    assert call("cancel_work", {})["ok"] and call("end_day", {})["cash"] == -theta["downtime_penalty"]


def test_running_out_of_turns_closes_the_remaining_days_with_no_work():
    theta = SIM[1]
    out, _ = generated(FAM, 2)
    env = env_of(FAM, 2, theta, "I", seed=8, budget=6)
    for _ in range(5):
        assert env.call(out.tool_name("end_day"), {})["ok"]
    assert env.call(out.tool_name("replace_machine"), {})["ok"]  # the last turn: dropped, then every day runs
    assert env.done and env.outcome()["turns_used"] == 6
    idle = FAM.idle_policy(theta)
    assert env.outcome()["utility"] == play(theta, idle, 8)[0] == FAM.simulate(theta, idle, 8).utility


def test_the_a_instruction_hides_theta_and_the_i_instruction_states_it():
    theta = HAND[2]
    other = dict(theta, revenue=[r + 5 for r in theta["revenue"]], maintenance_cost=7, replacement_cost=33,
                 downtime_penalty=9, salvage=[s + 1 for s in theta["salvage"]], repair_steps=1,
                 wear_weights=[[w + 1 for w in row] for row in theta["wear_weights"]])
    for k in range(len(PASSAGES)):
        out, _ = generated(FAM, k)
        i_text, a_text = env_of(FAM, k, theta, "I").instruction, env_of(FAM, k, theta, "A").instruction
        assert env_of(FAM, k, other, "A").instruction == a_text and env_of(FAM, k, other, "I").instruction != i_text
        assert "Maintenance costs 2 and restores 2 states; replacement costs 20; downtime penalty 5" in i_text
        assert "12, 8, 3" in i_text and "from 2: 2: 0.300, 3: 0.700" in i_text
        assert "12, 8, 3" not in a_text and "Maintenance costs" not in a_text and "from 0:" not in a_text
        for tool in ("get_cost_sheet", "get_revenue_table", "inspect_machine", "get_reliability_report"):
            assert out.tool_name(tool) in a_text
        assert PASSAGES[k].vocabulary["currency"] in a_text and "condition 2" in a_text


# ---------------------------------------------------------------------------------------------
# Decision rewards (the docstring's Advantages), against the expectimax: every call's A* along
# π* and random call sequences, replayed here on the docstring's tickets with the turn rule.

WORK = {"schedule_maintenance": MAINTAIN, "replace_machine": REPLACE}


def q_star(theta, day, c, action):
    return sum(p * (cash + expectimax(theta, day + 1, k)) for p, cash, k in outcomes(theta, c, action))


def expected_advantages(theta, calls, seed, budget):
    """(A* of every call, A* of finishing, the wear surprises: Σ cash + V(next) − Q, and the run out
    days' realised − expected value) by the Advantages paragraph: end_day Q − V of the work
    scheduled, running out the always-run value − V, every other call 0; one turn a call (accepted
    or refused by the world), run out at the budget."""
    ticket = tickets(theta, seed)
    day, c, work, turns, per_call, surprise = 0, theta["initial_condition"], RUN, 0, [], Fraction(0)
    idle = FAM.idle_policy(theta)

    def over():
        return day == theta["horizon"] or turns == budget

    def run_out():
        """Its advantage; its own wear surprise (the days run with no work) is added to `surprise`."""
        nonlocal surprise
        realised, k = 0, c
        for d in range(day, theta["horizon"]):
            cash, k = _one_day(theta, k, RUN, ticket[d])
            realised += cash
        surprise += realised + theta["salvage"][k] - expectation(theta, idle, day, c)
        return expectation(theta, idle, day, c) - expectimax(theta, day, c)

    for call in calls:
        value, live, tool = Fraction(0), not over(), call["tool"]
        ok = live
        if ok and tool == "end_day":
            value = q_star(theta, day, c, work) - expectimax(theta, day, c)
            cash, after = _one_day(theta, c, work, ticket[day])
            surprise += cash + expectimax(theta, day + 1, after) - q_star(theta, day, c, work)
            day, c, work = day + 1, after, RUN
        elif ok and tool in WORK:
            ok = work == RUN and not (tool == "schedule_maintenance" and c == failed_condition(theta))
            work = WORK[tool] if ok else work
        elif ok and tool == "cancel_work":
            ok, work = work != RUN, RUN
        turns += live  # accepted or refused by the world, a call uses its turn
        if live and turns == budget and day < theta["horizon"]:
            value += run_out()
        per_call.append(value)
    finish = Fraction(0) if over() else run_out()
    return per_call, finish, surprise


def _one_day(theta, c, action, u):
    """(today's cash, tomorrow's condition) of one day on ticket u, by the docstring."""
    if action != RUN or c == failed_condition(theta):
        (_, cash, after), = outcomes(theta, c, action)
        return cash, after
    row = theta["wear_weights"][c]
    return theta["revenue"][c], next(k for k in range(len(row)) if sum(row[:k + 1]) > u * sum(row))


def _random_calls(rng, count):
    pool = [{"tool": "end_day", "arguments": {}}] * 3 + [
        {"tool": tool, "arguments": {}} for tool in ("schedule_maintenance", "replace_machine", "cancel_work",
                                                     "view_machine")]
    return [pool[int(i)] for i in rng.integers(0, len(pool), size=count)]


@pytest.mark.parametrize("theta", HAND, ids=[_id(t) for t in HAND])
def test_every_call_has_the_advantage_of_the_expectimax(theta):
    rng = np.random.default_rng(5)
    best = FAM.solve(theta).policy
    for trial in range(10):
        seed = int(rng.integers(0, 1000))
        if trial < 2:
            calls = FAM.simulate(theta, best, seed).calls
        else:
            calls = _random_calls(rng, int(rng.integers(0, 10)))
        budget = FAM.turn_budget(theta) if trial % 3 else int(rng.integers(1, 5))
        steps = step_advantages(FAM, {"params": theta, "presentation": "I", "episode_seed": seed,
                                      "turn_budget": budget}, calls)
        per_call, finish, surprise = expected_advantages(theta, calls, seed, budget)
        assert steps.per_call == pytest.approx([float(a) for a in per_call], abs=TOL), (calls, budget)
        assert steps.finish == pytest.approx(float(finish), abs=TOL)
        if trial < 2 and budget == FAM.turn_budget(theta):
            assert set(steps.per_call) <= {0.0} and steps.finish == 0.0  # π*'s calls: exactly 0
        # the lemma path by path: Σ A* − (u − u*) is the sum of the wear surprises (mean 0)
        assert steps.total - (steps.utility - float(expectimax(theta))) == pytest.approx(float(-surprise), abs=TOL)


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_advantages_are_the_recursions_integers_divided_once(theta):
    """V*_d is the recursion's own number (`best`, not recomputed per call) and each advantage the
    correctly rounded ratio of exact integers, float(Fraction(Q − V, scale)), bit for bit."""
    values = FAM.decision_values(theta)
    m = values["model"]
    for day in range(theta["horizon"]):
        later, scale = values["optimal"][day]
        for c in range(m.n):
            best = mt._best(m, c, later, scale)[0]
            assert values["best"][day][c] == best, (day, c)
            for work in m.allowed(c):
                want = float(Fraction(m.q_value(c, work, later, scale) - best, scale))
                assert FAM.advantage(theta, values, (day, c, work), {"tool": "end_day", "arguments": {}}, None) == want
            want = float(Fraction(m.q_value(c, mt.RUN, *values["running"][day]) - best, scale))
            assert FAM.advantage(theta, values, (day, c, 0), None, None) == want


def test_each_first_day_action_costs_its_expectimax_regret():
    theta = HAND[2]  # condition 2 of 4 on day 0: every action allowed
    v0, end = expectimax(theta), {"tool": "end_day", "arguments": {}}
    for action, calls in ((RUN, []), (MAINTAIN, [{"tool": "schedule_maintenance", "arguments": {}}]),
                          (REPLACE, [{"tool": "replace_machine", "arguments": {}}])):
        steps = step_advantages(FAM, {"params": theta, "presentation": "I", "episode_seed": 0, "turn_budget": 20},
                                calls + [end])
        assert steps.per_call[:-1] == [0.0] * len(calls)
        assert steps.per_call[-1] == pytest.approx(float(q_star(theta, 0, 2, action) - v0), abs=TOL)
    assert max(q_star(theta, 0, 2, a) for a in (RUN, MAINTAIN, REPLACE)) == v0
    running = step_advantages(FAM, {"params": theta, "presentation": "I", "episode_seed": 0, "turn_budget": 20}, [])
    assert running.finish == pytest.approx(float(expectation(theta, FAM.idle_policy(theta)) - v0), abs=TOL)


# ---------------------------------------------------------------------------------------------
# Through the real gates (tests/test_contract.py: every rejection is the default band, ≥ 3 of 6 admitted).


def test_the_gates_admit_most_models_in_both_presentations():
    verdicts = gated(FAM).verdicts
    for presentation in ("I", "A"):
        mine = [v for v in verdicts if v.candidate.presentation == presentation]
        assert sum(v.admitted for v in mine) >= 5, [v.reason for v in mine]
    for v in verdicts:
        if v.candidate.presentation == "A":
            hiding = next(g for g in v.gates if g.name == "information_hiding")
            assert hiding.passed and "invariant" in hiding.message  # the leak check really ran


def _mutated(old, new, which):
    run = gated(FAM)
    return [v for k in which for v in mutant_verdicts(FAM, run, old, new, k)]


def test_a_world_paying_one_more_per_running_day_is_rejected():
    verdicts = _mutated('earned = p["revenue"][before]', 'earned = p["revenue"][before] + 1', range(0, 3))
    assert not any(v.admitted for v in verdicts)
    assert {"replay_agreement", "dynamics_agreement"} <= failed(verdicts)


def test_a_world_with_a_different_wear_draw_is_rejected():
    verdicts = _mutated("World.worn(p, before, self.draws[day])", "World.worn(p, before, self.draws[day] ** 2)",
                        range(3, 6))
    assert sum(v.admitted for v in verdicts) <= 1
    assert {"replay_agreement", "dynamics_agreement"} & failed(verdicts)


# ---------------------------------------------------------------------------------------------
# θ that solve() refuses (issue 14: solvers refuse what they cannot solve exactly).


@pytest.mark.parametrize("key,change", [
    pytest.param("n_conditions", lambda t: t["n_conditions"] + 0.5, id="n_conditions-fraction"),
    pytest.param("revenue", lambda t: bumped(t["revenue"], (0,), 0.5), id="revenue-fraction"),
    pytest.param("wear_weights", lambda t: bumped(t["wear_weights"], (0, 0), 0.5), id="wear_weights-fraction"),
    pytest.param("horizon", lambda t: 201, id="horizon-size"),
])
def test_solve_refuses_theta_not_of_the_declared_form(key, change):
    """A fraction where an integer is declared, or a size past the documented limit, is InvalidParams
    naming the field, raised before anything is allocated."""
    theta = smallest_theta(FAM)
    with pytest.raises(InvalidParams, match=r"maintenance θ\['%s'\]" % key):
        FAM.solve(dict(theta, **{key: change(theta)}))


# ---------------------------------------------------------------------------------------------
# Text (issue 16): a count agrees with its noun.


def test_one_repair_step_is_singular():
    from vhd.tasks.stages.sample import draw
    theta = draw(FAM, 0)[1]
    for steps, words in ((1, "restores 1 state;"), (2, "restores 2 states;")):
        assert words in env_of(FAM, 0, dict(theta, repair_steps=steps)).instruction


# ---------------------------------------------------------------------------------------------
# Schemas fitted to the instance (issue 16: the agent should not learn the real range from refusals).


def test_the_work_log_is_bounded_by_the_horizon():
    """The work log lists at most the H days, in I and A alike (both instructions tell H); a longer
    listing is refused with the schema's message."""
    out, _ = generated(FAM, 1)
    name = out.tool_name
    for theta in SIM:
        for presentation in ("I", "A"):
            env = env_of(FAM, 1, theta, presentation)
            schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
            assert (schemas[name("view_work_log")]["last_days"]["minimum"],
                    schemas[name("view_work_log")]["last_days"]["maximum"]) == (1, theta["horizon"])
            before = env.state_digest()
            refused = env.call(name("view_work_log"), {"last_days": theta["horizon"] + 1})
            assert refused["ok"] is False and f"must be <= {theta['horizon']}" in refused["error"]
            assert env.state_digest() == before
            assert env.call(name("view_work_log"), {"last_days": theta["horizon"]})["days"] == []


def test_the_kept_balance_is_the_ledgers_sum():
    """The World keeps the cash in its state table instead of summing the ledger on every call (issue
    31: grading replays every call): after every call of random and default plays they agree."""
    for world in worlds_after_each_call(FAM):
        t = world.t
        assert world._cash() == world.db.execute(
            f"SELECT COALESCE(SUM(amount), 0) FROM {t['ledger']}").fetchone()[0]
