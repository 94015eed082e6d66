"""The family's own World, rendered by the template setter: the trusted oracle of reference_agreement
and idle_floor, and its runs on the candidates' call sequences."""

from __future__ import annotations

from typing import Any

from vhd.mechanisms import Family
from vhd.schemas.records import SetterOutputRecord
from vhd.tasks import AST_LOCK
from vhd.tasks.check.candidates import Candidate
from vhd.tasks.check.sequences import IDLE, tailed
from vhd.tasks.sandbox import Limits, run_job

_REFERENCE: dict[str, tuple[Any, SetterOutputRecord]] = {}
_REFERENCE_LOCK = AST_LOCK  # check tasks run in threads; CPython 3.11's ast.parse is not thread-safe


def reference_module(family: Family) -> tuple[Any, SetterOutputRecord]:
    """The family's own World rendered by the template setter and executed here: trusted code,
    the oracle the reference_agreement gate compares a candidate module with."""
    with _REFERENCE_LOCK:
        return _reference_module(family)


def _reference_module(family: Family) -> tuple[Any, SetterOutputRecord]:
    if family.code_version not in _REFERENCE:
        import types

        from vhd.schemas.errors import SetterError
        from vhd.tasks.passages import builtin_passages
        from vhd.tasks.setters.template import render_module

        output = None
        for passage in builtin_passages():  # the first passage that has the family's vocabulary
            try:
                output = render_module(family, passage)
                break
            except SetterError:
                continue
        if output is None:
            raise SetterError(f"no built-in passage can skin {family.name}'s reference World")
        module = types.ModuleType(f"vhd_reference_{family.name}")
        exec(compile(output.module, f"<reference {family.code_version}>", "exec"), module.__dict__)
        _REFERENCE[family.code_version] = (module, output)
    return _REFERENCE[family.code_version]


def reference_runs(family: Family, candidates: list[Candidate], sequences: list[list[list[dict[str, Any]]]],
                   limits: Limits = Limits()) -> list[list[dict[str, Any]]]:
    """The family's reference World played on every candidate's call sequences, in a sandbox
    child of its own: trusted code, but CPU work the check tasks' threads would otherwise do
    under one GIL. Per candidate, one run per call sequence, then its episode finished at once
    (`IDLE`). If the child fails, every run carries its message as the exception."""
    _, output = reference_module(family)
    job = {"module": output.module, "episodes": [
        {"key": c.env_id, "config": c.config(),
         "trajectories": [tailed(family, output, calls) for calls in seqs] + [IDLE]}
        for c, seqs in zip(candidates, sequences)]}
    result = run_job(job, limits, hash_seed=0).settled()  # a wall_timeout is retried, not a verdict
    failed = {"exception": f"the reference World's sandbox run ended {result.status}: {result.message}"}
    return [result.episodes[c.env_id]["trajectories"] if result.status == "ok" and c.env_id in result.episodes
            else [failed] * (len(seqs) + 1) for c, seqs in zip(candidates, sequences)]
