"""The `refresh` flow: sample → solve → synthesize → check → annotate → write, per family.

    >>> summary = refresh(families=["inventory_dp"], per_family=20, seed=0, db_path="data/vhd.duckdb")

Stages are Prefect tasks over batches. Only transient faults are retried (a sandbox that
could not be started); a gate that fails is a verdict, not an error. Workers return records;
this process is the warehouse's only writer and commits each family in one transaction.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from vhd import __version__
from vhd.mechanisms import registry
from vhd.schemas.errors import SandboxError
from vhd.schemas.records import ModelRecord, RunRecord, SetterOutputRecord, SolutionRecord
from vhd.tasks import annotate as annotate_stage
from vhd.tasks import check as check_stage
from vhd.tasks import sample as sample_stage
from vhd.tasks import solve as solve_stage
from vhd.tasks import synthesize as synthesize_stage
from vhd.tasks.passages import builtin_passages
from vhd.warehouse import Warehouse


def transient(task_, task_run, state) -> bool:
    """Retry a failed task only when the sandbox itself failed, never for a verdict."""
    return isinstance(state.result(raise_on_failure=False), (SandboxError, OSError))


@task(cache_policy=NO_CACHE)
def sample_task(family: str, count: int, seed: int, batch: str) -> list[ModelRecord]:
    return sample_stage.sample_models(registry.get(family), count, seed, batch)


@task(cache_policy=NO_CACHE)
def solve_task(family: str, models: list[ModelRecord]) -> list[SolutionRecord]:
    return solve_stage.solve_models(registry.get(family), models)


@task(cache_policy=NO_CACHE)
def synthesize_task(family: str, models: list[ModelRecord], passages) -> tuple[list[SetterOutputRecord], dict]:
    return synthesize_stage.synthesize(registry.get(family), models, passages)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=1, retry_condition_fn=transient)
def check_task(family: str, output: SetterOutputRecord, candidates: list) -> list:
    return check_stage.check_batch(registry.get(family), output, candidates)


@task(cache_policy=NO_CACHE)
def annotate_task(family: str, verdicts: list) -> list[tuple]:
    return [annotate_stage.annotate(registry.get(family), verdict) for verdict in verdicts]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


@flow(name="refresh", log_prints=True)
def refresh(
    families: list[str],
    per_family: int = 20,
    seed: int = 0,
    batch: str = "default",
    db_path: str = "data/vhd.duckdb",
    presentations: tuple[str, ...] = ("I", "A"),
) -> dict[str, Any]:
    started = time.perf_counter()
    run = RunRecord(run_id=str(flow_run.id or "local"), flow="refresh", started_at=_now(), code_version=__version__,
                    parameters={"families": families, "per_family": per_family, "seed": seed, "batch": batch})
    passages = builtin_passages()
    totals = {"admitted": 0, "rejected": 0, "reused": 0, "families": {}}
    with Warehouse.open(db_path) as wh:
        with wh.transaction():
            wh.upsert_run(run)
            wh.insert([p.model_copy() for p in passages])
        for name in families:
            family = registry.get(name)
            models = sample_task(name, per_family, seed, batch)
            known = wh.solutions_for(m.model_id for m in models)
            fresh = solve_task(name, [m for m in models if m.model_id not in known])
            solutions = {**known, **{s.model_id: s for s in fresh}}
            outputs, assignment = synthesize_task(name, models, passages)
            candidates = annotate_stage.make_candidates(
                family, models, solutions, {o.setter_output_id: o for o in outputs}, assignment, presentations)
            done = wh.present(annotate_stage.EnvironmentRecord, [c.env_id for c in candidates])
            todo = [c for c in candidates if c.env_id not in done]
            batches = {o.setter_output_id: (o, [c for c in todo if c.setter_output.setter_output_id == o.setter_output_id])
                       for o in outputs}
            futures = [check_task.submit(name, output, batch) for output, batch in batches.values() if batch]
            verdicts = [v for future in futures for v in future.result()]
            annotated = annotate_task(name, verdicts)
            with wh.transaction():
                wh.insert([m.model_copy(update={"run_id": run.run_id}) for m in models])
                wh.insert([s.model_copy(update={"run_id": run.run_id}) for s in fresh])
                wh.insert([o.model_copy(update={"run_id": run.run_id}) for o in outputs])
                wh.insert([env.model_copy(update={"run_id": run.run_id}) for env, _, _ in annotated])
                wh.insert([c.model_copy(update={"run_id": run.run_id}) for _, checks, _ in annotated for c in checks])
                wh.insert(annotate_stage.upstream_edges(fresh, outputs)
                          + [e for _, _, edges in annotated for e in edges])
            admitted = sum(env.admitted for env, _, _ in annotated)
            totals["families"][name] = {"admitted": admitted, "rejected": len(annotated) - admitted,
                                        "reused": len(done)}
            totals["admitted"] += admitted
            totals["rejected"] += len(annotated) - admitted
            totals["reused"] += len(done)
        summary = {"run_id": run.run_id, **totals, "seconds": round(time.perf_counter() - started, 3)}
        with wh.transaction():
            wh.upsert_run(run.model_copy(update={"finished_at": _now(), "status": "completed", "summary": summary}))
    create_markdown_artifact(key="refresh-summary", markdown=_markdown(summary), description="refresh summary")
    return summary


def _markdown(summary: dict[str, Any]) -> str:
    lines = ["# Refresh summary", "", f"run `{summary['run_id']}` in {summary['seconds']} s", "",
             "| family | admitted | rejected | already there |", "|---|---|---|---|"]
    for name, row in summary["families"].items():
        lines.append(f"| {name} | {row['admitted']} | {row['rejected']} | {row['reused']} |")
    return "\n".join(lines)
