"""Cross-checks of the dynamic pricing family against plain-Python brute force, its rendered
module and the real admission gates.

Written from the docstring's Model section, not from the solver: a sale in period t at level a
has probability (buy_early[a] · (H − 1 − t) + buy_late[a] · t) / (1000 · (H − 1)) and happens iff
that period's ticket (random.Random(episode_seed).randrange(1000 · (H − 1)), in order) is below
the numerator; a sale earns prices[a]; the season ends when the stock is gone; units left after
the last period earn salvage_value each. The brute force is an expectimax over the scenario tree
in Fractions, the exact expectation of a plan over every ticket class of every period, and the
maximum over every plan table. The only layout assumption: a plan is [period, units left] →
action, action len(prices) = sales closed.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from fractions import Fraction

import numpy as np
import pytest
from pydantic import ValidationError

from family_kit import env_of, failed, gated, generated, mutant_verdicts, refused
from vhd.mechanisms import dynamic_pricing as dp
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.tasks.grading.step_advantages import step_advantages
from theta_cases import bumped, smallest_theta

FAM = registry.get("dynamic_pricing")
TOL = 1e-9


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in plain Python.


def numerator(theta, t, a):
    if a == len(theta["prices"]):
        return 0
    h = theta["horizon"]
    return theta["buy_early"][a] * (h - 1 - t) + theta["buy_late"][a] * t


def denominator(theta):
    return 1000 * (theta["horizon"] - 1)


def sale_probability(theta, t, a):
    return Fraction(numerator(theta, t, a), denominator(theta))


def expectimax(theta, t=0, n=None):
    """The optimum over the scenario tree: every action, then sale or no sale (no tables)."""
    n = theta["capacity"] if n is None else n
    if n == 0:
        return Fraction(0)
    if t == theta["horizon"]:
        return theta["salvage_value"] * Fraction(n)
    best = None
    for a in range(len(theta["prices"]) + 1):
        q = sale_probability(theta, t, a)
        value = (1 - q) * expectimax(theta, t + 1, n)
        if q:
            value += q * (theta["prices"][a] + expectimax(theta, t + 1, n - 1))
        best = value if best is None or value > best else best
    return best


def tickets_of(theta, seed):
    rng = random.Random(seed)
    return [rng.randrange(denominator(theta)) for _ in range(theta["horizon"])]


def play(theta, plan, tickets):
    """Replay a plan on a ticket path: (utility, canonical calls)."""
    closed = len(theta["prices"])
    left, posted, utility, calls = theta["capacity"], closed, 0, []
    for t in range(theta["horizon"]):
        a = int(plan[t][left])
        if a != posted:
            calls.append({"tool": "close_sales", "arguments": {}} if a == closed
                         else {"tool": "set_price", "arguments": {"level": a}})
            posted = a
        calls.append({"tool": "end_period", "arguments": {}})
        if tickets[t] < numerator(theta, t, a):
            utility += theta["prices"][a]
            left -= 1
            if left == 0:
                return utility, calls
    return utility + theta["salvage_value"] * left, calls


def ticket_classes(theta, t):
    """The tickets of period t split where some action's sale rule changes: (representative, probability)."""
    d = denominator(theta)
    cuts = sorted({0, d} | {min(d, numerator(theta, t, a)) for a in range(len(theta["prices"]))})
    return [(lo, Fraction(hi - lo, d)) for lo, hi in itertools.pairwise(cuts) if hi > lo]


def expectation(theta, plan):
    """Exact expected utility of a plan: every ticket class of every period, weighted."""
    total = Fraction(0)
    for path in itertools.product(*(ticket_classes(theta, t) for t in range(theta["horizon"]))):
        prob = math.prod((p for _, p in path), start=Fraction(1))
        total += prob * play(theta, plan, [x for x, _ in path])[0]
    return total


