"""Cross-checks of the inventory DP family against plain-Python brute force.

Everything here is written from the module docstring's Model section, not from `_Process`:
the one-day step, the expectimax recursion over the scenario tree (exact, in Fractions), the
exact expectation of a policy table over every demand sequence, and the replay of a demand
path. The only layout assumption is that of a policy table, [day, state] with states
(on hand, in transit) enumerated on hand first (in transit only with lead time 2).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from pydantic import ValidationError

from vhd.mechanisms import registry
from vhd.mechanisms import inventory_dp as inv
from vhd.schemas.errors import InvalidParams
from vhd.tasks.grading.step_advantages import step_advantages
from theta_cases import smallest_theta

FAM = registry.get("inventory_dp")
TOL = 1e-9


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in plain Python.


def states_of(theta):
    cap = theta["capacity"]
    if theta["lead_time"] == 2:
        return [(i, o) for i in range(cap + 1) for o in range(cap + 1 - i)]
    return [(i, 0) for i in range(cap + 1)]


def demand_dist(theta, day):
    row = theta["demand_weights"][day % 7]
    total = sum(row)
    return [(d, Fraction(w, total)) for d, w in enumerate(row) if w > 0]


def step(theta, day, on_hand, transit, q, demand):
    """One day: order q, receive, serve demand, book costs. Returns (cash change, next state)."""
    cap, lead = theta["capacity"], theta["lead_time"]
    assert 0 <= q <= cap - on_hand - transit, (day, on_hand, transit, q)
    cash = 0
    if q > 0:
        cash -= theta["order_fee"] + theta["unit_cost"] * q
    available = on_hand + q if lead == 0 else on_hand
    sold = min(available, demand)
    left = available - sold
    cash += theta["price"] * sold - theta["shortage_penalty"] * (demand - sold) - theta["holding_cost"] * left
    if day == theta["horizon"] - 1:
        cash += theta["salvage_value"] * left
    if lead == 0:
        nxt = (left, 0)
    elif lead == 1:
        nxt = (left + q, 0)
    else:  # today's order is in transit tomorrow; yesterday's arrives tomorrow morning
        nxt = (left + transit, q)
    return cash, nxt


def expectimax(theta, day=0, on_hand=None, transit=0):
    """The optimum over the full scenario tree (no memo, no state enumeration)."""
    if on_hand is None:
        on_hand = theta["initial_stock"]
    if day == theta["horizon"]:
        return Fraction(0)
    best = None
    for q in range(theta["capacity"] - on_hand - transit + 1):
        value = Fraction(0)
        for demand, prob in demand_dist(theta, day):
            cash, (i, o) = step(theta, day, on_hand, transit, q, demand)
            value += prob * (cash + expectimax(theta, day + 1, i, o))
        best = value if best is None or value > best else best
    return best


def play(theta, policy, demands):
    """Replay a policy table on a demand path; (utility, decisions)."""
    index = {s: n for n, s in enumerate(states_of(theta))}
    on_hand, transit, total, decisions = theta["initial_stock"], 0, 0, []
    for day, demand in enumerate(demands):
        q = int(policy[day][index[(on_hand, transit)]])
        decisions.append(q)
        cash, (on_hand, transit) = step(theta, day, on_hand, transit, q, demand)
        total += cash
    return total, decisions


def expectation(theta, policy):
    """Exact expected utility of a policy table: every demand sequence, weighted."""
    total = Fraction(0)
    days = [demand_dist(theta, day) for day in range(theta["horizon"])]
    for path in itertools.product(*days):
        prob = Fraction(1)
        for _, p in path:
            prob *= p
        utility, _ = play(theta, policy, [d for d, _ in path])
        total += prob * utility
    return total


def all_policies(theta):
    """Every deterministic Markov policy table (lists), respecting the storage rule."""
    cap = theta["capacity"]
    choices = [range(cap - i - o + 1) for i, o in states_of(theta)]
    rows = list(itertools.product(*choices))
    for table in itertools.product(rows, repeat=theta["horizon"]):
        yield [list(row) for row in table]


# ---------------------------------------------------------------------------------------------
# Instances.


def stickered(theta, factors=(0.5, 1.4, 1.0, 0.8, 1.7, 0.3, 1.2)):
    """θ with a forecast sticker: each weekday's mean demand times a factor of the stated 0.3 … 1.7."""
    means = [sum(d * w for d, w in enumerate(row)) / sum(row) for row in theta["demand_weights"]]
    return dict(theta, demand_forecast=[round(m * f, 1) for m, f in zip(means, factors)])


