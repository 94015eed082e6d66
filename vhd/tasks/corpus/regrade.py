"""Regrade: what annotate() stored on an environment row, computed again from θ, the stored
solution and the episode seed — the audit's replay of the grading fields.

    >>> realized(family, env, solution, setter_output, theta, passage)["u_star"] == env.u_star
    True
"""

from __future__ import annotations

from typing import Any

from vhd.mechanisms import Family
from vhd.schemas.records import EnvironmentRecord, SetterOutputRecord, SolutionRecord


def expected_budget(family: Family, env: EnvironmentRecord, theta: dict[str, Any]) -> int:
    from vhd.tasks.grading import written

    return written.TURN_BUDGET if env.presentation == "F" else family.turn_budget(theta)


def realized(family: Family, env: EnvironmentRecord, solution: SolutionRecord, output: SetterOutputRecord,
             theta: dict[str, Any], passage: Any) -> dict[str, Any]:
    """What annotate() stored for this environment, computed again: u*, u₀ (and u_idle of an
    admitted environment), the reference and default trajectories; in F also the instruction
    and tools, which the pipeline renders from θ (in I and A the module writes them: digest only)."""
    from vhd.tasks.grading import written
    from vhd.tasks.stages.check import to_calls
    from vhd.tasks.stages.solve import unpack_policy

    policy = unpack_policy(solution.policy)
    if env.presentation == "F":
        from vhd.tasks.setters.template import narrative

        u_star, u_default = (written.graded_values(family, theta, policy) if env.admitted
                             else (solution.u_star, solution.u_default))
        out = {"u_star": u_star, "u_default": u_default,
               "reference_trajectory": written.calls_for(policy),
               "default_trajectory": written.calls_for(family.default_policy(theta)),
               "tools": written.tools(family)}
        if env.admitted:
            out["u_idle"] = solution.u_idle
        if passage is not None:
            out["instruction"] = written.instruction(family, theta, narrative(passage))
        return out
    optimal = family.simulate(theta, policy, env.episode_seed)
    default = family.simulate(theta, family.default_policy(theta), env.episode_seed)
    out = {"u_star": optimal.utility, "u_default": default.utility,
           "reference_trajectory": to_calls(output, optimal.calls), "default_trajectory": to_calls(output, default.calls)}
    if env.admitted:
        out["u_idle"] = reference_idle(family, env.config(theta))
    return out


def reference_idle(family: Family, config: dict[str, Any]) -> float:
    """What finishing at once realizes in the family's reference World (trusted code, in process)."""
    from vhd.tasks.stages.check import reference_module

    module, _ = reference_module(family)
    return float(module.create(config).finish()["utility"])
