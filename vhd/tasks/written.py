"""Presentation F, written out: the whole instance in the prompt, one plan submitted once.

    >>> text = instruction(family, theta, narrative="A bakery sells sourdough.")
    >>> score_plan(family, theta, solution, pi_star.tolist())["reward"]
    1.0

DESIGN §5: F is rendered by the pipeline from θ, never by a generated module. The player
reads the family's model, every parameter of θ as JSON and the family's plan format, and
answers with one `submit_plan` call. The family's exact evaluator scores the plan in
expectation, so u* and u₀ of an F environment are the solution's expected values and the
reward is r = clip01((E[u(plan)] − u₀) / (u* − u₀)). No player code runs anywhere, so the
F gates run in this process: they prove the rendering is complete and that the grader gives
π* reward 1, the default 0, no plan more than 1, and refuses malformed plans.
"""

from __future__ import annotations

import json
import math
import textwrap
import time
from typing import Any

import numpy as np
from jsonschema import Draft202012Validator

from vhd.mechanisms import Family
from vhd.schemas.errors import TrajectoryFormatError
from vhd.tasks.score import reward

SUBMIT = "submit_plan"
TURN_BUDGET = 1
RANDOM_PLANS = 4


class InvalidPlan(ValueError):
    """A submitted plan that is not a plan of this family for this θ."""


def model_text(family: Family) -> str:
    """The `Model` section of the family's docstring, dedented."""
    doc = family.doc or ""
    start = doc.find("\nModel\n")
    end = doc.find("\nState\n", start + 1)
    if start < 0 or end < 0:
        raise ValueError(f"{family.name}'s docstring lacks its Model/State sections")
    return textwrap.dedent(doc[start + len("\nModel\n"):end]).strip()


def tools(family: Family) -> list[dict[str, Any]]:
    """The one tool of an F environment, in the same shape as a module's tools."""
    return [{
        "name": SUBMIT,
        "description": "Submit your plan for the whole instance, once; it is scored in expectation and ends the "
                       "episode. The plan is " + family.plan_format,
        "input_schema": {"type": "object", "properties": {"plan": {"type": "array", "description": family.plan_format}},
                         "required": ["plan"], "additionalProperties": False},
    }]


def instruction(family: Family, theta: dict[str, Any], narrative: str) -> str:
    """The written-out problem: narrative, model, θ in full, the answer format."""
    return "\n".join([
        narrative,
        "",
        f"This is a {family.model_class} problem ({family.name}), written out in full. The model:",
        "",
        model_text(family),
        "",
        "The instance — every parameter, as JSON (the names are the ones the model uses):",
        json.dumps(theta, sort_keys=True),
        "",
        f"Answer with exactly one call to {SUBMIT} with {{\"plan\": ...}}, where the plan is {family.plan_format}",
        "The plan is scored by its expected utility u under the model: your reward is (u − u0) / (u* − u0) clipped "
        "to [0, 1], where u* is the optimum and u0 the utility of the family's default policy. You submit once.",
    ])


def _numbers(value: Any, integer: bool) -> bool:
    if isinstance(value, list):
        return all(_numbers(v, integer) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) if integer else math.isfinite(value)


def parse_plan(plan: Any, integer: bool) -> np.ndarray:
    """A JSON plan as a numpy array: a (nested, rectangular) list of integers or finite numbers."""
    if not isinstance(plan, list) or not _numbers(plan, integer):
        raise InvalidPlan(f"a plan is a (nested) list of {'integers' if integer else 'finite numbers'}")
    try:
        array = np.array(plan, dtype=np.int64 if integer else np.float64)
    except (ValueError, OverflowError) as exc:
        raise InvalidPlan(f"a plan must be a rectangular list of numbers ({exc})") from None
    return array