def all_plans(theta):
    """Every plan table (column 0 held at 'closed': it is never read)."""
    closed, cap, h = len(theta["prices"]), theta["capacity"], theta["horizon"]
    for body in itertools.product(range(closed + 1), repeat=h * cap):
        yield [[closed] + list(body[t * cap:(t + 1) * cap]) for t in range(h)]


# ---------------------------------------------------------------------------------------------
# Instances.


def make(prices, early, late, salvage, horizon, capacity):
    return {"horizon": horizon, "capacity": capacity, "prices": list(prices), "buy_early": list(early),
            "buy_late": list(late), "salvage_value": salvage}


HAND = [
    make([10, 20], [800, 300], [900, 600], 0, 3, 2),
    make([5], [500], [500], 10, 2, 1),               # salvage beats the only price: keep sales closed
    make([10, 30], [900, 100], [900, 800], 0, 3, 1),  # late customers pay more: wait for them
    make([10, 20], [600, 300], [600, 300], 2, 3, 2),  # myopic tie between the levels
    make([8, 12], [0, 0], [0, 0], 3, 3, 2),            # nobody buys
    make([8, 12], [1000, 1000], [1000, 1000], 1, 2, 3),  # everyone buys; more stock than periods
    make([6, 9, 15], [700, 500, 200], [300, 200, 100], 2, 4, 2),  # late customers fewer (not sampled)
    make([4, 7, 11], [950, 600, 150], [950, 800, 500], 3, 4, 3),
]


def random_instances(seed, count):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        k, h, c = int(rng.integers(1, 4)), int(rng.integers(2, 5)), int(rng.integers(1, 4))
        prices = sorted(int(x) for x in rng.choice(np.arange(1, 40), size=k, replace=False))
        early = sorted((int(x) for x in rng.integers(0, 1001, size=k)), reverse=True)
        late = sorted((int(x) for x in rng.integers(0, 1001, size=k)), reverse=True)
        out.append(make(prices, early, late, int(rng.integers(0, prices[0] + 3)), h, c))
    return out


SAMPLED = [FAM.sample(FAM.Params(size=s, horizon=3), np.random.default_rng(seed))
           for seed, s in ((1, 3), (2, 2), (3, 3))]
TINY = HAND + random_instances(2024, 14) + SAMPLED
SIM = [FAM.sample(FAM.Params(size=s, horizon=h), np.random.default_rng(k)) for k, s, h in
       ((1, 3, 24), (2, 6, 30), (3, 12, 40), (4, 8, 60))]


def _id(theta):
    return f"K{len(theta['prices'])}-h{theta['horizon']}-c{theta['capacity']}-s{theta['salvage_value']}"


# ---------------------------------------------------------------------------------------------
# Solver and evaluator against brute force.


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_u_star_equals_expectimax_and_plan_expectation(theta):
    sol = FAM.solve(theta)
    exact = expectimax(theta)
    assert abs(sol.u_star - float(exact)) <= TOL, (sol.u_star, float(exact))
    assert sol.policy.shape == (theta["horizon"], theta["capacity"] + 1)
    assert np.issubdtype(sol.policy.dtype, np.integer)
    assert ((0 <= sol.policy) & (sol.policy <= len(theta["prices"]))).all()
    assert expectation(theta, sol.policy.tolist()) == exact
    assert abs(FAM.evaluate(theta, sol.policy) - sol.u_star) <= TOL
    assert sol.certificate.status == "optimal" and sol.certificate.gap == 0.0
    rng = np.random.default_rng(len(TINY))
    for policy in (FAM.default_policy(theta), FAM.idle_policy(theta), FAM.random_policy(theta, rng)):
        value = expectation(theta, policy.tolist())
        assert abs(FAM.evaluate(theta, policy) - float(value)) <= TOL and value <= exact
    assert abs(sol.u_default - float(expectation(theta, FAM.default_policy(theta).tolist()))) <= TOL
    assert sol.u_idle == theta["salvage_value"] * theta["capacity"]


