"""Score trajectories on an admitted environment: replay in the sandbox, reward of DESIGN §1.

    >>> score(env, setter_output, theta, family, [[{"tool": "end_shift", "arguments": {}}]])
    [{'utility': -31.0, 'reward': 0.0, 'error': None, 'terminal': True, ...}]

The one reward of every surface (`vhd score`, `vhd.adapters.reward`, the Gym wrapper,
`serve-env`, `play`, `eval`): a trajectory that stops before the episode ends is finished by
the module's `Env.finish()` (the instruction's own rule for running out of turns), and

    r = clip01((u − u0) / (u* − u0)),   u0 = max(u_default, u_idle)

where u_idle is what doing nothing realizes (finishing the episode at once), so that neither
the default nor doing nothing earns reward.
"""

from __future__ import annotations

import json
from typing import Any

from vhd.mechanisms import Family
from vhd.schemas.errors import TrajectoryFormatError
from vhd.schemas.records import EnvironmentRecord, SetterOutputRecord
from vhd.tasks import written
from vhd.tasks.reward import reward
from vhd.tasks.sandbox import Limits, run_job

REPLAY_ATTEMPTS = 3

__all__ = ["parse_trajectories", "replay", "reward", "score"]


def replay(module: str, config: dict[str, Any], trajectories: list[list[dict[str, Any]]],
           limits: Limits = Limits()) -> list[dict[str, Any]]:
    """Play each trajectory in the sandbox and finish it by the contract's rule (`Env.finish()`).
    One row per trajectory: utility (None if the module failed), error, terminal, refused calls.
    A job the machine starved is run again, and raises SandboxError if it stays starved."""
    job = {"module": module, "episodes": [{"key": "score", "config": config, "finish": True,
                                           "trajectories": trajectories}]}
    for _ in range(REPLAY_ATTEMPTS):  # a job the busy machine starved (wall_timeout) says nothing of the play
        result = run_job(job, limits)
        if not result.transient:
            break
    result.settled()  # still starved: SandboxError, never a reward of 0 for machine load
    if result.status != "ok":
        return [{"utility": None, "error": result.message, "terminal": False} for _ in trajectories]
    rows = []
    for played in result.episodes["score"]["trajectories"]:
        if played.get("exception"):
            rows.append({"utility": None, "error": played["exception"].splitlines()[-1], "terminal": False})
        else:
            rows.append({"utility": played["utility"], "error": None, "terminal": played["terminal"],
                         "rejected_calls": played["errors"], "first_error": played.get("first_error"),
                         "obs_digest": played.get("obs_digest"), "turns_used": played.get("turns_used")})
    return rows


MAX_DEPTH = 64  # arrays and objects inside one trajectory line; deeper ones cannot reach the sandbox's encoder


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (iterative: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def parse_trajectories(text: str, source: str = "trajectories") -> list[list[dict[str, Any]]]:
    """JSONL, one trajectory a line: a list of {"tool": str, "arguments": object}."""
    trajectories = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrajectoryFormatError(f"{source}:{number}: not JSON ({exc.msg}); expected a list of tool calls") from None
        except (RecursionError, ValueError):  # nested past the parser's depth, an integer past 4300 digits
            raise TrajectoryFormatError(f"{source}:{number}: nested too deeply or a number too long; "
                                        "expected a list of tool calls") from None
        if _depth(value) > MAX_DEPTH:
            raise TrajectoryFormatError(f"{source}:{number}: nested deeper than {MAX_DEPTH} levels; "
                                        "expected a list of tool calls") from None
        if not isinstance(value, list) or not all(
            isinstance(s, dict) and set(s) == {"tool", "arguments"} and isinstance(s["tool"], str)
            and isinstance(s["arguments"], dict) for s in value
        ):
            raise TrajectoryFormatError(f'{source}:{number}: expected a list of {{"tool": str, "arguments": object}}')
        trajectories.append(value)
    if not trajectories:
        raise TrajectoryFormatError(f"{source}: no trajectories; expected one JSON list per line")
    return trajectories


def score(env: EnvironmentRecord, setter_output: SetterOutputRecord, theta: dict[str, Any], family: Family,
          trajectories: list[list[dict[str, Any]]], limits: Limits = Limits()) -> list[dict[str, Any]]:
    """Reward of each trajectory on a stored environment (F: the written plan's grader)."""
    if env.presentation == "F":
        return [written.score_trajectory(family, theta, env.u_star, env.u_default, t, env.u_idle)
                for t in trajectories]
    rows = replay(setter_output.module, env.config(theta), trajectories, limits)
    return [{"reward": reward(row["utility"], env.u_star, env.u_default, env.u_idle), **row} for row in rows]
