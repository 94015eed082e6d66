"""Cross-checks of the e-commerce family against plain-Python brute force, its rendered module
and the real admission gates.

Everything here is written from the module docstring's Model section, not from `_Process`: one
day of the store (order, price, ads, demand, costs, bankruptcy, the sweep to the owner), an
expectimax over (day, stock, cash) in exact Fractions, the exact expectation of a plan over
every demand path, and the replay of a ticket path. The only layout assumption is the one the
family's `plan_format` states: plan[d, s, c] = (order quantity, price level, ad level).
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from pydantic import ValidationError

from family_kit import env_of, failed, gated, generated, mutant_verdicts, refused, worlds_after_each_call
from theta_cases import bumped, smallest_theta
from vhd.mechanisms import ecommerce as ec
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.tasks.grading.step_advantages import step_advantages

FAM = registry.get("ecommerce")
TOL = 1e-9
MIDDLE, NO_ADS = 1, 0


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in plain Python.


def traffic(theta, day):
    season = 1 if theta["peak_start"] <= day < theta["peak_end"] else 0
    return min(2, theta["weekday_boost"][day % 7] + season)


def demand_dist(theta, day, p, a):
    row = theta["demand_weights"][traffic(theta, day)][p][a]
    return [(d, Fraction(w, sum(row))) for d, w in enumerate(row) if w > 0]


def order_cost(theta, q):
    return (theta["order_fee"] if q > 0 else 0) + theta["unit_cost"] * q


def actions(theta, s, c):
    return [(q, p, a) for q in range(theta["capacity"] - s + 1) if order_cost(theta, q) <= c
            for p in range(3) for a in range(3)]


def step(theta, s, c, q, p, a, d):
    """One day. Returns (bankrupt, cash e at night, transfer to the owner, next state or None)."""
    assert 0 <= q <= theta["capacity"] - s and order_cost(theta, q) <= c, (s, c, q)
    x = s + q if theta["lead_time"] == 0 else s
    sold = min(x, d)
    left = x - sold
    e = (c - order_cost(theta, q) - theta["ad_costs"][a] - theta["overhead"] - theta["holding_cost"] * left
         + theta["price_levels"][p] * sold)
    if e < 0:
        return True, e, 0, None
    top = theta["cash_cap"]
    nxt = (left if theta["lead_time"] == 0 else left + q, min(e, top))
    return False, e, max(0, e - top), nxt


def outcome_value(theta, day, s, c, q, p, a, tail):
    """E[owner transfers + final cash (or e − penalty)] of one action, `tail(day + 1, s, c)` after."""
    total = Fraction(0)
    for d, prob in demand_dist(theta, day, p, a):
        broke, e, transfer, nxt = step(theta, s, c, q, p, a, d)
        total += prob * ((e - theta["bankruptcy_penalty"]) if broke else transfer + tail(day + 1, *nxt))
    return total


def expectimax(theta):
    """u* over the scenario tree, every decision chosen after seeing the state (exact)."""

    @functools.cache
    def best(day, s, c):
        if day == theta["horizon"]:
            return Fraction(c)
        return max(outcome_value(theta, day, s, c, q, p, a, best) for q, p, a in actions(theta, s, c))

    return best(0, theta["initial_stock"], theta["initial_cash"]) - theta["initial_cash"]


def expectation(theta, plan):
    """Exact expected utility of a plan, following it down every demand path."""

    def follow(day, s, c):
        if day == theta["horizon"]:
            return Fraction(c)
        q, p, a = (int(x) for x in plan[day][s][c])
        return outcome_value(theta, day, s, c, q, p, a, follow)

    return follow(0, theta["initial_stock"], theta["initial_cash"]) - theta["initial_cash"]


def ticket_demand(weights, ticket):
    """The docstring's rule: position j = r·W // 2^30, the d whose cumulative weights bracket j."""
    j, cumulative = ticket * sum(weights) // 2**30, 0
    for d, w in enumerate(weights):
        cumulative += w
        if j < cumulative:
            return d
    raise AssertionError("position beyond the weights")


def play(theta, plan, tickets):
    """Replay a plan on a ticket path: (utility, decisions, canonical calls, went bankrupt, owner's account)."""
    s, c, owner, price, ads = theta["initial_stock"], theta["initial_cash"], 0, MIDDLE, NO_ADS
    decisions, calls = [], []
    for day in range(theta["horizon"]):
        q, p, a = (int(x) for x in plan[day][s][c])
        decisions.append((q, p, a))
        if p != price:
            calls.append({"tool": "set_price", "arguments": {"level": p}})
            price = p
        if a != ads:
            calls.append({"tool": "set_ads", "arguments": {"level": a}})
            ads = a
        if q > 0:
            calls.append({"tool": "place_order", "arguments": {"quantity": q}})
        calls.append({"tool": "end_day", "arguments": {}})
        demand = ticket_demand(theta["demand_weights"][traffic(theta, day)][p][a], tickets[day])
        broke, e, transfer, nxt = step(theta, s, c, q, p, a, demand)
        if broke:
            return owner + e - theta["initial_cash"] - theta["bankruptcy_penalty"], decisions, calls, True, owner
        owner += transfer
        s, c = nxt
    return owner + c - theta["initial_cash"], decisions, calls, False, owner


def idle_table(theta):
    return [[[(0, MIDDLE, NO_ADS)] * (theta["cash_cap"] + 1) for _ in range(theta["capacity"] + 1)]
            for _ in range(theta["horizon"])]


def as_array(table):
    return np.array(table, dtype=np.int16)


# ---------------------------------------------------------------------------------------------
# Instances.


def weights_table(rng, n_demand):
    """3 × 3 × 3 random integer weight lists over 0 … n_demand − 1 (each sums to 1000)."""
    return [[[[int(x) for x in rng.multinomial(1000, rng.dirichlet(np.ones(n_demand)))] for _ in range(3)]
             for _ in range(3)] for _ in range(3)]