def _week(rows):
    """Seven weekday rows from a few, cycling; all rows padded to one length."""
    width = max(len(r) for r in rows)
    padded = [list(r) + [0] * (width - len(r)) for r in rows]
    for row in padded:
        assert sum(row) == 1000
    return [padded[d % len(padded)] for d in range(7)]


COSTS = [
    dict(unit_cost=3, price=8, holding_cost=1, shortage_penalty=2, order_fee=4, salvage_value=1),
    dict(unit_cost=5, price=9, holding_cost=2, shortage_penalty=5, order_fee=1, salvage_value=4),
    dict(unit_cost=2, price=12, holding_cost=0, shortage_penalty=0, order_fee=15, salvage_value=0),
    dict(unit_cost=4, price=6, holding_cost=3, shortage_penalty=7, order_fee=0, salvage_value=3),
]
DEMANDS = [
    _week([[300, 500, 200], [100, 300, 600], [700, 200, 100]]),
    _week([[0, 1000], [250, 250, 250, 250], [500, 0, 0, 500]]),
    _week([[900, 100], [50, 50, 900], [1000]]),
]


def hand_instances():
    out = []
    n = 0
    for lead in (0, 1, 2):
        for horizon, cap in ((2, 2), (3, 3), (3, 2), (2, 3)):
            for k in range(2):
                costs = COSTS[n % len(COSTS)]
                weights = DEMANDS[(n + k) % len(DEMANDS)]
                out.append(stickered(dict(horizon=horizon, capacity=cap, lead_time=lead,
                                          initial_stock=(n + k) % (cap + 1), initial_cash=500,
                                          demand_weights=weights, **costs)))
                n += 1
    return out


def random_instances(seed, count):
    """Random tiny θ: random costs (often nonzero), random supports and integer weights."""
    rng = np.random.default_rng(seed)
    out = []
    for n in range(count):
        lead = n % 3
        horizon, cap = int(rng.integers(2, 4)), int(rng.integers(2, 4))
        unit_cost = int(rng.integers(1, 7))
        width = int(rng.integers(1, cap + 2))
        weights = [[int(x) for x in rng.multinomial(1000, rng.dirichlet(np.ones(width)))] for _ in range(7)]
        out.append(stickered(dict(
            horizon=horizon, capacity=cap, lead_time=lead,
            unit_cost=unit_cost, price=unit_cost + int(rng.integers(1, 9)),
            holding_cost=int(rng.integers(0, 3)), shortage_penalty=int(rng.integers(0, 6)),
            order_fee=int(rng.integers(0, 9)), salvage_value=int(rng.integers(0, unit_cost)),
            initial_stock=int(rng.integers(0, cap + 1)), initial_cash=100, demand_weights=weights,
        ), factors=[float(f) for f in rng.uniform(0.3, 1.7, size=7)]))
    return out


def sampled_tiny(seed, lead):
    theta = FAM.sample(FAM.Params(size=3, horizon=3), np.random.default_rng(seed))
    theta = dict(theta, lead_time=lead)
    return theta


TINY = (hand_instances() + random_instances(2024, 15)
        + [sampled_tiny(seed, lead) for seed in (1, 2) for lead in (0, 1, 2)])


def _id(theta):
    return "L%d-h%d-c%d-s%d" % (theta["lead_time"], theta["horizon"], theta["capacity"], theta["initial_stock"])


