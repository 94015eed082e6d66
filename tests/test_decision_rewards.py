"""The decision reward against the plays it must not overpay (issue 19, "Done means").

What is true, and tested here, with span = E[u*] − max(E[u_default], E[u_idle]) and the decision
reward r = clip01(1 + ΣA*/span) (vhd/tasks/grading/reward.py):

- **A* ≤ 0 for every call.** A*(s, a) = Q*(s, a) − V*(s) and V*(s) = max_a Q*(s, a) under full
  information, so no step reward is positive and no trajectory scores above 1: not even one that
  memorised its episode's draws and realised more than π* did on that seed.
- **Walk-away-style plays** (one terminal call at once, the rest by the turns-ran-out rule) are
  fixed, non-anticipating policies, so by the performance-difference lemma the mean over seeds of
  the unclipped 1 + ΣA*/span estimates 1 − E[regret]/span without bias, E[regret] = u* − E[u(play)]
  (E[u(play)] computed here without the advantage tables). Asserted: that mean is at most
  1 − E[regret]/span + 0.02 (and no less than it − 0.02), widened by three standard errors of the
  mean over the seeds played (0 where the decision is taken in the same state on every seed: then
  every seed's reward is exactly clip01(1 − E[regret]/span)). Clipped per seed, a play whose one
  decision sees a draw (accepting day 0's offer in stopping) can score up to 1 on a seed where
  that offer was worth accepting: the clip is why the criterion is stated on the mean of the
  unclipped value.
- **Memorised-draw plays** (the best, on the seed's own draws, of π* and plans near it, or the
  exact hindsight optimum of the seed where it is simple: stopping, negotiation, pandora) beat π*'s
  realised utility on some seeds — the outcome reward pays them 1 there — yet score at most 1 on
  every seed, and their mean unclipped decision reward is at most 1 − E[regret]/span + 0.02 with
  E[regret] = u* − E[u(play)], estimated as the mean of π*'s realised utility less theirs on the
  same seeds (never positive: memorising beats u*, so that bound is above 1 and "at most 1 on every
  seed" is the binding one). What they score below 1 is what their decisions were worth given what
  could be seen when they were made: the draws themselves earn nothing.
- **Deterministic families**: the decision reward equals the outcome reward (the episode's
  references are the model's expected values, and ΣA* = u − u*), and the step rewards sum to it:
  on the Gym wrapper and in `vhd score`'s `step_rewards` (A*_t / span, one per call, the baseline 1
  on the first and the clip's correction on the last), whose first steps are the Gym's; 1 + Σ A*_t
  / span = reward whenever that value is not clipped (a trajectory worse than the zero reference
  scores 0; an empty trajectory has no call to carry a step reward, and scores 0).
"""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest

from family_kit import admitted_environments
from vhd.adapters.gym import TextToolEnv
from vhd.mechanisms import registry
from vhd.tasks.grading.step_advantages import Advantages, declares_advantages, decision_grade
from vhd.tasks.grading.reward import reward
from vhd.tasks.stages.sample import draw
from vhd.tasks.grading.score import Grading

STOCHASTIC = [f.name for f in registry.all() if f.stochastic and declares_advantages(f)]
DETERMINISTIC = [f.name for f in registry.all() if not f.stochastic and declares_advantages(f)]
TOLERANCE = 1e-9  # relative to max(1, |u*|): the advantage module's own rounding rule
MARGIN = 0.02     # the margin on 1 − E[regret]/span

# the cheapest "do one terminal thing at once": the call that ends the episode or, where only the
# clock can, one clock call (the turns-ran-out rule plays the rest: no orders, no trades, no work)
TERMINAL = {"negotiation": "walk_away", "stopping": "accept_offer", "pandora": "stop_and_take",
            "dynamic_pricing": "close_sales", "inventory_dp": "end_day", "ecommerce": "end_day",
            "maintenance": "end_day", "energy_storage": "end_hour"}
CHEAP = {"negotiation", "stopping", "pandora", "dynamic_pricing"}  # ~1 ms a graded episode: many seeds


def _config(family, theta, seed):
    return {"params": theta, "presentation": "I", "episode_seed": seed, "turn_budget": family.turn_budget(theta)}


def _expected(s):
    return {"u_star": s.u_star, "u_default": s.u_default, "u_idle": s.u_idle}


def _span(s):
    return s.u_star - max(s.u_default, s.u_idle)


