"""Budgets that bind in presentation A (issue 26): every paper family's turn budget leaves no room
to read everything beside π*'s play, yet room for the probes π*'s decisions depend on; the
default_band gate admits an A environment only where that holds (vhd/tasks/stages/check/budget.py)."""

from __future__ import annotations

import dataclasses

import pytest

from family_kit import gated
from vhd.tasks.stages.check.budget import measure, why_not
from vhd.mechanisms import registry
from vhd.tasks.stages.check.planning import budget_binds
from vhd.tasks.corpus.presets import preset
from vhd.tasks.stages.sample import draw

PAPER = sorted({slot.family for slot in preset("paper", registry.all()).slots})
# π*'s plan depends on every number pandora hides (every box's reservation value): no reading short
# of all of them keeps 95 % of the span, so no budget sits between them (docs/FAMILIES.md)
EVERY_PROBE_NEEDED = ("pandora",)
# the measure is too dear for a gate (and for this test): a Bellman solve per probe tried, seconds
# per θ; FAMILIES.md gives its binding share from bench/budgets.py
UNGATED = ("inventory_dp",)
BINDING = [f.name for f in registry.all() if f.budget_binds]
DRAWS = 24


@pytest.mark.registry
def test_every_paper_family_but_those_named_here_declares_a_binding_budget():
    assert sorted(set(PAPER) - set(EVERY_PROBE_NEEDED) - set(UNGATED)) == sorted(set(PAPER) & set(BINDING))


@pytest.mark.parametrize("name", BINDING)
def test_the_budget_binds_for_most_sampled_theta_in_the_band(name):
    """The gate rejects an A candidate whose budget does not bind; the family's budget formula must
    bind for at least 40 % of the θ in the band, or A slots cost over 2.5 candidates each."""
    family = registry.get(name)
    verdicts = []
    for seed in range(DRAWS):
        _, theta = draw(family, 7_000 + seed)
        s = family.solve(theta)
        position = family.default_position(s.u_star, s.u_default, s.u_idle)
        if family.default_band[0] <= position <= family.default_band[1]:
            verdicts.append(measure(family, theta, s).why_not())
    binding = sum(not why for why in verdicts)
    assert len(verdicts) >= DRAWS // 3 and binding >= 0.4 * len(verdicts), (binding, len(verdicts), verdicts)


@pytest.mark.parametrize("name", sorted(set(PAPER) & set(EVERY_PROBE_NEEDED)))
def test_where_no_budget_binds_every_probe_is_needed(name):
    """What FAMILIES.md says of these families: their needed reading is (nearly) the full one, so no
    budget can sit between them; reading everything beside π*'s play never fits either."""
    family = registry.get(name)
    for seed in range(8):
        _, theta = draw(family, 7_000 + seed)
        b = measure(family, theta)
        assert b.play + b.full_reading > b.budget, b
        assert b.needed_reading >= b.full_reading - max(3, b.full_reading // 4), b


@pytest.mark.parametrize("name", BINDING)
def test_the_verdict_is_the_full_measures_at_every_budget_around_its_thresholds(name):
    """`why_not` stops reducing the needed reading once it fits, and skips it when everything
    fits: at every budget from below play + needed to past play + full its message is the one the
    full measure gives, figures included."""
    family = registry.get(name)
    for seed in range(3):
        _, theta = draw(family, 7_000 + seed)
        s = family.solve(theta)
        b = measure(family, theta, s)
        low, high = b.play + b.needed_reading - 2, b.play + b.full_reading + 1
        budgets = sorted({*range(low, min(high, low + 4) + 1), *range(max(low, high - 3), high + 1), b.budget})
        for budget in budgets:
            assert why_not(family, theta, s, budget) == dataclasses.replace(b, budget=budget).why_not(), (seed, budget)


def test_the_gate_rejects_an_a_candidate_whose_budget_does_not_bind_and_admits_only_binding_ones():
    family = registry.get("knapsack")
    run = gated(family)
    a = [v for v in run.verdicts if v.candidate.presentation == "A"]
    assert a and all(measure(family, v.candidate.model.theta, budget=v.candidate.turn_budget).binds
                     for v in a if v.admitted)
    candidate = a[0].candidate
    b = measure(family, candidate.model.theta, budget=candidate.turn_budget)
    roomy = dataclasses.replace(candidate, turn_budget=b.play + b.full_reading)
    tight = dataclasses.replace(candidate, turn_budget=b.play + b.needed_reading - 1)
    assert budget_binds(family, roomy) == (False, "in presentation A " + dataclasses.replace(
        b, budget=roomy.turn_budget).why_not())
    assert "reading everything" in budget_binds(family, roomy)[1]
    assert not budget_binds(family, tight)[0] and "do not fit" in budget_binds(family, tight)[1]
    fitting = dataclasses.replace(candidate, turn_budget=b.play + b.full_reading - 1)
    assert budget_binds(family, fitting)[0] == (b.needed_reading < b.full_reading)
    assert budget_binds(family, dataclasses.replace(roomy, presentation="I"))[0]


def test_the_measure_is_the_families_own_reading():
    """The full reading of a family whose probes each show one entry is one probe per entry, the
    sticker dropped; π*'s play in a deterministic family skips decisions the World shows change
    nothing (scheduling: jobs left for machine 0)."""
    family = registry.get("scheduling")
    _, theta = draw(family, 11)
    b = measure(family, theta)
    assert b.full_reading == theta["n_jobs"]  # every job inspected; the job list adds nothing then
    pi = family.solve(theta).policy
    on_other_machines = sum(1 for k in pi if k > 0)
    assert b.play <= on_other_machines + 1 < theta["n_jobs"] + 1