# ---------------------------------------------------------------------------------------------
# Bellman solver against brute force.


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_u_star_equals_expectimax_over_scenario_tree(theta):
    sol = FAM.solve(theta)
    exact = expectimax(theta)
    assert abs(sol.u_star - float(exact)) <= TOL, (sol.u_star, float(exact))
    assert sol.policy.shape == (theta["horizon"], len(states_of(theta)))
    assert np.issubdtype(sol.policy.dtype, np.integer)
    # π* is a valid table whose exact expectation (computed here) is the optimum
    for day in range(theta["horizon"]):
        for n, (i, o) in enumerate(states_of(theta)):
            assert 0 <= int(sol.policy[day, n]) <= theta["capacity"] - i - o
    assert abs(float(expectation(theta, sol.policy)) - float(exact)) <= TOL
    assert abs(FAM.evaluate(theta, sol.policy) - sol.u_star) <= TOL
    assert sol.certificate.status == "optimal"
    assert sol.certificate.state_space == len(states_of(theta)) * theta["horizon"]


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_reference_policies_evaluate_to_plain_expectation(theta):
    sol = FAM.solve(theta)
    default, idle = FAM.default_policy(theta), FAM.idle_policy(theta)
    assert not idle.any()
    u_default = float(expectation(theta, default))
    u_idle = float(expectation(theta, idle))
    assert abs(FAM.evaluate(theta, default) - u_default) <= TOL
    assert abs(FAM.evaluate(theta, idle) - u_idle) <= TOL
    assert abs(sol.u_default - u_default) <= TOL
    assert abs(sol.u_idle - u_idle) <= TOL
    assert sol.u_star >= u_default - TOL and sol.u_star >= u_idle - TOL


def _default_table(theta):
    """The docstring of default_policy: order up to (lead + 1) days of the sticker's mean demand."""
    tenths = Fraction(sum(round(10 * m) for m in theta["demand_forecast"]), 70)  # the sticker's mean, exact
    level = min(theta["capacity"], math.ceil(tenths * (theta["lead_time"] + 1)))
    row = [max(0, min(level - i - o, theta["capacity"] - i - o)) for i, o in states_of(theta)]
    return [row] * theta["horizon"]


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_default_policy_is_order_up_to_mean(theta):
    assert FAM.default_policy(theta).tolist() == _default_table(theta)


ENUMERATED = [
    stickered(dict(horizon=3, capacity=2, lead_time=0, initial_stock=1, initial_cash=0, demand_weights=DEMANDS[0], **COSTS[0])),
    stickered(dict(horizon=2, capacity=2, lead_time=1, initial_stock=0, initial_cash=0, demand_weights=DEMANDS[1], **COSTS[1])),
    stickered(dict(horizon=2, capacity=2, lead_time=2, initial_stock=1, initial_cash=0, demand_weights=DEMANDS[0], **COSTS[3])),
]


@pytest.mark.parametrize("theta", ENUMERATED, ids=[_id(t) for t in ENUMERATED])
def test_u_star_is_max_over_every_markov_policy(theta):
    sol = FAM.solve(theta)
    best, count = None, 0
    for table in all_policies(theta):
        value = expectation(theta, table)
        assert abs(FAM.evaluate(theta, np.array(table, dtype=np.int16)) - float(value)) <= TOL
        best = value if best is None or value > best else best
        count += 1
    assert count >= 36
    assert abs(sol.u_star - float(best)) <= TOL
    assert best == expectimax(theta)


def test_evaluate_rejects_a_policy_beyond_capacity():
    theta = TINY[0]
    table = FAM.idle_policy(theta).copy()
    table[0, -1] = 1  # full store, orders one more
    with pytest.raises(ValueError):
        FAM.evaluate(theta, table)