def _theta(family, lucky=False):
    """The first sampled θ with a positive span (the environments the corpus admits); `lucky`: also
    one where π*'s realised utility differs between seeds (else no play can beat it on a seed)."""
    for k in range(40):
        _, theta = draw(family, k)
        s = family.solve(theta)
        if _span(s) <= 1e-6 * max(1.0, abs(s.u_star)):
            continue
        if lucky and len({family.simulate(theta, s.policy, seed).utility for seed in range(6)}) == 1:
            continue
        return theta, s
    raise AssertionError(f"{family.name}: no θ with a positive span{' and luck' if lucky else ''} in 40 draws")


def _exact_value_of_walking_away(family, theta):
    """E[u] of the one-terminal-call play, from θ alone or the family's exact plan evaluator (never
    from the advantage tables), and whether its realised utility must equal the idle plan's."""
    if family.name == "stopping":  # accept day 0's offer: its expectation, no fee yet
        return sum(v * w for v, w in zip(theta["values"], theta["weights"])) / sum(theta["weights"]), False
    if family.name == "negotiation":  # walk away in round 0: the outside option, no delay paid
        return float(theta["outside_option"]), False
    # pandora (take the fallback), dynamic_pricing (sales closed: every unit salvaged) and the clock
    # families (one clock call, then nothing): the idle plan, whose value the evaluator gives exactly
    return float(family.evaluate(theta, family.idle_policy(theta))), True


def _steps_at_most_zero(graded, s):
    assert max(graded["advantages"], default=0.0) <= TOLERANCE * max(1.0, abs(s.u_star)), graded
    assert graded["reward"] <= 1.0


def test_every_stochastic_family_has_a_walk_away_play():
    assert set(STOCHASTIC) == set(TERMINAL)


@pytest.mark.parametrize("name", STOCHASTIC)
def test_walking_away_scores_no_more_than_its_expected_regret(name):
    family = registry.get(name)
    theta, s = _theta(family)
    span, expected = _span(s), _expected(s)
    value, idle_plan = _exact_value_of_walking_away(family, theta)
    bound = 1 - (s.u_star - value) / span
    calls = [{"tool": TERMINAL[name], "arguments": {}}]
    unclipped, rewards, utilities = [], [], []
    seeds = range(300 if name in CHEAP else 30)
    for seed in seeds:
        graded = decision_grade(family, _config(family, theta, seed), calls, expected)
        _steps_at_most_zero(graded, s)
        assert graded["advantage"] <= TOLERANCE * max(1.0, abs(s.u_star))
        unclipped.append(1 + graded["advantage"] / span)
        rewards.append(graded["reward"])
        utilities.append(graded["reference_utility"])
        if idle_plan:  # the play is the idle plan: the evaluator's value is its value
            assert graded["reference_utility"] == pytest.approx(
                family.simulate(theta, family.idle_policy(theta), seed).utility, abs=1e-9 * max(1.0, abs(s.u_star)))
    mean, se = statistics.fmean(unclipped), statistics.stdev(unclipped) / math.sqrt(len(unclipped))
    assert mean <= bound + MARGIN + 3 * se, (mean, bound, se)
    assert mean >= bound - MARGIN - 3 * se, (mean, bound, se)  # and no less: the sum is unbiased
    # the realised utilities agree with the exact value too (the value is of this play)
    u_se = statistics.stdev(utilities) / math.sqrt(len(utilities))
    assert abs(statistics.fmean(utilities) - value) <= 4 * u_se + 1e-9 * max(1.0, abs(value))
    if se == 0:  # one decision, in the same state on every seed: exact on every seed, clipped or not
        assert all(r == pytest.approx(min(1.0, max(0.0, bound)), abs=1e-9) for r in rewards), (rewards[:3], bound)
        assert all(u == pytest.approx(bound, abs=1e-9) for u in unclipped)
    # clipped, a seed's reward is more than its unclipped value only where that is below 0: the mean
    # of the clipped rewards is the clip's lift above the bound (stopping: accepting day 0's offer is
    # worth −1.01 of the span in expectation, yet scores up to 1 on a seed whose offer π* accepts too)
    assert all(r == min(1.0, max(0.0, u)) for r, u in zip(rewards, unclipped))


