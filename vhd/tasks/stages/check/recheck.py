"""Re-run every gate on a stored environment, optionally with a replacement module.

    >>> recheck(env, model, solution, setter_output, family)["admitted"]     # the stored module
    True
    >>> doubled = setter_output.module.replace('-p["holding_cost"] * closing', '-2 * p["holding_cost"] * closing')
    >>> report = recheck(env, model, solution, setter_output, family, module=doubled)   # a replacement
    >>> report["module"], report["admitted"], [g["name"] for g in report["gates"] if not g["passed"]]
    ('replacement', False, ['replay_agreement', 'dynamics_agreement', 'reference_agreement', 'idle_floor'])
"""

from __future__ import annotations

from typing import Any

from vhd.mechanisms import Family
from vhd.schemas.records import EnvironmentRecord, ModelRecord, SetterOutputRecord, SolutionRecord
from vhd.tasks.stages.check import candidate_from, check_batch


def recheck(env: EnvironmentRecord, model: ModelRecord, solution: SolutionRecord, output: SetterOutputRecord,
            family: Family, module: str | None = None) -> dict[str, Any]:
    if module is not None:
        output = output.model_copy(update={"module": module})
    candidate = candidate_from(env, model, solution, output)
    verdict = check_batch(family, output, [candidate])[0]
    return {
        "env_id": env.env_id,
        "module": "replacement" if module is not None else "stored",
        "admitted": verdict.admitted,
        "gates": [{"name": g.name, "passed": g.passed, "message": g.message, "seconds": round(g.seconds, 4)}
                  for g in verdict.gates],
    }
