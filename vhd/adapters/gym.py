"""A Gymnasium text environment over one exported environment's tools.

    >>> env = TextToolEnv(row)                      # a row of `vhd export` (player + grader + module)
    >>> observation, info = env.reset(seed=0)       # JSON text: instruction and tools
    >>> observation, r, terminated, truncated, info = env.step('{"tool": "end_shift", "arguments": {}}')

Action: a JSON text (or a dict) {"tool": NAME, "arguments": {...}}. Observation: the tool's
result as ASCII JSON text (a bad action gives {"ok": false, "error": "..."} and uses a turn).
Reward: 0 on every step but the last; at the end, r = clip01((u − u0)/(u* − u0)) of
vhd.tasks.score.reward. Terminated when the episode ends (the clock or done tool); truncated
when turn_budget actions were taken — then the remaining days are played by the clock tool
alone, as the grader does, and the reward is given.

The generated module runs in this process (see docs/TRAINING.md, "Trust model").
"""

from __future__ import annotations

import json
import string
import types
from typing import Any

import gymnasium
from gymnasium import spaces

from vhd.adapters import clock_tool
from vhd.schemas.errors import TrajectoryFormatError
from vhd.tasks.score import reward as _reward

CHARSET = string.printable
MAX_TEXT = 1_000_000


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, default=repr)


def parse_action(action: Any) -> dict[str, Any]:
    """{"tool": str, "arguments": object} from a dict or its JSON text; TrajectoryFormatError otherwise."""
    if isinstance(action, str):
        try:
            action = json.loads(action)
        except json.JSONDecodeError as exc:
            raise TrajectoryFormatError(f'action is not JSON ({exc.msg}); expected {{"tool": NAME, "arguments": {{...}}}}') from None
    if not (isinstance(action, dict) and isinstance(action.get("tool"), str)
            and isinstance(action.get("arguments", {}), dict) and set(action) <= {"tool", "arguments"}):
        raise TrajectoryFormatError('action must be {"tool": NAME, "arguments": {...}}')
    return {"tool": action["tool"], "arguments": action.get("arguments", {})}


def load_module(source: str) -> types.ModuleType:
    module = types.ModuleType("vhd_generated_env")
    exec(compile(source, "<generated module>", "exec"), module.__dict__)  # admitted code; see docs/TRAINING.md
    return module


class TextToolEnv(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self, row: dict[str, Any]):
        if row["grader"]["config"].get("presentation") == "F":
            raise TrajectoryFormatError("presentation F is scored from a written answer, not tool calls; "
                                        "expected an I or A environment")
        self.row = row
        self.grader = row["grader"]
        self.turn_budget = int(self.grader["config"]["turn_budget"])
        self.clock = clock_tool(self.grader)
        self._module = load_module(row["module"])
        self.observation_space = spaces.Text(max_length=MAX_TEXT, min_length=1, charset=CHARSET)
        self.action_space = spaces.Text(max_length=4096, min_length=1, charset=CHARSET)
        self._env = None
        self.steps = 0
        self.trajectory: list[dict[str, Any]] = []

    @classmethod
    def from_warehouse(cls, env_id: str, db: Any = None) -> "TextToolEnv":
        from vhd.adapters import load_row

        return cls(load_row(env_id, db))

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.row["player"]["tools"]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        # The episode seed is fixed by the environment (its grader config); `seed` only seeds
        # self.np_random, so the same environment always replays the same episode.
        super().reset(seed=seed)
        self._env = self._module.create(self.grader["config"])
        self.steps, self.trajectory, self._finished = 0, [], False
        observation = _text({"instruction": self.row["player"]["instruction"], "tools": self.tools})
        return observation, {"env_id": self.row["env_id"], "turn_budget": self.turn_budget}

    def step(self, action: Any):
        if self._env is None or self._finished:
            raise RuntimeError("call reset() before step() (the episode has ended)")
        self.steps += 1
        try:
            call = parse_action(action)
        except TrajectoryFormatError as exc:
            observation: Any = {"ok": False, "error": str(exc)}
        else:
            self.trajectory.append(call)
            observation = self._env.call(call["tool"], call["arguments"])
        terminated = bool(self._env.done)
        truncated = not terminated and self.steps >= self.turn_budget
        info: dict[str, Any] = {"steps": self.steps}
        r = 0.0
        if terminated or truncated:
            pads = 0
            while not self._env.done and pads <= self.turn_budget:
                self._env.call(self.clock, {})
                pads += 1
            outcome = self._env.outcome()
            r = _reward(outcome["utility"], self.grader["u_star"], self.grader["u_default"])
            info.update(utility=outcome["utility"], reward=r)
            self._finished = True
        return _text(observation), float(r), terminated, truncated, info