def test_solver_depends_on_holding_cost():
    weights = _week([[900, 100, 0, 0], [800, 200], [1000]])
    theta = stickered(dict(horizon=3, capacity=3, lead_time=1, initial_stock=3, initial_cash=0, demand_weights=weights,
                           unit_cost=3, price=9, holding_cost=1, shortage_penalty=2, order_fee=2, salvage_value=1))
    doubled = dict(theta, holding_cost=2)
    u, u2 = FAM.solve(theta).u_star, FAM.solve(doubled).u_star
    assert abs(u - float(expectimax(theta))) <= TOL
    assert abs(u2 - float(expectimax(doubled))) <= TOL
    assert u2 < u - 1.0  # three units sit on the shelf at least one night
    for key, value in (("price", 10), ("salvage_value", 2)):
        changed = dict(theta, **{key: value})
        assert abs(FAM.solve(changed).u_star - float(expectimax(changed))) <= TOL, key
        assert abs(FAM.solve(changed).u_star - u) > 1e-6, key


def test_solver_depends_on_purchase_terms_when_ordering_pays():
    weights = _week([[0, 300, 700], [0, 500, 500]])
    theta = stickered(dict(horizon=3, capacity=3, lead_time=0, initial_stock=0, initial_cash=0, demand_weights=weights,
                           unit_cost=3, price=12, holding_cost=1, shortage_penalty=2, order_fee=2, salvage_value=1))
    sol = FAM.solve(theta)
    assert sol.policy[0, 0] > 0  # with nothing on hand and sure demand, π* orders on day 0
    for key, value in (("unit_cost", 4), ("order_fee", 3), ("lead_time", 1), ("lead_time", 2)):
        changed = dict(theta, **{key: value})
        assert abs(FAM.solve(changed).u_star - float(expectimax(changed))) <= TOL, key
        assert FAM.solve(changed).u_star < sol.u_star - 1e-6, key


# ---------------------------------------------------------------------------------------------
# The reference simulator.


def _policies(theta, rng):
    sol = FAM.solve(theta)
    return {
        "star": sol.policy,
        "default": FAM.default_policy(theta),
        "idle": FAM.idle_policy(theta),
        "random": FAM.random_policy(theta, rng),
    }


SIM_THETAS = [FAM.sample(FAM.Params(size=size, horizon=horizon), np.random.default_rng(seed))
              for seed, size, horizon in ((11, 6, 10), (12, 8, 14), (13, 5, 21), (14, 10, 9), (15, 7, 12),
                                          (16, 4, 8))]


def test_sim_thetas_cover_every_lead_time():
    assert {t["lead_time"] for t in SIM_THETAS} == {0, 1, 2}


@pytest.mark.parametrize("theta", SIM_THETAS + TINY[:6], ids=[_id(t) for t in SIM_THETAS + TINY[:6]])
def test_simulate_matches_plain_replay(theta):
    rng = np.random.default_rng(99)
    for name, policy in _policies(theta, rng).items():
        for seed in (0, 1, 7, 12345, 2**31 - 1):
            episode = FAM.simulate(theta, policy, seed)
            demands = inv.World.demand_path(theta, seed)
            assert len(demands) == theta["horizon"]
            utility, decisions = play(theta, policy, demands)
            assert episode.utility == utility, (name, seed)
            assert episode.decisions == decisions
            expected_calls = []
            for q in decisions:
                if q > 0:
                    expected_calls.append({"tool": "place_order", "arguments": {"quantity": q}})
                expected_calls.append({"tool": "end_day", "arguments": {}})
            assert episode.calls == expected_calls


def test_demand_path_is_deterministic_and_in_support():
    theta = SIM_THETAS[1]
    assert inv.World.demand_path(theta, 5) == inv.World.demand_path(theta, 5)
    paths = {tuple(inv.World.demand_path(theta, s)) for s in range(20)}
    assert len(paths) > 15
    for path in paths:
        for day, d in enumerate(path):
            assert theta["demand_weights"][day % 7][d] > 0


@pytest.mark.parametrize("which", [1, 2, 4])
def test_simulate_average_is_close_to_evaluate(which):
    theta = SIM_THETAS[which]
    rng = np.random.default_rng(314 + which)
    seeds = [int(s) for s in rng.integers(0, 2**31 - 1, size=1500)]
    for name, policy in _policies(theta, rng).items():
        values = np.array([FAM.simulate(theta, policy, s).utility for s in seeds])
        expected = FAM.evaluate(theta, policy)
        se = values.std(ddof=1) / math.sqrt(len(values))
        assert abs(values.mean() - expected) <= 4 * se + 1e-9, (name, values.mean(), expected, se)


