"""SkyRL-gym: one exported environment as a `skyrl_gym.Env` (text in, text out), registered as `vhd`.

    >>> import skyrl_gym, vhd.adapters.skyrl            # importing registers the id "vhd"
    >>> env = skyrl_gym.make("vhd", env_config=None, extras={"extra_info": {"row": row}})
    >>> prompt, info = env.init(None)                   # [{"role": "user", "content": instruction and tools}]
    >>> out = env.step('<tool_call>{"name": "end_day", "arguments": {}}</tool_call>')
    >>> out["done"], out["observations"][0]["role"], round(out["reward"], 3)   # the first step: baseline 1 + A*/span
    (False, 'user', 0.675)

SkyRL's trainers build an environment per dataset row with `skyrl_gym.make(row["env_class"],
env_config=…, extras=row)`, call `init(row["prompt"])`, then `step(model output)` each turn until
`done`, and sum the step rewards. `dataset_rows(export_rows)` writes those rows: `env_class`
"vhd", the prompt (the instruction and the tools, once), `reward_spec` and `extra_info` with the
export row (or give `extra_info` {"env_id", "db"} to load it from a warehouse, as `vhd export`
would write it; an id prefix works).

An action is the model's text. Its tool call is the last `<tool_call>…</tool_call>` block (the
Hermes/Qwen format, `{"name": T, "arguments": A}`), or the whole text as a JSON object
`{"tool": T, "arguments": A}`; anything else that holds a `{` is a malformed call (refused, free,
counted toward the call limit, as on every surface). A text with no tool call at all ends the
episode: the module's `Env.finish()` plays the rest, as when a player quits.

The rewards are the Gym wrapper's (`TextToolEnv`, the one function every surface uses): each step
its step reward (the first with the baseline 1), the step that ends the episode the rest, so they
sum to `vhd score`'s reward. SkyRL stops at its own `max_turns` without telling the environment:
such an episode has been paid 1 + Σ A*_t / span of its calls (docs/TRAINING.md, "Step rewards").
"""

from __future__ import annotations

import json
import re
from typing import Any

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from vhd.adapters.gym import TextToolEnv
from vhd.adapters.play import describe_tools
from vhd.schemas.errors import TrajectoryFormatError

ENV_CLASS = "vhd"
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def prompt_text(row: dict[str, Any]) -> str:
    """The instruction, the tools with their argument schemas and how to call one."""
    return (f"{row['player']['instruction']}\n\nTools:\n{describe_tools(row['player']['tools'])}\n\n"
            'Call one tool per turn: <tool_call>{"name": TOOL, "arguments": {...}}</tool_call>. '
            "A reply without a tool call ends the episode.")


def action_of(text: str) -> dict[str, Any] | str | None:
    """The call in a model's `text`: {"tool", "arguments"} from its last <tool_call> block (name →
    tool) or from the text as a JSON object; the text itself (a malformed call) when it holds a
    `{` but no such call; None when it holds no call at all (the model stopped)."""
    if not isinstance(text, str):
        raise TrajectoryFormatError(f"a SkyRL action is the model's text; got {type(text).__name__}")
    blocks = _TOOL_CALL.findall(text)
    body = blocks[-1] if blocks else text.strip()
    if not blocks and "{" not in body:
        return None
    try:
        call = json.loads(body)
    except (json.JSONDecodeError, RecursionError, ValueError):
        return body
    if isinstance(call, dict) and "name" in call and "tool" not in call:
        call = {"tool": call["name"], **{k: v for k, v in call.items() if k != "name"}}
    return call if isinstance(call, dict) else body


def row_from(extras: dict[str, Any] | None) -> dict[str, Any]:
    """The export row a SkyRL dataset row names: `extra_info.row` (a dict or its JSON text), or
    `extra_info.env_id` (+ `db`) in a warehouse; the same keys at the top level work too."""
    extras = extras or {}
    info = extras.get("extra_info") or {}
    for where in (info, extras):
        row = where.get("row")
        if isinstance(row, str):
            row = json.loads(row)
        if isinstance(row, dict):
            return row
        if where.get("env_id"):
            from vhd.adapters import load_row

            return load_row(str(where["env_id"]), where.get("db"))
    raise TrajectoryFormatError('a vhd SkyRL environment needs extras {"extra_info": {"row": ...}} or '
                                '{"extra_info": {"env_id": ..., "db": ...}}; got neither')


class VhdEnv(BaseTextEnv):
    """One episode of an export row per instance (SkyRL makes one per rollout)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        self.row = row_from(extras)
        self.gym = TextToolEnv(self.row)
        self.max_turns = 2 * self.gym.turn_budget + 50  # the module's call limit ends it first
        seed = ((extras or {}).get("extra_info") or {}).get("episode_seed")
        self._seed = None if seed is None else int(seed)
        self.reward_paid = 0.0
        self.info: dict[str, Any] = {}

    def init(self, prompt: Any = None) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """A fresh episode (the row's own, or `extra_info.episode_seed`'s); the prompt as given, or
        the instruction and tools when none is."""
        _, info = self.gym.reset(seed=self._seed)
        self.turns, self.reward_paid, self.info = 0, 0.0, {}
        return (prompt if prompt else [{"role": "user", "content": prompt_text(self.row)}]), info

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.gym.finished:
            raise RuntimeError("the episode is over; call init() for a new one")
        self.turns += 1
        call = action_of(action)
        if call is None:  # no tool call: the model stopped, and finishing pays the rest
            episode, info = self.gym.finish()
            reward, done, observation = episode - self.reward_paid, True, json.dumps({"finished": True, **info})
        else:
            observation, reward, terminated, truncated, info = self.gym.step(call)
            done = terminated or truncated
        self.reward_paid += reward
        self.info = info
        return BaseTextEnvStepOutput(observations=[] if done else [{"role": "user", "content": observation}],
                                     reward=float(reward), done=done, metadata=dict(info),
                                     postprocessed_action=None)

    def get_metrics(self) -> dict[str, Any]:
        metrics = {"steps": self.turns}
        if self.gym.finished:
            metrics.update({k: self.gym.result[k] for k in ("reward", "outcome_reward", "utility")})
        return metrics


def dataset_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """SkyRL dataset rows (`prompt`, `env_class`, `reward_spec`, `extra_info`) of export rows
    (presentations I and A: F is scored from a written answer)."""
    out = []
    for row in rows:
        if row["grader"]["config"].get("presentation") == "F":
            continue
        out.append({"data_source": "vhd", "env_class": ENV_CLASS,
                    "prompt": [{"role": "user", "content": prompt_text(row)}],
                    "reward_spec": {"method": "rule", "ground_truth": None},
                    "extra_info": {"env_id": row["env_id"], "row": json.dumps(row, sort_keys=True)}})
    return out


if ENV_CLASS not in skyrl_gym.registry:
    skyrl_gym.register(id=ENV_CLASS, entry_point="vhd.adapters.skyrl:VhdEnv")
