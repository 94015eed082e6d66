"""A Gymnasium text environment over one exported environment's tools.

    >>> env = TextToolEnv(row)                      # a row of `vhd export` (player + grader + module)
    >>> observation, info = env.reset()             # JSON text: instruction and tools (the stored episode)
    >>> observation, r, terminated, truncated, info = env.step('{"tool": "end_day", "arguments": {}}')

Action: a JSON text (or a dict) {"tool": NAME, "arguments": {...}}. Observation: the tool's
result as ASCII JSON text; a malformed action gives {"ok": false, "error": "..."} and counts as
a refused call. The turn rule is the module's (one rule on every surface): a refusal by the world
uses its turn, a malformed call none, the episode ends when the turns run out, at the clock or
done tool, or after the module's call limit (refused calls included). Reward: each step's is its decision's exact
advantage over the span, A*_t / (E[u*] − E[u0]), the first step's plus the baseline 1, and the
step that ends the episode carries the rest (finishing's advantage, the clip's correction), so
that the rewards of an episode sum to its decision reward (`reward` of `vhd score`; step by step
they are its `step_rewards`). As A*_t ≤ 0, a discounted return is at most 1, π*'s exactly 1, and
an episode cut short has been paid what its decisions were worth. `info` at the end has
`reward`, `outcome_reward` and `utility`. `finish()` stops an episode early by the module's
`Env.finish()`, as `vhd score` does with a trajectory that stops early, and returns the episode's
reward. Terminated when the episode
is over; truncated only under a step limit (`gymnasium.make(..., max_episode_steps=N)`, or
`env.step_limit = N`): the N-th step finishes the episode by the module's rule and carries its
reward, so `TimeLimit` never cuts an episode off unpaid.

Registered on import as `vhd/TextTool-v0` (`gymnasium.make("vhd/TextTool-v0", row=row)` or
`env_id=..., db=...`). Picklable: the state is the row, the episode seed and the calls so far;
unpickling rebuilds the module from the row and replays the calls. The observation space
(`JsonText`) declares its own shared memory, so `AsyncVectorEnv`'s default `shared_memory=True`
returns the true observations (Gymnasium's Text shared memory is read once, at construction).

The generated module runs in this process (see docs/TRAINING.md, "Trust model"). One episode
is driven one step at a time, from any thread.
"""

from __future__ import annotations

import json
import string
import threading
import types
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

from vhd.adapters import INVALID_TOOL, MAX_ACTION_CHARS, parse_action
from vhd.schemas.errors import TrajectoryFormatError
from vhd.tasks.grading.step_advantages import Advantages
from vhd.tasks.grading.reward import decision_reward, reward, step_reward
from vhd.tasks.grading.score import Grading

CHARSET = string.printable
MAX_TEXT = 1_000_000
ENV_ID = "vhd/TextTool-v0"
_LENGTH = 4  # bytes of the length prefix of a text in shared memory


class JsonText(spaces.Text):
    """`spaces.Text` of ASCII JSON whose shared memory `AsyncVectorEnv` reads live.

    Gymnasium's own Text shared memory is read into a tuple of strings once, when the vector env
    is built, so every later observation would be that first, empty one. Here each env's slot is
    a length prefix and the ASCII bytes; `read_from_shared_memory` gives a live view
    (`SharedTexts`) whose `deepcopy` (what `AsyncVectorEnv(copy=True)`, the default, returns) is a
    tuple of the current texts."""


class SharedTexts(Sequence):
    """The texts in an `AsyncVectorEnv`'s shared memory, read when indexed (like a Box's array view)."""

    def __init__(self, space: JsonText, memory: Any, n: int):
        self.space, self.memory, self.n = space, memory, n

    def _slot(self, index: int) -> np.ndarray:
        size = self.space.max_length + _LENGTH
        return np.frombuffer(self.memory.get_obj(), dtype=np.uint8)[index * size:(index + 1) * size]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self.n)))
        if not -self.n <= index < self.n:
            raise IndexError(index)
        slot = self._slot(index % self.n)
        length = int(slot[:_LENGTH].view("<u4")[0])
        return slot[_LENGTH:_LENGTH + length].tobytes().decode("ascii")

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@create_shared_memory.register(JsonText)
def _create_json_text_memory(space: JsonText, n: int = 1, ctx: Any = None):
    import multiprocessing

    return (ctx or multiprocessing).Array("B", n * (space.max_length + _LENGTH))


@read_from_shared_memory.register(JsonText)
def _read_json_text_memory(space: JsonText, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)


@write_to_shared_memory.register(JsonText)
def _write_json_text_memory(space: JsonText, index: int, value: str, shared_memory: Any) -> None:
    data = value.encode("ascii")
    if len(data) > space.max_length:
        raise ValueError(f"an observation of {len(data)} characters; expected at most {space.max_length}")
    slot = SharedTexts(space, shared_memory, index + 1)._slot(index)
    slot[:_LENGTH] = np.frombuffer(np.array([len(data)], dtype="<u4").tobytes(), dtype=np.uint8)
    slot[_LENGTH:_LENGTH + len(data)] = np.frombuffer(data, dtype=np.uint8)


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, default=repr)


