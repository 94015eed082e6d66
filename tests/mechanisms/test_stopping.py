"""Cross-checks of the stopping family against plain-Python brute force, its rendered module
and the real admission gates.

Written from the docstring's Model section: offers i.i.d. over `values` with `weights`; accept
on day d pays offer − waiting_cost · d; declining the last offer pays 0. The brute force is an
expectimax over the full tree of offer sequences (exact Fractions), and the maximum over every
threshold vector. The only layout assumption: a plan is one integer threshold per day.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from pydantic import ValidationError

from vhd.mechanisms import registry
from vhd.mechanisms import stopping as st
from vhd.schemas.errors import InvalidParams
import family_kit as kit
from theta_cases import bumped, smallest_theta

FAM = registry.get("stopping")
TOL = 1e-9


def dist(theta):
    total = sum(theta["weights"])
    return [(x, Fraction(w, total)) for x, w in zip(theta["values"], theta["weights"]) if w > 0]


def expectimax(theta, day=0):
    """Best expected utility from `day` on, over the scenario tree (no thresholds assumed)."""
    if day == theta["horizon"]:
        return Fraction(0)
    return sum(p * max(x - theta["waiting_cost"] * day, expectimax(theta, day + 1)) for x, p in dist(theta))


def play(theta, thresholds, offers):
    for day, x in enumerate(offers):
        if x >= thresholds[day]:
            return x - theta["waiting_cost"] * day, day
    return 0, None


def expectation(theta, thresholds):
    """Exact expectation over every offer sequence."""
    total = Fraction(0)
    for path in itertools.product(dist(theta), repeat=theta["horizon"]):
        prob = math.prod((p for _, p in path), start=Fraction(1))
        total += prob * play(theta, thresholds, [x for x, _ in path])[0]
    return total


def make(values, weights, cost, horizon, forecast=None):
    """θ; the forecast sticker's average offer is the true mean rounded up unless given."""
    mean = Fraction(sum(v * w for v, w in zip(values, weights)), sum(weights))
    return {"horizon": horizon, "values": list(values), "weights": list(weights), "waiting_cost": cost,
            "forecast_mean": math.ceil(mean) if forecast is None else forecast}


def tiny_instances():
    rng = np.random.default_rng(2024)
    out = [make([0, 5, 10], [1, 1, 1], 0, 3), make([1, 2, 9], [5, 3, 2], 1, 3), make([3, 4, 20], [8, 1, 1], 4, 4),
           make([0, 10], [1, 1], 7, 3), make([2, 6, 7], [2, 2, 6], 0, 2)]
    for _ in range(12):
        n, h = int(rng.integers(2, 4)), int(rng.integers(2, 5))
        vals = sorted(int(v) for v in rng.choice(25, size=n, replace=False))
        out.append(make(vals, [int(w) for w in rng.integers(1, 9, size=n)], int(rng.integers(0, 4)), h))
    for s in (1, 2):
        out.append(FAM.sample(FAM.Params(size=3, horizon=3), np.random.default_rng(s)))
    return out


TINY = tiny_instances()


@pytest.mark.parametrize("theta", TINY)
def test_u_star_equals_expectimax_and_threshold_enumeration(theta):
    sol = FAM.solve(theta)
    exact = expectimax(theta)
    assert abs(sol.u_star - float(exact)) <= TOL
    assert sol.policy.shape == (theta["horizon"],) and np.issubdtype(sol.policy.dtype, np.integer)
    assert expectation(theta, sol.policy.tolist()) == exact
    assert abs(FAM.evaluate(theta, sol.policy) - sol.u_star) <= TOL
    assert sol.certificate.status == "optimal"
    choices = theta["values"] + [max(theta["values"]) + 1]
    best = max(expectation(theta, list(t)) for t in itertools.product(choices, repeat=theta["horizon"]))
    assert best == exact
    for policy in (FAM.default_policy(theta), FAM.idle_policy(theta), FAM.random_policy(theta, np.random.default_rng(0))):
        value = expectation(theta, policy.tolist())
        assert abs(FAM.evaluate(theta, policy) - float(value)) <= TOL and value <= exact
    assert abs(sol.u_default - float(expectation(theta, FAM.default_policy(theta).tolist()))) <= TOL
    assert abs(sol.u_idle - float(sum(x * p for x, p in dist(theta)))) <= TOL


