"""Cross-checks of the energy-storage family against plain-Python brute force, its rendered
module and the real admission gates.

Everything here is written from the module docstring's Model section, not from `_Process`: the
price of an hour (regime base price + hour-of-day add-on), one hour's trade in exact Fractions
(charging pays price·k, discharging is paid price·|k|·efficiency_pct/100 less wear·|k|, the last
hour adds the buy-back of the final charge), the regime chain, an expectimax over (hour, charge,
regime), the exact expectation of a plan over every regime path, and the replay of one path.
The only layout assumption is that of a plan, given by `plan_format`: an integer array
[hour, charge 0..C, regime] of signed trades.
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
from vhd.mechanisms import energy_storage as es
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.tasks.grading.step_advantages import step_advantages

FAM = registry.get("energy_storage")
TOL = 1e-9
HIDDEN = ("regime_prices", "hour_profile", "transition_weights", "efficiency_pct", "cycling_cost", "terminal_value")


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in plain Python (exact Fractions).


def n_regimes(theta):
    return len(theta["regime_prices"])


def price(theta, hour, regime):
    return theta["regime_prices"][regime] + theta["hour_profile"][hour % 24]


def successors(theta, regime):
    row = theta["transition_weights"][regime]
    return [(r, Fraction(w, sum(row))) for r, w in enumerate(row) if w > 0]


def trades(theta, soc):
    """Every allowed signed trade at charge `soc`: |k| ≤ power, 0 ≤ soc + k ≤ capacity."""
    return [k for k in range(-theta["power"], theta["power"] + 1) if 0 <= soc + k <= theta["capacity"]]


def step(theta, hour, regime, soc, k):
    """One hour's cash (currency, exact) and the next charge."""
    assert k in trades(theta, soc), (hour, soc, k)
    p = price(theta, hour, regime)
    if k > 0:
        cash = Fraction(-p * k)
    else:
        cash = Fraction(p * -k * theta["efficiency_pct"], 100) - theta["cycling_cost"] * -k
    soc += k
    if hour == theta["horizon"] - 1:
        cash += theta["terminal_value"] * soc
    return cash, soc


def expectimax(theta):
    """The optimum: max over trades, expectation over the next regime (memoized exact recursion)."""

    @functools.cache
    def best(hour, soc, regime):
        if hour == theta["horizon"]:
            return Fraction(0)
        values = []
        for k in trades(theta, soc):
            cash, nxt = step(theta, hour, regime, soc, k)
            later = Fraction(0) if hour + 1 == theta["horizon"] else sum(
                p * best(hour + 1, nxt, r) for r, p in successors(theta, regime))
            values.append(cash + later)
        return max(values)

    return best(0, theta["initial_soc"], theta["initial_regime"])


def play(theta, plan, regimes):
    """Replay a plan on a regime path; (utility, decisions)."""
    soc, total, decisions = theta["initial_soc"], Fraction(0), []
    for hour, regime in enumerate(regimes):
        k = int(plan[hour][soc][regime])
        decisions.append(k)
        cash, soc = step(theta, hour, regime, soc, k)
        total += cash
    return total, decisions


def paths(theta):
    """Every regime path with its probability (hour 0 is in the initial regime)."""
    frontier = [((theta["initial_regime"],), Fraction(1))]
    for _ in range(1, theta["horizon"]):
        frontier = [(path + (r,), prob * p) for path, prob in frontier for r, p in successors(theta, path[-1])]
    return frontier


def expectation(theta, plan):
    """Exact expected utility of a plan: every regime path, weighted."""
    return sum((prob * play(theta, plan, path)[0] for path, prob in paths(theta)), Fraction(0))


def plan_value(theta, plan):
    """The same expectation by recursion over (hour, charge, regime), for horizons too long to enumerate."""

    @functools.cache
    def value(hour, soc, regime):
        if hour == theta["horizon"]:
            return Fraction(0)
        cash, nxt = step(theta, hour, regime, soc, int(plan[hour][soc][regime]))
        if hour + 1 == theta["horizon"]:
            return cash
        return cash + sum(p * value(hour + 1, nxt, r) for r, p in successors(theta, regime))

    return value(0, theta["initial_soc"], theta["initial_regime"])


def all_plans(theta):
    """Every deterministic Markov plan (nested lists), [hour][charge][regime] → allowed trade."""
    cells = [(h, s, r) for h in range(theta["horizon"]) for s in range(theta["capacity"] + 1)
             for r in range(n_regimes(theta))]
    for choice in itertools.product(*(trades(theta, s) for _, s, _ in cells)):
        plan = [[[0] * n_regimes(theta) for _ in range(theta["capacity"] + 1)] for _ in range(theta["horizon"])]
        for (h, s, r), k in zip(cells, choice):
            plan[h][s][r] = k
        yield plan