def load_module(source: str) -> types.ModuleType:
    module = types.ModuleType("vhd_generated_env")
    exec(compile(source, "<generated module>", "exec"), module.__dict__)  # admitted code; see docs/TRAINING.md
    if not callable(getattr(module, "create", None)) or getattr(module, "ENV_API", None) != 3:
        raise TrajectoryFormatError("the module does not implement ENV_API 3 (refusals by the world use their turn); "
                                    "expected a module from this version of vhd (run `vhd refresh`)")
    return module


class TextToolEnv(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self, row: dict[str, Any] | None = None, module: types.ModuleType | None = None, *,
                 env_id: str | None = None, db: Any = None):
        if (row is None) == (env_id is None):
            raise TrajectoryFormatError("give an export row (row=...) or an environment id (env_id=..., db=...), "
                                        "exactly one of them")
        if row is None:
            from vhd.adapters import load_row

            row = load_row(env_id, db)
        if row["grader"]["config"].get("presentation") == "F":
            raise TrajectoryFormatError("presentation F is scored from a written answer, not tool calls; "
                                        "expected an I or A environment")
        self.row = row
        self.grader = row["grader"]
        self._stored = self.grading = Grading.of_grader(self.grader, row["module"])  # the environment's own episode
        self._decisions: Advantages | None = None
        self._paid = 0.0  # the step rewards given so far this episode
        self.turn_budget = int(self.grader["config"]["turn_budget"])
        self._module = module if module is not None else load_module(row["module"])
        self.observation_space = JsonText(max_length=MAX_TEXT, min_length=1, charset=CHARSET)
        self.action_space = spaces.Text(max_length=MAX_ACTION_CHARS, min_length=1, charset=CHARSET)
        self._env = None
        self._lock = threading.RLock()
        self.steps = 0
        self.trajectory: list[dict[str, Any]] = []
        self.result: dict[str, Any] | None = None
        self._episode_seed: int | None = None  # what reset() was given (None: the stored episode)
        self.step_limit: int | None = None  # a TimeLimit's max_episode_steps (set by FinishAtStepLimit)

    def __getstate__(self) -> dict[str, Any]:
        """The row, the spec and the episode so far (its seed and calls): the module is rebuilt
        from the row and the calls replayed, so a restored env continues the same episode."""
        with self._lock:
            episode = None if self._env is None else {"seed": self._episode_seed, "calls": list(self.trajectory)}
            return {"row": self.row, "spec": self.spec, "step_limit": self.step_limit, "episode": episode}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["row"])
        self.spec, self.step_limit = state["spec"], state["step_limit"]
        if state["episode"] is not None:
            seed = state["episode"]["seed"]
            self.reset(options=None if seed is None else {"episode_seed": seed})
            for call in state["episode"]["calls"]:
                if self.finished:
                    break
                self.step(call)

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
            self._episode_seed = chosen
            self.grading = self._stored if chosen is None else self._stored.for_seed(chosen)
            self._env = self._module.create(self.grading.config)
            g = self.grading
            self._decisions = Advantages(g.family, g.config, g.interface)
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
            g = self.grading
            r = step_reward(self._decisions.call(call), self.steps == 1, g.expected["u_star"], g.expected["u_default"],
                            g.expected.get("u_idle"))
            terminated = bool(self._env.done)
            truncated = not terminated and self.step_limit is not None and self.steps >= self.step_limit
            info: dict[str, Any] = {"steps": self.steps}
            if terminated or truncated:  # a step limit's last step finishes the episode by the module's rule
                episode, result = self._end()
                r = episode - self._paid  # the last step carries the rest: the episode's rewards sum to it
                info.update(result)
            self._paid += r
            return _text(observation), float(r), terminated, truncated, info

    def finish(self) -> tuple[float, dict[str, Any]]:
        """Stop the episode now (the player quits): the module's `Env.finish()` plays the rest
        by the instruction's rule for running out of turns. Returns the episode's whole decision
        reward (not the part the steps have not paid) and the outcome; again on a second call."""
        with self._lock:
            if self._env is None:
                raise RuntimeError("call reset() before finish()")
            if self.finished:
                return self.result["reward"], dict(self.result)
            return self._end()

    def _end(self) -> tuple[float, dict[str, Any]]:
        outcome = self._env.finish()
        self._decisions.finish()
        g = self.grading
        r = decision_reward(self._decisions.total, g.expected["u_star"], g.expected["u_default"], g.expected.get("u_idle"))
        self.result = {"utility": outcome["utility"], "reward": r,
                       "outcome_reward": reward(outcome["utility"], *g.references),
                       "turns_used": outcome["turns_used"], "calls_used": outcome.get("calls_used")}
        return r, dict(self.result)


class FinishAtStepLimit(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """Tells the `TextToolEnv` inside the step limit of the `TimeLimit` it is wrapped in (the
    unwrapped env's own spec has none), so that the limit's last step finishes the episode by
    the module's rule and carries its reward. `gymnasium.make("vhd/TextTool-v0", ...)` adds it."""

    def __init__(self, env: gymnasium.Env):
        gymnasium.utils.RecordConstructorArgs.__init__(self)
        gymnasium.Wrapper.__init__(self, env)
        layer = env
        while isinstance(layer, gymnasium.Wrapper):
            if isinstance(layer, gymnasium.wrappers.TimeLimit):
                env.unwrapped.step_limit = layer._max_episode_steps
                break
            layer = layer.env


if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point="vhd.adapters.gym:TextToolEnv", additional_wrappers=(
        gymnasium.envs.registration.WrapperSpec("FinishAtStepLimit", "vhd.adapters.gym:FinishAtStepLimit", {}),))
