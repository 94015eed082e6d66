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
each decision (`vhd/tasks/advantage.py`) and E[·] the model's expected values: π* scores 1 on
every seed, the default and doing nothing 0 in expectation, and luck earns nothing. Its step
rewards are A*_t / (E[u*] − E[u0]).
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


def step_rewards(advantages: list[float], u_star: float, u_default: float, u_idle: float | None = None) -> list[float]:
    """A*_t / (E[u*] − E[u0]) for each step (all 0 without a span)."""
    span = _span(u_star, u_default, u_idle)
    return [a / span if span > 0 else 0.0 for a in advantages]