BASE = {"horizon": 3, "capacity": 2, "lead_time": 0, "unit_cost": 1, "order_fee": 2, "holding_cost": 1,
        "overhead": 1, "price_levels": [2, 3, 5], "ad_costs": [0, 1, 2], "weekday_boost": [0, 1, 1, 0, 0, 0, 0],
        "peak_start": 2, "peak_end": 3, "cash_cap": 8, "initial_cash": 4, "initial_stock": 1, "bankruptcy_penalty": 5}


def hand_instances():
    """Both lead times; tight cash (bankruptcy likely), a binding cap, free holding, costly ads,
    traffic levels 0, 1 and 2 within three days, demand supports wider and narrower than capacity."""
    out = []
    variants = [
        {},
        {"initial_cash": 2, "overhead": 2, "bankruptcy_penalty": 9},
        {"cash_cap": 5, "price_levels": [3, 4, 6], "initial_cash": 5},
        {"holding_cost": 0, "ad_costs": [0, 3, 5], "initial_stock": 0, "initial_cash": 6},
        {"capacity": 3, "cash_cap": 10, "unit_cost": 2, "order_fee": 1, "price_levels": [3, 4, 6], "initial_stock": 2},
        {"horizon": 2, "capacity": 3, "cash_cap": 9, "overhead": 0, "holding_cost": 2, "initial_stock": 3,
         "initial_cash": 0},
    ]
    for lead in (0, 1):
        for k, variant in enumerate(variants):
            rng = np.random.default_rng(100 * lead + k)
            theta = dict(BASE, lead_time=lead, **variant)
            theta["demand_weights"] = weights_table(rng, theta["capacity"] + k % 3)  # supports 0 … C − 1, C, C + 1
            out.append(theta)
    return out


def random_instances(seed, count):
    rng = np.random.default_rng(seed)
    out = []
    for n in range(count):
        cap, horizon = int(rng.integers(1, 4)), int(rng.integers(2, 4))
        unit_cost = int(rng.integers(1, 3))
        middle = unit_cost + int(rng.integers(1, 4))
        top = int(rng.integers(3, 12))
        peak_start = int(rng.integers(0, horizon))
        out.append({
            "horizon": horizon, "capacity": cap, "lead_time": n % 2, "unit_cost": unit_cost,
            "order_fee": int(rng.integers(0, 4)), "holding_cost": int(rng.integers(0, 2)),
            "overhead": int(rng.integers(0, 3)),
            "price_levels": [middle - 1, middle, middle + int(rng.integers(1, 3))],
            "ad_costs": [0, int(rng.integers(0, 2)), int(rng.integers(1, 4))],
            "demand_weights": weights_table(rng, int(rng.integers(1, cap + 3))),
            "weekday_boost": [int(x) for x in rng.integers(0, 2, size=7)], "peak_start": peak_start,
            "peak_end": peak_start + int(rng.integers(1, 3)), "cash_cap": top,
            "initial_cash": int(rng.integers(0, top + 1)),
            "initial_stock": int(rng.integers(0, cap + 1)), "bankruptcy_penalty": int(rng.integers(0, 12)),
        })
    return out


def sampled_tiny(seed, lead):
    theta = FAM.sample(FAM.Params(size=2, horizon=3), np.random.default_rng(seed))
    return dict(theta, lead_time=lead)


TINY = hand_instances() + random_instances(2026, 14) + [sampled_tiny(seed, lead) for seed in (1, 2) for lead in (0, 1)]


def _id(theta):
    return (f"L{theta['lead_time']}-h{theta['horizon']}-c{theta['capacity']}-K{theta['cash_cap']}"
            f"-s{theta['initial_stock']}-m{theta['initial_cash']}")


# ---------------------------------------------------------------------------------------------
# Bellman solver against brute force.


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_u_star_equals_expectimax_and_pi_star_attains_it(theta):
    sol = FAM.solve(theta)
    exact = expectimax(theta)
    assert abs(sol.u_star - float(exact)) <= TOL, (sol.u_star, float(exact))
    shape = (theta["horizon"], theta["capacity"] + 1, theta["cash_cap"] + 1, 3)
    assert sol.policy.shape == shape and np.issubdtype(sol.policy.dtype, np.integer)
    for day, s, c in itertools.product(range(shape[0]), range(shape[1]), range(shape[2])):
        assert tuple(int(x) for x in sol.policy[day, s, c]) in actions(theta, s, c)
    assert abs(float(expectation(theta, sol.policy)) - float(exact)) <= TOL
    assert abs(FAM.evaluate(theta, sol.policy) - sol.u_star) <= TOL
    assert sol.certificate.status == "optimal"
    assert sol.certificate.state_space == shape[0] * shape[1] * shape[2]


def test_tiny_instances_cover_the_structural_cases():
    """Both lead times and every traffic level occur in TINY; π* played on sampled tickets uses
    every price and ad level, orders, goes bankrupt on some paths and sweeps cash on others."""
    seen = set()
    for theta in TINY:
        plan = FAM.solve(theta).policy
        seen |= {("traffic", traffic(theta, day)) for day in range(theta["horizon"])}
        seen.add(("lead", theta["lead_time"]))
        for seed in range(40):
            _, decisions, _, bankrupt, owner = play(theta, plan, ec.World.ticket_path(theta, seed))
            seen |= {("ads", a) for _, _, a in decisions} | {("price", p) for _, p, _ in decisions}
            seen |= {"order" for q, _, _ in decisions if q > 0} | ({"bankrupt"} if bankrupt else set())
            seen |= {"swept"} if owner > 0 else set()
    assert {("traffic", k) for k in range(3)} <= seen and {("lead", 0), ("lead", 1)} <= seen
    assert {("ads", a) for a in range(3)} <= seen and {("price", p) for p in range(3)} <= seen
    assert {"order", "bankrupt", "swept"} <= seen


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_reference_policies_evaluate_to_plain_expectation(theta):
    sol = FAM.solve(theta)
    default, idle = FAM.default_policy(theta), FAM.idle_policy(theta)
    assert idle.tolist() == [[[list(x) for x in row] for row in day] for day in idle_table(theta)]
    u_default, u_idle = float(expectation(theta, default)), float(expectation(theta, idle))
    assert abs(FAM.evaluate(theta, default) - u_default) <= TOL
    assert abs(FAM.evaluate(theta, idle) - u_idle) <= TOL
    assert abs(sol.u_default - u_default) <= TOL and abs(sol.u_idle - u_idle) <= TOL
    assert sol.u_star >= u_default - TOL and sol.u_star >= u_idle - TOL