def default_plan(theta):
    """The docstring of default_policy, from scratch: the mean M = mean(base prices) + mean(add-ons)."""
    mean = Fraction(sum(theta["regime_prices"]), n_regimes(theta)) + Fraction(sum(theta["hour_profile"]), 24)
    out = []
    for hour in range(theta["horizon"]):
        rows = []
        for s in range(theta["capacity"] + 1):
            row = []
            for r in range(n_regimes(theta)):
                p = price(theta, hour, r)
                row.append(min(theta["power"], theta["capacity"] - s) if p < mean else
                           -min(theta["power"], s) if p > mean else 0)
            rows.append(row)
        out.append(rows)
    return out


# ---------------------------------------------------------------------------------------------
# Instances.


def make(horizon, capacity, power, soc, regime, prices, profile, weights, eff, wear, tv):
    if len(profile) < 24:
        profile = [profile[h % len(profile)] for h in range(24)]
    return {"horizon": horizon, "capacity": capacity, "power": power, "initial_soc": soc, "initial_regime": regime,
            "regime_prices": list(prices), "hour_profile": list(profile),
            "transition_weights": [list(w) for w in weights], "efficiency_pct": eff, "cycling_cost": wear,
            "terminal_value": tv}


def hand_instances():
    return [
        make(2, 1, 1, 0, 0, [10, 30], [0], [[1, 1], [1, 1]], 90, 1, 0),
        make(3, 2, 1, 1, 1, [5, 20], [-2, 3, 1], [[3, 1], [1, 3]], 80, 0, 2),
        make(3, 2, 2, 2, 0, [12, 15, 40], [0, 5, -4], [[5, 3, 2], [2, 6, 2], [1, 1, 8]], 75, 2, 3),
        make(2, 3, 2, 0, 0, [8, 25], [4, -3], [[9, 1], [4, 6]], 100, 0, 7),  # lossless, no wear
        make(3, 3, 1, 3, 1, [20, 21], [0, 10, -10], [[1, 0], [0, 1]], 85, 3, 0),  # absorbing regimes
        make(1, 2, 2, 1, 0, [30, 50], [0], [[1, 1], [1, 1]], 80, 1, 25),  # one hour: sell or keep for the buy-back
        make(3, 1, 1, 0, 2, [5, 10, 60], [1, 0, 2], [[2, 1, 1], [1, 2, 1], [1, 1, 2]], 70, 4, 1),
    ]


