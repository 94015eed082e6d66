"""The checker self-test: mutants of an admitted module, each judged by every gate."""

import json

import numpy as np
import pytest

from conftest import run_vhd
from vhd.mechanisms import registry
from vhd.tasks.stages.check import check_batch
from vhd.tasks.stages.in_process import check_models
from vhd.tasks.stages.check.mutants import mutants
from vhd.tasks.stages.check.selftest import selftest

FAMILY = registry.get("inventory_dp")


@pytest.fixture(scope="module")
def admitted():
    run = check_models(FAMILY, 4, seed=1)
    output = run.outputs[0]
    chosen = [v.candidate for v in run.verdicts if v.admitted
              and v.candidate.setter_output.setter_output_id == output.setter_output_id]
    assert {c.presentation for c in chosen} == {"I", "A"}
    return output, chosen[:3]


def test_every_operator_makes_a_compiling_mutant_that_differs(admitted):
    output, candidates = admitted
    made = mutants(FAMILY, output, candidates[0].model.theta, 1.0, np.random.default_rng(0))
    assert {m.operator for m in made} == {"flip_operator", "scale_cost", "drop_check", "shift_horizon", "free_probe",
                                          "leak_hidden", "constant_utility", "stale_state"}
    for mutant in made:
        assert mutant.module != output.module
        compile(mutant.module, "mutant.py", "exec")


def test_selftest_rejects_the_named_bugs_and_no_correct_module(admitted):
    output, candidates = admitted
    report = selftest({FAMILY.name: [(output, candidates)]}, {FAMILY.name: FAMILY}, seed=0)
    row = report["families"][FAMILY.name]
    assert report["false_rejections"] == 0 and report["mutants"] == row["mutants"] >= 7
    for operator in ("drop_check", "shift_horizon", "free_probe", "leak_hidden", "constant_utility"):
        counts = row["by_operator"][operator]
        assert counts["rejected"] == counts["mutants"] > 0, (operator, counts, row["survivors"])
    assert report["rejected"] + report["survivors"] == report["mutants"]
    assert all(s["diff"].startswith("@@") for s in row["survivors"])


def test_selftest_command_reports_totals(prefect_server, refreshed):
    db, _ = refreshed
    result = run_vhd(prefect_server, "selftest", "--families", "inventory_dp", "--modules", "1", "--envs", "2",
                     "--db", db, "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert {"mutants", "rejected", "survivors", "false_rejections"} <= set(report)
    assert set(report["families"]) == {"inventory_dp"} and report["mutants"] > 0
    missing = run_vhd(prefect_server, "selftest", "--families", "nope", "--db", db)
    assert missing.returncode == 1 and "unknown family 'nope'" in missing.stderr


def test_a_planted_side_channel_is_rejected_by_information_hiding():
    """A decision's answer that echoes a hidden entry no probe read (issue 26): the twin compares
    every answer after accepted decisions too, so the mutant is rejected in presentation A, while
    the module it was made from passes the same gate on the same candidates."""
    family = registry.get("facility")
    run = check_models(family, 4, seed=1, presentations=("A",))
    output = run.outputs[0]
    mine = [c for c in run.candidates if c.setter_output.setter_output_id == output.setter_output_id]
    planted = [m for m in mutants(family, output, mine[0].model.theta, 0.0, np.random.default_rng(0))
               if m.operator == "side_channel"]
    assert len(planted) == 1 and "tool_open_site" in planted[0].where
    original = [v for v in run.verdicts if v.candidate in mine]
    assert all(g.passed for v in original for g in v.gates if g.name == "information_hiding")
    wrong = output.model_copy(update={"module": planted[0].module})
    for verdict in check_batch(family, wrong, mine, every_candidate=True):
        gate = next(g for g in verdict.gates if g.name == "information_hiding")
        assert not gate.passed and "open_site" in gate.message and "differs" in gate.message, gate.message