def default_table(theta):
    """The docstring of default_policy: middle price, no ads, reorder below ceil(m) up to capacity
    while keeping one day's overhead in cash."""
    row = theta["demand_weights"][0][MIDDLE][NO_ADS]
    mean = Fraction(sum(d * w for d, w in enumerate(row)), sum(row))
    reorder = min(theta["capacity"], math.ceil(mean))
    table = []
    for _ in range(theta["horizon"]):
        day = []
        for s in range(theta["capacity"] + 1):
            cells = []
            for c in range(theta["cash_cap"] + 1):
                q = 0
                if s < reorder:
                    for want in range(theta["capacity"] - s, 0, -1):
                        if order_cost(theta, want) + theta["overhead"] <= c:
                            q = want
                            break
                cells.append([q, MIDDLE, NO_ADS])
            day.append(cells)
        table.append(day)
    return table


@pytest.mark.parametrize("theta", TINY + [FAM.sample(FAM.Params(size=9, horizon=20), np.random.default_rng(s))
                                          for s in range(4)])
def test_default_policy_matches_its_docstring(theta):
    assert FAM.default_policy(theta).tolist() == default_table(theta)


def reachable(theta, day, s, c, q, p, a):
    """The distinct non-bankrupt next states of one action."""
    return sorted({step(theta, s, c, q, p, a, d)[3] for d, _ in demand_dist(theta, day, p, a)} - {None})


ENUMERATED = [
    dict(BASE, horizon=2, capacity=1, cash_cap=4, initial_cash=3, initial_stock=0, order_fee=1, unit_cost=1,
         price_levels=[2, 3, 4], ad_costs=[0, 1, 2], overhead=1, holding_cost=0, bankruptcy_penalty=3,
         weekday_boost=[0, 1, 0, 0, 0, 0, 0], demand_weights=weights_table(np.random.default_rng(7), 2)),
    dict(BASE, horizon=2, capacity=1, cash_cap=4, initial_cash=2, initial_stock=1, lead_time=1, order_fee=0,
         unit_cost=1, price_levels=[1, 2, 4], ad_costs=[0, 1, 1], overhead=1, holding_cost=1, bankruptcy_penalty=4,
         peak_start=0, peak_end=1, demand_weights=weights_table(np.random.default_rng(8), 2)),
]


@pytest.mark.parametrize("theta", ENUMERATED, ids=[_id(t) for t in ENUMERATED])
def test_u_star_is_max_over_every_plan(theta):
    """Every plan that differs on a reachable (day, stock, cash): day-0 action × the actions of
    every day-1 state it can lead to (plans that differ only elsewhere have the same value)."""
    sol = FAM.solve(theta)
    start = (theta["initial_stock"], theta["initial_cash"])
    best, count = None, 0
    for first in actions(theta, *start):
        later = reachable(theta, 0, *start, *first)
        for choice in itertools.product(*(actions(theta, s, c) for s, c in later)):
            table = idle_table(theta)
            table[0][start[0]][start[1]] = first
            for (s, c), act in zip(later, choice):
                table[1][s][c] = act
            value = expectation(theta, table)
            if count % 5 == 0:
                assert abs(FAM.evaluate(theta, as_array(table)) - float(value)) <= TOL
            best = value if best is None or value > best else best
            count += 1
    assert count >= 500
    assert best == expectimax(theta)
    assert abs(sol.u_star - float(best)) <= TOL


def test_evaluate_rejects_invalid_plans():
    theta = TINY[0]
    good = FAM.idle_policy(theta)
    for day, s, c, entry in ((0, theta["capacity"], 5, (1, 1, 0)),  # beyond the warehouse
                             (1, 0, 0, (1, 1, 0)),  # cannot pay the order
                             (2, 0, 3, (0, 3, 0)), (0, 1, 1, (0, 1, -1))):
        bad = good.copy()
        bad[day, s, c] = entry
        with pytest.raises(ValueError):
            FAM.evaluate(theta, bad)
    with pytest.raises(ValueError):
        FAM.evaluate(theta, good[:-1])
    with pytest.raises(ValueError):
        FAM.evaluate(theta, good.astype(float))


RICH = dict(BASE, horizon=3, capacity=3, lead_time=0, unit_cost=1, order_fee=1, holding_cost=0, overhead=1,
            price_levels=[2, 3, 5], ad_costs=[0, 1, 2], cash_cap=7, initial_cash=6, initial_stock=1,
            bankruptcy_penalty=9,
            demand_weights=[[[[500, 300, 150, 50], [300, 300, 250, 150], [150, 250, 300, 300]],
                             [[600, 250, 100, 50], [400, 300, 200, 100], [250, 300, 250, 200]],
                             [[800, 150, 50, 0], [600, 250, 100, 50], [400, 300, 200, 100]]],
                            [[[300, 300, 250, 150], [150, 250, 300, 300], [100, 200, 300, 400]],
                             [[400, 300, 200, 100], [250, 300, 250, 200], [150, 250, 300, 300]],
                             [[600, 250, 100, 50], [400, 300, 200, 100], [300, 300, 250, 150]]],
                            [[[100, 200, 300, 400], [50, 150, 300, 500], [0, 100, 300, 600]],
                             [[150, 250, 300, 300], [100, 200, 300, 400], [50, 150, 300, 500]],
                             [[300, 300, 250, 150], [150, 250, 300, 300], [100, 200, 300, 400]]]])