# ---------------------------------------------------------------------------------------------
# sample, optimality sanity, Params.


def test_sample_is_deterministic_per_seed():
    params = FAM.Params(size=9, horizon=20)
    a = FAM.sample(params, np.random.default_rng(5))
    b = FAM.sample(params, np.random.default_rng(5))
    assert a == b
    others = [FAM.sample(params, np.random.default_rng(s)) for s in (6, 7, 8)]
    assert all(o != a for o in others)
    assert len({repr(sorted(o.items())) for o in others}) == 3


@pytest.mark.parametrize("size,horizon", [(3, 3), (4, 7), (12, 30), (30, 120), (40, 365)])
def test_sample_respects_params(size, horizon):
    rng = np.random.default_rng(size * 1000 + horizon)
    for _ in range(8):
        theta = FAM.sample(FAM.Params(size=size, horizon=horizon), rng)
        assert set(theta) == set(inv.World.PARAMS)
        assert theta["horizon"] == horizon and theta["capacity"] == size
        assert 3 <= theta["horizon"] <= 365 and 3 <= theta["capacity"] <= 40
        assert theta["lead_time"] in (0, 1, 2)
        assert 0 <= theta["initial_stock"] <= theta["capacity"]
        assert 0 <= theta["salvage_value"] < theta["unit_cost"] < theta["price"]
        for key in ("holding_cost", "shortage_penalty", "order_fee", "initial_cash"):
            assert theta[key] >= 0
        rows = theta["demand_weights"]
        assert len(rows) == 7
        assert len({len(r) for r in rows}) == 1
        for row in rows:
            assert all(type(w) is int and w >= 0 for w in row)
            assert sum(row) == inv.WEIGHT_TOTAL == 1000
        assert len(rows[0]) == theta["capacity"] + 1  # demand 0 … capacity, as the A instruction tells
        for row, mean in zip(rows, theta["demand_forecast"]):  # the sticker: 0.3 … 1.7 × the true mean
            true = sum(d * w for d, w in enumerate(row)) / 1000
            assert 0.3 * true - 0.05 <= mean <= 1.7 * true + 0.05 and round(mean, 1) == mean
        for key, value in theta.items():
            if key not in ("demand_weights", "demand_forecast"):
                assert type(value) is int, key


SANITY = [FAM.sample(FAM.Params(size=size, horizon=horizon), np.random.default_rng(seed))
          for seed, size, horizon in ((21, 6, 14), (22, 10, 21), (23, 4, 7), (24, 12, 30), (25, 8, 10),
                                      (26, 15, 20))]


@pytest.mark.parametrize("theta", SANITY, ids=[_id(t) for t in SANITY])
def test_u_star_dominates_reference_and_random_policies(theta):
    sol = FAM.solve(theta)
    assert sol.u_star >= sol.u_default - TOL
    assert sol.u_star >= sol.u_idle - TOL
    assert abs(sol.u_default - FAM.evaluate(theta, FAM.default_policy(theta))) <= TOL
    assert abs(sol.u_idle - FAM.evaluate(theta, FAM.idle_policy(theta))) <= TOL
    rng = np.random.default_rng(7)
    randoms = [FAM.evaluate(theta, FAM.random_policy(theta, rng)) for _ in range(20)]
    assert max(randoms) <= sol.u_star + TOL
    # the random tables really are random and valid
    assert len(set(randoms)) > 1


def test_random_policy_is_seeded_and_valid():
    theta = SANITY[0]
    a = FAM.random_policy(theta, np.random.default_rng(3))
    b = FAM.random_policy(theta, np.random.default_rng(3))
    assert (a == b).all()
    states = states_of(theta)
    for day in range(theta["horizon"]):
        for n, (i, o) in enumerate(states):
            assert 0 <= a[day, n] <= theta["capacity"] - i - o
    assert (a == 0).mean() >= 0.4


