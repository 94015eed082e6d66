"""Trainer adapters: a reward function over exported grader records, a Gymnasium-style text
environment (vhd.adapters.gym) and an HTTP server for many episodes (vhd.adapters.http).

    >>> reward(row["grader"], row["grader"]["reference_trajectory"], row["module"])
    1.0

Every surface gives one reward for one trajectory (docs/TRAINING.md, "One episode, one
reward"): refused calls use no turn, an episode ends after the module's call limit, an
unfinished episode is finished by the module's `Env.finish()`, and the reward is
`vhd.tasks.score.reward` with the grader's u*, u_default and u_idle.
"""

from __future__ import annotations

import json
from typing import Any

from vhd.schemas.errors import TrajectoryFormatError
from vhd.tasks.sandbox import Limits
from vhd.tasks.score import replay
from vhd.tasks.score import reward as _reward

MAX_ACTION_CHARS = 65_536  # an action's JSON text; longer is refused before parsing
INVALID_TOOL = ""  # what a malformed action is recorded as: a call the module refuses (and counts)


def episode_reward(grader: dict[str, Any], utility: float | None) -> float:
    """The reward of an episode that realized `utility`, by the grader record's references."""
    return _reward(utility, grader["u_star"], grader["u_default"], grader.get("u_idle"))


def parse_action(action: Any) -> dict[str, Any]:
    """{"tool": str, "arguments": object} from a dict or its JSON text; TrajectoryFormatError
    (one line) for anything else: not JSON, too long, nested too deeply, other keys."""
    if isinstance(action, (str, bytes)):
        if len(action) > MAX_ACTION_CHARS:
            raise TrajectoryFormatError(f"action is {len(action)} characters long; expected at most {MAX_ACTION_CHARS}")
        try:
            action = json.loads(action)
        except json.JSONDecodeError as exc:
            raise TrajectoryFormatError(f'action is not JSON ({exc.msg}); expected {{"tool": NAME, "arguments": {{...}}}}') from None
        except (RecursionError, ValueError, UnicodeDecodeError):
            raise TrajectoryFormatError('action is nested too deeply or holds a number too long; expected '
                                        '{"tool": NAME, "arguments": {...}}') from None
    if not (isinstance(action, dict) and isinstance(action.get("tool"), str)
            and isinstance(action.get("arguments", {}), dict) and set(action) <= {"tool", "arguments"}):
        raise TrajectoryFormatError('action must be {"tool": NAME, "arguments": {...}}')
    return {"tool": action["tool"], "arguments": action.get("arguments", {})}


def _calls(trajectory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not isinstance(trajectory, list):
        raise TrajectoryFormatError('a trajectory is a list of {"tool": str, "arguments": object}')
    calls = []
    for number, step in enumerate(trajectory, start=1):
        if not (isinstance(step, dict) and isinstance(step.get("tool"), str) and isinstance(step.get("arguments", {}), dict)):
            raise TrajectoryFormatError(f'step {number}: expected {{"tool": str, "arguments": object}}')
        calls.append({"tool": step["tool"], "arguments": step.get("arguments", {})})
    return calls


def reward(grader: dict[str, Any], trajectory: list[dict[str, Any]], module: str, limits: Limits = Limits()) -> float:
    """Reward in [0, 1] of a trajectory (a list of {"tool", "arguments"}; extra keys ignored).

    Replays it in the sandbox (the job `vhd score` runs: `vhd.tasks.score.replay`), finishing
    it by the module's `Env.finish()`, and applies the grader's references."""
    config = grader["config"]
    if config.get("presentation") == "F":
        raise TrajectoryFormatError("presentation F is scored from a written answer (vhd score), not from tool calls")
    played = replay(module, config, [_calls(trajectory)], limits)[0]
    return episode_reward(grader, played["utility"])


def load_row(env_id: str, db: Any = None) -> dict[str, Any]:
    """The export row (as `vhd export` writes it) of one admitted environment in the warehouse,
    its rows verified first (ids and field digests; the latest version that holds it, if any)."""
    from vhd.mechanisms import registry
    from vhd.schemas.errors import UnknownEnvironment
    from vhd.schemas.records import EnvironmentRecord, ModelRecord, SetterOutputRecord
    from vhd.tasks.export import export_row
    from vhd.tasks.publish import holding_version, pinned
    from vhd.warehouse import Warehouse

    with Warehouse.open(db, read_only=True) as wh:
        env = wh.verified(EnvironmentRecord, [env_id]).get(env_id)
        if env is None or not env.admitted:
            raise UnknownEnvironment(f"no admitted environment {env_id!r}; expected an env_id from `vhd envs`")
        held = holding_version(wh, env_id)
        model = wh.verified(ModelRecord, [env.model_id], complete=True)[env.model_id]
        output = wh.verified(SetterOutputRecord, [env.setter_output_id], complete=True)[env.setter_output_id]
        return {**export_row(env, model, output, registry.get(env.family)),
                **pinned(env, held[0] if held is not None else None)}