@pytest.mark.parametrize("key,value", [
    ("unit_cost", 2), ("order_fee", 2), ("holding_cost", 1), ("overhead", 2), ("price_levels", [3, 3, 5]),
    ("price_levels", [2, 4, 5]), ("price_levels", [2, 3, 6]), ("ad_costs", [0, 2, 2]), ("ad_costs", [0, 1, 3]),
    ("bankruptcy_penalty", 14), ("cash_cap", 6), ("lead_time", 1), ("initial_cash", 7), ("peak_start", 0),
    ("weekday_boost", [1] * 7)])
def test_solver_depends_on_each_parameter(key, value):
    """RICH is profitable, advertises, can go bankrupt and hits the cap: every parameter moves u*."""
    theta = RICH
    u = FAM.solve(theta).u_star
    assert u > 5
    assert abs(u - float(expectimax(theta))) <= TOL
    changed = dict(theta, **{key: value})
    if key == "peak_start":
        changed["peak_end"] = 3
    moved = FAM.solve(changed).u_star
    assert abs(moved - float(expectimax(changed))) <= TOL
    assert abs(moved - u) > 1e-6, key


def test_bankruptcy_is_absorbing_and_penalised():
    """With no stock, no cash and an overhead, the first night is bankrupt whatever is done."""
    theta = dict(BASE, horizon=3, initial_stock=0, initial_cash=0, overhead=2, bankruptcy_penalty=7,
                 demand_weights=weights_table(np.random.default_rng(3), 3))
    sol = FAM.solve(theta)
    assert sol.u_star == sol.u_idle == sol.u_default == -2 - 7  # e = −overhead, then the penalty
    for plan in (sol.policy, FAM.default_policy(theta)):
        episode = FAM.simulate(theta, plan, 5)
        assert episode.utility == -9 and len(episode.decisions) == 1
        assert episode.calls[-1] == {"tool": "end_day", "arguments": {}}


# ---------------------------------------------------------------------------------------------
# The reference simulator.


def _policies(theta, rng):
    return {"star": FAM.solve(theta).policy, "default": FAM.default_policy(theta), "idle": FAM.idle_policy(theta),
            "random": FAM.random_policy(theta, rng)}


SIM_THETAS = [FAM.sample(FAM.Params(size=size, horizon=horizon), np.random.default_rng(seed))
              for seed, size, horizon in ((11, 5, 30), (12, 8, 40), (13, 4, 25), (14, 10, 21), (15, 6, 60))]


def test_sim_thetas_cover_both_lead_times():
    assert {t["lead_time"] for t in SIM_THETAS} == {0, 1}


@pytest.mark.parametrize("theta", SIM_THETAS + TINY[:6], ids=[_id(t) for t in SIM_THETAS + TINY[:6]])
def test_simulate_matches_plain_replay(theta):
    rng = np.random.default_rng(99)
    for name, policy in _policies(theta, rng).items():
        for seed in (0, 1, 7, 12345, 2**31 - 1):
            episode = FAM.simulate(theta, policy, seed)
            tickets = ec.World.ticket_path(theta, seed)
            assert len(tickets) == theta["horizon"] and all(0 <= r < 2**30 for r in tickets)
            utility, decisions, calls, _, _ = play(theta, policy, tickets)
            assert episode.utility == utility, (name, seed)
            assert episode.decisions == decisions
            assert episode.calls == calls
            assert len(calls) <= FAM.turn_budget(theta) - 10


def test_simulate_refuses_a_plan_entry_it_cannot_play():
    theta = dict(TINY[0], initial_stock=0, initial_cash=2)  # order fee 2: nothing can be bought on day 0
    plan = FAM.idle_policy(theta)
    plan[0, 0, 2] = (1, 1, 0)
    for seed in (0, 1, 2):
        with pytest.raises(ValueError):
            FAM.simulate(theta, plan, seed)
    with pytest.raises(ValueError):
        FAM.evaluate(theta, plan)
    plan[0, 0, 2] = (0, 1, 0)
    assert FAM.simulate(theta, plan, 0).decisions[0] == (0, 1, 0)


def test_plan_format_names_the_layout():
    text = FAM.plan_format
    for phrase in ("[horizon, capacity + 1, cash_cap + 1, 3]", "price_levels", "ad_costs", "s + q ≤ capacity"):
        assert phrase in text
    theta = SIM_THETAS[0]  # a plan written from the text alone: order 1 whenever affordable, high price, no ads
    plan = np.zeros((theta["horizon"], theta["capacity"] + 1, theta["cash_cap"] + 1, 3), dtype=np.int64)
    plan[..., 1] = 2
    for s, c in itertools.product(range(theta["capacity"]), range(theta["cash_cap"] + 1)):
        plan[:, s, c, 0] = 1 if theta["order_fee"] + theta["unit_cost"] <= c else 0
    value = FAM.evaluate(theta, plan)
    assert math.isfinite(value) and value <= FAM.solve(theta).u_star + TOL
    assert len(FAM.simulate(theta, plan, 0).calls) >= 1


def test_ticket_path_is_deterministic_and_demands_are_in_support():
    theta = SIM_THETAS[1]
    assert ec.World.ticket_path(theta, 5) == ec.World.ticket_path(theta, 5)
    assert len({tuple(ec.World.ticket_path(theta, s)) for s in range(20)}) == 20
    for day, ticket in enumerate(ec.World.ticket_path(theta, 3)):
        for p, a in itertools.product(range(3), range(3)):
            weights = theta["demand_weights"][traffic(theta, day)][p][a]
            d = ec.World.demand_of(weights, ticket)
            assert d == ticket_demand(weights, ticket) and weights[d] > 0


@pytest.mark.parametrize("which", [0, 2])
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
    params = FAM.Params(size=9, horizon=100)
    a = FAM.sample(params, np.random.default_rng(5))
    assert a == FAM.sample(params, np.random.default_rng(5))
    others = [FAM.sample(params, np.random.default_rng(s)) for s in (6, 7, 8)]
    assert all(o != a for o in others) and len({repr(sorted(o.items())) for o in others}) == 3


