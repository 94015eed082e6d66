"""Presentation F, written out: the whole instance in the prompt, one plan submitted once.

    >>> text = instruction(family, theta, narrative="A bakery sells sourdough.")   # family: inventory_dp
    >>> print(text[:122])
    A bakery sells sourdough.
    <BLANKLINE>
    This is a finite-horizon stochastic MDP problem (inventory_dp), written out in full. The model:
    >>> s = family.solve(theta)
    >>> score_plan(family, theta, s.u_star, s.u_default, s.policy.tolist())["reward"]
    1.0
    >>> score_plan(family, theta, s.u_star, s.u_default, (0 * s.policy - 1).tolist())["error"]
    'invalid plan: entry [0, 0] is -1; expected an integer in 0 … 14 (a plan is an integer array of shape [27, 120])'

DESIGN §5: F is rendered by the pipeline from θ, never by a generated module. The player
reads the family's model, every parameter of θ as JSON and the family's plan format, and
answers with one `submit_plan` call. The family's exact evaluator scores the plan in
expectation, so u* and u₀ of an F environment are the solution's expected values and the
reward is r = clip01((E[u(plan)] − u₀) / (u* − u₀)). No player code runs anywhere, so the
F gates run in this process: they prove the rendering is complete and that the grader gives
π* reward 1, the default 0, no plan more than 1, and refuses malformed plans.

Strict parsing (issue 14): a submitted plan must be of the form the family declares for θ
(`Family.plan_spec`: shape, integer or real entries, the bounds of each entry). Anything else —
a wrong length or depth, a float where integers are declared, a bool, a string, null, an entry
out of range, a plan nested 10 000 deep — is refused with one line naming the entry and the
expected form, and scores 0; the family's `evaluate` then checks the same form again and the
rules a range cannot state (capacities, permutations), so it never reads −1 from the end.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import numpy as np
from jsonschema import Draft202012Validator

from vhd.mechanisms import Family
from vhd.mechanisms._contract import doc_section
from vhd.mechanisms._plan import InvalidPlan, PlanSpec
from vhd.schemas.errors import TrajectoryFormatError
from vhd.tasks.grading.reward import reward

SUBMIT = "submit_plan"
TURN_BUDGET = 1
RANDOM_PLANS = 4
MESSAGE_CHARS = 300  # a refusal is one line of at most this many characters
DEEP = 1500  # the nesting depth of the deep malformed plan (past json's and Python's recursion limits)


def model_text(family: Family) -> str:
    """The `Model` section of the family's docstring, dedented."""
    text = doc_section(family.doc or "", "Model")
    if not text:
        raise ValueError(f"{family.name}'s docstring lacks its Model section")
    return text


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


def plan_spec(family: Family, theta: dict[str, Any]) -> PlanSpec:
    """The form the family declares for θ's plans; InvalidPlan if it declares none."""
    if family.plan_spec is None:
        raise InvalidPlan(f"{family.name} declares no plan form (Family.plan_spec), so no plan can be graded")
    return family.plan_spec(theta)


def parse_plan(family: Family, theta: dict[str, Any], plan: Any) -> np.ndarray:
    """A JSON plan as the int64 (or float64) array of the declared form; InvalidPlan naming the
    first entry that is not. Never recurses: a plan nested 10 000 deep is one line."""
    return plan_spec(family, theta).check(plan)


def one_line(message: str) -> str:
    """The first line of a message, at most MESSAGE_CHARS characters."""
    line = (message.splitlines() or [""])[0]
    return line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS - 1] + "…"


def plan_utility(family: Family, theta: dict[str, Any], plan: Any) -> float:
    """E[u] of a submitted plan under the family's exact evaluator; InvalidPlan if it is no plan."""
    array = parse_plan(family, theta, plan)
    try:
        value = float(family.evaluate(theta, array))
    except (ValueError, IndexError, TypeError) as exc:
        raise InvalidPlan(one_line(str(exc)) or type(exc).__name__) from None
    if not math.isfinite(value):
        raise InvalidPlan(f"the plan's utility is {value}")
    return value


def graded_values(family: Family, theta: dict[str, Any], policy: np.ndarray) -> tuple[float, float]:
    """(u*, u₀) of an F environment as its grader computes them: the evaluator's values of π*
    and of the default plan, so that π* scores exactly 1 and the default exactly 0 (the
    plan_grader gate proves they equal the solver's to 1e-6)."""
    return float(family.evaluate(theta, policy)), float(family.evaluate(theta, family.default_policy(theta)))


