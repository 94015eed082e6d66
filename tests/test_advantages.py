"""The exact advantages of every family that declares them (vhd/tasks/grading/step_advantages.py).

For any way of playing, E[Σ_t A*] = E[u] − u* (the performance-difference lemma): the difference
D = Σ A* − (u − u*) is the exogenous noise alone, 0 on every seed of a deterministic family and of
mean 0 over seeds of a stochastic one. π*'s decisions have advantage 0 on every seed, and the
default's advantages average to E[u_default] − u*.
"""

import math

import numpy as np
import pytest

from vhd.mechanisms import registry
from vhd.tasks.grading.step_advantages import declares_advantages, step_advantages
from vhd.tasks.stages.sample import draw

DECLARING = [f.name for f in registry.all() if declares_advantages(f)]
SEEDS = 60


def _config(family, theta, seed, budget=None):
    return {"params": theta, "presentation": "I", "episode_seed": seed,
            "turn_budget": family.turn_budget(theta) if budget is None else budget}


def _theta(family, k=0):
    """A θ with a positive span (the environments the corpus admits), the first of the draws."""
    for seed in range(k, k + 40):
        _, theta = draw(family, seed)
        s = family.solve(theta)
        if s.u_star - max(s.u_default, s.u_idle) > 1e-6 * max(1.0, abs(s.u_star)):
            return theta, s
    raise AssertionError(f"{family.name}: no θ with a positive span in 40 draws")


def test_some_family_declares_advantages():
    assert DECLARING


@pytest.mark.parametrize("name", DECLARING)
def test_the_optimal_decisions_have_advantage_zero(name):
    family = registry.get(name)
    for k in range(3):
        theta, s = _theta(family, 10 * k)
        for seed in range(4):
            episode = family.simulate(theta, s.policy, seed)
            steps = step_advantages(family, _config(family, theta, seed), episode.calls)
            assert set(steps.per_call) <= {0.0} and steps.finish == 0.0, steps
            assert steps.utility == pytest.approx(episode.utility, abs=1e-9)


def _noise(family, theta, s, play):
    """D = Σ A* − (u − u*) over SEEDS episode seeds of `play(seed) -> (calls, budget)`."""
    out = []
    for seed in range(SEEDS):
        calls, budget = play(seed)
        steps = step_advantages(family, _config(family, theta, seed, budget), calls)
        out.append((steps.total, steps.total - (steps.utility - s.u_star)))
    return np.array(out)


def _plays(family, theta, s):
    rng = np.random.default_rng(0)
    random = family.random_policy(theta, rng)
    short = max(1, len(family.simulate(theta, s.policy, 0).calls) // 3)  # one budget for every seed
    return {
        "default": lambda seed: (family.simulate(theta, family.default_policy(theta), seed).calls, None),
        "random": lambda seed: (family.simulate(theta, random, seed).calls, None),
        # stopped after a fixed number of calls, or with a fixed budget: a stop that depended on the
        # episode's own future (its length) would be a hindsight policy, for which the lemma does not hold
        "optimal, stopped after three calls": lambda seed: (family.simulate(theta, s.policy, seed).calls[:3], None),
        "optimal, out of turns": lambda seed: (family.simulate(theta, s.policy, seed).calls, short),
    }


@pytest.mark.parametrize("name", DECLARING)
def test_the_advantages_sum_to_the_utility_less_the_noise(name):
    family = registry.get(name)
    theta, s = _theta(family)
    for what, play in _plays(family, theta, s).items():
        totals, noise = _noise(family, theta, s, play).T
        if not family.stochastic:
            assert np.all(np.abs(noise) <= 1e-6 * max(1.0, abs(s.u_star))), (what, noise)
        else:
            bound = 4 * noise.std(ddof=1) / math.sqrt(SEEDS) + 1e-9 * max(1.0, abs(s.u_star))
            assert abs(noise.mean()) <= bound, (what, noise.mean(), bound)
        if what == "default":
            spread = 4 * totals.std(ddof=1) / math.sqrt(SEEDS) + 1e-6 * max(1.0, abs(s.u_star))
            assert abs(totals.mean() - (s.u_default - s.u_star)) <= spread, (totals.mean(), s.u_default - s.u_star)


@pytest.mark.parametrize("name,bug,why", [
    ("stopping", "losses turned gains", "positive advantage"),  # V* is the best Q*: no A* above 0
    ("knapsack", "π*'s decisions lose", "π*'s decisions have advantage"),
    ("knapsack", "losses doubled", "not its utility less u*"),  # a deterministic Σ A* is u − u*
])
def test_the_decision_reward_gate_fails_on_wrong_advantages(name, bug, why):
    """The gate judges the family's advantage code on each candidate: the correct code passes,
    and each wrong one fails it by the invariant it breaks."""
    import dataclasses

    from family_kit import failed, gated
    from vhd.tasks.stages.check import check_batch

    family = registry.get(name)
    run = gated(family, models=2)
    output = run.outputs[0]
    mine = [c for c in run.candidates if c.setter_output.setter_output_id == output.setter_output_id]
    right = family.advantage

    def wrong(theta, values, before, call, after):
        value = right(theta, values, before, call, after)
        if call is None:
            return value
        if bug == "losses turned gains":
            return abs(value)
        if bug == "π*'s decisions lose":
            return value - 1.0 if value == 0.0 else value
        return 2.0 * value

    broken = dataclasses.replace(family, advantage=wrong)
    assert "decision_reward" not in failed(check_batch(family, output, mine, every_candidate=True))
    verdicts = check_batch(broken, output, mine, every_candidate=True)
    reasons = [g.message for v in verdicts for g in v.gates if g.name == "decision_reward" and not g.passed]
    assert reasons and all(why in r for r in reasons), reasons