@pytest.mark.parametrize("size,horizon", [(2, 2), (4, 60), (8, 120), (12, 365), (16, 365)])
def test_sample_respects_params(size, horizon):
    rng = np.random.default_rng(size * 1000 + horizon)
    for _ in range(6):
        theta = FAM.sample(FAM.Params(size=size, horizon=horizon), rng)
        assert set(theta) == set(ec.World.PARAMS)
        assert theta["horizon"] == horizon and theta["capacity"] == size and theta["lead_time"] in (0, 1)
        assert 0 < theta["unit_cost"] < theta["price_levels"][0] < theta["price_levels"][1] < theta["price_levels"][2]
        assert theta["ad_costs"][0] == 0 < theta["ad_costs"][1] < theta["ad_costs"][2]
        assert 0 <= theta["initial_stock"] <= size and 0 <= theta["initial_cash"] <= theta["cash_cap"]
        assert theta["cash_cap"] >= theta["order_fee"] + theta["unit_cost"] * size  # a full order fits under the cap
        assert 0 <= theta["peak_start"] < theta["peak_end"] <= horizon and set(theta["weekday_boost"]) <= {0, 1}
        for key in ("order_fee", "overhead", "bankruptcy_penalty"):
            assert theta[key] >= 1
        assert theta["holding_cost"] in (0, 1)
        assert len(theta["demand_weights"]) == 3
        for row in theta["demand_weights"]:
            for cell in row:
                assert len(cell) == 3
                for weights in cell:
                    assert len(weights) == size + 1 and sum(weights) == 1000
                    assert all(type(w) is int and w >= 0 for w in weights)
        for key, value in theta.items():
            if key not in ("demand_weights",):
                assert type(value) is int or all(type(v) is int for v in value), key


SANITY = [FAM.sample(FAM.Params(size=size, horizon=horizon), np.random.default_rng(seed))
          for seed, size, horizon in ((21, 6, 60), (22, 10, 90), (23, 4, 30), (24, 12, 120))]


@pytest.mark.parametrize("theta", SANITY, ids=[_id(t) for t in SANITY])
def test_u_star_dominates_reference_and_random_policies(theta):
    sol = FAM.solve(theta)
    assert sol.u_star >= sol.u_default - TOL and sol.u_star >= sol.u_idle - TOL
    rng = np.random.default_rng(7)
    randoms = [FAM.evaluate(theta, FAM.random_policy(theta, rng)) for _ in range(12)]
    assert max(randoms) <= sol.u_star + TOL and len(set(randoms)) > 1


def test_random_policy_is_seeded_and_valid():
    theta = SANITY[0]
    a = FAM.random_policy(theta, np.random.default_rng(3))
    assert (a == FAM.random_policy(theta, np.random.default_rng(3))).all()
    for day, s, c in itertools.product(range(theta["horizon"]), range(theta["capacity"] + 1),
                                       range(theta["cash_cap"] + 1)):
        assert tuple(int(x) for x in a[day, s, c]) in actions(theta, s, c)
    assert 0.4 <= (a[..., 0] == 0).mean() < 1 and set(np.unique(a[..., 1:])) == {0, 1, 2}


def test_top_of_the_knob_ranges_solves():
    (_, hi_size), (_, hi_horizon) = FAM.knob_ranges["size"], FAM.knob_ranges["horizon"]
    assert hi_horizon == 365
    theta = dict(FAM.sample(FAM.Params(size=hi_size, horizon=hi_horizon), np.random.default_rng(0)), lead_time=1)
    assert FAM.solve(theta).certificate.gap <= 1e-9  # its time is in bench/solve_scaling.py, not a test


@pytest.mark.parametrize("knobs", [{"size": 1}, {"size": 17}, {"horizon": 1}, {"horizon": 366},
                                   {"size": "many"}])
def test_params_out_of_bounds_raise(knobs):
    with pytest.raises(ValidationError):
        FAM.Params(**knobs)
    with pytest.raises(InvalidParams):
        FAM.params(knobs)


def test_knob_ranges_lie_inside_params():
    for knob, (lo, hi) in FAM.knob_ranges.items():
        field = FAM.Params.model_fields[knob]
        bounds = {type(m).__name__: m for m in field.metadata}
        assert bounds["Ge"].ge <= lo <= hi <= bounds["Le"].le


# ---------------------------------------------------------------------------------------------
# The rendered module, in process.


def test_noisy_probe_is_cheap_deterministic_and_changes_nothing():
    out, _ = generated(FAM, 1)
    name = out.tool_name
    theta = SIM_THETAS[0]
    assert FAM.tool("estimate_demand").noisy and FAM.tool("estimate_demand").turn_cost == 1
    assert FAM.tool("get_demand_forecast").turn_cost == 2 and not FAM.tool("get_demand_forecast").noisy
    assert "estimate" in FAM.tool("estimate_demand").description
    env, twin = env_of(FAM, 1, theta, "A", 4, budget=1000), env_of(FAM, 1, theta, "A", 4, budget=1000)
    first, again = env.call(name("estimate_demand"), {}), env.call(name("estimate_demand"), {})
    assert first == twin.call(name("estimate_demand"), {})  # same seed, same call number
    assert first["turns_left"] - again["turns_left"] == 1
    assert first["estimates"] != again["estimates"]
    exact = env.call(name("get_demand_forecast"), {})
    assert again["turns_left"] - exact["turns_left"] == 2
    means = [sum(d * p for d, p in enumerate(row["probabilities"])) for row in exact["demand_distributions"]]
    errors = [abs(e["estimated_mean_demand"] - m) for e, m in zip(first["estimates"], means)]
    assert 0 < max(errors) < 8 and len(errors) == 27
    other_seed = env_of(FAM, 1, theta, "A", 5, budget=1000)
    assert other_seed.call(name("estimate_demand"), {})["estimates"] != first["estimates"]
    # the dynamics and the utility ignore the estimates entirely
    plan = FAM.solve(theta).policy
    episode = FAM.simulate(theta, plan, 4)
    for call in episode.calls:
        assert env.call(name(call["tool"]), call["arguments"])["ok"]
        if call["tool"] == "end_day" and not env.done:
            assert env.call(name("estimate_demand"), {})["ok"]
    assert env.done and env.outcome()["utility"] == episode.utility