def submission(trajectory: list[dict[str, Any]]) -> Any:
    """The plan of an F trajectory: its one `submit_plan` call, whose arguments are {"plan": ...}."""
    if not isinstance(trajectory, list) or not all(isinstance(step, dict) for step in trajectory):
        raise TrajectoryFormatError(f"a trajectory is a list of {{\"tool\", \"arguments\"}} calls")
    calls = [step for step in trajectory if step.get("tool") == SUBMIT]
    others = sorted({str(step.get("tool"))[:64] for step in trajectory} - {SUBMIT})
    if others:
        raise TrajectoryFormatError(f"presentation F has one tool, {SUBMIT}; the trajectory calls {others[:5]}")
    if len(calls) != 1:
        raise TrajectoryFormatError(f"presentation F takes exactly one {SUBMIT} call, got {len(calls)}")
    arguments = calls[0].get("arguments")
    if not isinstance(arguments, dict) or set(arguments) != {"plan"}:
        keys = sorted(str(k)[:64] for k in arguments) if isinstance(arguments, dict) else None
        raise TrajectoryFormatError(f"{SUBMIT} takes exactly one argument, plan; got "
                                    f"{keys if keys is not None else type(arguments).__name__}")
    return arguments["plan"]


def calls_for(policy: np.ndarray) -> list[dict[str, Any]]:
    """The one-call trajectory that submits `policy`."""
    return [{"tool": SUBMIT, "arguments": {"plan": np.asarray(policy).tolist()}}]


def score_plan(family: Family, theta: dict[str, Any], u_star: float, u_default: float, plan: Any,
               u_idle: float | None = None) -> dict[str, Any]:
    """Reward of one submitted plan (its expected utility, reward zero max(u_default, u_idle));
    a plan not of the family's declared form (`plan_spec`) scores 0 with a one-line error."""
    try:
        utility = plan_utility(family, theta, plan)
    except InvalidPlan as exc:
        return {"utility": None, "reward": 0.0, "error": one_line(f"invalid plan: {exc}"), "terminal": True}
    return {"utility": utility, "reward": reward(utility, u_star, u_default, u_idle), "error": None, "terminal": True}


def score_trajectory(family: Family, theta: dict[str, Any], u_star: float, u_default: float,
                     trajectory: list[dict[str, Any]], u_idle: float | None = None) -> dict[str, Any]:
    """Score one F trajectory: exactly one `submit_plan` call, its plan of the family's declared form."""
    try:
        plan = submission(trajectory)
    except TrajectoryFormatError as exc:
        return {"utility": None, "reward": 0.0, "error": one_line(str(exc)), "terminal": True}
    return score_plan(family, theta, u_star, u_default, plan, u_idle)


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
    if family.plan_spec is None:
        return False, f"{family.name} declares no plan form (Family.plan_spec), so no plan can be checked"
    try:
        Draft202012Validator.check_schema(family.plan_spec(theta).schema())
    except Exception as exc:  # jsonschema.SchemaError
        return False, f"{family.name}'s plan form is not valid JSON Schema 2020-12: {str(exc).splitlines()[0]}"
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
                     rng: np.random.Generator) -> tuple[bool, str]:
    """π* through the JSON round trip scores 1, the default 0, random plans at most 1."""
    optimal = score_plan(family, theta, u_star, u_default, json.loads(json.dumps(policy.tolist())))
    if optimal["error"] or not _close(optimal["utility"], u_star):
        return False, f"π* submitted as a plan scores {optimal['utility']} ({optimal['error']}), the solver says {u_star}"
    default = score_plan(family, theta, u_star, u_default, family.default_policy(theta).tolist())
    if default["error"] or not _close(default["utility"], u_default):
        return False, f"the default plan scores {default['utility']} ({default['error']}), expected {u_default}"
    tolerance = 1e-9 * max(1.0, abs(u_star))
    for k in range(RANDOM_PLANS):
        plan = family.random_policy(theta, rng).tolist()
        played = score_plan(family, theta, u_star, u_default, plan)
        if played["error"]:
            return False, f"a valid random plan was refused: {played['error']}"
        if played["utility"] > u_star + tolerance:
            return False, f"random plan {k} scores {played['utility']} > u* = {u_star}"
    return True, f"π* scores 1, the default 0, {RANDOM_PLANS} random plans ≤ u*"


def _deep(depth: int) -> list:
    plan: list = []
    for _ in range(depth):
        plan = [plan]
    return plan


def _with(plan: list, index: tuple[int, ...], value: Any) -> list:
    """A copy of the nested list `plan` with one entry replaced (only the path to it is copied)."""
    root = list(plan)
    node = root
    for i in index[:-1]:
        node[i] = list(node[i])
        node = node[i]
    node[index[-1]] = value
    return root