def test_default_is_mean_threshold_and_idle_takes_the_first():
    theta = make([1, 2, 9], [5, 3, 2], 1, 4)  # mean 2.9
    assert FAM.default_policy(theta).tolist() == [3] * 4
    assert FAM.default_policy(dict(theta, forecast_mean=2)).tolist() == [2] * 4  # it reads the sticker
    assert FAM.idle_policy(theta).tolist() == [0] * 4
    assert FAM.solve(theta).policy[-1] == 9  # last day: accept iff x − 3 ≥ 0: only 9 qualifies


def test_solver_depends_on_the_fee():
    theta = make([0, 5, 30], [3, 3, 1], 0, 5)
    u0, u1 = FAM.solve(theta).u_star, FAM.solve(dict(theta, waiting_cost=3)).u_star
    assert u1 < u0 - 1 and abs(u1 - float(expectimax(dict(theta, waiting_cost=3)))) <= TOL


def test_random_policy_and_evaluate_validation():
    theta = TINY[1]
    rng = np.random.default_rng(5)
    plans = {tuple(FAM.random_policy(theta, rng).tolist()) for _ in range(20)}
    assert len(plans) > 5
    for bad in ([0, 0], [0, 0, 99], [-1, 0, 0], [0.5, 0, 0]):
        with pytest.raises(ValueError):
            FAM.evaluate(theta, np.array(bad))


SIM = [FAM.sample(FAM.Params(size=s, horizon=h), np.random.default_rng(k)) for k, s, h in
       ((1, 5, 18), (2, 8, 25), (3, 12, 30), (4, 6, 10))]


@pytest.mark.parametrize("theta", SIM)
def test_simulate_matches_plain_replay_and_mean_matches_evaluate(theta):
    rng = np.random.default_rng(9)
    policies = [FAM.solve(theta).policy, FAM.default_policy(theta), FAM.idle_policy(theta), FAM.random_policy(theta, rng)]
    for policy in policies:
        values = []
        for seed in range(1500):
            ep = FAM.simulate(theta, policy, seed)
            offers = st.World.draw(theta, seed)
            u, day = play(theta, policy.tolist(), offers)
            assert ep.utility == u
            if seed < 20:
                n = theta["horizon"] if day is None else day
                assert ep.calls == [{"tool": "decline_offer", "arguments": {}}] * n + (
                    [] if day is None else [{"tool": "accept_offer", "arguments": {}}])
            values.append(ep.utility)
        se = np.std(values, ddof=1) / math.sqrt(len(values))
        assert abs(np.mean(values) - FAM.evaluate(theta, policy)) <= 4 * se + 1e-9


def test_sample_determinism_bounds_and_params():
    p = FAM.Params(size=7, horizon=20)
    a = FAM.sample(p, np.random.default_rng(3))
    assert a == FAM.sample(p, np.random.default_rng(3)) != FAM.sample(p, np.random.default_rng(4))
    for s in range(20):
        t = FAM.sample(FAM.Params(size=3 + s % 10, horizon=3 + s), np.random.default_rng(s))
        assert len(t["values"]) == 3 + s % 10 and t["horizon"] == 3 + s
        assert t["values"] == sorted(set(t["values"])) and all(type(v) is int and v >= 0 for v in t["values"])
        assert all(type(w) is int and w >= 1 for w in t["weights"]) and sum(t["weights"]) == 1000
        assert type(t["waiting_cost"]) is int and t["waiting_cost"] >= 0
        assert t["waiting_cost"] <= 8 and t["values"][-1] <= 25 * len(t["values"])  # the ranges A states
        mean = sum(v * w for v, w in zip(t["values"], t["weights"])) / 1000
        assert type(t["forecast_mean"]) is int and 0.75 * mean - 0.5 <= t["forecast_mean"] <= 1.25 * mean + 0.5
        assert FAM.turn_budget(t) < 300
    for bad in (dict(size=2), dict(size=13), dict(horizon=2), dict(horizon=31)):
        with pytest.raises(ValidationError):
            FAM.Params(**bad)
        with pytest.raises(InvalidParams):
            FAM.params(bad)