def test_invalid_calls_leave_state_unchanged():
    out, _ = generated(FAM, 0)
    name = out.tool_name
    theta = dict(SIM_THETAS[0], initial_stock=1, initial_cash=10, order_fee=3, unit_cost=2)
    env = env_of(FAM, 0, theta)
    assert env.call(name("place_order"), {"quantity": 2})["order_cost"] == 3 + 4
    for tool, args in (("place_order", {"quantity": 3}),  # 5 units cost 13 > 10
                       ("place_order", {"quantity": theta["capacity"]}),  # beyond the warehouse
                       ("set_price", {"level": 3}), ("set_ads", {"level": -1}), ("view_orders", {"limit": 0}),
                       ("end_day", {"x": 1}), ("no_such_tool", {})):
        refused(env, name(tool) if tool != "no_such_tool" else tool, args)  # the world's use a turn, malformed ones none
    assert env.call(name("cancel_order"), {})["ordered_today"] == 0
    before = env.state_digest()
    assert env.call(name("cancel_order"), {})["ok"] is False and env.state_digest() == before
    assert env.call(name("view_stock"), {})["ordered_today"] == 0


def test_bankruptcy_ends_the_episode_in_the_module():
    out, _ = generated(FAM, 2)
    name = out.tool_name
    theta = dict(SIM_THETAS[2], initial_stock=0, initial_cash=5, overhead=3, ad_costs=[0, 2, 4], holding_cost=0)
    env = env_of(FAM, 2, theta, "I", 0)
    assert env.call(name("set_ads"), {"level": 2})["ok"]
    closed = env.call(name("end_day"), {})
    assert closed["bankrupt"] is True and closed["cash"] == 5 - 4 - 3 and env.done
    assert env.outcome()["utility"] == (5 - 4 - 3) - 5 - theta["bankruptcy_penalty"]
    assert env.call(name("view_cash"), {})["ok"] is False  # the episode is over


def test_sweep_moves_cash_to_the_owner_and_it_still_counts():
    out, _ = generated(FAM, 3)
    name = out.tool_name
    theta = dict(TINY[2], horizon=3)  # cash cap 5
    plan = FAM.solve(theta).policy
    for seed in range(30):
        episode = FAM.simulate(theta, plan, seed)
        env = env_of(FAM, 3, theta, "I", seed)
        owner = 0
        for call in episode.calls:
            r = env.call(name(call["tool"]), call["arguments"])
            assert r["ok"]
            if call["tool"] == "end_day" and not r.get("bankrupt"):
                assert r["cash"] <= theta["cash_cap"]
                owner += r["transferred_to_owner"]
        assert env.outcome()["utility"] == episode.utility
        assert env.call(name("view_cash"), {})["ok"] is False
        if owner:
            break
    assert owner > 0


def test_running_out_of_turns_closes_the_remaining_days():
    out, _ = generated(FAM, 4)
    name = out.tool_name
    theta = SIM_THETAS[3]
    env = env_of(FAM, 4, theta, "I", 2, budget=3)
    assert env.call(name("set_price"), {"level": 2})["ok"]
    assert env.call(name("place_order"), {"quantity": 1})["ok"]
    assert env.call(name("view_calendar"), {})["turns_left"] == 0 and env.done
    # the order was dropped and every day closed at the high price without ads
    table = np.zeros_like(FAM.idle_policy(theta))
    table[..., 1] = 2
    assert env.outcome()["utility"] == FAM.simulate(theta, table, 2).utility


def test_instructions_hide_theta_in_presentation_a():
    out, _ = generated(FAM, 5)
    theta = SIM_THETAS[4]
    a, i = env_of(FAM, 5, theta, "A").instruction, env_of(FAM, 5, theta, "I").instruction
    assert f"Unit cost {theta['unit_cost']}, order fee {theta['order_fee']}" in i
    assert "Unit cost" not in a and "normal / middle / none" not in a and "normal / middle / none" in i
    for tool in ("get_price_list", "get_supplier_terms", "get_cost_sheet", "get_ad_rates", "get_traffic_calendar",
                 "get_demand_forecast", "estimate_demand"):
        assert out.tool_name(tool) in a
    other = dict(theta, unit_cost=theta["unit_cost"] + 1, price_levels=[x + 1 for x in theta["price_levels"]],
                 peak_start=0, lead_time=1 - theta["lead_time"], overhead=theta["overhead"] + 2)
    assert {"unit_cost", "price_levels", "peak_start", "lead_time", "overhead"} <= set(FAM.hidden)
    assert env_of(FAM, 5, other, "A").instruction == a and env_of(FAM, 5, other, "I").instruction != i


# ---------------------------------------------------------------------------------------------
# The real gates.


def test_gates_admit_most_models():
    verdicts = gated(FAM).verdicts
    for presentation in ("I", "A"):
        mine = [v for v in verdicts if v.candidate.presentation == presentation]
        assert len(mine) == 6 and sum(v.admitted for v in mine) >= 5, [v.reason for v in mine]
    for v in verdicts:
        assert v.admitted or failed([v]) == {"default_band"}, v.reason


def test_a_changed_overhead_is_rejected():
    old = '("overhead", -p["overhead"])'
    verdicts = mutant_verdicts(FAM, gated(FAM), old, old.replace("-p", "-2 * p"))
    assert "default_band" not in failed(verdicts)  # the candidates were played
    assert verdicts and all(failed([v]) & {"replay_agreement", "dynamics_agreement"} for v in verdicts)


# ---------------------------------------------------------------------------------------------
# θ that solve() refuses: what it cannot solve exactly.


