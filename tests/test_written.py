"""Presentation F: the written-out instruction, plan parsing, its gates failing when they should."""

import doctest
import json

import numpy as np
import pytest
from jsonschema import Draft202012Validator

import vhd.mechanisms._plan as plan_module
from vhd.mechanisms import registry
from vhd.mechanisms._plan import PlanSpec
from vhd.schemas.errors import TrajectoryFormatError
from vhd.tasks.grading import written
from vhd.tasks.stages.in_process import check_models
from vhd.tasks.stages.sample import draw

FAMILY = registry.get("knapsack")
# what every family's malformed plans must include (issue 14, item 6)
REQUIRED = {"an entry below its minimum", "an entry past its maximum", "an entry past int64", "a bool entry",
            "one row too many", "one more dimension", "a nested entry", "a string", "a string entry", "null",
            "a null entry", "nested 1500 deep", "a deeply nested entry", "a NaN entry"}


def _instance(seed=1):
    _, theta = draw(FAMILY, seed)
    return theta, FAMILY.solve(theta)


def test_a_plan_spec_refuses_what_is_not_a_plan():
    table = PlanSpec(shape=(2, 2), integer=True, low=0, high=4)
    assert table.check([[1, 2], [3, 4]]).dtype == np.int64 and table.check(np.array([[1, 2], [3, 4]], np.int8)).shape == (2, 2)
    for bad in ([[1, "2"], [3, 4]], [[1.0, 2], [3, 4]], [[True, 2], [3, 4]], [[1, 2], [3]], [[1, 2], [3, 4, 0]],
                [[1, 2]], [[1, 2], [3, 4], [0, 0]], [1, 2], [[[1], 2], [3, 4]], 7, None, "[[1, 2], [3, 4]]",
                [[float("nan"), 2], [3, 4]], [[-1, 2], [3, 4]], [[1, 5], [3, 4]], [[2 ** 64, 2], [3, 4]],
                {"plan": [[1, 2], [3, 4]]}, np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[True, False], [True, True]]),
                np.array([[1, 2], [3, 4]]).astype(str), np.array([[1, 2], [3, 4]], dtype=object)[None],
                np.array([[1, -1], [3, 4]]), np.array([[1, 2], [3, 2 ** 40]])):
        with pytest.raises(written.InvalidPlan) as refused:
            table.check(bad)
        assert "\n" not in str(refused.value) and "expected" in str(refused.value), bad
    real = PlanSpec(shape=(2,), integer=False, low=0, high=np.array([1.0, 2.0]), tolerance=1e-9)
    assert real.check([0.5, 2]).dtype == np.float64 and real.check([1 + 1e-10, 0]).tolist() == [1 + 1e-10, 0.0]
    for bad in ([float("inf"), 0], [0.5, 2.1], [-0.0001, 0], [False, 1], [10 ** 400, 0], ["1", 0]):
        with pytest.raises(written.InvalidPlan):
            real.check(bad)
    prefix = PlanSpec(shape=(3,), integer=True, low=0, high=2, min_length=0)
    assert prefix.check([]).shape == (0,) and prefix.check(np.zeros(0)).shape == (0,)
    with pytest.raises(written.InvalidPlan):
        prefix.check([0, 1, 2, 0])


def test_a_varying_bound_names_the_entry_and_its_own_range():
    spec = PlanSpec(shape=(2, 3), integer=True, low=0, high=np.array([4, 3, 2]))
    with pytest.raises(written.InvalidPlan, match=r"^entry \[1, 2\] is 3; expected an integer in 0 … 2 "):
        spec.check([[0, 0, 0], [0, 0, 3]])
    schema = spec.schema()
    Draft202012Validator.check_schema(schema)
    assert [item["maximum"] for item in schema["items"]["prefixItems"]] == [4, 3, 2]
    assert doctest.testmod(plan_module).failed == 0


def test_deep_nesting_is_one_line_never_a_recursion_error():
    theta, s = _instance()
    for depth in (1500, 100_000):
        deep = []
        for _ in range(depth):
            deep = [deep]
        for plan in (deep, [deep] + s.policy.tolist()[1:], s.policy.tolist()[:-1] + [deep]):
            row = written.score_trajectory(FAMILY, theta, s.u_star, s.u_default,
                                           [{"tool": written.SUBMIT, "arguments": {"plan": plan}}])
            assert row["reward"] == 0.0 and row["utility"] is None and "\n" not in row["error"], row
            assert row["error"].startswith("invalid plan: ") and len(row["error"]) <= written.MESSAGE_CHARS