def test_sampled_spans_are_a_sizeable_share_of_the_stakes():
    """The reward's scale u* − u0 (u0 = max(u_default, u_idle)) is not a sliver of what the episode is
    worth: over 30 θ drawn as the pipeline draws them (bench/spans.py measures every family), its
    median is at least 20 % of u* − u_idle (the value of waiting rather than taking the first offer)
    and 10 % of u*. A fee that makes waiting dear would break it: the default's mean threshold is
    then near π*'s (issue 26)."""
    from vhd.tasks.stages.sample import draw

    of_play, of_u_star = [], []
    for seed in range(30):
        _, theta = draw(FAM, seed)
        s = FAM.solve(theta)
        span = s.u_star - max(s.u_default, s.u_idle)
        of_play.append(span / (s.u_star - s.u_idle))
        of_u_star.append(span / s.u_star)
    assert float(np.median(of_play)) >= 0.20 and float(np.median(of_u_star)) >= 0.10, (of_play, of_u_star)


# --- the rendered module and the real gates (the generic ones are in tests/test_contract.py) ---


def env_of(k, theta, presentation="I", seed=0):
    return kit.env_of(FAM, k, theta, presentation, seed)


def test_invalid_calls_leave_state_unchanged_and_hiding():
    out, _ = kit.generated(FAM, 0)
    theta = SIM[0]
    env = env_of(0, theta)
    name = out.tool_name
    assert env.call(name("view_offer"), {"day": 0})["amount"] == st.World.draw(theta, 0)[0]
    assert env.call(name("write_note"), {"text": "wait for the top"})["ok"]
    for tool, args in (("view_offer", {"day": 1}), ("view_offer", {"day": -1}), ("write_note", {"text": ""}),
                       ("delete_note", {"note": 9}), ("accept_offer", {"x": 1}), ("no_such", {})):
        before = env.state_digest()
        r = env.call(name(tool) if tool != "no_such" else tool, args)
        assert r["ok"] is False and isinstance(r["error"], str) and env.state_digest() == before
    a = env_of(0, theta, "A").instruction
    i = env_of(0, theta, "I").instruction
    assert "Storage fee: %d" % theta["waiting_cost"] in i and "Storage fee" not in a
    assert all("%d (" % v not in a for v in theta["values"]) and name("get_offer_forecast") in a
    other = dict(theta, values=[v + 1 for v in theta["values"]], weights=[w + 1 for w in theta["weights"]],
                 waiting_cost=theta["waiting_cost"] + 1)
    assert env_of(0, other, "A").instruction == a and env_of(0, other, "I").instruction != i


def test_a_scaled_fee_is_rejected():
    run = kit.gated(FAM)
    rejected = []
    for which in range(len(run.outputs)):
        verdicts = kit.mutant_verdicts(FAM, run, 'fee = self.p["waiting_cost"] * day',
                                       'fee = 2 * self.p["waiting_cost"] * day + 1', which)
        rejected += [bool(kit.failed([v]) & {"replay_agreement", "dynamics_agreement", "no_policy_beats_optimum"})
                     for v in verdicts]
    assert sum(rejected) >= len(rejected) - 2


# ---------------------------------------------------------------------------------------------
# θ that solve() refuses (issue 14: solvers refuse what they cannot solve exactly).


@pytest.mark.parametrize("key,change", [
    pytest.param("horizon", lambda t: t["horizon"] + 0.5, id="horizon-fraction"),  # before: a raw TypeError
    # before: a raw TypeError
    pytest.param("weights", lambda t: bumped(t["weights"], (0,), 0.5), id="weights-fraction"),
    pytest.param("values", lambda t: bumped(t["values"], (0,), 0.5), id="values-fraction"),  # before: solved
    pytest.param("horizon", lambda t: 31, id="horizon-size"),  # before: no size guard
])
def test_solve_refuses_theta_not_of_the_declared_form(key, change):
    """A fraction where an integer is declared, or a size past the documented limit, is InvalidParams
    naming the field, raised before anything is allocated."""
    theta = smallest_theta(FAM)
    with pytest.raises(InvalidParams, match=r"stopping θ\['%s'\]" % key):
        FAM.solve(dict(theta, **{key: change(theta)}))


# ---------------------------------------------------------------------------------------------
# Observations (issue 16): values, not formula strings.