@pytest.mark.parametrize("key,change", [
    pytest.param("unit_cost", lambda t: 0, id="unit_cost-zero"),
    pytest.param("holding_cost", lambda t: 10**6, id="holding_cost-huge"),
    pytest.param("unit_cost", lambda t: t["unit_cost"] + 0.5, id="unit_cost-fraction"),
    pytest.param("demand_weights", lambda t: bumped(t["demand_weights"], (0, 0, 0, 0), 0.5),
                 id="demand_weights-fraction"),
    pytest.param("cash_cap", lambda t: 10**5, id="cash_cap-size"),
])
def test_solve_refuses_theta_not_of_the_declared_form(key, change):
    """A fraction where an integer is declared, or a size past the documented limit, is InvalidParams
    naming the field, raised before anything is allocated."""
    theta = smallest_theta(FAM)
    with pytest.raises(InvalidParams, match=r"ecommerce θ\['%s'\]" % key):
        FAM.solve(dict(theta, **{key: change(theta)}))


# ---------------------------------------------------------------------------------------------
# Decision rewards: A* = Q* − V* of the day's committed (order, price, ads), from the plain recursion.


def _values(theta):
    """V*(t, s, c), Q*(t, s, c; q, p, a) and I^{p,a}(t, s, c), the value of closing every remaining day
    at price p and ads a with no orders (exact)."""

    @functools.cache
    def best(day, s, c):
        if day == theta["horizon"]:
            return Fraction(c)
        return max(outcome_value(theta, day, s, c, q, p, a, best) for q, p, a in actions(theta, s, c))

    @functools.cache
    def idle(p, a, day, s, c):
        if day == theta["horizon"]:
            return Fraction(c)
        return outcome_value(theta, day, s, c, 0, p, a, functools.partial(idle, p, a))

    return best, (lambda day, s, c, q, p, a: outcome_value(theta, day, s, c, q, p, a, best)), idle


ADVANTAGE_THETAS = TINY[:3] + TINY[6:9]


@pytest.mark.parametrize("theta", ADVANTAGE_THETAS, ids=[_id(t) for t in ADVANTAGE_THETAS])
def test_advantage_of_every_action_and_of_running_out_is_q_minus_v(theta):
    best, q_star, idle = _values(theta)
    values = FAM.decision_values(theta)
    start = (theta["initial_stock"], theta["initial_cash"])
    assert abs(values.u_star - float(best(0, *start) - theta["initial_cash"])) <= TOL
    end_day = {"tool": "end_day", "arguments": {}}
    for day, s, c in itertools.product(range(theta["horizon"]), range(theta["capacity"] + 1),
                                       range(theta["cash_cap"] + 1)):
        v = best(day, s, c)
        for q, p, a in actions(theta, s, c):
            before = (day, s, c, q, p, a, False)
            got = FAM.advantage(theta, values, before, end_day, None)
            assert abs(got - float(q_star(day, s, c, q, p, a) - v)) <= TOL, before
            assert FAM.advantage(theta, values, before, {"tool": "set_price", "arguments": {"level": p}}, None) == 0
            if q == 0:
                got = FAM.advantage(theta, values, before, None, None)
                assert abs(got - float(idle(p, a, day, s, c) - v)) <= TOL, before
        assert FAM.advantage(theta, values, (day, s, c, 0, 1, 0, True), end_day, None) == 0.0  # bankrupt: over


@pytest.mark.parametrize("theta", ADVANTAGE_THETAS, ids=[_id(t) for t in ADVANTAGE_THETAS])
def test_q_of_one_state_is_the_evaluators_sum_to_the_bit(theta):
    """Grading reads Q* one state at a time (`_Process.outcome`: U only where the day's demands
    lead, kept per state and action); it is the evaluator's `outcomes` over every demand, bit for bit."""
    values = FAM.decision_values(theta)
    proc = values.proc
    for day, s, c in itertools.product(range(theta["horizon"]), range(theta["capacity"] + 1),
                                       range(theta["cash_cap"] + 1)):
        state = s * proc.n_cash + c
        for q, p, a in actions(theta, s, c):
            pa = p * ec.LEVELS + a
            whole = proc.outcomes(day, values.optimal[day + 1], np.array([state]), np.array([q]), np.array([pa]))
            assert values.q(day, state, q, pa) == float(whole[0]) == values.q(day, state, q, pa), (day, s, c, q, pa)


@pytest.mark.parametrize("theta", ADVANTAGE_THETAS[:4], ids=[_id(t) for t in ADVANTAGE_THETAS[:4]])
def test_a_replayed_episode_scores_the_close_and_the_run_out(theta):
    """Day 0: high price, low ads, one unit ordered if the cash pays it, then the close; day 1: low
    price, then the episode is finished (run out). The close gets Q* − V* of day 0's state on the
    episode's tickets, the settings and the order 0, the finish I^{low, low ads} − V* of day 1."""
    best, q_star, idle = _values(theta)
    s, c = theta["initial_stock"], theta["initial_cash"]
    q = 1 if s < theta["capacity"] and order_cost(theta, 1) <= c else 0
    calls = ([{"tool": "set_price", "arguments": {"level": 2}}, {"tool": "set_ads", "arguments": {"level": 1}}]
             + [{"tool": "place_order", "arguments": {"quantity": 1}}] * q
             + [{"tool": "end_day", "arguments": {}}, {"tool": "set_price", "arguments": {"level": 0}}])
    for seed in range(3):  # seeds 1 and 2 end some of these θ in bankruptcy at the close
        config = {"params": theta, "presentation": "I", "episode_seed": seed, "turn_budget": FAM.turn_budget(theta)}
        steps = step_advantages(FAM, config, calls)
        ticket = ec.World.ticket_path(theta, seed)[0]
        broke, _, _, after = step(theta, s, c, q, 2, 1, ticket_demand(theta["demand_weights"][traffic(theta, 0)][2][1],
                                                                     ticket))
        expected = [0.0] * (2 + q) + [q_star(0, s, c, q, 2, 1) - best(0, s, c), 0.0]
        # bankrupt at the close: the episode is over, the last call refused and nothing runs out
        finish = 0 if broke else idle(0, 1, 1, *after) - best(1, *after)
        assert len(steps.per_call) == len(expected)
        for got, want in zip(steps.per_call, expected):
            assert abs(got - float(want)) <= TOL, (seed, steps.per_call, expected)
        assert abs(steps.finish - float(finish)) <= TOL, (seed, steps.finish, finish)


