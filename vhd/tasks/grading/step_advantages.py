"""The exact advantage of every step of a played trajectory, from the solved model.

    >>> from vhd.mechanisms import registry
    >>> from vhd.tasks.stages.sample import draw
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
(demand, offers, prizes) left out: the decision reward built on it (`vhd/tasks/grading/reward.py`)
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
from vhd.tasks.grading.oracle import reference_module
from vhd.tasks.grading.reward import decision_reward, step_rewards
from vhd.tasks.setters.skin import UNKNOWN, Interface

TOLERANCE = 1e-9  # |A*| below this, relative to the model's scale, is 0: π* ties are exact
_VALUES: OrderedDict[tuple[str, str], Any] = OrderedDict()
_VALUES_KEPT = 8  # a θ's tables can take tens of MB (ecommerce at its limits); scoring keeps to a few θ
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


class Advantages:
    """One episode replayed on the family's own World, call by call, with the advantage of each.

    `interface` is a module's (`vhd.tasks.setters.skin.Interface`): calls then come as its player
    makes them (its tool names, argument names and ids) and are replayed as the canonical calls
    they mean; a tool outside it is a call every World refuses. Without it, calls are canonical."""

    def __init__(self, family: Family, config: dict[str, Any], interface: Interface | None = None):
        if not declares_advantages(family):
            raise NotImplementedError(f"{family.name} declares no advantages (decision_values, decision_state, "
                                      "advantage)")
        self.family, self.theta, self.interface = family, config["params"], interface
        module, self._output = reference_module(family)
        self._env = module.create(config)
        self._world = self._env._world
        self._values = decision_values(family, self.theta)
        self._scale = max(1.0, abs(family_scale(family, self.theta, self._values)))
        self._roles = {spec.name: spec.role for spec in family.tools}
        self._names: dict[str, str] = {}  # canonical tool → the module's name (`tool_name`, looked up once)
        for binding in self._output.interface:
            self._names.setdefault(binding.canonical, binding.name)
        self._ran_out: list[tuple[Any, float]] = []  # (the state just before run_out, run_out's advantage)
        self._original_run_out = self._world.run_out
        self._world.run_out = self._run_out  # the World's own rule, with its advantage recorded
        self._after: Any = None  # the state after the last call when it was a played decision or clock call
        self.total = 0.0

    def _state(self) -> Any:
        return self.family.decision_state(self.theta, self._world)

    def _run_out(self) -> None:
        before = self._state()
        self._original_run_out()
        self._ran_out.append((before, self.family.advantage(self.theta, self._values, before, None, self._state())))

    @property
    def done(self) -> bool:
        return bool(self._env.done)

    @property
    def utility(self) -> float:
        return float(self._env.outcome()["utility"])

    def call(self, call: dict[str, Any]) -> float:
        """A* of one call (0 for a refused, probe or observe call, or one after the end)."""
        if self.interface is not None:
            call = self.interface.canonical(call)
        tool, arguments = call.get("tool"), call.get("arguments")
        role = self._roles.get(tool) if isinstance(tool, str) else None
        before = None
        if role in ("decision", "clock"):
            before = self._after  # nothing ran since the last call's state was read: reuse it
            if before is None:
                if self._env.done:  # no state to read after the end
                    return 0.0
                before = self._state()
        # any other call after the end is refused by the Env itself (not counted, nothing changes):
        # A* 0, without a `done` query of the World's of our own before every call
        self._after = None
        if role is None:
            self._env.call(UNKNOWN, arguments)  # refused, and counted toward the call limit
            return self._account(0.0)
        answer = self._env.call(self._names[tool], arguments)
        value = 0.0
        if answer.get("ok") and before is not None:
            after = self._ran_out[-1][0] if self._ran_out else self._state()
            value = self.family.advantage(self.theta, self._values, before, {"tool": tool, "arguments": arguments},
                                          after)
            self._after = None if self._ran_out else after
        return self._account(value)

    def finish(self) -> float:
        """End an unfinished episode by the World's `run_out`; the advantage of doing so."""
        if self._env.done:
            return 0.0
        self._env.finish()
        return self._account(0.0)

    def _account(self, value: float) -> float:
        while self._ran_out:  # this call spent the last turn or the call limit, or finished the episode
            value += self._ran_out.pop()[1]
        value = _exact(value, self._scale)
        self.total = math.fsum((self.total, value))
        return value


def step_advantages(family: Family, config: dict[str, Any], calls: list[dict[str, Any]],
                    finish: bool = True) -> Steps:
    """A* of every canonical call `{"tool", "arguments"}` of a trajectory played from `config`
    (the module's create() config); `finish`: finish an unfinished episode (as every surface does)."""
    replay = Advantages(family, config)
    steps = Steps(per_call=[replay.call(call) for call in calls])
    if finish:
        steps.finish = replay.finish()
    steps.utility = replay.utility
    return steps



def decision_grade(family: Family, config: dict[str, Any], calls: list[dict[str, Any]],
                   expected: dict[str, float], interface: Interface | None = None) -> dict[str, Any]:
    """The decision reward of a trajectory (as the module's player makes its calls when
    `interface` is the module's, else canonical) with `expected` = the model's E[u*], E[u_default], E[u_idle]: `reward`,
    `step_rewards` (one per call, summing to `reward`: `reward.step_rewards`; the advantage of
    finishing an unfinished episode is the last call's), `advantages` (each call's A*_t, finishing's
    in the last) and `advantage` (Σ A*)."""
    replay = Advantages(family, config, interface)
    per_call = [replay.call(call) for call in calls]
    finish = replay.finish()
    if per_call:
        per_call[-1] = math.fsum((per_call[-1], finish))
    refs = (expected["u_star"], expected["u_default"], expected.get("u_idle"))
    episode = decision_reward(replay.total, *refs)
    return {"reward": episode, "step_rewards": step_rewards(per_call, *refs, episode_reward=episode),
            "advantages": per_call, "advantage": replay.total, "reference_utility": replay.utility}


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