def malformed_plans(spec: PlanSpec, policy: np.ndarray) -> dict[str, Any]:
    """JSON values derived from a valid plan that are not plans of the form `spec`: an entry below
    its minimum (−1 where −1 is not allowed) or past its maximum, past int16 or int64, a float
    where integers are declared, a non-finite number, a bool, a string, null or a list as an
    entry, one entry (or row) too few or too many, one dimension more or fewer, and no list at
    all (null, a string, an object, a plan nested DEEP lists deep)."""
    array = np.asarray(policy)
    plan = array.tolist()
    bad: dict[str, Any] = {"null": None, "a string": "[0, 1]", "a number": 1, "an object": {"plan": plan},
                           "nested 1500 deep": _deep(DEEP), "one more dimension": [plan]}
    low_length = spec.min_length if spec.min_length is not None else spec.shape[0]
    if len(plan) - 1 < low_length:
        bad["one row too few"] = plan[:-1]
    if plan:
        bad["one row too many"] = plan + [plan[-1]]
        bad["one dimension fewer"] = plan[0]
    if array.size == 0:
        return bad
    first, last = (0,) * array.ndim, tuple(n - 1 for n in array.shape)
    low, high = spec.bounds(first)[0], spec.bounds(last)[1]
    if low is not None:
        bad["an entry below its minimum"] = _with(plan, first, low - 1)
    if spec.bounds(last)[0] is not None and spec.bounds(last)[0] > -1:
        bad["−1 in the last entry"] = _with(plan, last, -1)
    if high is not None:
        bad["an entry past its maximum"] = _with(plan, last, high + 1)
        bad["an entry past int16"] = _with(plan, last, max(high + 1, 2 ** 15))
    bad["an entry past int64"] = _with(plan, last, 2 ** 70)
    value = array[first].item()
    if spec.integer:
        bad["a float entry"] = _with(plan, first, float(value))
    bad["a NaN entry"] = _with(plan, first, float("nan"))
    bad["an infinite entry"] = _with(plan, last, float("inf"))
    bad["a bool entry"] = _with(plan, first, bool(value) if value in (0, 1) else True)
    bad["a string entry"] = _with(plan, first, str(value))
    bad["a null entry"] = _with(plan, first, None)
    bad["a nested entry"] = _with(plan, first, [value])
    bad["a deeply nested entry"] = _with(plan, last, _deep(DEEP))
    if array.ndim > 1:
        row = array[last[:-1]].tolist()
        bad["a ragged row"] = _with(plan, last[:-1], row[:-1])
        bad["a row with one entry too many"] = _with(plan, last[:-1], row + [row[-1]])
    return bad


def malformed_arrays(spec: PlanSpec, policy: np.ndarray) -> dict[str, np.ndarray]:
    """numpy arrays derived from a valid plan that the family's `evaluate` must refuse by itself
    (a ValueError), without the JSON check in front: an entry below its minimum or past its
    maximum, float, bool or string entries, one row too few or too many, one dimension more."""
    array = np.asarray(policy).astype(np.int64 if spec.integer else np.float64)
    bad: dict[str, np.ndarray] = {"one dimension more": array[None], "string entries": array.astype(str)}
    if array.shape[0] - 1 < (spec.min_length if spec.min_length is not None else spec.shape[0]):
        bad["one row too few"] = array[:-1]
    if array.size == 0:
        return bad
    bad["one row too many"] = np.concatenate([array, array[-1:]])
    first, last = (0,) * array.ndim, tuple(n - 1 for n in array.shape)
    if spec.low is not None:
        below = array.copy()
        below[first] = spec.bounds(first)[0] - 1
        bad["an entry below its minimum"] = below
    if spec.high is not None:
        above = array.copy()
        above[last] = spec.bounds(last)[1] + 1
        bad["an entry past its maximum"] = above
    if spec.integer:
        bad["float entries"] = array.astype(np.float64)
    bad["bool entries"] = array.astype(bool)
    return bad


def gate_plan_validation(family: Family, theta: dict[str, Any], policy: np.ndarray, u_star: float, u_default: float,
                         integer: bool | None = None) -> tuple[bool, str]:
    """Malformed plans are refused with one line, never scored: as JSON through the grader, and
    as arrays by the family's `evaluate` itself. (`integer` is not read: the form is declared.)"""
    if family.plan_spec is None:
        return False, f"{family.name} declares no plan form (Family.plan_spec)"
    spec = family.plan_spec(theta)
    accepted, multiline = [], []
    for name, value in malformed_plans(spec, policy).items():
        row = score_plan(family, theta, u_star, u_default, value)
        if row["error"] is None:
            accepted.append(name)
        elif "\n" in row["error"] or len(row["error"]) > MESSAGE_CHARS:
            multiline.append(name)
    for name, array in malformed_arrays(spec, policy).items():
        try:
            family.evaluate(theta, array)
        except (ValueError, IndexError, TypeError):
            continue
        accepted.append(f"{name} (evaluate)")
    if accepted:
        return False, f"malformed plans were scored instead of refused: {accepted}"
    if multiline:
        return False, f"malformed plans were refused with more than one line: {multiline}"
    return True, "malformed plans refused, as JSON and by evaluate"


def gates(family: Family, theta: dict[str, Any], policy: np.ndarray, u_star: float, u_default: float, u_idle: float,
          text: str, seed: int) -> list[tuple[str, bool, str, float]]:
    """(name, passed, message, seconds) of every F gate."""
    rng = np.random.default_rng([seed, 0xF])
    runs = [
        ("interface", lambda: gate_interface(family, theta, text, policy)),
        ("default_band", lambda: gate_default_band(family, u_star, u_default, u_idle)),
        ("plan_grader", lambda: gate_plan_grader(family, theta, policy, u_star, u_default, rng)),
        ("plan_validation", lambda: gate_plan_validation(family, theta, policy, u_star, u_default)),
    ]
    results = []
    for name, run in runs:
        started = time.perf_counter()
        passed, message = run()
        results.append((name, passed, message, time.perf_counter() - started))
    return results