@pytest.mark.parametrize("knobs", [dict(size=2), dict(size=41), dict(horizon=2), dict(horizon=366),
                                   dict(size=0, horizon=10), dict(size="many")])
def test_params_out_of_bounds_raise(knobs):
    with pytest.raises(ValidationError):
        FAM.Params(**knobs)


def test_params_bounds_accept_edges_and_family_translates_errors():
    for knobs in (dict(size=3, horizon=3), dict(size=40, horizon=365)):
        params = FAM.params(knobs)
        assert (params.size, params.horizon) == (knobs["size"], knobs["horizon"])
    with pytest.raises(InvalidParams):
        registry.get("inventory_dp").params({"size": 1})
    with pytest.raises(InvalidParams):
        registry.get("inventory_dp").params({"horizon": 400})


# ---------------------------------------------------------------------------------------------
# θ that solve() refuses (issue 14: solvers refuse what they cannot solve exactly).


@pytest.mark.parametrize("key,change", [
    pytest.param("initial_stock", lambda t: t["initial_stock"] + 0.5, id="initial_stock-fraction"),
    pytest.param("unit_cost", lambda t: t["unit_cost"] + 0.5, id="unit_cost-fraction"),
    pytest.param("lead_time", lambda t: t["lead_time"] + 0.5, id="lead_time-fraction"),
    pytest.param("capacity", lambda t: 41, id="capacity-size"),
])
def test_solve_refuses_theta_not_of_the_declared_form(key, change):
    """A fraction where an integer is declared, or a size past the documented limit, is InvalidParams
    naming the field, raised before anything is allocated."""
    theta = smallest_theta(FAM)
    with pytest.raises(InvalidParams, match=r"inventory_dp θ\['%s'\]" % key):
        FAM.solve(dict(theta, **{key: change(theta)}))


# ---------------------------------------------------------------------------------------------
# Decision rewards: A* = Q* − V* of the day's committed order, from the plain expectimax.


def _values(theta):
    """V*(d, i, o), Q*(d, i, o, q) and the no-more-orders value I(d, i, o), memoized, exact."""
    memo = {}

    def outcome(day, on_hand, transit, q, later):
        total = Fraction(0)
        for demand, prob in demand_dist(theta, day):
            cash, (i, o) = step(theta, day, on_hand, transit, q, demand)
            total += prob * (cash + later(day + 1, i, o))
        return total

    def best(day, on_hand, transit):
        if day == theta["horizon"]:
            return Fraction(0)
        key = ("best", day, on_hand, transit)
        if key not in memo:
            memo[key] = max(outcome(day, on_hand, transit, q, best)
                            for q in range(theta["capacity"] - on_hand - transit + 1))
        return memo[key]

    def idle(day, on_hand, transit):
        if day == theta["horizon"]:
            return Fraction(0)
        key = ("idle", day, on_hand, transit)
        if key not in memo:
            memo[key] = outcome(day, on_hand, transit, 0, idle)
        return memo[key]

    return best, (lambda day, i, o, q: outcome(day, i, o, q, best)), idle


ADVANTAGE_THETAS = [t for t in TINY if t["horizon"] == 3][:6]


@pytest.mark.parametrize("theta", ADVANTAGE_THETAS, ids=[_id(t) for t in ADVANTAGE_THETAS])
def test_advantage_of_every_order_and_of_running_out_is_q_minus_v(theta):
    best, q_star, idle = _values(theta)
    values = FAM.decision_values(theta)
    assert abs(values.u_star - float(best(0, theta["initial_stock"], 0))) <= TOL
    end_day = {"tool": "end_day", "arguments": {}}
    for day in range(theta["horizon"]):
        for i, o in states_of(theta):
            v = best(day, i, o)
            for q in range(theta["capacity"] - i - o + 1):
                got = FAM.advantage(theta, values, (day, i, o, q), end_day, None)
                assert abs(got - float(q_star(day, i, o, q) - v)) <= TOL, (day, i, o, q)
                order = {"tool": "place_order", "arguments": {"quantity": max(q, 1)}}
                assert FAM.advantage(theta, values, (day, i, o, q), order, None) == 0.0
            got = FAM.advantage(theta, values, (day, i, o, 1), None, None)
            assert abs(got - float(idle(day, i, o) - v)) <= TOL, (day, i, o)


