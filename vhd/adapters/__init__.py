"""Trainer adapters: a reward function over exported grader records, a Gymnasium-style text
environment (vhd.adapters.gym) and an HTTP server for many episodes (vhd.adapters.http).

    >>> reward(row["grader"], row["grader"]["reference_trajectory"], row["module"])
    1.0

Every surface gives one reward for one trajectory (docs/TRAINING.md, "One episode, one
reward"): a refusal by the world uses its turn, a malformed call none, an episode ends after
the module's call limit, an
unfinished episode is finished by the module's `Env.finish()`, and the rewards are those of
`vhd score` (`vhd.tasks.grading.score.Grading`): the decision reward from the exact advantages, the step
rewards, and the outcome reward with the grader's u*, u_default and u_idle.
"""

from __future__ import annotations

import json
from typing import Any

from vhd.schemas.errors import TrajectoryFormatError
from vhd.tasks.sandbox import Limits
from vhd.tasks.grading.score import Grading, replay

MAX_ACTION_CHARS = 65_536  # an action's JSON text; longer is refused before parsing
INVALID_TOOL = ""  # what a malformed action is recorded as: a call the module refuses (and counts)


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


def grade(grader: dict[str, Any], trajectory: list[dict[str, Any]], module: str,
          limits: Limits = Limits()) -> dict[str, Any]:
    """The rewards of a trajectory (a list of {"tool", "arguments"}; extra keys ignored), as
    `vhd score` gives them: `reward` (the decision reward), `outcome_reward`, `step_rewards` (one
    per call) and `utility`. Replays it in the sandbox (`vhd.tasks.grading.score.replay`), finishing it by
    the module's `Env.finish()`."""
    grading = Grading.of_grader(grader, module)
    calls = _calls(trajectory)
    played = replay(module, grading.config, [calls], limits)[0]
    return {**grading.row(calls, played["utility"]), **played}


def reward(grader: dict[str, Any], trajectory: list[dict[str, Any]], module: str, limits: Limits = Limits()) -> float:
    """The decision reward in [0, 1] of a trajectory (`grade(...)["reward"]`)."""
    return grade(grader, trajectory, module, limits)["reward"]


def load_row(env_id: str, db: Any = None) -> dict[str, Any]:
    """The export row (as `vhd export` writes it) of one admitted environment in the warehouse
    (`env_id`: the id or a unique prefix of it, as the CLI takes), its rows verified first (ids and
    field digests; the latest version that holds it, if any)."""
    from vhd.schemas.errors import UnknownEnvironment
    from vhd.schemas.records import EnvironmentRecord
    from vhd.tasks.corpus.export import rows_of
    from vhd.tasks.corpus.publish import holding_version, pinned
    from vhd.warehouse import Warehouse

    with Warehouse.open(db, read_only=True) as wh:
        env_id = wh.resolve_env_id(env_id)
        env = wh.verified(EnvironmentRecord, [env_id]).get(env_id)
        if env is None or not env.admitted:
            raise UnknownEnvironment(f"no admitted environment {env_id!r}; expected an env_id from `vhd envs`")
        held = holding_version(wh, env_id)
        return rows_of(wh, [env], lambda e: pinned(e, held[0] if held is not None else None))[0]
