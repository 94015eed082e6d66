"""A Gymnasium text environment over one exported environment's tools.

    >>> env = TextToolEnv(row)                      # a row of `vhd export` (player + grader + module)
    >>> observation, info = env.reset(seed=0)       # JSON text: instruction and tools
    >>> observation, r, terminated, truncated, info = env.step('{"tool": "end_shift", "arguments": {}}')

Action: a JSON text (or a dict) {"tool": NAME, "arguments": {...}}. Observation: the tool's
result as ASCII JSON text; a malformed action gives {"ok": false, "error": "..."} and counts as
a refused call. The turn rule is the module's (one rule on every surface): a refused call uses
no turn, the episode ends when the turns run out, at the clock or done tool, or after the
module's call limit (refused calls included). Reward: 0 on every step but the last; at the
end, the episode reward of `vhd.adapters.episode_reward`. `finish()` stops an episode early by
the module's `Env.finish()`, as `vhd score` does with a trajectory that stops early.
Terminated when the episode is over; never truncated (the module's own limits end it).

The generated module runs in this process (see docs/TRAINING.md, "Trust model"). One episode
is driven one step at a time, from any thread.
"""

from __future__ import annotations

import json
import string
import threading
import types
from typing import Any

import gymnasium
from gymnasium import spaces

from vhd.adapters import INVALID_TOOL, MAX_ACTION_CHARS, episode_reward, parse_action
from vhd.schemas.errors import TrajectoryFormatError

CHARSET = string.printable
MAX_TEXT = 1_000_000


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, default=repr)


def load_module(source: str) -> types.ModuleType:
    module = types.ModuleType("vhd_generated_env")
    exec(compile(source, "<generated module>", "exec"), module.__dict__)  # admitted code; see docs/TRAINING.md
    if not callable(getattr(module, "create", None)) or getattr(module, "ENV_API", None) != 2:
        raise TrajectoryFormatError("the module does not implement ENV_API 2 (Env.finish(), the call limit); "
                                    "expected a module from this version of vhd (run `vhd refresh`)")
    return module


class TextToolEnv(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self, row: dict[str, Any], module: types.ModuleType | None = None):
        if row["grader"]["config"].get("presentation") == "F":
            raise TrajectoryFormatError("presentation F is scored from a written answer, not tool calls; "
                                        "expected an I or A environment")
        self.row = row
        self.grader = row["grader"]
        self.turn_budget = int(self.grader["config"]["turn_budget"])
        self._module = module if module is not None else load_module(row["module"])
        self.observation_space = spaces.Text(max_length=MAX_TEXT, min_length=1, charset=CHARSET)
        self.action_space = spaces.Text(max_length=MAX_ACTION_CHARS, min_length=1, charset=CHARSET)
        self._env = None
        self._lock = threading.RLock()
        self.steps = 0
        self.trajectory: list[dict[str, Any]] = []
        self.result: dict[str, Any] | None = None

    @classmethod
    def from_warehouse(cls, env_id: str, db: Any = None) -> "TextToolEnv":
        from vhd.adapters import load_row

        return cls(load_row(env_id, db))

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.row["player"]["tools"]

    @property
    def finished(self) -> bool:
        return self.result is not None  # set once, when the episode ends

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        # The episode seed is fixed by the environment (its grader config); `seed` only seeds
        # self.np_random, so the same environment always replays the same episode.
        with self._lock:
            super().reset(seed=seed)
            self._env = self._module.create(self.grader["config"])
            self.steps, self.trajectory, self.result = 0, [], None
            observation = _text({"instruction": self.row["player"]["instruction"], "tools": self.tools})
            return observation, {"env_id": self.row["env_id"], "turn_budget": self.turn_budget}

    def step(self, action: Any):
        with self._lock:
            if self._env is None or self.finished:
                raise RuntimeError("call reset() before step() (the episode has ended)")
            self.steps += 1
            try:
                call = parse_action(action)
            except TrajectoryFormatError as exc:
                # recorded as a call the module refuses, so the module counts it toward its call
                # limit exactly as a replay of the recorded trajectory does
                call, observation = {"tool": INVALID_TOOL, "arguments": {}}, {"ok": False, "error": str(exc)}
                answer = self._env.call(INVALID_TOOL, {})
                if "episode_over" in answer:
                    observation["episode_over"] = answer["episode_over"]
            else:
                observation = self._env.call(call["tool"], call["arguments"])
            self.trajectory.append(call)
            terminated = bool(self._env.done)
            info: dict[str, Any] = {"steps": self.steps}
            r = 0.0
            if terminated:
                r, result = self._end()
                info.update(result)
            return _text(observation), float(r), terminated, False, info

    def finish(self) -> tuple[float, dict[str, Any]]:
        """Stop the episode now (the player quits): the module's `Env.finish()` plays the rest
        by the instruction's rule for running out of turns. Returns the reward and the outcome."""
        with self._lock:
            if self._env is None:
                raise RuntimeError("call reset() before finish()")
            if self.finished:
                return self.result["reward"], dict(self.result)
            return self._end()

    def _end(self) -> tuple[float, dict[str, Any]]:
        outcome = self._env.finish()
        r = episode_reward(self.grader, outcome["utility"])
        self.result = {"utility": outcome["utility"], "reward": r, "turns_used": outcome["turns_used"],
                       "calls_used": outcome.get("calls_used")}
        return r, dict(self.result)
