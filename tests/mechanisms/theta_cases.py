"""Shared pieces of the family tests' "θ not of the declared form" cases (issue 14 item 7)."""

import numpy as np


def smallest_theta(family, seed=3):
    """A θ at the low end of every knob range, from a fixed seed."""
    knobs = {k: lo for k, (lo, _) in family.knob_ranges.items()}
    return family.sample(family.Params(**knobs), np.random.default_rng(seed))


def bumped(value, index, delta):
    """A copy of a nested list with the entry at `index` moved by `delta` (a fraction where integers are declared)."""
    if not index:
        return value + delta
    return [bumped(v, index[1:], delta) if i == index[0] else v for i, v in enumerate(value)]