def _hindsight_calls(family, theta, seed):
    """The exact best play of one seed, knowing its draws (None where that is not simple)."""
    world = family.world
    if family.name == "stopping":
        offers = world.draw(theta, seed)
        day = max(range(len(offers)), key=lambda d: offers[d] - theta["waiting_cost"] * d)
        return [{"tool": "decline_offer", "arguments": {}}] * day + [{"tool": "accept_offer", "arguments": {}}]
    if family.name == "negotiation":
        price = min(world.draw(theta, seed), theta["max_price"])
        if price <= theta["outside_option"]:
            return [{"tool": "walk_away", "arguments": {}}]
        return [{"tool": "make_offer", "arguments": {"price": price}}]
    if family.name == "pandora":
        prizes = world.draw(theta, seed)
        box = max(range(len(prizes)), key=lambda i: prizes[i] - theta["costs"][i])
        opened = [{"tool": "open_box", "arguments": {"box": box}}] if prizes[box] - theta["costs"][box] > theta[
            "fallback"] else []
        return opened + [{"tool": "stop_and_take", "arguments": {}}]
    return None


def _memorised(family, theta, s, seed, tries=10, share=0.03):
    """The best, by the utility it realises on this seed's own draws, of π* and `tries` plans that
    take a `share` of their entries from random plans (near-optimal plans, chosen after the draws)."""
    rng = np.random.default_rng([seed, 0x4D454D])
    plans = [s.policy]
    for _ in range(tries):
        plan, other = np.array(s.policy, copy=True), family.random_policy(theta, rng)
        mask = rng.random(plan.shape) < share
        plan[mask] = other[mask]
        plans.append(plan)
    episodes = [family.simulate(theta, plan, seed) for plan in plans]
    return max(episodes, key=lambda e: e.utility).calls


@pytest.mark.parametrize("name", STOCHASTIC)
def test_memorised_draws_score_no_more_than_their_decisions(name):
    family = registry.get(name)
    theta, s = _theta(family, lucky=True)
    span, expected = _span(s), _expected(s)
    scale = max(1.0, abs(s.u_star))
    played = {"memorised": [], "hindsight": []}
    for seed in range(20):
        config = _config(family, theta, seed)
        optimal = family.simulate(theta, s.policy, seed).utility
        default = family.simulate(theta, family.default_policy(theta), seed).utility
        idle = Advantages(family, config)
        idle.finish()
        for kind, calls in (("memorised", _memorised(family, theta, s, seed)),
                            ("hindsight", _hindsight_calls(family, theta, seed))):
            if calls is None:
                continue
            graded = decision_grade(family, config, calls, expected)
            _steps_at_most_zero(graded, s)
            u = graded["reference_utility"]
            assert u >= optimal - TOLERANCE * scale, (kind, seed, u, optimal)  # chosen after the draws
            outcome = reward(u, optimal, default, idle.utility)
            zero = max(default, idle.utility)  # the outcome reward's zero on this seed
            played[kind].append((u, optimal, zero, 1 + graded["advantage"] / span, graded["reward"], outcome))
    beaten = 0
    for kind, rows in played.items():
        if not rows:
            continue
        u, optimal, zero, unclipped, rewards, outcomes = map(np.array, zip(*rows))
        # the memoriser's expected regret u* − E[u], estimated paired with π* on the same seeds
        # (E[π*'s realised utility] = u*): never positive, as the play is chosen to beat π*'s on its seed
        gains = u - optimal
        regret = -gains.mean()
        se = gains.std(ddof=1) / math.sqrt(len(gains)) / span
        assert regret <= TOLERANCE * scale
        assert unclipped.mean() <= 1 - regret / span + MARGIN + 3 * se, (kind, unclipped.mean(), regret / span)
        assert np.all(rewards <= 1.0) and np.all(unclipped <= 1 + 1e-12)
        lucky = u > optimal + TOLERANCE * scale  # the seeds where memorising beat π*'s own realisation
        beaten += int(lucky.sum())
        # the outcome reward pays them in full where the seed has a positive span of its own; the
        # decision reward only what the decisions were worth (1 only if every step was π*'s)
        assert np.all(outcomes[lucky & (optimal > zero)] == 1.0)
        assert np.all(rewards[lucky] <= 1.0)
    assert beaten, f"{name}: no memorised play beat π* on its seed; the test would show nothing"


@pytest.fixture(scope="module", params=DETERMINISTIC)
def deterministic_row(request):
    family = registry.get(request.param)
    return family, next(row for env, row, *_ in admitted_environments(family) if env.presentation == "I")