def test_an_open_offer_shows_the_days_of_storage_fee_as_a_number():
    from vhd.tasks.stages.sample import draw
    theta = draw(FAM, 0)[1]
    env = kit.env_of(FAM, 0, theta)
    first, _, second, earlier = kit.play(FAM, 0, env, [{"tool": "view_offer", "arguments": {"day": 0}},
                                                      {"tool": "decline_offer", "arguments": {}},
                                                      {"tool": "view_offer", "arguments": {"day": 1}},
                                                      {"tool": "view_offer", "arguments": {"day": 0}}])
    assert first["storage_fee_days_if_accepted_today"] == 0 and second["storage_fee_days_if_accepted_today"] == 1
    assert earlier["status"] == "declined" and earlier["storage_fee_days_if_accepted_today"] is None
    assert not any(isinstance(value, str) and "×" in value for answer in (first, second) for value in answer.values())


# ---------------------------------------------------------------------------------------------
# Presentation A (issue 16): schemas fitted to the instance, one amount per forecast call.


def test_arguments_are_bounded_by_the_instance():
    """Forecast ranks stop at the number of amounts, days at the last day, in both presentations
    (the instruction tells both); past them the schema refuses."""
    theta = SIM[0]
    out, _ = kit.generated(FAM, 1)
    n = len(theta["values"])
    for presentation in ("I", "A"):
        env = env_of(1, theta, presentation)
        schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
        assert schemas[out.tool_name("get_offer_forecast")]["rank"]["maximum"] == n - 1
        assert schemas[out.tool_name("view_offer")]["day"]["maximum"] == theta["horizon"] - 1
        refused = env.call(out.tool_name("get_offer_forecast"), {"rank": n})
        assert refused["ok"] is False and f"must be <= {n - 1}" in refused["error"]
        refused = env.call(out.tool_name("view_offer"), {"day": theta["horizon"]})
        assert refused["ok"] is False and f"must be <= {theta['horizon'] - 1}" in refused["error"]


def test_in_a_a_forecast_call_shows_one_amount_and_the_sticker_is_told():
    theta = SIM[1]
    out, _ = kit.generated(FAM, 1)
    env = env_of(1, theta, "A")
    budget = FAM.turn_budget(theta)
    top = env.call(out.tool_name("get_offer_forecast"), {"rank": len(theta["values"]) - 1})
    assert top["ok"] and top["amount"] == theta["values"][-1] and top["probability"] == theta["weights"][-1] / 1000
    assert set(top) == {"ok", "turns_left", "rank", "amount", "probability", "currency"}
    assert top["turns_left"] == budget - 3
    fee = env.call(out.tool_name("get_fee_schedule"), {})
    assert fee["storage_fee_per_day"] == theta["waiting_cost"] and fee["turns_left"] == budget - 4
    assert "average offer at %d" % theta["forecast_mean"] in env.instruction and "up to 25 % off" in env.instruction
    assert "from 0 to %d" % (25 * len(theta["values"])) in env.instruction and "0 to 8" in env.instruction
    assert "average offer at %d" % theta["forecast_mean"] in env_of(1, theta, "I").instruction


def test_belief_is_what_was_read_and_the_stated_guess_elsewhere():
    """The fee 4 and, for unread amounts, an even spread between the amounts read around them (in
    0 … 25 n) sharing equally the probability left."""
    theta = make([3, 10, 40, 60], [400, 300, 200, 100], 1, 5, forecast=20)
    calls = FAM.probe_calls(theta)
    assert calls == [{"tool": "get_fee_schedule", "arguments": {}}] + [
        {"tool": "get_offer_forecast", "arguments": {"rank": r}} for r in range(4)]
    blind = FAM.belief(theta, [])
    assert blind["waiting_cost"] == 4 and blind["values"] == [19, 39, 60, 80] and blind["weights"] == [250] * 4
    some = FAM.belief(theta, [calls[0], calls[2]])  # the fee and the amount of rank 1
    assert some["waiting_cost"] == 1 and some["values"] == [4, 10, 40, 70] and some["weights"] == [234, 300, 233, 233]
    assert FAM.belief(theta, calls) == theta
    FAM.solve(blind), FAM.solve(some)