@pytest.mark.parametrize("theta", ADVANTAGE_THETAS[:3], ids=[_id(t) for t in ADVANTAGE_THETAS[:3]])
def test_a_replayed_episode_scores_each_close_and_the_run_out(theta):
    """Day 0: order the most storage allows; day 1: order 1 and cancel it; then stop (the rest runs
    out). Each close gets Q* − V* of its state on the episode's demand path, the orders 0, the finish
    I − V*."""
    best, q_star, idle = _values(theta)
    seed = 3
    demands = inv.World.demand_path(theta, seed)
    i, o = theta["initial_stock"], 0
    most = theta["capacity"] - i
    calls = ([{"tool": "place_order", "arguments": {"quantity": most}}] if most else []) + [
        {"tool": "end_day", "arguments": {}}, {"tool": "place_order", "arguments": {"quantity": 1}},
        {"tool": "cancel_order", "arguments": {}}, {"tool": "end_day", "arguments": {}}]
    expected = [0.0] if most else []
    expected.append(q_star(0, i, o, most) - best(0, i, o))
    _, (i, o) = step(theta, 0, i, o, most, demands[0])
    expected += [0.0, 0.0,  # the order of 1 and its cancellation (or both refused, if the store is full)
                  q_star(1, i, o, 0) - best(1, i, o)]
    _, (i, o) = step(theta, 1, i, o, 0, demands[1])
    config = {"params": theta, "presentation": "I", "episode_seed": seed, "turn_budget": FAM.turn_budget(theta)}
    steps = step_advantages(FAM, config, calls)
    assert len(steps.per_call) == len(expected)
    for got, want in zip(steps.per_call, expected):
        assert abs(got - float(want)) <= TOL, (steps.per_call, expected)
    assert abs(steps.finish - float(idle(2, i, o) - best(2, i, o))) <= TOL


# ---------------------------------------------------------------------------------------------
# Text (issue 16): a count of one takes the passage's singular.


def test_one_unit_on_hand_is_singular():
    from family_kit import env_of, generated
    from vhd.tasks.stages.sample import draw
    theta = dict(draw(FAM, 0)[1], initial_stock=1)
    vocab = generated(FAM, 0)[1].SKIN["vocab"]
    assert f"starting on day 0 with 1 {vocab['unit_one']} on hand" in env_of(FAM, 0, theta).instruction


# ---------------------------------------------------------------------------------------------
# Presentation A (issue 16): schemas fitted to the instance, one entry per probe call.


def test_arguments_are_bounded_by_the_instance():
    """Orders stop at the storage, demand entries at the largest demand, history lengths at the
    horizon, in both presentations (the instruction tells all three); past them the schema refuses."""
    from family_kit import env_of, generated
    from vhd.tasks.stages.sample import draw
    theta = draw(FAM, 5)[1]
    out, _ = generated(FAM, 2)
    for presentation in ("I", "A"):
        env = env_of(FAM, 2, theta, presentation)
        schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
        assert schemas[out.tool_name("place_order")]["quantity"]["maximum"] == theta["capacity"]
        assert schemas[out.tool_name("get_demand_forecast")]["demand"]["maximum"] == theta["capacity"]
        assert schemas[out.tool_name("get_demand_forecast")]["weekday"]["maximum"] == 6
        assert schemas[out.tool_name("get_cost_sheet")]["line"]["maximum"] == 5
        for tool, argument in (("view_orders", "limit"), ("view_sales", "last_days")):
            assert schemas[out.tool_name(tool)][argument]["maximum"] == theta["horizon"]
        refused = env.call(out.tool_name("place_order"), {"quantity": theta["capacity"] + 1})
        assert refused["ok"] is False and f"must be <= {theta['capacity']}" in refused["error"]
        refused = env.call(out.tool_name("get_demand_forecast"), {"weekday": 0, "demand": theta["capacity"] + 1})
        assert refused["ok"] is False and f"must be <= {theta['capacity']}" in refused["error"]


