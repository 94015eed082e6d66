"""The reward of DESIGN §1, one function for every surface (docs/TRAINING.md).

    >>> reward(10.0, u_star=10.0, u_default=4.0, u_idle=6.0)
    1.0
    >>> reward(6.0, u_star=10.0, u_default=4.0, u_idle=6.0)   # doing nothing earns nothing
    0.0

r = clip01((u − u0) / (u* − u0)) with u0 = max(u_default, u_idle): neither the default policy
nor doing nothing (the episode finished at once) earns reward; 0 for no utility at all.
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