ENUM = [HAND[0], HAND[2], HAND[3], make([3, 9], [900, 400], [700, 600], 1, 3, 2),
        make([5, 8, 13], [800, 500, 100], [900, 700, 400], 2, 2, 2)]


@pytest.mark.parametrize("theta", ENUM, ids=[_id(t) for t in ENUM])
def test_u_star_is_the_best_of_every_plan(theta):
    best = max(expectation(theta, plan) for plan in all_plans(theta))
    assert best == expectimax(theta)
    assert abs(FAM.solve(theta).u_star - float(best)) <= TOL


def test_structural_cases_of_the_hand_instances():
    # the only price is below the salvage value: π* keeps sales closed, the default loses
    sol = FAM.solve(HAND[1])
    assert (sol.policy[:, 1] == 1).all() and sol.u_star == 10 and sol.u_default < 10
    # late customers take the high price at 80 %: π* waits at level 1 from period 0 on
    sol = FAM.solve(HAND[2])
    assert sol.policy[:, 1].tolist() == [1, 1, 1] and sol.u_star > FAM.solve(dict(HAND[2], buy_late=[900, 100])).u_star
    # nobody buys: everything is salvaged whatever the plan
    assert FAM.solve(HAND[4]).u_star == FAM.solve(HAND[4]).u_default == 6
    # everyone buys at the top price: one sale a period, the third unit is salvaged
    assert FAM.solve(HAND[5]).u_star == 12 + 12 + 1


def test_default_is_the_myopic_fixed_price_and_idle_never_opens():
    theta = HAND[0]  # 10 · 1700 = 17000 < 20 · 900 = 18000: level 1
    assert (FAM.default_policy(theta) == 1).all() and FAM.default_policy(theta).shape == (3, 3)
    assert (FAM.default_policy(HAND[3]) == 0).all()  # a tie goes to the lowest level
    assert (FAM.default_policy(HAND[7]) == 1).all()  # 4·1900, 7·1400, 11·650: level 1
    for theta in TINY:
        scores = [p * (e + late) for p, e, late in zip(theta["prices"], theta["buy_early"], theta["buy_late"])]
        level = min(a for a, s in enumerate(scores) if s == max(scores))
        assert (FAM.default_policy(theta) == level).all()
        assert (FAM.idle_policy(theta) == len(theta["prices"])).all()


def test_solver_depends_on_every_parameter():
    theta = HAND[7]
    base = FAM.solve(theta).u_star
    for change in ({"salvage_value": 6}, {"prices": [4, 7, 14]}, {"buy_early": [950, 600, 400]},
                   {"buy_late": [950, 500, 500]}, {"horizon": 3}, {"capacity": 2}):
        other = dict(theta, **change)
        moved = FAM.solve(other).u_star
        assert abs(moved - base) > 1e-6, change
        assert abs(moved - float(expectimax(other))) <= TOL, change


def test_evaluate_validates_plans_and_ignores_column_zero():
    theta = HAND[7]
    good = FAM.random_policy(theta, np.random.default_rng(1))
    other = good.copy()
    other[:, 0] = 0
    assert FAM.evaluate(theta, other) == FAM.evaluate(theta, good)
    for bad in (good[:, 1:], good[:-1], good.astype(float), np.where(good == 0, -1, good), good + 4):
        with pytest.raises(ValueError):
            FAM.evaluate(theta, bad)


def test_plan_format_is_enough_to_write_a_plan():
    assert "[horizon, capacity + 1]" in FAM.plan_format and "len(prices)" in FAM.plan_format
    theta = HAND[7]
    closed = np.full((theta["horizon"], theta["capacity"] + 1), len(theta["prices"]))
    assert FAM.evaluate(theta, closed) == 3 * 3
    level_two = np.full((theta["horizon"], theta["capacity"] + 1), 2)
    assert abs(FAM.evaluate(theta, level_two) - float(expectation(theta, level_two.tolist()))) <= TOL


