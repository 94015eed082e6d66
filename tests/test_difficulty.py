"""Difficulty scales with the knobs: across each family's `size` and `horizon` ranges the gap
u* − u₀ stays positive and the solved state space grows (the solve seconds that go with it are
measured by bench/solve_scaling.py and listed in docs/FAMILIES.md; no wall clock here)."""

import statistics

import pytest

from vhd.mechanisms import registry
from vhd.tasks.stages.sample import draw

FAMILIES = registry.names()
SEEDS = 3


def _corner(family, which):
    return {name: (lo if which == "low" else hi) for name, (lo, hi) in family.knob_ranges.items()}


def _solved(family, knobs):
    return [family.solve(draw(family, 20_000 + seed, knobs)[1]) for seed in range(SEEDS)]


@pytest.mark.parametrize("name", FAMILIES)
def test_gap_stays_positive_and_state_space_grows_across_the_knob_ranges(name):
    family = registry.get(name)
    assert set(family.knob_ranges) == {"size", "horizon"}, "every family has the knobs size and horizon"
    spaces = {}
    for which in ("low", "high"):
        solutions = _solved(family, _corner(family, which))
        gaps = [s.u_star - s.u_default for s in solutions]
        assert min(gaps) >= -1e-9 * max(1.0, max(abs(s.u_star) for s in solutions)), (which, gaps)
        assert statistics.fmean(gaps) > 0, f"{name} at its {which} corner: the default is optimal on average"
        spaces[which] = statistics.median(s.certificate.state_space for s in solutions)
    assert spaces["high"] > spaces["low"], f"{name}: the state space does not grow with the knobs: {spaces}"


@pytest.mark.parametrize("name", FAMILIES)
def test_knob_ranges_lie_inside_the_params_bounds(name):
    family = registry.get(name)
    for knob, (lo, hi) in family.knob_ranges.items():
        field = family.Params.model_fields[knob]
        bounds = {type(m).__name__: getattr(m, type(m).__name__.lower(), None) for m in field.metadata}
        assert bounds.get("Ge", lo) <= lo <= hi <= bounds.get("Le", hi), (knob, bounds, (lo, hi))
        assert field.description, f"{name}.{knob} needs a description with its unit"
