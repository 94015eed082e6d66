"""Presentation A as the paper specifies it, and tool schemas fitted to the instance (issue 16).

For the paper's eleven families: no probe dumps a whole table (each shows one entry or one row
per call, or is a noisy estimate); the turn budget leaves room for π*'s play and only part of the
probing; `probe_calls` and `belief` describe what the probes show; and the `prober` agent — read
what it can afford, then play the optimum of what it read — scores 1 in I and clearly below 1
in A. For every family: the tool list of presentation A does not change with hidden θ (its
schemas' bounds come only from what the instruction tells), and every fitted bound narrows the
family's own schema.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from vhd.agents.prober import probe_then_play, reads_probes
from vhd.mechanisms import registry
from vhd.tasks.grading.step_advantages import decision_grade
from vhd.tasks.stages.check.budget import reserved_turns, turns_of
from vhd.tasks.stages.check import to_calls
from vhd.tasks.stages.check.sequences import perturbed
from vhd.tasks.grading.oracle import reference_module
from vhd.tasks.stages.sample import draw

PAPER = [f.name for f in registry.all() if f.group != "beyond"]
ALL = registry.names()
THETAS = 6           # θ draws per family for the prober's mean
CLEARLY_BELOW = 0.95  # "a mean clearly below 1" in A


def thetas(family, count=3, first=0):
    return [draw(family, 7_000 + first + k)[1] for k in range(count)]


def admissible(family, count, first):
    """The first `count` θ (from seed 7,000 + `first` on) that the default_band gate admits: where the
    default is already optimal there is no span to score (π* earns 0), and no such θ is admitted."""
    found, seed = [], 7_000 + first
    while len(found) < count:
        theta = draw(family, seed)[1]
        solution = family.solve(theta)
        low, high = family.default_band
        position = family.default_position(solution.u_star, solution.u_default, solution.u_idle)
        if low <= position <= high and solution.u_star > max(solution.u_default, solution.u_idle):
            found.append((theta, solution))
        seed += 1
    return found


def twin(family, theta):
    """θ with every hidden number moved (the information-hiding gate's twin)."""
    return {k: perturbed(v) if k in family.hidden else v for k, v in theta.items()}


def env(family, theta, presentation, seed=0, budget=None):
    module, _ = reference_module(family)
    return module.create({"params": theta, "presentation": presentation, "episode_seed": seed,
                          "turn_budget": budget or family.turn_budget(theta)})


def canonical_tools(family, env_):
    _, output = reference_module(family)
    names = {b.name: b.canonical for b in output.interface}
    return {names[t["name"]]: t["input_schema"] for t in env_.tools}


@pytest.mark.parametrize("name", PAPER)
def test_no_probe_dumps_a_table(name):
    """Each probe shows one entry (it takes the entry's id) or one row (one θ field of at most one
    dimension), or is a noisy estimate."""
    family = registry.get(name)
    for theta in thetas(family):
        for spec in family.tools_with_role("probe"):
            if spec.noisy or spec.input_schema.get("required"):
                continue
            shapes = [np.shape(theta[key]) for key in spec.reveals]
            assert len(spec.reveals) == 1 and len(shapes[0]) <= 1, (
                f"{spec.name} reveals {list(spec.reveals)} of shapes {shapes} in one call: a whole table")


@pytest.mark.parametrize("name", PAPER)
def test_belief(name):
    """belief(θ, every probe call) is θ; belief(θ, nothing read) does not depend on hidden θ; every
    probe call is accepted in A."""
    family = registry.get(name)
    assert reads_probes(family), f"{name} declares no probe_calls/belief"
    for theta in thetas(family):
        calls = family.probe_calls(theta)
        assert family.belief(theta, calls) == theta
        blind, blind_twin = family.belief(theta, []), family.belief(twin(family, theta), [])
        assert {k: blind[k] for k in family.hidden} == {k: blind_twin[k] for k in family.hidden}
        assert set(blind) == set(theta)
        family.solve(blind)  # a guess the family's solver takes
        episode = env(family, theta, "A", budget=turns_of(family, calls) + 1)
        _, output = reference_module(family)
        refused = [(call, answer) for call in to_calls(output, calls)
                   for answer in [episode.call(call["tool"], call["arguments"])] if not answer["ok"]]
        assert not refused


@pytest.mark.parametrize("name", PAPER)
def test_budget_leaves_only_part_of_the_probing(name):
    """After π*'s own play (its longest over the prober's fixed seeds in a stochastic family: what a
    player keeps back before it sees the draws), the budget affords at least one probe but not all
    of them."""
    family = registry.get(name)
    for theta in thetas(family):
        optimum = family.solve(theta)
        spare = family.turn_budget(theta) - reserved_turns(family, theta, optimum.policy)
        cheapest = min(spec.turn_cost for spec in family.tools_with_role("probe"))
        assert cheapest <= spare < turns_of(family, family.probe_calls(theta))


@pytest.mark.parametrize("name", PAPER)
def test_prober_scores_one_in_i_and_below_one_in_a(name):
    family = registry.get(name)
    scores = {"I": [], "A": []}
    for k, (theta, solution) in enumerate(admissible(family, THETAS, first=100)):
        expected = {"u_star": solution.u_star, "u_default": solution.u_default, "u_idle": solution.u_idle}
        for presentation in scores:
            budget = family.turn_budget(theta)
            read, play = probe_then_play(family, theta, presentation, budget, k)
            config = {"params": theta, "presentation": presentation, "episode_seed": k, "turn_budget": budget}
            scores[presentation].append(decision_grade(family, config, read + play, expected)["reward"])
    assert scores["I"] == [1.0] * THETAS
    assert statistics.mean(scores["A"]) < CLEARLY_BELOW, scores["A"]


@pytest.mark.parametrize("name", ALL)
def test_a_tool_list_does_not_move_with_hidden_theta(name):
    """The A schemas' bounds use only what the instruction tells; every fitted bound is within the
    family's own schema."""
    family = registry.get(name)
    static = {spec.name: spec.input_schema for spec in family.tools}
    for theta in thetas(family, 2):
        assert env(family, theta, "A").tools == env(family, twin(family, theta), "A").tools
        for presentation in ("I", "A"):
            for tool, schema in canonical_tools(family, env(family, theta, presentation)).items():
                for argument, spec in schema["properties"].items():
                    own = static[tool]["properties"][argument]
                    assert own.get("minimum", -np.inf) <= spec.get("minimum", -np.inf) <= spec.get("maximum", np.inf)
                    assert spec.get("maximum", np.inf) <= own.get("maximum", np.inf)


@pytest.mark.registry
def test_families_json_lists_per_entry_and_noisy_probes():
    """`vhd families --json` says, per paper family, which probes show one entry a call or are stickers."""
    import json

    from typer.testing import CliRunner

    from vhd.cli import app

    result = CliRunner().invoke(app, ["families", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    for name in PAPER:
        row, family = rows[name], registry.get(name)
        assert row["per_entry_probes"] == [t.name for t in family.tools_with_role("probe") if t.input_schema.get("required")]
        assert row["noisy_probes"] == [t.name for t in family.tools_with_role("probe") if t.noisy]
        assert row["per_entry_probes"] or row["noisy_probes"], name
        assert {p["name"] for p in row["probes"]} == {t.name for t in family.tools_with_role("probe")}