def test_random_policy_is_seeded_and_covers_every_action():
    a = FAM.random_policy(SIM[2], np.random.default_rng(3))
    assert (a == FAM.random_policy(SIM[2], np.random.default_rng(3))).all()
    assert set(np.unique(a).tolist()) == set(range(len(SIM[2]["prices"]) + 1))
    theta = SAMPLED[0]
    values = {FAM.evaluate(theta, FAM.random_policy(theta, np.random.default_rng(s))) for s in range(10)}
    assert len(values) > 5 and max(values) <= FAM.solve(theta).u_star + TOL


# ---------------------------------------------------------------------------------------------
# simulate against a plain replay.

def test_world_tickets_follow_the_docstring():
    for theta in SIM:
        for seed in (0, 1, 77):
            assert dp.World.tickets(theta, seed) == tickets_of(theta, seed)


@pytest.mark.parametrize("theta", SIM, ids=[_id(t) for t in SIM])
def test_simulate_matches_plain_replay_and_mean_matches_evaluate(theta):
    rng = np.random.default_rng(9)
    policies = [FAM.solve(theta).policy, FAM.default_policy(theta), FAM.idle_policy(theta),
                FAM.random_policy(theta, rng)]
    for policy in policies:
        values = []
        plan = policy.tolist()
        for seed in range(1200):
            ep = FAM.simulate(theta, policy, seed)
            utility, calls = play(theta, plan, tickets_of(theta, seed))
            assert ep.utility == utility
            if seed < 25:
                assert ep.calls == calls
                assert len(ep.calls) <= FAM.turn_budget(theta) - 4  # room left for the three probes
            values.append(ep.utility)
        se = np.std(values, ddof=1) / math.sqrt(len(values))
        expected = FAM.evaluate(theta, policy)  # a near-certain sell-out gives se = 0: allow 1e-4 relative
        assert abs(np.mean(values) - expected) <= 4 * se + 1e-4 * abs(expected)
    idle = FAM.simulate(theta, FAM.idle_policy(theta), 5)
    assert idle.calls == [{"tool": "end_period", "arguments": {}}] * theta["horizon"]
    assert idle.utility == theta["salvage_value"] * theta["capacity"]


# ---------------------------------------------------------------------------------------------
# sample, Params, solve time.


def test_sample_is_deterministic_and_respects_params():
    p = FAM.Params(size=7, horizon=30)
    a = FAM.sample(p, np.random.default_rng(3))
    assert a == FAM.sample(p, np.random.default_rng(3)) != FAM.sample(p, np.random.default_rng(4))
    for s in range(40):
        size, horizon = 2 + s % 14, 3 + 3 * s
        t = FAM.sample(FAM.Params(size=size, horizon=horizon), np.random.default_rng(s))
        assert set(t) == set(dp.World.PARAMS) and json.loads(json.dumps(t)) == t
        assert t["capacity"] == size and t["horizon"] == horizon
        k = len(t["prices"])
        assert 4 <= k <= 6 and len(t["buy_early"]) == len(t["buy_late"]) == k
        assert all(type(x) is int for x in t["prices"] + t["buy_early"] + t["buy_late"])
        assert all(type(t[key]) is int for key in ("horizon", "capacity", "salvage_value"))
        assert t["prices"] == sorted(set(t["prices"])) and 10 <= t["prices"][0] <= 40
        assert all(1 <= r <= 950 for r in t["buy_early"] + t["buy_late"])
        assert all(x >= y for x, y in zip(t["buy_early"], t["buy_early"][1:]))
        assert all(x >= y for x, y in zip(t["buy_late"], t["buy_late"][1:]))
        assert all(late >= early for early, late in zip(t["buy_early"], t["buy_late"]))
        assert 0 <= t["salvage_value"] <= t["prices"][0] // 2
    for bad in ({"size": 1}, {"size": 61}, {"horizon": 2}, {"horizon": 201}, {"size": "many"}):
        with pytest.raises(ValidationError):
            FAM.Params(**bad)
        with pytest.raises(InvalidParams):
            FAM.params(bad)
    for lo, hi in FAM.knob_ranges.values():
        assert lo <= hi
    assert FAM.knob_ranges["size"][0] >= 2 and FAM.knob_ranges["horizon"][1] <= 200


