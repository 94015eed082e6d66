"""Score trajectories on an admitted environment: replay in the sandbox, reward of DESIGN §1.

    >>> score(env, setter_output, theta, family, [[{"tool": "end_shift", "arguments": {}}]])
    [{'utility': -31.0, 'reward': 0.0, 'error': None, 'terminal': True}]

A trajectory that stops before the episode ends is finished by the clock tool alone (the
remaining days are played with no decisions), as when the turn budget runs out.
"""

from __future__ import annotations

import json
import math
from typing import Any

from vhd.mechanisms import Family
from vhd.schemas.errors import TrajectoryFormatError
from vhd.schemas.records import EnvironmentRecord, SetterOutputRecord
from vhd.tasks.sandbox import Limits, run_job


def reward(utility: float, u_star: float, u_default: float) -> float:
    """r = clip01((u − u0) / (u* − u0))."""
    span = u_star - u_default
    if not math.isfinite(utility) or span <= 0:
        return 0.0
    return min(1.0, max(0.0, (utility - u_default) / span))


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
    if env.presentation == "F":
        from vhd.tasks import written

        return [written.score_trajectory(family, theta, env.u_star, env.u_default, env.reference_trajectory, t)
                for t in trajectories]
    clock = setter_output.tool_name(family.tools_with_role("clock")[0].name)
    job = {"module": setter_output.module,
           "episodes": [{"key": "score", "config": env.config(theta), "pad_with": clock, "trajectories": trajectories}]}
    result = run_job(job, limits)
    if result.status != "ok":
        return [{"utility": None, "reward": 0.0, "error": result.message, "terminal": False} for _ in trajectories]
    rows = []
    for played in result.episodes["score"]["trajectories"]:
        if played.get("exception"):
            rows.append({"utility": None, "reward": 0.0, "error": played["exception"].splitlines()[-1], "terminal": False})
            continue
        utility = played["utility"]
        rows.append({"utility": utility, "reward": reward(utility, env.u_star, env.u_default),
                     "error": None, "terminal": played["terminal"], "rejected_calls": played["errors"],
                     "first_error": played.get("first_error"), "obs_digest": played.get("obs_digest"),
                     "turns_used": played.get("turns_used")})
    return rows
