"""Registry-wide contract: every family, the same generic checks (reasoning-gym's key test).

The checks themselves are in vhd/tasks/family_check.py, which `vhd family-check NAME` runs too: each
answers the problems it found (one line each, saying what to fix), and a test here wants none."""

import pytest

from family_kit import PASSAGES, gated
from vhd.mechanisms import registry
from vhd.tasks import family_check as fc

FAMILIES = registry.names()


@pytest.mark.registry
def test_registry_discovers_families():
    assert "inventory_dp" in FAMILIES


@pytest.mark.parametrize("name", FAMILIES)
def test_optimal_replay_scores_one_and_default_zero(name):
    """On three seeds with a positive reward span, π*'s calls score 1 on the module, the default's 0."""
    assert fc.check_scores(registry.get(name)) == []


@pytest.mark.parametrize("name", FAMILIES)
def test_same_seed_same_theta_and_theta_is_json(name):
    assert fc.check_draw(registry.get(name)) == []


@pytest.mark.parametrize("name", FAMILIES)
def test_solution_dominates_reference_policies(name):
    assert fc.check_dominance(registry.get(name)) == []


@pytest.mark.parametrize("name", FAMILIES)
def test_tool_spec_is_complete(name):
    assert fc.check_tool_table(registry.get(name)) == []


@pytest.mark.parametrize("name", FAMILIES)
def test_written_out_presentation_grades_plans(name):
    """F on every family: π* as JSON scores 1, the default 0, and every F gate passes."""
    assert fc.check_written(registry.get(name)) == []


@pytest.mark.parametrize("name", FAMILIES)
def test_the_world_declares_its_tools(name):
    """The tool table is the World's `@tool` declarations: one per `tool_*` method, none without
    a method, the runtime's `BaseWorld` underneath (state table, log, skin)."""
    assert fc.check_world_tools(registry.get(name)) == []


@pytest.mark.parametrize("name", FAMILIES)
def test_every_passage_renders_unique_valid_tool_names(name):
    assert len(PASSAGES) == len(fc.builtin_passages())
    assert fc.check_passage_names(registry.get(name)) == []


REPLAYED = fc.replayed_passages()  # the World is the same in every passage; its words and names are not


@pytest.mark.parametrize("k", REPLAYED)
@pytest.mark.parametrize("name", FAMILIES)
def test_the_module_replays_the_reference_plans(name, k):
    """In passage k's words the module plays π*, the default, the idle and a random plan on two
    episode seeds, in I and A, to the utility of the family's own simulator, ending the episode."""
    assert fc.check_replay(registry.get(name), k) == []


@pytest.mark.parametrize("name", FAMILIES)
def test_the_gates_admit_the_family_in_both_presentations(name):
    """Six sampled models through the real gates: every rejection is the model's own default band,
    and at least half of the candidates are admitted in each presentation."""
    family = registry.get(name)
    assert fc.check_gates(family, gated(family)) == []


@pytest.mark.parametrize("name", FAMILIES)
def test_the_module_declares_every_required_name(name):
    assert fc.names_check(registry.get(name)).problems == []