def random_instances(seed, count):
    """Random tiny θ: 2–3 regimes, charge 1–3, power 1–2, horizon 1–3, random weights (zeros allowed)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        r = int(rng.integers(2, 4))
        capacity = int(rng.integers(1, 4))
        prices = sorted(int(x) for x in rng.choice(np.arange(5, 60), size=r, replace=False))
        weights = [[int(w) for w in rng.integers(0, 6, size=r)] for _ in range(r)]
        for i, row in enumerate(weights):
            row[i] += 1
        out.append(make(int(rng.integers(1, 4)), capacity, int(rng.integers(1, capacity + 1)),
                        int(rng.integers(0, capacity + 1)), int(rng.integers(0, r)), prices,
                        [int(x) for x in rng.integers(-4, 5, size=24)], weights, int(rng.integers(70, 101)),
                        int(rng.integers(0, 5)), int(rng.integers(0, 6))))
    return out


def sampled_tiny(seed):
    return FAM.sample(FAM.Params(size=3, horizon=3), np.random.default_rng(seed))


TINY = hand_instances() + random_instances(2024, 12) + [sampled_tiny(s) for s in (1, 2, 3)]


def _id(theta):
    return (f"h{theta['horizon']}-c{theta['capacity']}-p{theta['power']}-r{n_regimes(theta)}"
            f"-e{theta['efficiency_pct']}")


# ---------------------------------------------------------------------------------------------
# The Bellman solver against brute force.


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_u_star_equals_expectimax_and_pi_star_is_valid(theta):
    sol = FAM.solve(theta)
    exact = expectimax(theta)
    assert abs(sol.u_star - float(exact)) <= TOL, (sol.u_star, float(exact))
    shape = (theta["horizon"], theta["capacity"] + 1, n_regimes(theta))
    assert sol.policy.shape == shape and np.issubdtype(sol.policy.dtype, np.integer)
    for h, s, r in itertools.product(*map(range, shape)):
        assert int(sol.policy[h, s, r]) in trades(theta, s)
    assert abs(float(expectation(theta, sol.policy.tolist())) - float(exact)) <= TOL
    assert abs(FAM.evaluate(theta, sol.policy) - sol.u_star) <= TOL
    assert sol.certificate.status == "optimal"
    assert sol.certificate.state_space == math.prod(shape)


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_reference_and_random_plans_evaluate_to_plain_expectation(theta):
    sol = FAM.solve(theta)
    default, idle = FAM.default_policy(theta), FAM.idle_policy(theta)
    assert default.tolist() == default_plan(theta)
    assert not idle.any() and idle.shape == sol.policy.shape
    u_default, u_idle = expectation(theta, default.tolist()), expectation(theta, idle.tolist())
    assert u_idle == theta["terminal_value"] * theta["initial_soc"]  # never trading keeps the start charge
    assert abs(FAM.evaluate(theta, default) - float(u_default)) <= TOL
    assert abs(sol.u_default - float(u_default)) <= TOL and abs(sol.u_idle - float(u_idle)) <= TOL
    rng = np.random.default_rng(0)
    for _ in range(3):
        plan = FAM.random_policy(theta, rng)
        value = expectation(theta, plan.tolist())
        assert abs(FAM.evaluate(theta, plan) - float(value)) <= TOL and value <= expectimax(theta)


ENUMERATED = [
    make(2, 1, 1, 0, 0, [10, 30], [0, 4], [[1, 1], [1, 2]], 90, 1, 3),  # 2^8 plans
    make(3, 1, 1, 1, 1, [6, 25], [3, -2, 5], [[3, 1], [1, 1]], 80, 0, 4),  # 2^12 plans
    make(2, 2, 2, 1, 0, [9], [0, 14], [[1]], 75, 1, 2),  # one regime, power 2: 3^6 plans
]


@pytest.mark.parametrize("theta", ENUMERATED, ids=[_id(t) for t in ENUMERATED])
def test_u_star_is_max_over_every_markov_plan(theta):
    sol = FAM.solve(theta)
    best, count = None, 0
    for n, plan in enumerate(all_plans(theta)):
        value = expectation(theta, plan)
        if n % 7 == 0:
            assert abs(FAM.evaluate(theta, np.array(plan, dtype=np.int16)) - float(value)) <= TOL
        best = value if best is None or value > best else best
        count += 1
    assert count >= 256
    assert best == expectimax(theta)
    assert abs(sol.u_star - float(best)) <= TOL


def test_hour_of_day_wraps_after_24_hours():
    """27 hours: the add-ons of hours 24–26 are those of hours of day 0–2 (a cheap night, then a peak)."""
    profile = [-8, -8, 9] + [0] * 21
    theta = make(27, 2, 1, 0, 0, [20, 26], profile, [[4, 1], [1, 4]], 90, 0, 0)
    sol = FAM.solve(theta)
    exact = expectimax(theta)
    assert abs(sol.u_star - float(exact)) <= TOL
    assert abs(float(plan_value(theta, sol.policy.tolist())) - float(exact)) <= TOL
    assert sol.policy[26, 1, 0] == -1 and sol.policy[24, 0, 0] == 1  # sell at the 02:00 peak, buy at midnight
    shifted = dict(theta, hour_profile=profile[1:] + profile[:1])
    assert abs(FAM.solve(shifted).u_star - float(expectimax(shifted))) <= TOL
    assert FAM.solve(shifted).u_star != sol.u_star


BASE = make(3, 2, 1, 1, 0, [10, 24], [0, 6, -3], [[3, 1], [1, 2]], 85, 1, 3)


@pytest.mark.parametrize("key,value", [("efficiency_pct", 95), ("cycling_cost", 3), ("terminal_value", 12),
                                       ("regime_prices", [10, 30]), ("hour_profile", [0, 8, -3] + [0] * 21),
                                       ("transition_weights", [[1, 3], [1, 2]]), ("power", 2),
                                       ("initial_soc", 2), ("initial_regime", 1)])
def test_solver_depends_on_each_parameter(key, value):
    u = FAM.solve(BASE).u_star
    changed = dict(BASE, **{key: value})
    exact = expectimax(changed)
    assert abs(FAM.solve(changed).u_star - float(exact)) <= TOL
    assert abs(float(exact) - u) > 1e-6, key


def test_losses_decide_whether_a_round_trip_pays():
    """Buy at 10, sell at 12 an hour later: with 90 % efficiency 12·0.9 − 10 = 0.8 > 0 pays, with 80 % or
    a wear of 1 it does not; π* trades exactly when the round trip pays."""
    theta = make(2, 1, 1, 0, 0, [10], [0, 2], [[1]], 90, 0, 0)
    assert FAM.solve(theta).u_star == pytest.approx(0.8) and FAM.solve(theta).policy[0, 0, 0] == 1
    for changed in (dict(theta, efficiency_pct=80), dict(theta, cycling_cost=1)):
        sol = FAM.solve(changed)
        assert sol.u_star == 0 and sol.policy[0, 0, 0] == 0 and expectimax(changed) == 0


def test_evaluate_rejects_invalid_plans():
    theta = TINY[2]
    good = FAM.idle_policy(theta)
    assert FAM.evaluate(theta, good) == pytest.approx(theta["terminal_value"] * theta["initial_soc"])
    over_power = good.copy()
    over_power[0, 0, 0] = theta["power"] + 1
    overfull = good.copy()
    overfull[1, theta["capacity"], 1] = 1
    negative = good.copy()
    negative[2, 0, 2] = -1
    for bad in (over_power, overfull, negative, good[:-1], good.astype(float), good[:, :, :1]):
        with pytest.raises(ValueError):
            FAM.evaluate(theta, bad)
        with pytest.raises(ValueError):
            FAM.simulate(theta, bad, 0)


def test_a_plan_written_from_plan_format_is_accepted():
    """plan_format: shape [horizon, capacity + 1, len(regime_prices)], signed trades within power and charge."""
    assert "[horizon, capacity + 1, len(regime_prices)]" in FAM.plan_format
    theta = TINY[1]
    plan = [[[(1 if s < theta["capacity"] else -1) if r == 0 else -min(1, s) for r in range(2)]
             for s in range(theta["capacity"] + 1)] for _ in range(theta["horizon"])]
    assert abs(FAM.evaluate(theta, np.array(plan)) - float(expectation(theta, plan))) <= TOL


# ---------------------------------------------------------------------------------------------
# The reference simulator.


SIM = [FAM.sample(FAM.Params(size=s, horizon=h), np.random.default_rng(k))
       for k, s, h in ((11, 6, 14), (12, 10, 30), (13, 4, 26), (14, 16, 48))]


def _plans(theta, rng):
    return {"star": FAM.solve(theta).policy, "default": FAM.default_policy(theta), "idle": FAM.idle_policy(theta),
            "random": FAM.random_policy(theta, rng)}


def expected_calls(decisions):
    calls = []
    for k in decisions:
        if k > 0:
            calls.append({"tool": "charge", "arguments": {"units": k}})
        elif k < 0:
            calls.append({"tool": "discharge", "arguments": {"units": -k}})
        calls.append({"tool": "end_hour", "arguments": {}})
    return calls


@pytest.mark.parametrize("theta", SIM + TINY[:5], ids=[_id(t) for t in SIM + TINY[:5]])
def test_simulate_matches_plain_replay(theta):
    rng = np.random.default_rng(99)
    for name, plan in _plans(theta, rng).items():
        for seed in (0, 1, 7, 12345, 2**32 - 1):
            episode = FAM.simulate(theta, plan, seed)
            regimes = es.World.regime_path(theta, seed)
            assert len(regimes) == theta["horizon"] and regimes[0] == theta["initial_regime"]
            utility, decisions = play(theta, plan.tolist(), regimes)
            assert episode.utility == float(utility), (name, seed)
            assert episode.decisions == decisions
            assert episode.calls == expected_calls(decisions)


def test_regime_path_is_deterministic_and_follows_the_chain():
    theta = SIM[1]
    assert es.World.regime_path(theta, 5) == es.World.regime_path(theta, 5)
    runs = [es.World.regime_path(theta, s) for s in range(300)]
    assert len({tuple(p) for p in runs}) > 250
    counts = np.zeros((n_regimes(theta),) * 2)
    for path in runs:
        for a, b in itertools.pairwise(path):
            assert theta["transition_weights"][a][b] > 0
            counts[a, b] += 1
    weights = np.array(theta["transition_weights"], dtype=float)
    expected = weights / weights.sum(axis=1, keepdims=True)
    seen = counts.sum(axis=1) > 200
    assert np.abs(counts[seen] / counts[seen].sum(axis=1, keepdims=True) - expected[seen]).max() < 0.06


@pytest.mark.parametrize("which", [0, 2, 3])
def test_simulate_average_is_close_to_evaluate(which):
    theta = SIM[which]
    rng = np.random.default_rng(314 + which)
    seeds = [int(s) for s in rng.integers(0, 2**32 - 1, size=1200)]
    for name, plan in _plans(theta, rng).items():
        values = np.array([FAM.simulate(theta, plan, s).utility for s in seeds])
        expected = FAM.evaluate(theta, plan)
        se = values.std(ddof=1) / math.sqrt(len(values))
        assert abs(values.mean() - expected) <= 4 * se + 1e-9, (name, values.mean(), expected, se)


# ---------------------------------------------------------------------------------------------
# sample, Params, speed.


def test_sample_is_deterministic_per_seed():
    params = FAM.Params(size=12, horizon=30)
    a = FAM.sample(params, np.random.default_rng(5))
    assert a == FAM.sample(params, np.random.default_rng(5))
    others = [FAM.sample(params, np.random.default_rng(s)) for s in (6, 7, 8)]
    assert all(o != a for o in others) and len({repr(sorted(o.items())) for o in others}) == 3


@pytest.mark.parametrize("size,horizon", [(2, 2), (4, 12), (12, 30), (40, 72), (60, 168)])
def test_sample_respects_params(size, horizon):
    rng = np.random.default_rng(size * 1000 + horizon)
    for _ in range(10):
        theta = FAM.sample(FAM.Params(size=size, horizon=horizon), rng)
        assert set(theta) == set(es.World.PARAMS)
        assert theta["horizon"] == horizon and theta["capacity"] == size
        assert 1 <= theta["power"] <= size and 0 <= theta["initial_soc"] <= size // 2
        r = n_regimes(theta)
        assert 2 <= r <= 4 and 0 <= theta["initial_regime"] < r
        prices = theta["regime_prices"]
        assert prices == sorted(set(prices)) and len(theta["hour_profile"]) == 24
        cheapest = prices[0] + min(theta["hour_profile"])
        assert cheapest >= 1 and 0 <= theta["terminal_value"] < cheapest
        assert 70 <= theta["efficiency_pct"] <= 92 and 0 <= theta["cycling_cost"] <= 3
        rows = theta["transition_weights"]
        assert len(rows) == r and all(len(row) == r and sum(row) == es.WEIGHT_TOTAL for row in rows)
        assert all(400 <= rows[i][i] <= 800 for i in range(r))
        for key, value in theta.items():
            flat = value if isinstance(value, list) else [value]
            flat = [x for v in flat for x in (v if isinstance(v, list) else [v])]
            assert all(type(x) is int for x in flat), key


def test_solve_at_the_top_of_the_knob_ranges():
    top = {name: hi for name, (_, hi) in FAM.knob_ranges.items()}
    for seed in range(3):
        theta = FAM.sample(FAM.params(top), np.random.default_rng(seed))
        sol = FAM.solve(theta)
        assert sol.u_star >= sol.u_default - TOL
        assert FAM.turn_budget(theta) == 2 * theta["horizon"] + 16


@pytest.mark.parametrize("knobs", [{"size": 1}, {"size": 61}, {"horizon": 1}, {"horizon": 169}, {"size": "big"}])
def test_params_out_of_bounds_raise(knobs):
    with pytest.raises(ValidationError):
        FAM.Params(**knobs)
    with pytest.raises(InvalidParams):
        FAM.params(knobs)


def test_params_edges_and_knob_ranges():
    for knobs in ({"size": 2, "horizon": 2}, {"size": 60, "horizon": 168}):
        params = FAM.params(knobs)
        assert (params.size, params.horizon) == (knobs["size"], knobs["horizon"])
    for name, (lo, hi) in FAM.knob_ranges.items():
        field = FAM.Params.model_fields[name]
        assert field.description and FAM.params({name: lo}) and FAM.params({name: hi})
    assert FAM.group == "beyond" and "numpy" in FAM.solver and "Bellman" in FAM.solver


# ---------------------------------------------------------------------------------------------
# The rendered module.

@pytest.mark.parametrize("k", range(len(SIM)))
def test_module_books_every_plan_to_the_hundredth(k):
    """The module's cash is the simulator's utility exactly (money in hundredths), on the larger θ
    of SIM, with its fourteen tools."""
    out, _ = generated(FAM, k)
    assert len(FAM.tools) == 14
    theta = SIM[k]
    rng = np.random.default_rng(k)
    for name, plan in _plans(theta, rng).items():
        seed = 1000 + k
        episode = FAM.simulate(theta, plan, seed)
        env = env_of(FAM, k, theta, "A", seed)
        for call in episode.calls:
            assert env.call(out.tool_name(call["tool"]), call["arguments"])["ok"], (name, call)
        assert env.done and env.outcome()["utility"] == episode.utility, name


def test_noisy_sticker_is_a_seeded_estimate_that_changes_nothing_else():
    noisy = [t for t in FAM.tools if t.noisy]
    assert [t.name for t in noisy] == ["read_price_sticker"] and noisy[0].turn_cost == 1
    assert "estimate" in noisy[0].description
    exact = FAM.tool("get_tariff_sheet")
    assert exact.turn_cost == 2 and "regime_prices" in exact.reveals and not noisy[0].reveals
    out, _ = generated(FAM, 1)
    theta, seed = SIM[1], 77
    name = out.tool_name
    env = env_of(FAM, 1, theta, "A", seed)
    reads = [env.call(name("read_price_sticker"), {}) for _ in range(40)]
    assert reads[0]["turns_left"] == FAM.turn_budget(theta) - 1
    again = env_of(FAM, 1, theta, "A", seed).call(name("read_price_sticker"), {})
    assert again["estimates"] == reads[0]["estimates"]  # the same episode seed, the same first read
    other = env_of(FAM, 1, theta, "A", seed + 1).call(name("read_price_sticker"), {})
    estimates = [[e["estimated_base_price"] for e in r["estimates"]] for r in reads + [other]]
    assert len({tuple(e) for e in estimates}) > 20
    for r, true in enumerate(theta["regime_prices"]):
        column = [e[r] for e in estimates]
        assert max(abs(x - true) for x in column) <= max(2, (true + 2) // 5)
        assert min(column) < true < max(column)
    sheet = env.call(name("get_tariff_sheet"), {})
    assert [b["base_price"] for b in sheet["base_price_by_regime"]] == theta["regime_prices"]
    assert sheet["turns_left"] == reads[-1]["turns_left"] - 2
    # reading the sticker between the trades of π* leaves the dynamics and the utility alone
    episode = FAM.simulate(theta, FAM.solve(theta).policy, seed)
    env = env_of(FAM, 1, theta, "A", seed, budget=3 * len(episode.calls) + 10)
    for call in episode.calls:
        assert env.call(name("read_price_sticker"), {})["ok"]
        assert env.call(name(call["tool"]), call["arguments"])["ok"]
    assert env.done and env.outcome()["utility"] == episode.utility


def test_probes_and_observations_report_theta_and_state():
    out, _ = generated(FAM, 2)
    theta, seed = SIM[0], 3
    name = out.tool_name
    env = env_of(FAM, 2, theta, "A", seed)
    regimes = es.World.regime_path(theta, seed)
    spec = env.call(name("get_battery_spec"), {})
    assert (spec["efficiency_pct"], spec["wear_cost_per_unit_discharged"], spec["buy_back_price_per_unit_at_end"]) == (
        theta["efficiency_pct"], theta["cycling_cost"], theta["terminal_value"])
    outlook = env.call(name("get_market_outlook"), {})["transitions"]
    for r, row in enumerate(theta["transition_weights"]):
        assert outlook[r]["next_hour_probabilities"] == pytest.approx([w / sum(row) for w in row])
    assert env.call(name("view_price"), {"hour": 0})["price"] == price(theta, 0, regimes[0])
    assert env.call(name("view_clock"), {})["regime"] == theta["initial_regime"]
    k = min(theta["power"], theta["capacity"] - theta["initial_soc"])
    env.call(name("charge"), {"units": k})
    closed = env.call(name("end_hour"), {})
    assert closed["cash"] == -price(theta, 0, regimes[0]) * k and closed["next_price"] == price(theta, 1, regimes[1])
    battery = env.call(name("view_battery"), {})
    assert battery["state_of_charge"] == theta["initial_soc"] + k and battery["scheduled_this_hour"] == 0
    assert env.call(name("view_trades"), {})["trades"][0]["units"] == k
    history = env.call(name("view_price_history"), {})["past_hours"]
    assert [(h["hour"], h["regime"]) for h in history] == [(0, regimes[0])]
    assert env.call(name("view_cash"), {})["cash"] == closed["cash"]


def test_invalid_calls_leave_state_unchanged():
    out, _ = generated(FAM, 0)
    theta = dict(SIM[0], initial_soc=1)
    name = out.tool_name
    env = env_of(FAM, 0, theta)
    assert env.call(name("discharge"), {"units": 1})["ok"]
    bad = [("charge", {"units": 1}),  # a discharge is scheduled
           ("discharge", {"units": 1}),  # only 1 unit stored
           ("view_price", {"hour": 1}), ("view_price", {"hour": -1}), ("charge", {"units": 0}),
           ("discharge", {"units": "two"}), ("end_hour", {"now": True}), ("no_such_tool", {})]
    for tool, args in bad:
        refused(env, name(tool) if tool != "no_such_tool" else tool, args)  # the world's use a turn, malformed ones none
    assert env.call(name("cancel_schedule"), {})["ok"]
    before = env.state_digest()
    assert not env.call(name("cancel_schedule"), {})["ok"] and env.state_digest() == before
    assert not env.call(name("charge"), {"units": theta["power"] + 1})["ok"]
    full = env_of(FAM, 0, dict(theta, initial_soc=theta["capacity"]))
    assert not full.call(name("charge"), {"units": 1})["ok"]


def test_running_out_of_turns_idles_the_rest_and_buys_back():
    out, _ = generated(FAM, 3)
    theta = dict(SIM[0], initial_soc=2)
    name = out.tool_name
    regimes = es.World.regime_path(theta, 9)
    env = env_of(FAM, 3, theta, "I", 9, budget=3)
    env.call(name("charge"), {"units": 1})
    env.call(name("end_hour"), {})
    env.call(name("discharge"), {"units": 1})  # the last turn: dropped, the hours pass idle
    assert env.done
    expected = Fraction(-price(theta, 0, regimes[0])) + theta["terminal_value"] * 3
    assert env.outcome()["utility"] == float(expected) and env.outcome()["turns_used"] == 3


def test_presentation_a_hides_what_i_states():
    theta = SIM[2]
    a = env_of(FAM, 0, theta, "A").instruction
    i = env_of(FAM, 0, theta, "I").instruction
    assert "Base price per regime" in i and "Base price per regime" not in a
    assert f"× {theta['efficiency_pct']} %" in i and f"{theta['efficiency_pct']} %" not in a
    out, _ = generated(FAM, 0)
    assert out.tool_name("get_tariff_sheet") in a and out.tool_name("read_price_sticker") in a
    moved = {k: v for k, v in theta.items()}
    moved.update(regime_prices=[p + 1 for p in theta["regime_prices"]], efficiency_pct=theta["efficiency_pct"] + 1,
                 cycling_cost=theta["cycling_cost"] + 1, terminal_value=theta["terminal_value"] + 1,
                 hour_profile=[x + 1 for x in theta["hour_profile"]],
                 transition_weights=[[w + 1 for w in row] for row in theta["transition_weights"]])
    assert set(moved) - {k for k in moved if moved[k] == theta[k]} == set(HIDDEN) == set(FAM.hidden)
    assert env_of(FAM, 0, moved, "A").instruction == a and env_of(FAM, 0, moved, "I").instruction != i


# ---------------------------------------------------------------------------------------------
# The real gates.


def test_gates_admit_most_models_in_both_presentations():
    verdicts = gated(FAM).verdicts
    for presentation in ("I", "A"):
        mine = [v for v in verdicts if v.candidate.presentation == presentation]
        assert len(mine) == 6 and sum(v.admitted for v in mine) >= 5, [v.reason for v in mine]
    for v in verdicts:
        assert v.admitted or failed([v]) == {"default_band"}, v.reason


def test_a_world_that_pays_one_point_more_efficiency_is_rejected():
    run = gated(FAM)
    rejected = []
    for which in range(len(run.outputs)):
        for v in mutant_verdicts(FAM, run, '("sale", price * -k * p["efficiency_pct"])',
                                 '("sale", price * -k * (p["efficiency_pct"] + 1))', which):
            rejected.append(bool(failed([v]) & {"replay_agreement", "dynamics_agreement"}))
    assert rejected and all(rejected)


# ---------------------------------------------------------------------------------------------
# θ that solve() refuses (issue 14: solvers refuse what they cannot solve exactly).


@pytest.mark.parametrize("key,change", [
    pytest.param("power", lambda t: t["power"] + 0.5, id="power-fraction"),
    pytest.param("regime_prices", lambda t: bumped(t["regime_prices"], (0,), 0.5), id="regime_prices-fraction"),
    pytest.param("efficiency_pct", lambda t: t["efficiency_pct"] + 0.5, id="efficiency_pct-fraction"),
    pytest.param("capacity", lambda t: 61, id="capacity-size"),
])
def test_solve_refuses_theta_not_of_the_declared_form(key, change):
    """A fraction where an integer is declared, or a size past the documented limit, is InvalidParams
    naming the field, raised before anything is allocated."""
    theta = smallest_theta(FAM)
    with pytest.raises(InvalidParams, match=r"energy_storage θ\['%s'\]" % key):
        FAM.solve(dict(theta, **{key: change(theta)}))


# ---------------------------------------------------------------------------------------------
# Decision rewards: A* = Q* − V* of the hour's settled trade, from the plain recursion.


def _values(theta):
    """V*(t, s, r), Q*(t, s, r, k) and the idle-to-the-end value I(t, s, r), exact."""

    def outcome(hour, soc, regime, k, later):
        cash, nxt = step(theta, hour, regime, soc, k)
        if hour + 1 == theta["horizon"]:
            return cash
        return cash + sum(p * later(hour + 1, nxt, r) for r, p in successors(theta, regime))

    @functools.cache
    def best(hour, soc, regime):
        return max(outcome(hour, soc, regime, k, best) for k in trades(theta, soc))

    @functools.cache
    def idle(hour, soc, regime):
        return outcome(hour, soc, regime, 0, idle)

    return best, (lambda hour, soc, regime, k: outcome(hour, soc, regime, k, best)), idle


ADVANTAGE_THETAS = [t for t in TINY if t["horizon"] >= 2][:8]


@pytest.mark.parametrize("theta", ADVANTAGE_THETAS, ids=[_id(t) for t in ADVANTAGE_THETAS])
def test_advantage_of_every_trade_and_of_running_out_is_q_minus_v(theta):
    best, q_star, idle = _values(theta)
    values = FAM.decision_values(theta)
    assert abs(values.u_star - float(best(0, theta["initial_soc"], theta["initial_regime"]))) <= TOL
    end_hour = {"tool": "end_hour", "arguments": {}}
    for hour in range(theta["horizon"]):
        for soc in range(theta["capacity"] + 1):
            for r in range(n_regimes(theta)):
                v = best(hour, soc, r)
                for k in trades(theta, soc):
                    got = FAM.advantage(theta, values, (hour, soc, r, k), end_hour, None)
                    assert abs(got - float(q_star(hour, soc, r, k) - v)) <= TOL, (hour, soc, r, k)
                    charge = {"tool": "charge", "arguments": {"units": 1}}
                    assert FAM.advantage(theta, values, (hour, soc, r, k), charge, None) == 0.0
                got = FAM.advantage(theta, values, (hour, soc, r, 1), None, None)
                assert abs(got - float(idle(hour, soc, r) - v)) <= TOL, (hour, soc, r)


@pytest.mark.parametrize("theta", ADVANTAGE_THETAS, ids=[_id(t) for t in ADVANTAGE_THETAS])
def test_q_of_one_trade_is_the_solvers_table_to_the_bit(theta):
    """Grading reads Q* one trade at a time (the hour's cash and expected value kept per hour); it is
    the solver's `q_values` table, bit for bit, −inf for a trade the battery cannot make included."""
    values = FAM.decision_values(theta)
    proc = values.proc
    for hour in range(theta["horizon"]):
        table = proc.q_values(hour, values.optimal[hour + 1])
        for soc, r, k in itertools.product(range(theta["capacity"] + 1), range(n_regimes(theta)),
                                           range(-proc.P, proc.P + 1)):
            assert values.q(hour, soc, r, k) == float(table[soc, r, k + proc.P]), (hour, soc, r, k)


@pytest.mark.parametrize("theta", ADVANTAGE_THETAS[:4], ids=[_id(t) for t in ADVANTAGE_THETAS[:4]])
def test_a_replayed_episode_scores_the_close_and_the_run_out(theta):
    """Three turns: schedule the most charge allowed (or the most discharge on a full battery), close
    the hour, schedule a unit's trade with the last turn: the close gets Q* − V* of hour 0, the
    schedules 0, and the last call also carries the run-out's I − V* of hour 1 (its schedule dropped)."""
    best, q_star, idle = _values(theta)
    seed = 5
    regimes = es.World.regime_path(theta, seed)
    soc = theta["initial_soc"]
    k = min(theta["power"], theta["capacity"] - soc) or -min(theta["power"], soc)
    first = {"tool": "charge" if k > 0 else "discharge", "arguments": {"units": abs(k)}}
    _, after = step(theta, 0, regimes[0], soc, k)
    last = {"tool": "discharge" if after else "charge", "arguments": {"units": 1}}  # accepted: it spends the turn
    calls = [first, {"tool": "end_hour", "arguments": {}}, last]
    config = {"params": theta, "presentation": "I", "episode_seed": seed, "turn_budget": 3}
    steps = step_advantages(FAM, config, calls)
    expected = [0.0, q_star(0, soc, regimes[0], k) - best(0, soc, regimes[0]),
                idle(1, after, regimes[1]) - best(1, after, regimes[1])]
    assert len(steps.per_call) == 3 and steps.finish == 0.0
    for got, want in zip(steps.per_call, expected):
        assert abs(got - float(want)) <= TOL, (steps.per_call, expected)
    assert steps.utility == float(step(theta, 0, regimes[0], soc, k)[0] + theta["terminal_value"] * after)


# ---------------------------------------------------------------------------------------------
# Text (issue 16): a count of one takes the singular, in the instruction and in refusals.


def test_one_unit_is_singular_in_the_instruction_and_the_refusals():
    import family_kit as kit
    from vhd.tasks.stages.sample import draw
    theta = dict(draw(FAM, 0)[1], power=1, initial_soc=1)
    env = env_of(FAM, 0, theta)
    assert "at most 1 unit per hour" in env.instruction and "It starts with 1 unit stored" in env.instruction
    assert "1 units" not in env.instruction
    charge, discharge, more = kit.play(FAM, 0, env, [{"tool": "charge", "arguments": {"units": 1}},
                                                     {"tool": "discharge", "arguments": {"units": 1}},
                                                     {"tool": "charge", "arguments": {"units": 1}}])
    assert charge["ok"] and "a charge of 1 unit is scheduled this hour" in discharge["error"]
    assert "the power limit is 1 unit per hour; 1 already scheduled" in more["error"]


# ---------------------------------------------------------------------------------------------
# Schemas fitted to the instance (issue 16: "hour maximum 167 for 30 hours").


def test_hour_and_unit_arguments_are_bounded_by_the_instance():
    """The schemas the module shows and checks stop at the instance's last hour, its H hours of
    listing and its power limit, in I and A alike (both instructions tell them); past them the
    call is refused with the schema's message."""
    out, _ = generated(FAM, 1)
    name = out.tool_name
    for theta in SIM[:3]:
        last, power = theta["horizon"] - 1, theta["power"]
        assert last < es.MAX_HORIZON - 1 and power < es.MAX_CAPACITY
        for presentation in ("I", "A"):
            env = env_of(FAM, 1, theta, presentation)
            schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
            assert (schemas[name("view_price")]["hour"]["minimum"], schemas[name("view_price")]["hour"]["maximum"]) \
                == (0, last)
            assert schemas[name("view_price_history")]["last_hours"]["maximum"] == theta["horizon"]
            assert schemas[name("view_trades")]["limit"]["maximum"] == theta["horizon"]
            for trade in ("charge", "discharge"):
                assert (schemas[name(trade)]["units"]["minimum"], schemas[name(trade)]["units"]["maximum"]) \
                    == (1, power)
            before = env.state_digest()
            for tool, args, bound in [("view_price", {"hour": last + 1}, last),
                                      ("charge", {"units": power + 1}, power),
                                      ("view_price_history", {"last_hours": theta["horizon"] + 1}, theta["horizon"])]:
                refused = env.call(name(tool), args)
                assert refused["ok"] is False and f"must be <= {bound}" in refused["error"], (tool, refused)
            assert env.state_digest() == before
            assert env.call(name("view_price"), {"hour": 0})["ok"] and env.call(name("charge"), {"units": power})["ok"]


def test_the_kept_balance_is_the_ledgers_sum():
    """The World keeps the cash (in hundredths) in its state table instead of summing the ledger on
    every call (issue 31: grading replays every call): after every call of random and default plays
    they agree."""
    for world in worlds_after_each_call(FAM):
        t = world.t
        assert world._cents() == world.db.execute(
            f"SELECT COALESCE(SUM(hundredths), 0) FROM {t['ledger']}").fetchone()[0]