def test_solve_at_the_top_of_the_knob_ranges():
    top = {name: hi for name, (_, hi) in FAM.knob_ranges.items()}
    for seed in range(3):
        theta = FAM.sample(FAM.params(top), np.random.default_rng(seed))
        sol = FAM.solve(theta)
        assert sol.u_star >= sol.u_default - TOL and sol.u_star >= sol.u_idle - TOL


# ---------------------------------------------------------------------------------------------
# The rendered module (its replay of every reference plan: tests/test_contract.py).


def test_probes_and_looks_change_nothing_and_the_survey_is_a_seeded_estimate():
    out, _ = generated(FAM, 2)
    name = out.tool_name
    theta = SIM[1]
    episode = FAM.simulate(theta, FAM.solve(theta).policy, 4)
    env = env_of(FAM, 2, theta, "A", 4, budget=1000)  # the budget changes no dynamics; looks must not run it out
    turns = env.call(name("view_calendar"), {})["turns_left"]
    assert env.call(name("run_market_survey"), {})["turns_left"] == turns - 1
    assert env.call(name("get_demand_study"), {})["turns_left"] == turns - 3
    assert env.call(name("get_buyback_terms"), {})["turns_left"] == turns - 4
    for n, call in enumerate(episode.calls):
        if n % 5 == 0:
            for look in ("run_market_survey", "view_stock", "view_sales", "view_revenue", "view_price"):
                assert env.call(name(look), {})["ok"]
        if env.done:
            break
        assert env.call(name(call["tool"]), call["arguments"])["ok"]
    assert env.done and env.outcome()["utility"] == episode.utility

    study = env_of(FAM, 2, theta, "A", 4).call(name("get_demand_study"), {})["purchase_rates"]
    assert [r["sale_probability_first_period"] for r in study] == [x / 1000 for x in theta["buy_early"]]
    assert [r["sale_probability_last_period"] for r in study] == [x / 1000 for x in theta["buy_late"]]
    assert env_of(FAM, 2, theta, "A", 4).call(name("get_buyback_terms"), {})["salvage_value_per_unit"] == \
        theta["salvage_value"]

    def surveys(seed, count):
        e = env_of(FAM, 2, theta, "A", seed)
        return [e.call(name("run_market_survey"), {})["estimates"] for _ in range(count)]

    first = surveys(4, 30)
    assert first == surveys(4, 30)              # deterministic per (episode seed, survey number)
    assert first[0] != first[1] and first[0] != surveys(5, 1)[0]  # fresh noise per survey and per episode
    for level in range(len(theta["prices"])):
        for key, truth in (("estimated_first_period_rate", theta["buy_early"]),
                           ("estimated_last_period_rate", theta["buy_late"])):
            estimates = [s[level][key] for s in first]
            assert all(abs(x * 50 - round(x * 50)) < 1e-9 for x in estimates)
            assert abs(np.mean(estimates) - truth[level] / 1000) <= 4 * 0.5 / math.sqrt(50 * 30) + 1e-9