# ---------------------------------------------------------------------------------------------
# Text and observations (issue 16): a count of one takes the singular; the end of a day shows what
# arrives the next morning.


def test_one_unit_in_the_instruction_is_singular_and_end_day_shows_what_arrives_tomorrow():
    import family_kit as kit
    from vhd.tasks.stages.sample import draw
    theta = dict(draw(FAM, 0)[1], initial_stock=1, lead_time=1)
    vocab = generated(FAM, 0)[1].SKIN["vocab"]
    env = env_of(FAM, 0, theta)
    assert f"Day 0 opens with 1 {vocab['unit_one']} in the warehouse" in env.instruction
    order, day = kit.play(FAM, 0, env, [{"tool": "place_order", "arguments": {"quantity": 2}},
                                        {"tool": "end_day", "arguments": {}}])
    assert order["ok"] and day["ok"], (order, day)
    assert day["arriving_tomorrow"] == 2 and day["on_hand"] == theta["initial_stock"] - day["sold"]
    stock = kit.play(FAM, 0, env, [{"tool": "view_stock", "arguments": {}}])[0]
    assert stock["on_hand"] == day["on_hand"] + 2 and stock["in_transit"] == 0
    quiet = kit.play(FAM, 0, env, [{"tool": "end_day", "arguments": {}}])[0]
    assert quiet["arriving_tomorrow"] == 0


# ---------------------------------------------------------------------------------------------
# Schemas fitted to the instance (issue 16: the agent should not learn the real range from refusals).


def test_order_and_listing_arguments_are_bounded_by_the_instance():
    """An order stops at the warehouse capacity (both instructions tell it) and, in I, at what the
    cash cap can pay with the fee (A tells neither the fee nor the unit cost, so its schema does not
    move with them); the order and sales listings stop at the H days. Past a bound the call is
    refused with the schema's message."""
    out, _ = generated(FAM, 1)
    name = out.tool_name

    def bounds(env):
        schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
        return (schemas[name("place_order")]["quantity"]["maximum"], schemas[name("view_orders")]["limit"]["maximum"],
                schemas[name("view_sales")]["last_days"]["maximum"])

    for theta in SIM_THETAS[:3]:  # the sampler's cash cap pays a full warehouse and the fee
        for presentation in ("I", "A"):
            env = env_of(FAM, 1, theta, presentation)
            assert bounds(env) == (theta["capacity"], theta["horizon"], theta["horizon"])
            before = env.state_digest()
            refused = env.call(name("place_order"), {"quantity": theta["capacity"] + 1})
            assert refused["ok"] is False and f"must be <= {theta['capacity']}" in refused["error"]
            listing = env.call(name("view_sales"), {"last_days": theta["horizon"] + 1})
            assert listing["ok"] is False and f"must be <= {theta['horizon']}" in listing["error"]
            assert env.state_digest() == before
    # a cash cap of 17 with a fee of 4 pays at most (17 − 4) // 3 = 4 units at 3 each: fewer than the 5 the warehouse holds
    theta = dict(SIM_THETAS[0], cash_cap=17, order_fee=4, unit_cost=3, initial_cash=17, initial_stock=0)
    assert theta["capacity"] == 5
    told, probed = env_of(FAM, 1, theta, "I"), env_of(FAM, 1, theta, "A")
    assert bounds(told)[0] == 4 and bounds(probed)[0] == 5
    refused = told.call(name("place_order"), {"quantity": 5})
    assert refused["ok"] is False and "must be <= 4" in refused["error"]
    assert told.call(name("place_order"), {"quantity": 4})["order_cost"] == 4 + 3 * 4 == 16
    assert "would cost more than the cash" in probed.call(name("place_order"), {"quantity": 5})["error"]  # the World's rule


def test_a_world_that_doubles_the_capacity_is_rejected():
    """The self-test found this surviving: the boundary orders of a full warehouse were refused
    by the cash check first. One unit over the free room on day 0 is the cheapest order the
    capacity refuses (`boundary_calls`): wherever the opening cash pays it, the mutant is caught.
    (Where it does not, reaching the capacity with cash to spare takes sales first.)"""
    old = 'if on_hand + in_transit + pending + quantity > p["capacity"]:'
    run = gated(FAM)
    verdicts = [v for which in range(len(run.outputs))
                for v in mutant_verdicts(FAM, run, old, old.replace('p["capacity"]', '2 * p["capacity"]'), which)]
    def pays(theta):
        return theta["order_fee"] + theta["unit_cost"] * (theta["capacity"] - theta["initial_stock"] + 1) <= \
            theta["initial_cash"]

    paid = [v for v in verdicts if pays(v.candidate.model.theta)]
    assert len(verdicts) == 12 and len(paid) >= 8 and not any(v.admitted for v in paid)
    assert "reference_agreement" in failed(paid)


def test_the_kept_balance_is_the_ledgers_sum_and_in_transit_the_orders():
    """The World keeps the cash and the units in transit in its state table instead of summing the
    ledger and the orders on every call (issue 31: grading replays every call): after every call of
    random and default plays they agree."""
    for world in worlds_after_each_call(FAM):
        t = world.t
        assert world._cash() == world.db.execute(
            f"SELECT COALESCE(SUM(amount), 0) FROM {t['ledger']}").fetchone()[0]
        assert world._in_transit() == world.db.execute(
            f"SELECT COALESCE(SUM(quantity), 0) FROM {t['orders']} WHERE status = 'in transit'").fetchone()[0]
