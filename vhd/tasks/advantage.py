"""The exact advantage of every step of a played trajectory, from the solved model.

    >>> from vhd.mechanisms import registry
    >>> from vhd.tasks.sample import draw
    >>> family = registry.get("stopping")
    >>> _, theta = draw(family, 3)
    >>> config = {"params": theta, "presentation": "I", "episode_seed": 5, "turn_budget": family.turn_budget(theta)}
    >>> best = family.simulate(theta, family.solve(theta).policy, 5).calls
    >>> steps = step_advantages(family, config, best)
    >>> steps.total, set(steps.per_call)
    (0.0, {0.0})

Along a trajectory, every accepted decision or clock call a_t taken in state s_t has the advantage
A*(s_t, a_t) = Q*(s_t, a_t) − V*(s_t) under full information (the family's `advantage`, from the
tables its solver computes); probes, observations and refused calls have advantage 0, and so
does a call after the episode ended. An episode left unfinished is finished by the World's
`run_out` (the instruction's rule for running out of turns), which has an advantage of its own:
it is added to the call that triggered it (the last turn, the call limit) or kept as `finish`.
By the performance-difference lemma E[Σ_t A*] = E[u(π)] − E[u*], with the exogenous noise
(demand, offers, prizes) left out: the decision reward built on it (`vhd/tasks/reward.py`)
measures the decisions, not the draws.

The trajectory is replayed on the family's own World (the template setter's rendering, run here:
trusted code), which the gates hold equal to every admitted module.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from vhd.mechanisms import Family
from vhd.tasks.check.reference import reference_module

TOLERANCE = 1e-9  # |A*| below this, relative to the model's scale, is 0: π* ties are exact
_VALUES: OrderedDict[tuple[str, str], Any] = OrderedDict()
_VALUES_KEPT = 64
_VALUES_LOCK = threading.Lock()


@dataclass
class Steps:
    """The advantages of one trajectory: one per call, and that of finishing it afterwards."""

    per_call: list[float] = field(default_factory=list)
    finish: float = 0.0
    utility: float = 0.0  # what the episode realised (the reference World's outcome)

    @property
    def total(self) -> float:
        return math.fsum(self.per_call) + self.finish


def declares_advantages(family: Family) -> bool:
    return None not in (family.decision_values, family.decision_state, family.advantage)


def decision_values(family: Family, theta: dict[str, Any]) -> Any:
    """`family.decision_values(θ)`, kept for the last few θ (scoring many trajectories of one
    environment solves it once)."""
    key = (family.code_version, json.dumps(theta, sort_keys=True))
    with _VALUES_LOCK:
        if key in _VALUES:
            _VALUES.move_to_end(key)
            return _VALUES[key]
    values = family.decision_values(theta)
    with _VALUES_LOCK:
        _VALUES[key] = values
        while len(_VALUES) > _VALUES_KEPT:
            _VALUES.popitem(last=False)
    return values


def step_advantages(family: Family, config: dict[str, Any], calls: list[dict[str, Any]],
                    finish: bool = True) -> Steps:
    """A* of every canonical call `{"tool", "arguments"}` of a trajectory played from `config`
    (the module's create() config); `finish`: finish an unfinished episode (as every surface does)."""
    if not declares_advantages(family):
        raise NotImplementedError(f"{family.name} declares no advantages (decision_values, decision_state, advantage)")
    theta = config["params"]
    module, output = reference_module(family)
    env = module.create(config)
    world = env._world
    values = decision_values(family, theta)
    scale = max(1.0, abs(family_scale(family, theta, values)))
    roles = {spec.name: spec.role for spec in family.tools}
    ran_out: list[tuple[Any, float]] = []  # (the state just before run_out, run_out's advantage)
    original = world.run_out

    def run_out() -> None:  # the World's own rule, with its advantage recorded
        before = family.decision_state(theta, world)
        original()
        ran_out.append((before, family.advantage(theta, values, before, None, family.decision_state(theta, world))))

    world.run_out = run_out
    steps = Steps()
    for call in calls:
        tool, arguments = call.get("tool"), call.get("arguments")
        role = roles.get(tool) if isinstance(tool, str) else None
        if env.done or role is None:
            if not env.done:
                env.call(tool if isinstance(tool, str) else "", arguments)  # refused: it counts toward the call limit
            steps.per_call.append(0.0)
            continue
        before = family.decision_state(theta, world) if role in ("decision", "clock") else None
        answer = env.call(output.tool_name(tool), arguments)
        value = 0.0
        if answer.get("ok") and before is not None:
            after = ran_out[-1][0] if ran_out else family.decision_state(theta, world)
            value = family.advantage(theta, values, before, {"tool": tool, "arguments": arguments}, after)
        if ran_out:  # this call spent the last turn or the call limit: the rest of the episode ran out with it
            value += ran_out.pop()[1]
        steps.per_call.append(_exact(value, scale))
    if finish and not env.done:
        env.finish()
        steps.finish = _exact(sum(a for _, a in ran_out), scale)
    steps.utility = float(env.outcome()["utility"])
    return steps


def family_scale(family: Family, theta: dict[str, Any], values: Any) -> float:
    """The size of the model's numbers that rounding errors are relative to: its optimum."""
    scale = getattr(values, "u_star", None)
    if scale is None and isinstance(values, dict):
        scale = values.get("u_star")
    return float(scale) if isinstance(scale, (int, float)) and math.isfinite(scale) else 1.0


def _exact(value: float, scale: float) -> float:
    if not math.isfinite(value):
        raise ArithmeticError(f"an advantage is not finite: {value}")
    return 0.0 if abs(value) <= TOLERANCE * scale else float(value)