def plan_utility(family: Family, theta: dict[str, Any], plan: Any, integer: bool) -> float:
    """E[u] of a submitted plan under the family's exact evaluator; InvalidPlan if it is no plan."""
    array = parse_plan(plan, integer)
    try:
        value = float(family.evaluate(theta, array))
    except (ValueError, IndexError, TypeError) as exc:
        raise InvalidPlan(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    if not math.isfinite(value):
        raise InvalidPlan(f"the plan's utility is {value}")
    return value


def graded_values(family: Family, theta: dict[str, Any], policy: np.ndarray) -> tuple[float, float]:
    """(u*, u₀) of an F environment as its grader computes them: the evaluator's values of π*
    and of the default plan, so that π* scores exactly 1 and the default exactly 0 (the
    plan_grader gate proves they equal the solver's to 1e-6)."""
    return float(family.evaluate(theta, policy)), float(family.evaluate(theta, family.default_policy(theta)))


def submission(trajectory: list[dict[str, Any]]) -> Any:
    """The plan of an F trajectory: its one `submit_plan` call."""
    calls = [step for step in trajectory if step.get("tool") == SUBMIT]
    others = sorted({step.get("tool") for step in trajectory} - {SUBMIT})
    if others:
        raise TrajectoryFormatError(f"presentation F has one tool, {SUBMIT}; the trajectory calls {others}")
    if len(calls) != 1:
        raise TrajectoryFormatError(f"presentation F takes exactly one {SUBMIT} call, got {len(calls)}")
    return calls[0]["arguments"].get("plan")


def calls_for(policy: np.ndarray) -> list[dict[str, Any]]:
    """The one-call trajectory that submits `policy`."""
    return [{"tool": SUBMIT, "arguments": {"plan": np.asarray(policy).tolist()}}]


def score_plan(family: Family, theta: dict[str, Any], u_star: float, u_default: float, plan: Any,
               integer: bool) -> dict[str, Any]:
    try:
        utility = plan_utility(family, theta, plan, integer)
    except InvalidPlan as exc:
        return {"utility": None, "reward": 0.0, "error": f"invalid plan: {exc}", "terminal": True}
    return {"utility": utility, "reward": reward(utility, u_star, u_default), "error": None, "terminal": True}


def _leaves_are_ints(value: Any) -> bool:
    if isinstance(value, list):
        return all(_leaves_are_ints(v) for v in value)
    return isinstance(value, int) and not isinstance(value, bool)


def score_trajectory(family: Family, theta: dict[str, Any], u_star: float, u_default: float,
                     reference: list[dict[str, Any]], trajectory: list[dict[str, Any]]) -> dict[str, Any]:
    """Score one F trajectory; plans are integer when the reference plan (π*) is."""
    integer = _leaves_are_ints(reference[0]["arguments"]["plan"])
    try:
        plan = submission(trajectory)
    except TrajectoryFormatError as exc:
        return {"utility": None, "reward": 0.0, "error": str(exc), "terminal": True}
    return score_plan(family, theta, u_star, u_default, plan, integer)


# --- the F gates -----------------------------------------------------------------------------


def _close(a: float, b: float) -> bool:
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def gate_interface(family: Family, theta: dict[str, Any], text: str, policy: np.ndarray) -> tuple[bool, str]:
    try:
        for tool in tools(family):
            Draft202012Validator.check_schema(tool["input_schema"])
    except Exception as exc:  # jsonschema.SchemaError
        return False, f"{SUBMIT}'s input schema is not valid JSON Schema 2020-12: {str(exc).splitlines()[0]}"
    if not family.plan_format.strip():
        return False, f"{family.name} declares no plan format, so the player cannot write a plan"
    if json.dumps(theta, sort_keys=True) not in text:
        return False, "the written-out instruction does not state θ in full"
    return True, f"one tool ({SUBMIT}); θ and the plan format are written out"


def gate_default_band(family: Family, u_star: float, u_default: float, u_idle: float) -> tuple[bool, str]:
    lo, hi = family.default_band
    position = family.default_position(u_star, u_default, u_idle)
    if position == math.inf:
        return False, f"doing nothing is already optimal (u* = {u_star:g} ≤ u_idle = {u_idle:g}): nothing to learn"
    if not lo <= position <= hi:
        return False, f"default sits at {position:.3f} between idle (0) and optimal (1); admissible band [{lo}, {hi}]"
    if not u_star - u_default > 1e-9 * max(1.0, abs(u_star)):
        return False, f"the default ({u_default:g}) is not below u* ({u_star:g}) in expectation"
    return True, f"default at {position:.3f} in [{lo}, {hi}]"


def gate_plan_grader(family: Family, theta: dict[str, Any], policy: np.ndarray, u_star: float, u_default: float,
                     integer: bool, rng: np.random.Generator) -> tuple[bool, str]:
    """π* through the JSON round trip scores 1, the default 0, random plans at most 1."""
    optimal = score_plan(family, theta, u_star, u_default, json.loads(json.dumps(policy.tolist())), integer)
    if optimal["error"] or not _close(optimal["utility"], u_star):
        return False, f"π* submitted as a plan scores {optimal['utility']} ({optimal['error']}), the solver says {u_star}"
    default = score_plan(family, theta, u_star, u_default, family.default_policy(theta).tolist(), integer)
    if default["error"] or not _close(default["utility"], u_default):
        return False, f"the default plan scores {default['utility']} ({default['error']}), expected {u_default}"
    tolerance = 1e-9 * max(1.0, abs(u_star))
    for k in range(RANDOM_PLANS):
        plan = family.random_policy(theta, rng).tolist()
        played = score_plan(family, theta, u_star, u_default, plan, integer)
        if played["error"]:
            return False, f"a valid random plan was refused: {played['error']}"
        if played["utility"] > u_star + tolerance:
            return False, f"random plan {k} scores {played['utility']} > u* = {u_star}"
    return True, f"π* scores 1, the default 0, {RANDOM_PLANS} random plans ≤ u*"


def gate_plan_validation(family: Family, theta: dict[str, Any], policy: np.ndarray, u_star: float, u_default: float,
                         integer: bool) -> tuple[bool, str]:
    """Malformed plans are refused with a message, never scored."""
    plan = policy.tolist()
    bad = {
        "every entry 10**6": np.full(policy.shape, 10**6).tolist(),
        "one more dimension": [plan],
        "not a list": {"plan": plan},
        "a string entry": ["seven"] + (plan[1:] if isinstance(plan, list) else []),
    }
    if integer:
        bad["a fractional entry"] = (np.asarray(policy, dtype=float) + 0.5).tolist()
    accepted = [name for name, value in bad.items()
                if score_plan(family, theta, u_star, u_default, value, integer)["error"] is None]
    if accepted:
        return False, f"malformed plans were scored instead of refused: {accepted}"
    return True, f"{len(bad)} malformed plans refused"


def gates(family: Family, theta: dict[str, Any], policy: np.ndarray, u_star: float, u_default: float, u_idle: float,
          text: str, seed: int) -> list[tuple[str, bool, str, float]]:
    """(name, passed, message, seconds) of every F gate."""
    integer = bool(np.issubdtype(policy.dtype, np.integer))
    rng = np.random.default_rng([seed, 0xF])
    runs = [
        ("interface", lambda: gate_interface(family, theta, text, policy)),
        ("default_band", lambda: gate_default_band(family, u_star, u_default, u_idle)),
        ("plan_grader", lambda: gate_plan_grader(family, theta, policy, u_star, u_default, integer, rng)),
        ("plan_validation", lambda: gate_plan_validation(family, theta, policy, u_star, u_default, integer)),
    ]
    results = []
    for name, run in runs:
        started = time.perf_counter()
        passed, message = run()
        results.append((name, passed, message, time.perf_counter() - started))
    return results
