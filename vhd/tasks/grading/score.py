"""Score trajectories on an admitted environment: replay in the sandbox, the rewards of every surface.

    >>> rows = score(env, setter_output, theta, family, solution, [[{"tool": "end_day", "arguments": {}}]])
    >>> rows[0]["reward"], rows[0]["outcome_reward"], rows[0]["utility"], rows[0]["error"]
    (0.0, 0.0, -318.0, None)
    >>> rows[0]["step_rewards"]   # closing the day at once, then finishing: its sum, the reward, is clipped to 0
    [0.0]

One grading for every surface (`vhd score`, `vhd.adapters.reward`, the Gym wrapper, `serve-env`,
`play`, `eval`): a trajectory that stops before the episode ends is finished by the module's
`Env.finish()` (the instruction's own rule for running out of turns); then

- `reward`, the decision reward: clip01(1 + Σ_t A*_t / (E[u*] − E[u0])), the exact advantages of
  the trajectory's decisions from the solved model (`vhd/tasks/grading/step_advantages.py`): π* scores 1 on every
  seed, the default and doing nothing 0 in expectation, and luck earns nothing;
- `step_rewards`, one per call, summing to `reward`: A*_t / (E[u*] − E[u0]) each, the baseline 1
  on the first call's, the clip's correction on the last call's (`reward.step_rewards`);
  `advantages`, each call's A*_t (finishing's in the last), and `advantage`, Σ_t A*_t;
- `outcome_reward`, the paper's realised-utility ratio on the episode's own draws:
  clip01((u − u0) / (u* − u0)), u0 = max(u_default, u_idle), u_idle what doing nothing realizes;
- `utility`, what the module realised.

A module that fails scores 0 on both rewards.
"""

from __future__ import annotations

import json
from typing import Any

from dataclasses import dataclass

from vhd.mechanisms import Family, registry
from vhd.schemas.errors import TrajectoryFormatError
from vhd.schemas.records import EnvironmentRecord, SetterOutputRecord, SolutionRecord
from vhd.tasks.grading import written
from vhd.tasks.grading.step_advantages import Advantages, decision_grade
from vhd.tasks.grading.reward import reward, step_rewards
from vhd.tasks.sandbox import Limits, run_job
from vhd.tasks.setters.skin import Interface

REPLAY_ATTEMPTS = 3

__all__ = ["Grading", "parse_trajectories", "replay", "reward", "score"]


@dataclass(frozen=True)
class Grading:
    """What grading any trajectory of one I or A environment takes: the family, the module's
    create() config, the episode's own references (u*, u_default, u_idle on its seed), the model's
    expected values and the module's interface (its calls → the family's canonical calls)."""

    family: Family
    config: dict[str, Any]
    references: tuple[float, float, float | None]
    expected: dict[str, float]
    interface: Interface

    @classmethod
    def of(cls, env: EnvironmentRecord, theta: dict[str, Any], output: SetterOutputRecord, solution: SolutionRecord,
           family: Family) -> "Grading":
        return cls(family, env.config(theta), (env.u_star, env.u_default, env.u_idle),
                   {"u_star": solution.u_star, "u_default": solution.u_default, "u_idle": solution.u_idle},
                   Interface.of(family, output))

    @classmethod
    def of_grader(cls, grader: dict[str, Any], module: str) -> "Grading":
        """From an export row's grader view and module (whose SKIN says how its calls name their
        arguments and write ids); TrajectoryFormatError if this vhd's family differs from the one
        the row was made with, or if the row is of presentation F."""
        if grader["config"].get("presentation") == "F":
            raise TrajectoryFormatError("presentation F is scored from a written answer (vhd score), not from tool "
                                        "calls")
        name, _, version = str(grader.get("family", "")).partition("@")
        family = registry.get(name)
        if family.code_version != grader.get("family"):
            raise TrajectoryFormatError(f"the row was exported from {grader.get('family')} but this vhd has "
                                        f"{family.code_version}; expected a row of this version (re-export it)")
        return cls(family, grader["config"], (grader["u_star"], grader["u_default"], grader.get("u_idle")),
                   grader["expected"], Interface.of_row(family, grader["interface"], module))

    def for_seed(self, episode_seed: int) -> "Grading":
        """The grading of another episode of the same θ: its config, and its own references (π*, the
        default and finishing at once, played on that seed by the family's simulator and World).
        The decision reward needs only the expected values, which do not change."""
        if episode_seed == self.config["episode_seed"]:
            return self
        theta, family = self.config["params"], self.family
        optimal = _policy(family, theta)
        config = dict(self.config, episode_seed=episode_seed)
        idle = Advantages(family, config)
        idle.finish()
        references = (family.simulate(theta, optimal, episode_seed).utility,
                      family.simulate(theta, family.default_policy(theta), episode_seed).utility, idle.utility)
        return Grading(family, config, references, self.expected, self.interface)

    def row(self, calls: list[dict[str, Any]], utility: float | None) -> dict[str, Any]:
        """The rewards of one trajectory whose module replay realised `utility` (None: it failed)."""
        decision = decision_grade(self.family, self.config, calls, self.expected, self.interface)
        failed = utility is None
        return {"reward": 0.0 if failed else decision["reward"],
                "outcome_reward": reward(utility, *self.references),
                "step_rewards": [0.0] * len(calls) if failed else decision["step_rewards"],
                "advantage": None if failed else decision["advantage"],
                "advantages": None if failed else decision["advantages"], "utility": utility}


_POLICIES: dict[tuple[str, str], Any] = {}


def _policy(family: Family, theta: dict[str, Any]) -> Any:
    """π* of θ, solved once per θ in this process (a new episode seed needs its references)."""
    key = (family.code_version, json.dumps(theta, sort_keys=True))
    if key not in _POLICIES:
        if len(_POLICIES) >= 64:
            _POLICIES.pop(next(iter(_POLICIES)))
        _POLICIES[key] = family.solve(theta).policy
    return _POLICIES[key]


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
          solution: SolutionRecord, trajectories: list[list[dict[str, Any]]],
          limits: Limits = Limits()) -> list[dict[str, Any]]:
    """The rewards of each trajectory on a stored environment (F: the written plan's grader)."""
    if env.presentation == "F":  # one decision, graded by expected values: decision and outcome reward agree
        rows = [written.score_trajectory(family, theta, env.u_star, env.u_default, t, env.u_idle) for t in trajectories]
        return [{**row, "outcome_reward": row["reward"],
                 "advantage": None if row["utility"] is None else row["utility"] - env.u_star,
                 "advantages": None if row["utility"] is None else [0.0] * (len(t) - 1) + [row["utility"] - env.u_star],
                 "step_rewards": [0.0] * len(t) if row["utility"] is None else
                 step_rewards([0.0] * (len(t) - 1) + [row["utility"] - env.u_star], env.u_star, env.u_default,
                              env.u_idle, episode_reward=row["reward"])} for t, row in zip(trajectories, rows)]
    grading = Grading.of(env, theta, setter_output, solution, family)
    rows = replay(setter_output.module, env.config(theta), trajectories, limits)
    return [{**grading.row(calls, row["utility"]), **row} for calls, row in zip(trajectories, rows)]
