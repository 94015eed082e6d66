"""The family's own World (`vhd/tasks/grading/oracle.py`), the trusted oracle of reference_agreement and
idle_floor, played on the candidates' call sequences."""

from __future__ import annotations

from typing import Any

from vhd.mechanisms import Family
from vhd.tasks.stages.check.candidates import Candidate
from vhd.tasks.stages.check.sequences import IDLE, tailed
from vhd.tasks.grading.oracle import reference_module
from vhd.tasks.sandbox import Limits, run_job


def reference_runs(family: Family, candidates: list[Candidate], sequences: list[list[list[dict[str, Any]]]],
                   limits: Limits = Limits()) -> list[list[dict[str, Any]]]:
    """The family's reference World played on every candidate's call sequences, in a sandbox
    child of its own: trusted code, but CPU work the check tasks' threads would otherwise do
    under one GIL. Per candidate, one run per call sequence, then its episode finished at once
    (`IDLE`). If the child fails, every run carries its message as the exception."""
    _, output = reference_module(family)
    job = {"module": output.module, "episodes": [
        {"key": c.env_id, "config": c.config(),
         "trajectories": [tailed(family, output, calls, c.turn_budget) for calls in seqs] + [IDLE]}
        for c, seqs in zip(candidates, sequences)]}
    result = run_job(job, limits, hash_seed=0).settled()  # a wall_timeout is retried, not a verdict
    failed = {"exception": f"the reference World's sandbox run ended {result.status}: {result.message}"}
    return [result.episodes[c.env_id]["trajectories"] if result.status == "ok" and c.env_id in result.episodes
            else [failed] * (len(seqs) + 1) for c, seqs in zip(candidates, sequences)]