def test_submission_takes_exactly_one_plan():
    plan = {"tool": written.SUBMIT, "arguments": {"plan": [1]}}
    assert written.submission([plan]) == [1]
    for bad in ([], [plan, plan], [plan, {"tool": "view_stock", "arguments": {}}], [7], "plan",
                [{"tool": written.SUBMIT, "arguments": {"plan": [1], "note": "x"}}],
                [{"tool": written.SUBMIT, "arguments": {}}], [{"tool": written.SUBMIT, "arguments": [1]}]):
        with pytest.raises(TrajectoryFormatError) as refused:
            written.submission(bad)
        assert "\n" not in str(refused.value)


def test_an_infeasible_plan_scores_zero_with_the_reason():
    theta, s = _instance()
    everything = [1] * theta["n_items"]
    row = written.score_plan(FAMILY, theta, s.u_star, s.u_default, everything)
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


def _graded(family, seeds=range(12)):
    """The first θ whose F environment has a reward span, with its grader's (u*, u₀)."""
    for seed in seeds:
        _, theta = draw(family, seed)
        s = family.solve(theta)
        u_star, u_default = written.graded_values(family, theta, s.policy)
        if u_star - u_default > 1e-9 * max(1.0, abs(u_star)):
            return theta, s, u_star, u_default
    raise AssertionError(f"{family.name}: no θ with a reward span on {len(seeds)} seeds")


@pytest.mark.parametrize("name", registry.names())
def test_every_family_refuses_every_non_plan_with_one_line(name):
    """Issue 14 item 6, registry-wide: π* scores 1.0; plans derived from it with one entry −1 (below
    its minimum), past its maximum, a float, a bool, a string, null, one entry too few or too many,
    the wrong nesting, or nested 1500 deep are refused with one line naming the entry (or the plan)
    and the expected form, reward 0 — and `evaluate` refuses the same mistakes made on numpy arrays."""
    family = registry.get(name)
    theta, s, u_star, u_default = _graded(family)
    best = written.score_trajectory(family, theta, u_star, u_default, written.calls_for(s.policy))
    assert best["error"] is None and best["reward"] == 1.0, best
    spec = family.plan_spec(theta)
    Draft202012Validator.check_schema(spec.schema())
    if spec.integer:  # JSON Schema's own validator agrees that π* has the declared form
        assert not list(Draft202012Validator(spec.schema()).iter_errors(s.policy.tolist()))
    bad = written.malformed_plans(spec, s.policy)
    missing = REQUIRED - set(bad)
    assert not missing, missing
    if spec.integer:
        assert "a float entry" in bad
    if spec.min_length is None:
        assert "one row too few" in bad
    if spec.bounds(tuple(n - 1 for n in s.policy.shape))[0] > -1:  # −1 is no entry there: it must not count from the end
        assert "−1 in the last entry" in bad
    for what, plan in bad.items():
        trajectory = [{"tool": written.SUBMIT, "arguments": {"plan": plan}}]
        row = written.score_trajectory(family, theta, u_star, u_default, trajectory)
        assert row["reward"] == 0.0 and row["utility"] is None, (what, row)
        message = row["error"]
        assert message.startswith("invalid plan: ") and "\n" not in message, (what, message)
        assert len(message) <= written.MESSAGE_CHARS and "expected" in message, (what, message)
        assert "entry [" in message or "the plan is" in message, (what, message)
    for what, array in written.malformed_arrays(spec, s.policy).items():
        with pytest.raises(ValueError) as refused:
            family.evaluate(theta, array)
        assert "\n" not in str(refused.value), (what, str(refused.value))
    assert family.evaluate(theta, s.policy) == u_star  # the checks changed nothing for a valid plan


def test_inventory_dp_minus_one_is_refused_not_read_from_the_end():
    """Regression (issue 14, 'F plans'): an entry −1 indexed numpy from the end, i.e. 'order capacity',
    and such a plan scored 0.9998."""
    family = registry.get("inventory_dp")
    theta, s, u_star, u_default = _graded(family)
    plan = s.policy.tolist()
    plan[0][0] = -1  # day 0, empty store: −1 used to mean "order capacity"
    row = written.score_plan(family, theta, u_star, u_default, plan)
    assert row["reward"] == 0.0 and row["utility"] is None
    assert row["error"] == (f"invalid plan: entry [0, 0] is -1; expected an integer in 0 … {theta['capacity']} "
                            f"(a plan is an integer array of shape {list(s.policy.shape)})")
    with pytest.raises(ValueError, match=r"entry \[0, 0\] is -1"):
        family.evaluate(theta, np.array(plan))
    for huge in (40_000, 2 ** 70):  # past int16 (the policy's dtype) and past int64
        plan[0][0] = huge
        assert written.score_plan(family, theta, u_star, u_default, plan)["error"].startswith("invalid plan: entry [0, 0]")
