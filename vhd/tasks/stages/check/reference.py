"""The family's own World (`vhd/tasks/grading/oracle.py`), the trusted oracle of reference_agreement and
idle_floor, played on the candidates' call sequences in their module's skin."""

from __future__ import annotations

from typing import Any

from vhd.mechanisms import Family
from vhd.schemas.records import SetterOutputRecord
from vhd.tasks.stages.check.candidates import Candidate
from vhd.tasks.stages.check.sequences import IDLE, tailed
from vhd.tasks.grading.oracle import reference_module, reference_skin
from vhd.tasks.setters.skin import with_skin
from vhd.tasks.sandbox import Limits, run_job


def reference_runs(family: Family, candidates: list[Candidate], sequences: list[list[list[dict[str, Any]]]],
                   limits: Limits = Limits(), setter_output: SetterOutputRecord | None = None) -> list[list[dict[str, Any]]]:
    """The family's reference World played on every candidate's call sequences, in a sandbox
    child of its own: trusted code, but CPU work the check tasks' threads would otherwise do
    under one GIL. Per candidate, one run per call sequence, then its episode finished at once
    (`IDLE`). The World wears the candidates' module's presentation (`oracle.reference_skin`: its
    tool names, tables, words, ids and argument names over the trusted tools' roles, turn costs
    and schemas), so both sides answer the same calls in the same words and numbers; a module
    without a readable SKIN is compared with the reference's own. If the child fails, every run carries its message as the exception."""
    _, output = reference_module(family)
    module, names = output.module, output
    skin = reference_skin(family, setter_output) if setter_output is not None else None
    if skin is not None:
        module, names = with_skin(output.module, skin), setter_output
    job = {"module": module, "episodes": [
        {"key": c.env_id, "config": c.config(),
         "trajectories": [tailed(family, names, calls, c.turn_budget) for calls in seqs] + [IDLE]}
        for c, seqs in zip(candidates, sequences)]}
    result = run_job(job, limits, hash_seed=0).settled()  # a wall_timeout is retried, not a verdict
    failed = {"exception": f"the reference World's sandbox run ended {result.status}: {result.message}"}
    return [result.episodes[c.env_id]["trajectories"] if result.status == "ok" and c.env_id in result.episodes
            else [failed] * (len(seqs) + 1) for c, seqs in zip(candidates, sequences)]
