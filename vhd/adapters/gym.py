"""A Gymnasium text environment over one exported environment's tools.

    >>> env = TextToolEnv(row)                      # a row of `vhd export` (player + grader + module)
    >>> observation, info = env.reset()             # JSON text: instruction and tools (the stored episode)
    >>> observation, r, terminated, truncated, info = env.step('{"tool": "end_shift", "arguments": {}}')

Action: a JSON text (or a dict) {"tool": NAME, "arguments": {...}}. Observation: the tool's
result as ASCII JSON text; a malformed action gives {"ok": false, "error": "..."} and counts as
a refused call. The turn rule is the module's (one rule on every surface): a refused call uses
no turn, the episode ends when the turns run out, at the clock or done tool, or after the
module's call limit (refused calls included). Reward: each step's is its decision's exact
advantage over the span, A*_t / (E[u*] − E[u0]) (the `step_rewards` of `vhd score`), and the step
that ends the episode also carries the rest, so that the rewards of an episode sum to its
decision reward (`reward` of `vhd score`); `info` at the end has `reward`, `outcome_reward` and
`utility`. `finish()` stops an episode early by the module's `Env.finish()`, as `vhd score` does
with a trajectory that stops early, and returns the episode's reward. Terminated when the episode
is over; never truncated (the module's own limits end it).

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

from vhd.adapters import INVALID_TOOL, MAX_ACTION_CHARS, parse_action
from vhd.schemas.errors import TrajectoryFormatError
from vhd.tasks.advantage import Advantages
from vhd.tasks.reward import decision_reward, reward, step_rewards
from vhd.tasks.score import Grading

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
        self.grading = Grading.of_grader(self.grader)
        self._decisions: Advantages | None = None
        self._paid = 0.0  # the step rewards given so far this episode
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
        """A new episode: the environment's own (its stored episode seed, for reproducible
        evaluation) without a seed, else a fresh episode of the same θ on episode seed `seed` (or
        `options["episode_seed"]`), graded by the same exact decision reward."""
        with self._lock:
            super().reset(seed=seed)
            chosen = (options or {}).get("episode_seed", seed)
            if chosen is not None and (not isinstance(chosen, int) or isinstance(chosen, bool) or chosen < 0):
                raise TrajectoryFormatError(f"an episode seed is a non-negative integer, got {chosen!r}")
            base = Grading.of_grader(self.grader)
            self.grading = base if chosen is None else base.for_seed(chosen)
            self._env = self._module.create(self.grading.config)
            g = self.grading
            self._decisions = Advantages(g.family, g.config, g.names)
            self.steps, self.trajectory, self.result, self._paid = 0, [], None, 0.0
            observation = _text({"instruction": self.row["player"]["instruction"], "tools": self.tools})
            return observation, {"env_id": self.row["env_id"], "turn_budget": self.turn_budget,
                                 "episode_seed": self.grading.config["episode_seed"]}

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
            r = self._step_reward(self._decisions.call(call))
            terminated = bool(self._env.done)
            info: dict[str, Any] = {"steps": self.steps}
            if terminated:
                episode, result = self._end()
                r = episode - self._paid  # the last step carries the rest: the episode's rewards sum to it
                info.update(result)
            self._paid += r
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

    def _step_reward(self, advantage: float) -> float:
        g = self.grading
        return step_rewards([advantage], g.expected["u_star"], g.expected["u_default"], g.expected.get("u_idle"))[0]

    def _end(self) -> tuple[float, dict[str, Any]]:
        outcome = self._env.finish()
        self._decisions.finish()
        g = self.grading
        r = decision_reward(self._decisions.total, g.expected["u_star"], g.expected["u_default"], g.expected.get("u_idle"))
        self.result = {"utility": outcome["utility"], "reward": r,
                       "outcome_reward": reward(outcome["utility"], *g.references),
                       "turns_used": outcome["turns_used"], "calls_used": outcome.get("calls_used")}
        return r, dict(self.result)