def test_in_a_a_probe_call_shows_one_entry_and_the_sticker_is_told():
    """A cost-sheet call shows one line, a forecast call one probability; the instruction shows the
    sticker and its stated error, and the ranges the stated guesses come from."""
    from family_kit import env_of, generated
    from vhd.tasks.stages.sample import draw
    theta = draw(FAM, 5)[1]
    out, _ = generated(FAM, 2)
    env = env_of(FAM, 2, theta, "A")
    line = env.call(out.tool_name("get_cost_sheet"), {"line": 4})
    assert line["ok"] and line["amount"] == theta["order_fee"] and line["term"] == "fee per order"
    assert not set(line) & set(inv.COST_FIELDS)
    entry = env.call(out.tool_name("get_demand_forecast"), {"weekday": 3, "demand": 2})
    assert entry["ok"] and entry["probability"] == theta["demand_weights"][3][2] / 1000
    assert set(entry) == {"ok", "turns_left", "weekday", "demand", "probability"}
    terms = env.call(out.tool_name("get_supplier_terms"), {})
    assert terms["lead_time_days"] == theta["lead_time"] and terms["turns_left"] == FAM.turn_budget(theta) - 3
    told = ", ".join("%.1f" % m for m in theta["demand_forecast"])
    assert told in env.instruction and "up to 70 % off" in env.instruction
    assert "order fee 5 to 24" in env.instruction and "0 to %d" % theta["capacity"] in env.instruction


def test_belief_is_what_was_read_and_the_stated_guess_elsewhere():
    """The lead time 1, the ranges' middles and Poisson counts around the sticker's means, until read."""
    from vhd.tasks.stages.sample import draw
    theta = draw(FAM, 5)[1]
    calls = FAM.probe_calls(theta)
    assert calls[0] == {"tool": "get_supplier_terms", "arguments": {}}
    assert len(calls) == 1 + 6 + 7 * (theta["capacity"] + 1)
    blind = FAM.belief(theta, [])
    assert blind["lead_time"] == 1 and (blind["unit_cost"], blind["price"], blind["order_fee"]) == (5, 14, 14)
    assert all(sum(row) == 1000 for row in blind["demand_weights"])
    weekday_mean = sum(d * w for d, w in enumerate(blind["demand_weights"][0])) / 1000
    assert abs(weekday_mean - theta["demand_forecast"][0]) < 0.1 + 1e-9 or theta["demand_forecast"][0] > theta["capacity"] / 2
    some = FAM.belief(theta, calls[:9])  # the terms, the cost sheet and weekday 0's first two entries
    assert {k: some[k] for k in inv.COST_FIELDS + ("lead_time",)} == {k: theta[k] for k in inv.COST_FIELDS + ("lead_time",)}
    assert some["demand_weights"][0][:2] == theta["demand_weights"][0][:2] and sum(some["demand_weights"][0]) == 1000
    assert FAM.belief(theta, calls) == theta


def test_the_kept_balance_is_the_ledgers_sum_and_in_transit_the_orders():
    """The World keeps the cash and the units in transit in its state table instead of summing the
    ledger and the orders on every call (issue 31: grading replays every call): after every call of
    random and default plays they agree."""
    from family_kit import worlds_after_each_call

    for world in worlds_after_each_call(FAM):
        t = world.t
        assert world._cash() == world.db.execute(
            f"SELECT COALESCE(SUM(amount), 0) FROM {t['ledger']}").fetchone()[0]
        assert world._in_transit() == world.db.execute(
            f"SELECT COALESCE(SUM(quantity), 0) FROM {t['orders']} WHERE status = 'in transit'").fetchone()[0]
