"""Presentation F: the written-out instruction, plan parsing, its gates failing when they should."""

import json

import numpy as np
import pytest

from vhd.mechanisms import registry
from vhd.schemas.errors import TrajectoryFormatError
from vhd.tasks import written
from vhd.tasks.pipeline import check_models
from vhd.tasks.sample import draw

FAMILY = registry.get("knapsack")


def _instance(seed=1):
    _, theta = draw(FAMILY, seed)
    return theta, FAMILY.solve(theta)


def test_parse_plan_refuses_what_is_not_a_plan():
    assert written.parse_plan([[1, 2], [3, 4]], integer=True).shape == (2, 2)
    for bad in ([1, "2"], [1.5], [True], [[1, 2], [3]], 7, None, [float("nan")]):
        with pytest.raises(written.InvalidPlan):
            written.parse_plan(bad, integer=True)
    assert written.parse_plan([0.5, 2], integer=False).dtype == np.float64
    with pytest.raises(written.InvalidPlan):
        written.parse_plan([float("inf")], integer=False)


def test_submission_takes_exactly_one_plan():
    plan = {"tool": written.SUBMIT, "arguments": {"plan": [1]}}
    assert written.submission([plan]) == [1]
    for bad in ([], [plan, plan], [plan, {"tool": "view_stock", "arguments": {}}]):
        with pytest.raises(TrajectoryFormatError):
            written.submission(bad)


def test_an_infeasible_plan_scores_zero_with_the_reason():
    theta, s = _instance()
    everything = [1] * theta["n_items"]
    row = written.score_plan(FAMILY, theta, s.u_star, s.u_default, everything, integer=True)
    assert row["reward"] == 0.0 and row["utility"] is None and "capacity" in row["error"]


def test_the_grader_gate_fails_when_the_stored_optimum_is_wrong():
    theta, s = _instance()
    text = written.instruction(FAMILY, theta, "x.")
    gates = dict((g, (ok, m)) for g, ok, m, _ in written.gates(FAMILY, theta, s.policy, s.u_star + 1, s.u_default,
                                                                 s.u_idle, text, 0))
    assert gates["plan_grader"][0] is False and "π*" in gates["plan_grader"][1]
    unstated = text.replace(json.dumps(theta, sort_keys=True), "{}")
    gates = dict((g, (ok, m)) for g, ok, m, _ in written.gates(FAMILY, theta, s.policy, s.u_star, s.u_default,
                                                                 s.u_idle, unstated, 0))
    assert gates["interface"][0] is False and "θ" in gates["interface"][1]


def test_the_validation_gate_fails_for_a_lenient_evaluator(monkeypatch):
    theta, s = _instance()
    lenient = FAMILY.__class__(**{**FAMILY.__dict__, "evaluate": lambda theta, plan: 0.0})
    ok, message = written.gate_plan_validation(lenient, theta, s.policy, s.u_star, s.u_default, integer=True)
    assert not ok and "scored instead of refused" in message


def test_f_candidates_go_through_the_pipeline_without_the_sandbox():
    run = check_models(FAMILY, 4, seed=2, presentations=("F",))
    assert run.verdicts and all(v.references is None for v in run.verdicts)
    admitted = [v for v in run.verdicts if v.admitted]
    assert admitted and all(v.tools[0]["name"] == written.SUBMIT for v in admitted)
    assert [g.name for g in admitted[0].gates] == ["interface", "default_band", "plan_grader", "plan_validation"]
    assert admitted[0].instruction.startswith(admitted[0].candidate.narrative)