def test_invalid_calls_leave_state_unchanged_and_running_out_salvages():
    out, _ = generated(FAM, 0)
    name = out.tool_name
    theta = SIM[0]
    env = env_of(FAM, 0, theta)
    assert env.call(name("set_price"), {"level": 1})["posted_price"] == theta["prices"][1]
    top = len(theta["prices"])
    for tool, args in (("set_price", {"level": top}), ("set_price", {"level": -1}), ("set_price", {}),
                       ("view_sales", {"last_periods": 0}), ("end_period", {"x": 1}), ("no_such", {})):
        refused(env, name(tool) if tool != "no_such" else tool, args)  # the world's use a turn, malformed ones none
    assert env.call(name("close_sales"), {})["sales_open"] is False
    before = env.state_digest()
    assert env.call(name("close_sales"), {})["ok"] is False and env.state_digest() == before

    tickets = tickets_of(theta, 0)
    env = env_of(FAM, 0, theta, "I", 0, budget=3)
    assert env.call(name("set_price"), {"level": 0})["ok"]
    assert env.call(name("end_period"), {})["ok"]
    assert not env.done
    assert env.call(name("end_period"), {})["ok"]
    assert env.done and env.call(name("view_stock"), {})["ok"] is False
    sold = sum(tickets[t] < numerator(theta, t, 0) for t in range(2))
    expected = sold * theta["prices"][0] + theta["salvage_value"] * (theta["capacity"] - sold)
    assert env.outcome().items() >= {"utility": float(expected), "terminal": True, "turns_used": 3}.items()


def test_presentations_hide_exactly_the_hidden_parameters():
    out, _ = generated(FAM, 3)
    theta = SIM[2]
    a = env_of(FAM, 3, theta, "A").instruction
    i = env_of(FAM, 3, theta, "I").instruction
    assert f"Salvage price: {theta['salvage_value']}" in i and "Salvage price:" not in a
    assert f"first {theta['buy_early'][0] / 1000:.3f}" in i and "first 0." not in a
    assert out.tool_name("get_demand_study") in a and out.tool_name("run_market_survey") in a
    assert all(f"level {k} = {p}" in a for k, p in enumerate(theta["prices"]))
    other = dict(theta, buy_early=[x + 1 for x in theta["buy_early"]], buy_late=[x + 1 for x in theta["buy_late"]],
                 salvage_value=theta["salvage_value"] + 1)
    assert env_of(FAM, 3, other, "A").instruction == a and env_of(FAM, 3, other, "I").instruction != i
    assert FAM.tool("run_market_survey").noisy and FAM.tool("run_market_survey").turn_cost == 1
    assert FAM.tool("get_demand_study").turn_cost == 2 and not FAM.tool("get_demand_study").noisy
    assert "ESTIMATE" in FAM.tool("run_market_survey").description
    assert set(FAM.hidden) == set(FAM.tool("get_demand_study").reveals) | set(FAM.tool("get_buyback_terms").reveals)


# ---------------------------------------------------------------------------------------------
# Decision rewards (the docstring's Advantages), against the expectimax: every call's A* along
# random call sequences, replayed here on the docstring's tickets with the turn rule.


def q_star(theta, t, n, a):
    q = sale_probability(theta, t, a)
    value = (1 - q) * expectimax(theta, t + 1, n)
    return value + q * (theta["prices"][a] + expectimax(theta, t + 1, n - 1)) if q else value


def expected_advantages(theta, calls, seed, budget):
    """(A* of every call, A* of finishing, the sale surprises Σ r + V(next) − Q) by the Advantages
    paragraph: end_period Q − V, running out salvage · n − V, every other call 0; one turn a call
    (accepted or refused by the world), run out at the budget."""
    tickets, closed = tickets_of(theta, seed), len(theta["prices"])
    t, n, posted, turns, per_call, surprise = 0, theta["capacity"], closed, 0, [], Fraction(0)

    def over():
        return n == 0 or t == theta["horizon"] or turns == budget

    def run_out():
        return theta["salvage_value"] * n - expectimax(theta, t, n)

    for call in calls:
        value, live = Fraction(0), not over()
        ok = live
        if ok and call["tool"] == "end_period":
            value = q_star(theta, t, n, posted) - expectimax(theta, t, n)
            sold = posted < closed and tickets[t] < numerator(theta, t, posted)
            earned = theta["prices"][posted] if sold else 0
            surprise += earned + expectimax(theta, t + 1, n - sold) - q_star(theta, t, n, posted)
            n, t = n - sold, t + 1
        elif ok and call["tool"] == "set_price":
            posted = call["arguments"]["level"]
        elif ok and call["tool"] == "close_sales":
            ok, posted = posted < closed, closed
        turns += live  # accepted or refused by the world, a call uses its turn
        if live and turns == budget and n and t < theta["horizon"]:
            value += run_out()
        per_call.append(value)
    return per_call, Fraction(0) if over() else run_out(), surprise


