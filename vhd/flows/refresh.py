"""The `refresh` flow: sample → solve → synthesize → check → annotate → write, per family.

    >>> summary = refresh(families=["inventory_dp"], per_family=20, seed=0, db_path="data/vhd.duckdb")

Stages are Prefect tasks over batches. Only transient faults are retried (a sandbox that
could not be started); a gate that fails is a verdict, not an error. Workers return records;
this process is the warehouse's only writer and commits each family in one transaction.
"""

from __future__ import annotations

import time
from datetime import date, datetime, timezone
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from vhd import __version__
from vhd.mechanisms import registry
from vhd.schemas.errors import SandboxError
from vhd.schemas.records import (
    CorpusVersionRecord, EnvironmentRecord, ModelRecord, RunRecord, SetterOutputRecord, SolutionRecord,
)
from vhd.tasks import annotate as annotate_stage
from vhd.tasks import check as check_stage
from vhd.tasks import publish as publish_stage
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


def _stamped(records: list, run_id: str) -> list:
    return [r.model_copy(update={"run_id": run_id}) for r in records]


def refresh_family(wh: Warehouse, run_id: str, name: str, per_family: int, seed: int, batch: str,
                   passages: list, presentations: tuple[str, ...]) -> dict[str, Any]:
    """One family through every stage; only what the warehouse lacks is computed."""
    family = registry.get(name)
    models = sample_task(name, per_family, seed, batch)
    had_models = wh.present(ModelRecord, [m.model_id for m in models])
    known = wh.solutions_for(m.model_id for m in models)
    fresh = solve_task(name, [m for m in models if m.model_id not in known])
    outputs, assignment = synthesize_task(name, models, passages)
    had_outputs = wh.present(SetterOutputRecord, [o.setter_output_id for o in outputs])
    candidates = annotate_stage.make_candidates(
        family, models, {**known, **{s.model_id: s for s in fresh}}, {o.setter_output_id: o for o in outputs},
        assignment, presentations)
    done = wh.present(EnvironmentRecord, [c.env_id for c in candidates])
    pending = [c for c in candidates if c.env_id not in done]
    futures = [check_task.submit(name, output, batch_) for output, batch_ in annotate_stage.by_module(outputs, pending)]
    annotated = annotate_task(name, [v for future in futures for v in future.result()])
    with wh.transaction():  # one family, one commit: all of its rows or none
        wh.insert(_stamped(models, run_id))
        wh.insert(_stamped(fresh, run_id))
        wh.insert(_stamped(outputs, run_id))
        wh.insert(_stamped([env for env, _, _ in annotated], run_id))
        wh.insert(_stamped([c for _, checks, _ in annotated for c in checks], run_id))
        wh.insert(annotate_stage.upstream_edges(fresh, outputs) + [e for _, _, edges in annotated for e in edges])
    admitted = sum(env.admitted for env, _, _ in annotated)
    return {
        "admitted": admitted, "rejected": len(annotated) - admitted, "reused": len(done),
        "computed": {"sample": len(models) - len(had_models), "solve": len(fresh),
                     "synthesize": len(outputs) - len(had_outputs), "check": len(pending), "annotate": len(annotated)},
        "found": {"sample": len(had_models), "solve": len(known), "synthesize": len(had_outputs),
                  "check": len(done), "annotate": len(done)},
    }


def publish(wh: Warehouse, run_id: str) -> tuple[str | None, bool]:
    """A new corpus version when the admitted set changed; (version, published?)."""
    manifest = publish_stage.build_manifest(wh.environments())
    versions = wh.versions()
    if versions and versions[-1].manifest["digest"] == manifest["digest"]:
        return versions[-1].version, False
    if not manifest["env_ids"]:
        return None, False
    version = publish_stage.next_version([v.version for v in versions])
    with wh.transaction():
        wh.insert([CorpusVersionRecord(version=version, created_at=_now(), run_id=run_id,
                                       admitted=len(manifest["env_ids"]), manifest=manifest)])
    return version, True


@flow(name="refresh", log_prints=True)
def refresh(
    families: list[str],
    per_family: int = 20,
    seed: int = 0,
    batch: str | None = None,
    db_path: str = "data/vhd.duckdb",
    presentations: tuple[str, ...] = ("I", "A"),
) -> dict[str, Any]:
    """Add a batch per family (default batch: today's date), recompute what is missing, publish."""
    started = time.perf_counter()
    batch = batch or date.today().isoformat()
    run = RunRecord(run_id=str(flow_run.id or "local"), flow="refresh", started_at=_now(), code_version=__version__,
                    parameters={"families": families, "per_family": per_family, "seed": seed, "batch": batch})
    passages = builtin_passages()
    with Warehouse.open(db_path) as wh:
        with wh.transaction():
            wh.upsert_run(run)
            wh.insert(passages)
        per = {name: refresh_family(wh, run.run_id, name, per_family, seed, batch, passages, presentations)
               for name in families}
        version, published = publish(wh, run.run_id)
        summary = _summary(run.run_id, batch, per, version, published, time.perf_counter() - started)
        with wh.transaction():
            wh.upsert_run(run.model_copy(update={"finished_at": _now(), "status": "completed", "summary": summary}))
    create_markdown_artifact(key="refresh-summary", markdown=_markdown(summary), description="refresh summary")
    return summary


def _summary(run_id: str, batch: str, per: dict[str, dict], version: str | None, published: bool,
             seconds: float) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(row[key] for row in per.values())

    stages = ("sample", "solve", "synthesize", "check", "annotate")
    computed = {s: sum(row["computed"][s] for row in per.values()) for s in stages}
    return {
        "run_id": run_id, "batch": batch, "admitted": total("admitted"), "rejected": total("rejected"),
        "reused": total("reused"), "computed": computed,
        "found": {s: sum(row["found"][s] for row in per.values()) for s in stages},
        "nothing_to_do": not any(computed.values()), "corpus_version": version, "published": published,
        "families": per, "seconds": round(seconds, 3),
    }


def _markdown(summary: dict[str, Any]) -> str:
    lines = ["# Refresh summary", "", f"run `{summary['run_id']}`, batch `{summary['batch']}`, {summary['seconds']} s;"
             f" corpus version `{summary['corpus_version']}`{' (new)' if summary['published'] else ''}", "",
             "| family | admitted | rejected | already there |", "|---|---|---|---|"]
    for name, row in summary["families"].items():
        lines.append(f"| {name} | {row['admitted']} | {row['rejected']} | {row['reused']} |")
    return "\n".join(lines)
