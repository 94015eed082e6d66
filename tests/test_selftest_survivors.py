"""Regression tests for the self-test survivors closed in the families (docs/RELIABILITY.md, the
selftest section): pandora's cap now binds in every sampled θ, near-boundary sequences reach
ecommerce's cash check and qp's budget at budget + TOL, and write-only state is gone from the
Worlds."""

import ast
import re

import numpy as np
import pytest

from vhd.mechanisms import registry
from vhd.tasks.stages.check import reference_module
from vhd.tasks.stages.sample import draw

from test_boundary_gates import _admitted, _rejected_by_reference_agreement


@pytest.fixture(scope="module")
def pandora():
    return _admitted("pandora")


def test_pandora_samples_a_binding_cap():
    family = registry.get("pandora")
    for seed in range(40):
        _, theta = draw(family, seed)
        assert 1 <= theta["max_open"] < theta["n_boxes"], theta


@pytest.mark.parametrize("new", ['if used > self.p["max_open"]:', 'if used >= 2 * self.p["max_open"]:'])
def test_pandora_cap_mutants_are_rejected(pandora, new):
    """Self-test survivors (equivalent while every sampled cap was n_boxes): the cap `>=` → `>`
    and the cap doubled. (The cap dropped: tests/test_boundary_gates.py.)"""
    _rejected_by_reference_agreement(*pandora, 'if used >= self.p["max_open"]:', new)


def test_ecommerce_without_cash_check_on_an_order_is_rejected():
    """Self-test survivor: the cash check on an order dropped. The boundary sequence sells the
    stock out and offers a full order every day while the cash drains."""
    family, output, candidates = _admitted("ecommerce", n=1)
    _rejected_by_reference_agreement(family, output, candidates, "if cost > cash:", "if False:")


def test_qp_budget_tolerance_is_rejected():
    """Self-test survivor: `total > budget + TOL` → `>=`; the boundary sequence makes the total
    budget + TOL to the last bit."""
    family, output, candidates = _admitted("qp", n=2)
    old = next(line.strip() for line in output.module.splitlines() if "if total > self.p[" in line and "budget" in line)
    _rejected_by_reference_agreement(family, output, candidates, old, old.replace("total >", "total >="))


@pytest.mark.registry
def test_no_world_keeps_a_state_key_it_never_reads():
    """Write-only state (a step counter no observation or utility reads) is dead code rendered into
    every module, and its mutants can never be rejected: every key a World `_set`s is `_get` too."""
    for name in registry.names():
        _, output = reference_module(registry.get(name))
        world = output.module[output.module.index("\nclass World"):]
        tree = ast.parse(world[:world.index("\nSKIN = json.loads(")])
        written, read = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                (written if node.func.attr == "_set" else read if node.func.attr == "_get" else set()).add(
                    node.args[0].value)
        assert written <= read, f"{name} writes state keys it never reads: {sorted(written - read)}"
        assert not re.search(r"\bsteps\b", world.split("def instruction")[0]), f"{name} still keeps a step counter"


def test_facility_utility_before_the_end_scores_the_null_plan():
    family = registry.get("facility")
    module, _ = reference_module(family)
    _, theta = draw(family, 3)
    env = module.create({"params": theta, "presentation": "I", "episode_seed": 0,
                         "turn_budget": family.turn_budget(theta)})
    null_plan = theta["opening_costs"][0] + sum(row[0] for row in theta["service_costs"])
    assert env.outcome()["utility"] == -null_plan
