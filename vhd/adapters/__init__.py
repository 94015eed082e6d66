"""Trainer adapters: a reward function over exported grader records, a Gymnasium-style text
environment (vhd.adapters.gym) and an HTTP server for one environment (vhd.adapters.http).

    >>> reward(row["grader"], row["grader"]["reference_trajectory"], row["module"])
    1.0

See docs/TRAINING.md for the export schema and the trust model.
"""

from __future__ import annotations

from typing import Any

from vhd.schemas.errors import TrajectoryFormatError
from vhd.tasks.sandbox import Limits, run_job
from vhd.tasks.score import reward as _reward


def clock_tool(grader: dict[str, Any]) -> str:
    """The tool that advances the clock: the last call of π*'s reference trajectory, which ends the episode."""
    reference = grader.get("reference_trajectory") or []
    if not reference:
        raise TrajectoryFormatError("grader record has no reference_trajectory; expected the exported grader view")
    return reference[-1]["tool"]


def _calls(trajectory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    calls = []
    for number, step in enumerate(trajectory, start=1):
        if not (isinstance(step, dict) and isinstance(step.get("tool"), str) and isinstance(step.get("arguments", {}), dict)):
            raise TrajectoryFormatError(f'step {number}: expected {{"tool": str, "arguments": object}}')
        calls.append({"tool": step["tool"], "arguments": step.get("arguments", {})})
    return calls


def reward(grader: dict[str, Any], trajectory: list[dict[str, Any]], module: str, limits: Limits = Limits()) -> float:
    """Reward in [0, 1] of a trajectory (a list of {"tool", "arguments"}; extra keys ignored).

    Replays it in the sandbox (the same job `vhd score` runs), finishing it with the clock tool
    as when the turn budget runs out, and applies vhd.tasks.score.reward to its utility.
    """
    config = grader["config"]
    if config.get("presentation") == "F":
        raise TrajectoryFormatError("presentation F is scored from a written answer (vhd score), not from tool calls")
    job = {"module": module, "episodes": [{"key": "reward", "config": config, "pad_with": clock_tool(grader),
                                           "trajectories": [_calls(trajectory)]}]}
    result = run_job(job, limits)
    if result.status != "ok":
        return 0.0
    played = result.episodes["reward"]["trajectories"][0]
    if played.get("exception"):
        return 0.0
    return _reward(played["utility"], grader["u_star"], grader["u_default"])


def load_row(env_id: str, db: Any = None) -> dict[str, Any]:
    """The export row (as `vhd export` writes it) of one admitted environment in the warehouse."""
    from vhd.mechanisms import registry
    from vhd.schemas.errors import UnknownEnvironment
    from vhd.schemas.records import EnvironmentRecord, ModelRecord, SetterOutputRecord
    from vhd.tasks.export import export_row
    from vhd.warehouse import Warehouse

    with Warehouse.open(db, read_only=True) as wh:
        env = wh.get(EnvironmentRecord, env_id)
        if env is None or not env.admitted:
            raise UnknownEnvironment(f"no admitted environment {env_id!r}; expected an env_id from `vhd envs`")
        return export_row(env, wh.get(ModelRecord, env.model_id), wh.get(SetterOutputRecord, env.setter_output_id),
                          registry.get(env.family))
