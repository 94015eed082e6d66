"""The rewards of every surface (docs/TRAINING.md), each one function.

    >>> reward(10.0, u_star=10.0, u_default=4.0, u_idle=6.0)
    1.0
    >>> reward(6.0, u_star=10.0, u_default=4.0, u_idle=6.0)   # doing nothing earns nothing
    0.0
    >>> decision_reward(-2.0, u_star=10.0, u_default=4.0, u_idle=6.0)   # decisions worth 2 less than π*'s
    0.5

The outcome reward (the paper's, DESIGN §1) is r = clip01((u − u0) / (u* − u0)) on the episode's
own draws, with u0 = max(u_default, u_idle): neither the default policy nor doing nothing (the
episode finished at once) earns reward; 0 for no utility at all.

The decision reward is r = clip01(1 + Σ_t A*_t / (E[u*] − E[u0])), with A*_t the exact advantage of
each decision (`vhd/tasks/grading/step_advantages.py`) and E[·] the model's expected values: π* scores 1 on
every seed, the default and doing nothing 0 in expectation, and luck earns nothing.

Its step rewards, one per call, sum to it: A*_t / (E[u*] − E[u0]) each, the baseline 1 on the
first call's and the clip's correction on the last call's (`step_rewards`):

    >>> step_rewards([0.0, -2.0, 0.0], u_star=10.0, u_default=4.0, u_idle=6.0)   # 1 − 0.5 = 0.5
    [1.0, -0.5, 0.0]
    >>> step_rewards([-3.0, -3.0], u_star=10.0, u_default=4.0, u_idle=6.0)      # 1 − 1.5 → clipped to 0
    [0.25, -0.25]

As every A*_t ≤ 0, a discounted return with any γ ≤ 1 is at most 1, and 1 exactly for π*'s
decisions: the baseline comes first, so ending sooner is never paid, and the clip's correction
(only for a reward clipped to 0) comes last, discounted most (docs/TRAINING.md).
"""

from __future__ import annotations

import math


def reward(utility: float | None, u_star: float, u_default: float, u_idle: float | None = None) -> float:
    """r = clip01((u − u0) / (u* − u0)) with u0 = max(u_default, u_idle); 0 for no utility."""
    zero = u_default if u_idle is None else max(u_default, u_idle)
    span = u_star - zero
    if utility is None or not math.isfinite(utility) or span <= 0:
        return 0.0
    return min(1.0, max(0.0, (utility - zero) / span))


def _span(u_star: float, u_default: float, u_idle: float | None) -> float:
    return u_star - (u_default if u_idle is None else max(u_default, u_idle))


def decision_reward(total_advantage: float, u_star: float, u_default: float, u_idle: float | None = None) -> float:
    """r = clip01(1 + Σ A* / (E[u*] − E[u0])) with E[u0] = max(E[u_default], E[u_idle]) (expected values)."""
    span = _span(u_star, u_default, u_idle)
    if not math.isfinite(total_advantage) or span <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 + total_advantage / span))


def step_reward(advantage: float, first: bool, u_star: float, u_default: float, u_idle: float | None = None) -> float:
    """One call's step reward, before the episode's end: A*_t / (E[u*] − E[u0]), plus the baseline 1
    on the episode's first call (0 without a span: the decision reward is 0 then)."""
    span = _span(u_star, u_default, u_idle)
    return (advantage / span + (1.0 if first else 0.0)) if span > 0 else 0.0


def step_rewards(advantages: list[float], u_star: float, u_default: float, u_idle: float | None = None,
                 episode_reward: float | None = None) -> list[float]:
    """One reward per call that sum to the episode's decision reward (`episode_reward`, or the
    decision reward of Σ `advantages`): `step_reward` for each, the last call's set to what the
    others leave (its advantage and the clip's correction). [] for no call: ending at once earns
    0 (E[u_idle] ≤ E[u0], so 1 + A*/span ≤ 0 there)."""
    if not advantages:
        return []
    if episode_reward is None:
        episode_reward = decision_reward(math.fsum(advantages), u_star, u_default, u_idle)
    steps = [step_reward(a, t == 0, u_star, u_default, u_idle) for t, a in enumerate(advantages)]
    steps[-1] = episode_reward - math.fsum(steps[:-1])
    return steps