def _deterministic_trajectories(family, theta, s, seed=0):
    rng = np.random.default_rng(11)
    best = family.simulate(theta, s.policy, seed).calls
    plays = [[], best, best[:-1], family.simulate(theta, family.default_policy(theta), seed).calls]
    plays += [best[: len(best) * q // 4] for q in (1, 2, 3)]
    randoms = [family.simulate(theta, family.random_policy(theta, rng), seed).calls for _ in range(4)]
    plays += randoms + [calls[: len(calls) // 2] for calls in randoms]  # and cut short: finished mid-way
    return plays


def test_deterministic_decision_reward_equals_outcome_reward_on_every_surface(deterministic_row):
    """An admitted environment: `Grading.row` (vhd score, adapters.grade) and the Gym wrapper."""
    family, row = deterministic_row
    grading = Grading.of_grader(row["grader"], row["module"])
    theta, s = grading.config["params"], family.solve(grading.config["params"])
    assert grading.references == pytest.approx((s.u_star, s.u_default, s.u_idle), abs=1e-9 * max(1.0, abs(s.u_star)))
    assert (s.u_star, s.u_default, s.u_idle) == pytest.approx(tuple(grading.expected[k] for k in (
        "u_star", "u_default", "u_idle")), abs=1e-9 * max(1.0, abs(s.u_star)))
    env = TextToolEnv(row)
    seen = set()
    for canonical in _deterministic_trajectories(family, theta, s, grading.config["episode_seed"]):
        calls = [grading.interface.shown(c) for c in canonical]
        env.reset()
        total, info = 0.0, None
        for call in calls:
            _, r, terminated, truncated, info = env.step(json.dumps(call))
            total += r
            if terminated or truncated:
                break
        if env.finished:
            assert total == pytest.approx(info["reward"], abs=1e-9)  # the Gym's step rewards sum to it
        else:  # finish() returns the episode's whole reward, not what the steps left unpaid (TRAINING.md)
            r, info = env.finish()
            assert r == info["reward"] == env.finish()[0]
        assert info["reward"] == pytest.approx(info["outcome_reward"], abs=1e-9), (canonical[:3], info)
        scored = grading.row(env.trajectory, info["utility"])
        assert scored["reward"] == pytest.approx(info["reward"], abs=1e-12)
        assert scored["outcome_reward"] == pytest.approx(scored["reward"], abs=1e-9)
        unclipped = 1 + scored["advantage"] / _span(s)
        if env.trajectory:
            assert math.fsum(scored["step_rewards"]) == pytest.approx(scored["reward"], abs=1e-12)
            assert scored["step_rewards"][:-1] == pytest.approx(
                [a / _span(s) + (t == 0) for t, a in enumerate(scored["advantages"][:-1])], abs=1e-12)
            if 0.0 <= unclipped <= 1.0:
                assert unclipped == pytest.approx(scored["reward"], abs=1e-9)
            else:
                assert scored["reward"] == (0.0 if unclipped < 0 else 1.0)
        else:
            assert scored["reward"] == 0.0 and scored["step_rewards"] == []  # ending at once
        seen.add(round(scored["reward"], 6))
    assert {0.0, 1.0} <= seen, seen  # π* and ending at once, at least


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_deterministic_decision_reward_equals_outcome_reward_over_many_models(name):
    """More θ, graded on the family's own World: ΣA* = u − u* exactly, the references are the
    expected values, so the two rewards agree whatever the trajectory."""
    family = registry.get(name)
    compared = 0
    for k in range(0, 30, 6):
        _, theta = draw(family, k)
        s = family.solve(theta)
        if _span(s) <= 1e-6 * max(1.0, abs(s.u_star)):
            continue
        config = _config(family, theta, 0)
        idle = Advantages(family, config)
        idle.finish()
        references = (family.simulate(theta, s.policy, 0).utility,
                      family.simulate(theta, family.default_policy(theta), 0).utility, idle.utility)
        for calls in _deterministic_trajectories(family, theta, s):
            graded = decision_grade(family, config, calls, _expected(s))
            u = graded["reference_utility"]
            assert graded["advantage"] == pytest.approx(u - s.u_star, abs=1e-6 * max(1.0, abs(s.u_star)))
            assert graded["reward"] == pytest.approx(reward(u, *references), abs=1e-9)
            compared += 1
    assert compared >= 22