def _random_calls(theta, rng, count):
    k = len(theta["prices"])
    pool = [{"tool": "end_period", "arguments": {}}] * 3 + [{"tool": "close_sales", "arguments": {}},
                                                            {"tool": "view_stock", "arguments": {}}]
    pool += [{"tool": "set_price", "arguments": {"level": a}} for a in range(k)]
    return [pool[int(i)] for i in rng.integers(0, len(pool), size=count)]


@pytest.mark.parametrize("theta", HAND + SAMPLED, ids=[_id(t) for t in HAND + SAMPLED])
def test_every_call_has_the_advantage_of_the_expectimax(theta):
    rng = np.random.default_rng(11)
    best = FAM.solve(theta).policy
    for trial in range(12):
        seed = int(rng.integers(0, 1000))
        if trial < 2:
            calls = FAM.simulate(theta, best, seed).calls
        else:
            calls = _random_calls(theta, rng, int(rng.integers(0, 9)))
        budget = FAM.turn_budget(theta) if trial % 3 else int(rng.integers(1, 5))
        steps = step_advantages(FAM, {"params": theta, "presentation": "I", "episode_seed": seed,
                                      "turn_budget": budget}, calls)
        per_call, finish, surprise = expected_advantages(theta, calls, seed, budget)
        assert steps.per_call == pytest.approx([float(a) for a in per_call], abs=TOL), (calls, budget)
        assert steps.finish == pytest.approx(float(finish), abs=TOL)
        if trial < 2 and budget == FAM.turn_budget(theta):
            assert set(steps.per_call) <= {0.0} and steps.finish == 0.0  # π*'s calls: exactly 0
        # the lemma path by path: Σ A* − (u − u*) is the sum of the sale surprises (mean 0)
        assert steps.total - (steps.utility - float(expectimax(theta))) == pytest.approx(float(-surprise), abs=TOL)


def test_a_worse_price_costs_its_expectimax_regret():
    theta = HAND[2]  # late customers pay more: selling cheap in period 0 gives up the wait
    v0, end = expectimax(theta), {"tool": "end_period", "arguments": {}}
    for level in range(len(theta["prices"]) + 1):
        calls = [{"tool": "set_price", "arguments": {"level": level}}] if level < len(theta["prices"]) else []
        steps = step_advantages(FAM, {"params": theta, "presentation": "I", "episode_seed": 0, "turn_budget": 20},
                                calls + [end])
        assert steps.per_call[:-1] == [0.0] * len(calls)
        assert steps.per_call[-1] == pytest.approx(float(q_star(theta, 0, 1, level) - v0), abs=TOL)
    assert q_star(theta, 0, 1, 0) < v0


# ---------------------------------------------------------------------------------------------
# The real gates.


def test_gates_admit_most_models_and_the_leak_check_runs():
    """Stricter than the generic admission test (three of six): five of six per presentation, and
    in A the information-hiding gate really varied the hidden parameters."""
    verdicts = gated(FAM).verdicts
    for presentation in ("I", "A"):
        mine = [v for v in verdicts if v.candidate.presentation == presentation]
        assert sum(v.admitted for v in mine) >= 5, [v.reason for v in mine]
    for v in verdicts:
        hiding = next(g for g in v.gates if g.name == "information_hiding")
        if v.candidate.presentation == "A":
            assert "invariant to the hidden θ not read" in hiding.message, hiding.message  # the leak check really ran


def test_a_changed_sale_price_is_rejected():
    run = gated(FAM)
    old = 'self._book(period, "sales", p["prices"][level])'
    rejected = []
    for which in range(len(run.outputs)):
        for v in mutant_verdicts(FAM, run, old, 'self._book(period, "sales", p["prices"][level] + 1)', which):
            rejected.append(bool(failed([v]) & {"replay_agreement", "dynamics_agreement"}))
    assert rejected and sum(rejected) >= len(rejected) - 1


# ---------------------------------------------------------------------------------------------
# θ that solve() refuses (issue 14: solvers refuse what they cannot solve exactly).


@pytest.mark.parametrize("key,change", [
    pytest.param("horizon", lambda t: t["horizon"] + 0.5, id="horizon-fraction"),
    pytest.param("salvage_value", lambda t: t["salvage_value"] + 0.5, id="salvage_value-fraction"),
    pytest.param("prices", lambda t: bumped(t["prices"], (0,), 0.5), id="prices-fraction"),
    pytest.param("buy_early", lambda t: bumped(t["buy_early"], (0,), 0.5), id="buy_early-fraction"),
    pytest.param("capacity", lambda t: 61, id="capacity-size"),
])
def test_solve_refuses_theta_not_of_the_declared_form(key, change):
    """A fraction where an integer is declared, or a size past the documented limit, is InvalidParams
    naming the field, raised before anything is allocated."""
    theta = smallest_theta(FAM)
    with pytest.raises(InvalidParams, match=r"dynamic_pricing θ\['%s'\]" % key):
        FAM.solve(dict(theta, **{key: change(theta)}))


# ---------------------------------------------------------------------------------------------
# Text (issue 16): a count of one takes the passage's singular.


def test_one_unit_bought_back_is_singular():
    import family_kit as kit
    from vhd.tasks.stages.sample import draw
    theta = dict(draw(FAM, 0)[1], capacity=1)
    vocab = generated(FAM, 0)[1].SKIN["vocab"]
    env = env_of(FAM, 0, theta)
    assert f"has 1 {vocab['unit_one']} left" in env.instruction
    answers = kit.play(FAM, 0, env, [{"tool": "close_sales", "arguments": {}}] +
                       [{"tool": "end_period", "arguments": {}}] * theta["horizon"])
    assert answers[-1]["season_over"] == f"last period: 1 {vocab['unit_one']} bought back", answers


# ---------------------------------------------------------------------------------------------
# Schemas fitted to the instance (issue 16: the agent should not learn the real range from refusals).


def test_level_and_period_arguments_are_bounded_by_the_instance():
    """A price level stops at the menu's last level and the sales history at the H periods, in I and
    A alike (both instructions tell the menu and H); past them the call is refused with the schema's
    message."""
    out, _ = generated(FAM, 1)
    name = out.tool_name
    short_menu = {**SIM[1], **{key: SIM[1][key][:3] for key in ("prices", "buy_early", "buy_late")}}
    assert len(SIM[0]["prices"]) == 5 < dp.MAX_LEVELS  # menus shorter than the schema's own six levels
    for theta in SIM + [short_menu]:
        top = len(theta["prices"]) - 1
        for presentation in ("I", "A"):
            env = env_of(FAM, 1, theta, presentation)
            schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
            assert (schemas[name("set_price")]["level"]["minimum"], schemas[name("set_price")]["level"]["maximum"]) \
                == (0, top)
            assert schemas[name("view_sales")]["last_periods"]["maximum"] == theta["horizon"]
            before = env.state_digest()
            refused = env.call(name("set_price"), {"level": top + 1})
            assert refused["ok"] is False and f"must be <= {top}" in refused["error"]
            refused = env.call(name("view_sales"), {"last_periods": theta["horizon"] + 1})
            assert refused["ok"] is False and f"must be <= {theta['horizon']}" in refused["error"]
            assert env.state_digest() == before
            assert env.call(name("set_price"), {"level": top})["posted_price"] == theta["prices"][top]
