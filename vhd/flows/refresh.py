"""The `refresh` flow: sample → solve → synthesize → check → annotate → write, per family.

For example (a Prefect flow run, not a doctest):

    summary = refresh(families=["inventory_dp"], per_family=20, seed=0, db_path="data/vhd.duckdb")

Stages are Prefect tasks over batches. Only transient faults are retried (a sandbox that
could not be started); a gate that fails is a verdict, not an error. Workers return records;
this process is the warehouse's only writer and commits each family in one transaction.
"""

from __future__ import annotations

import math
import os
import time
from datetime import date, datetime, timezone
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from vhd import __version__
from vhd.flows.progress import report
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams, SandboxError, SetterUnavailable
from vhd.schemas.records import (
    CorpusVersionRecord, EnvironmentRecord, ModelRecord, PassageRecord, RunRecord, SetterOutputRecord,
    SolutionRecord,
)
from vhd.tasks.stages import annotate as annotate_stage
from vhd.tasks.stages import check as check_stage
from vhd.tasks.stages import difficulty as difficulty_stage
from vhd.tasks.corpus import follow as follow_stage
from vhd.tasks.corpus import publish_audit as gate_stage
from vhd.tasks.corpus.marks import refuse_forged
from vhd.tasks.corpus import presets
from vhd.tasks.corpus import publish as publish_stage
from vhd.tasks.corpus import quality as quality_stage
from vhd.tasks.stages import resume as resume_stage
from vhd.tasks.stages import sample as sample_stage
from vhd.tasks.stages import solve as solve_stage
from vhd.tasks.stages import synthesize as synthesize_stage
from vhd.tasks.sandbox import pool as sandbox_pool
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.setters.template import SETTER as TEMPLATE_SETTER
from vhd.tasks.setters.template import SETTER_VERSION as TEMPLATE_SETTER_VERSION
from vhd.warehouse import Warehouse
from vhd.warehouse.lineage import chain_batches, load_versions
from vhd.warehouse import seals as seal_store


def transient(task_, task_run, state) -> bool:
    """Retry a failed task only when the sandbox itself failed, never for a verdict."""
    return isinstance(state.result(raise_on_failure=False), (SandboxError, OSError))


@task(cache_policy=NO_CACHE, task_run_name="sample {family}")
def sample_task(family: str, count: int, seed: int, batch: str, start: int = 0) -> list[ModelRecord]:
    return sample_stage.sample_models(registry.get(family), count, seed, batch, start)


@task(cache_policy=NO_CACHE, task_run_name="solve {family}")
def solve_task(family: str, models: list[ModelRecord]) -> list[SolutionRecord]:
    return solve_stage.solve_models(registry.get(family), models)


@task(cache_policy=NO_CACHE, task_run_name="synthesize {family}")
def synthesize_task(family: str, models: list[ModelRecord], passages) -> tuple[list[SetterOutputRecord], dict]:
    return synthesize_stage.synthesize(registry.get(family), models, passages)


@task(cache_policy=NO_CACHE, task_run_name="write modules {family}")
def llm_synthesize_task(family: str, models: list[ModelRecord], solutions: dict, passages, exemplars: list,
                        presentations: tuple[str, ...], run_id: str) -> tuple[list, dict, list]:
    # settings are read here, not passed: the API key stays out of Prefect's task parameters
    from vhd.tasks.setters.anthropic import AnthropicSetter
    from vhd.tasks.setters.settings import LLMSettings
    return synthesize_stage.synthesize_with_llm(AnthropicSetter(LLMSettings.from_env()), registry.get(family), models,
                                                solutions, passages, exemplars, presentations, run_id)


def check_run_name(parameters: dict[str, Any]) -> str:
    """A check task run's name: its family and the module it plays (the setter output's id).

    >>> check_run_name({"family": "knapsack", "output": {"setter_output_id": "4f1c2a9b7e3d5f60aa"}})
    'check knapsack module 4f1c2a9b7e3d'
    """
    output = parameters.get("output")
    module = output.get("setter_output_id") if isinstance(output, dict) else getattr(output, "setter_output_id", "")
    return f"check {parameters.get('family', '?')} module {(module or '?')[:12]}"


def refresh_run_name() -> str:
    """A refresh or backfill flow run's name: its batch and its families (or preset), e.g.
    `refresh 2026-06-01: inventory_dp, knapsack` or `refresh 2026-06-01: 16 families (dynamic_pricing, …)`."""
    params = flow_run.parameters
    batch = params.get("batch") or (DEFAULT_BACKFILL_BATCH if flow_run.flow_name == "backfill"
                                    else date.today().isoformat())
    if params.get("preset"):
        what = f"preset {params['preset']} ×{params.get('scale', 1.0):g}"
    else:
        names = list(params.get("families") or ([params["family"]] if params.get("family") else registry.names()))
        what = ", ".join(names) if len(names) <= 3 else f"{len(names)} families ({', '.join(names[:2])}, …)"
    return f"{flow_run.flow_name} {batch}: {what}"


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=1, retry_condition_fn=transient,
      task_run_name=check_run_name)
def check_task(family: str, output: SetterOutputRecord, candidates: list) -> tuple[list[tuple], float]:
    """One module's candidates checked, then annotated in the same worker thread, while other
    modules' checks run: their (environment, checks, lineage edges) and the annotation's seconds.
    The verdicts (reference episodes, gate evidence) are dropped here, not held for the round."""
    mechanism = registry.get(family)
    verdicts = check_stage.check_batch(mechanism, output, candidates)
    started = time.perf_counter()
    rows = [annotate_stage.annotate(mechanism, verdict) for verdict in verdicts]
    return rows, time.perf_counter() - started


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _stamped(records: list, run_id: str) -> list:
    return [r.model_copy(update={"run_id": run_id}) for r in records]


def check_threads() -> int:
    """Tasks in flight at once in the flow process: Prefect's own setting
    PREFECT_TASKS_RUNNER_THREAD_POOL_MAX_WORKERS when it is set, else one per core this process
    may run on (at least 2).

    Prefect's thread-pool runner is unbounded by default: a round submitted every module's check
    at once, one thread each, and each thread borrowed its own warm zygote (the pool caps only idle
    zygotes), so a large round held hundreds of zygotes, sandbox children and candidates' reference
    episodes in memory together, on cores that run two at a time. A check's gates and annotation
    hold the GIL for most of its time, so threads beyond the cores add zygotes and memory, not
    speed: the paper preset at scale 1 on 2 cores took 410 s with 4 threads and with 2, whose
    tree peaked 135 MB lower (docs/BENCHMARKS.md). Verdicts do not depend on this number; only how
    many checks overlap does."""
    from prefect.settings import get_current_settings

    configured = get_current_settings().tasks.runner.thread_pool_max_workers
    return configured if configured else max(2, _cores())


def _cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def bounded_runner() -> ThreadPoolTaskRunner:
    """The default task runner of the refresh and backfill flows: `check_threads()` threads."""
    return ThreadPoolTaskRunner(max_workers=check_threads())


STAGES = ("sample", "solve", "synthesize", "check", "annotate")
DEFAULT_BACKFILL_BATCH = "backfill"  # vhd.flows.backfill's default batch key
TIMED = STAGES + ("write",)  # seconds per stage in the flow process: wall, but check until every future
# resolved (annotation included) and annotate the seconds spent annotating in the check threads
FIRST_GUESS = 0.85     # admission rate assumed before a slot has any verdict
MAX_ROUNDS = 160  # rounds per slot at most: 40,000 draws (ROUND_DRAWS each), as 40 rounds of 1,000 were
GIVE_UP = 64       # candidates a slot sees with none admitted before it stops (reported short), at least


def give_up(target: int) -> int:
    """Candidates a slot of `target` sees with none admitted before it stops: 4 × target, at least
    GIVE_UP. Rounds stop there, so where the rounds end (`ROUND_DRAWS`) changes no slot's outcome."""
    return max(4 * target, GIVE_UP)


def _round(wh: Warehouse, name: str, models: list[ModelRecord], passages: list, presentations: tuple[str, ...],
           split: str | None, wanted: int | None, llm: Any = None, run_id: str = "",
           tick: Any = None, select: Any = None, counted: frozenset[str] = frozenset()) -> dict[str, Any]:
    """sample → solve → synthesize → check → annotate for `models`, nothing written yet.

    With `wanted`, only the candidates up to the `wanted`-th admitted one (in model order) are
    kept, and only the pending candidates that can get there are checked (`needed_checks`).
    `tick(admitted, rejected)` is told the verdicts so far as each check task resolves.
    With `select` (a `difficulty.Band` or a `follow.Aim`), only the candidates whose measured
    difficulty it accepts are candidates at all: the others are neither checked nor written.
    """
    family = registry.get(name)
    clock = time.perf_counter
    had_models = wh.present(ModelRecord, [m.model_id for m in models])
    known = wh.solutions_for(m.model_id for m in models)
    t0 = clock()
    fresh = solve_task(name, _unwalked([m for m in models if m.model_id not in known]))
    t1 = clock()
    attempts: list = []
    if llm is None:
        outputs, assignment = synthesize_task(name, _unwalked(models), _unwalked(passages))
    else:  # the LLM setter checks its own replies (repair loop); models without a module are dropped
        outputs, assignment, attempts = llm_synthesize_task(
            name, models, {**known, **{s.model_id: s for s in fresh}}, passages,
            wh.exemplars(name, llm.exemplars), presentations, run_id)
        models = [m for m in models if m.model_id in assignment]
        fresh = [s for s in fresh if s.model_id in assignment]
    t2 = clock()
    had_outputs = wh.present(SetterOutputRecord, [o.setter_output_id for o in outputs])
    candidates = annotate_stage.make_candidates(
        family, models, {**known, **{s.model_id: s for s in fresh}}, {o.setter_output_id: o for o in outputs},
        assignment, presentations, {p.passage_id: p for p in passages}, split)
    chosen = {"tried": len(candidates), "outside": 0, "values": []}
    if select is not None:  # the same measure annotate stores (computed once per θ, shared with it)
        inside = []
        for c in candidates:
            measured = difficulty_stage.measure(family, c.model, c.solution, c.presentation)
            value = select.value(measured)
            if value is not None:
                chosen["values"].append(value)
            if select.accepts(measured):
                inside.append(c)
        chosen["outside"] = len(candidates) - len(inside)
        candidates = inside
    candidates = [c for c in candidates if c.env_id not in counted]  # the previous round walked them
    stored = wh.admission(c.env_id for c in candidates)
    pending = [c for c in candidates if c.env_id not in stored] if wanted is None else \
        check_stage.needed_checks(family, candidates, stored, wanted)  # none when the stored ones fill the slot
    t3 = clock()
    wrap = _unwalked if isinstance(FlowRunContext.get().task_runner, ThreadPoolTaskRunner) else (lambda v: v)
    futures = [check_task.submit(name, wrap(output), wrap(group))
               for output, group in annotate_stage.by_module(outputs, pending)]
    annotated, ticked, annotating = {}, [0, 0], 0.0
    for f in futures:
        rows, seconds = f.result()
        annotating += seconds
        for env, checks, edges in rows:
            annotated[env.env_id] = (env, checks, edges)
            ticked[0 if env.admitted else 1] += 1
        if tick is not None:
            tick(*ticked)
    del futures
    t4 = clock()
    verdicts = {**stored, **{env_id: row[0].admitted for env_id, row in annotated.items()}}
    kept, reached = _walk(candidates, verdicts, wanted)
    # the walk stopped at a candidate no check reached (a guess of `needed_checks` failed): the next
    # round starts at its model, so no drawn model is skipped and where rounds end changes nothing
    stop = candidates[len(kept)].model.model_id if not reached and len(kept) < len(candidates) else None
    walked = next((k for k, m in enumerate(models) if m.model_id == stop), len(models))
    partial = [c.env_id for c in kept if c.model.model_id == stop]  # the stop model's candidates walked already
    kept_ids = {c.env_id for c in kept}
    kept_models = {c.model.model_id for c in kept} if wanted is not None else {m.model_id for m in models}
    kept_outputs = {c.setter_output.setter_output_id for c in kept} if wanted is not None else {
        o.setter_output_id for o in outputs}
    rows = [annotated[c.env_id] for c in kept if c.env_id in annotated]
    return {
        "models": [m for m in models if m.model_id in kept_models],
        "solutions": [s for s in fresh if s.model_id in kept_models],
        "outputs": [o for o in outputs if o.setter_output_id in kept_outputs],
        "rows": rows,
        "attempts": [a for a in attempts if a.setter_output_id in kept_outputs or not a.setter_output_id],
        "admitted": sum(verdicts[env_id] for env_id in kept_ids),
        "kept": len(kept), "seen": len(verdicts), "chosen": chosen, "walked": walked, "partial": partial,
        "computed": {"sample": len(kept_models - had_models), "solve": len(fresh), "check": len(pending),
                     "synthesize": len(kept_outputs - had_outputs), "annotate": len(rows)},
        "stage_seconds": {"solve": t1 - t0, "synthesize": t2 - t1, "check": t4 - t3, "annotate": annotating},
        "found": {"sample": len(kept_models & had_models), "solve": len(known), "check": len(kept_ids & set(stored)),
                  "synthesize": len(kept_outputs & had_outputs), "annotate": len(kept_ids & set(stored))},
    }


def _unwalked(value: Any) -> Any:
    """`value` passed to a task without Prefect walking it for futures (a verdict takes 14 ms).
    Only for tasks run in this process: Dask's runner rebuilds the wrapper as a plain tuple."""
    return quote(value)


def _walk(candidates: list, admitted: dict[str, bool], wanted: int | None) -> tuple[list, bool]:
    """The candidates in order up to the `wanted`-th admitted one; (kept, target reached?).
    A candidate without a verdict stops the walk (it must be checked first)."""
    if wanted is None:
        return [c for c in candidates if c.env_id in admitted], False
    kept, count = [], 0
    for c in candidates:
        if count >= wanted:
            return kept, True
        if c.env_id not in admitted:
            return kept, False
        kept.append(c)
        count += admitted[c.env_id]
    return kept, count >= wanted


def _forget_results() -> None:
    """Drop Prefect's links from this flow run's task results to their states (`FlowRunContext.run_results`:
    a copy of the final state for every result and every item of it, kept for the whole run so that a
    result passed to a later task is drawn as that task's input). A round's results are written and
    dropped before the next round, which passes none of them on; kept, the links grew with the
    corpus (~5 KB a task run: ~2,000 check tasks at scale 1, ~7,000 at scale 3)."""
    context = FlowRunContext.get()
    if context is not None:
        context.run_results.clear()


def _write(wh: Warehouse, run_id: str, out: dict[str, Any]) -> None:
    rows = out["rows"]
    with wh.transaction():  # one round of one slot, one commit: all of its rows or none
        wh.insert(_stamped(out["models"], run_id))
        wh.insert(_stamped(out["solutions"], run_id))
        wh.insert(_stamped(out["outputs"], run_id))
        wh.insert(_stamped([env for env, _, _ in rows], run_id))
        wh.insert(_stamped([c for _, checks, _ in rows for c in checks], run_id))
        edges = [e for _, _, row_edges in rows for e in row_edges]
        wh.insert(annotate_stage.upstream_edges(out["solutions"], out["outputs"]) + edges)
        wh.insert(_stamped(out.get("attempts", []), run_id))
    wh.checkpoint()  # this round's blocks and key indexes out of DuckDB's cache: the flow's memory does not grow


def refresh_family(wh: Warehouse, run_id: str, name: str, per_family: int | None, seed: int, batch: str,
                   passages: list, presentations: tuple[str, ...], split: str | None = None,
                   target: int | None = None, llm: Any = None, key: str | None = None,
                   select: Any = None) -> dict[str, Any]:
    """One family (one split of it) through every stage; only what the warehouse lacks is computed.

    Either `per_family` models (every candidate is stored), or models in seed order until
    `target` candidates are admitted (a preset's slot; the stored prefix is reused as is).
    With `select` (`--difficulty`, `--follow`) only the candidates it accepts count, and
    `per_family` becomes a target of `per_family` × presentations admitted environments.
    Progress is reported (`vhd.flows.progress.report`) under `key` (default: `name`).
    """
    family = registry.get(name)
    key = key or name
    if select is not None and target is None:
        target, per_family = per_family * len(presentations), None
    chosen = {"tried": 0, "outside": 0, "low": None, "high": None}
    report("started", key)
    if llm is None:  # a finished batch: its summary row from the warehouse's counts, no task started
        state = wh.slot_state(name, family.version, batch, [p.passage_id for p in passages])
        row = resume_stage.stored_slot(family, state, per_family=per_family, target=target,
                                       presentations=presentations, split=split or family.split,
                                       env_version=annotate_stage.CODE_VERSION, passages=passages,
                                       stages=STAGES, timed=TIMED)
        if row is not None:
            if select is not None:
                row["select"] = {"kind": select.kind, **select.record(), **chosen, "reused": True}
            _finished(key, row, per_family, presentations)
            return row
    totals = {"computed": dict.fromkeys(STAGES, 0), "found": dict.fromkeys(STAGES, 0)}
    seconds = dict.fromkeys(TIMED, 0.0)
    filled = seen = 0                     # admitted in the slot so far (stored or new), verdicts seen
    new_admitted = new_rejected = 0
    reasons: dict[str, int] = {}
    cursor, rounds = 0, 0
    counted: frozenset[str] = frozenset()
    failed = None
    while True:
        if target is None:
            count = per_family
        elif rounds == 0 and wh.model_count(name, family.version, batch):  # the stored draws first (a resume)
            count = min(sample_stage.ROUND_DRAWS, wh.model_count(name, family.version, batch))
        else:
            rate = filled / seen if seen else FIRST_GUESS
            count = min(sample_stage.ROUND_DRAWS,  # a round's memory is bounded; more rounds fill the slot
                        math.ceil((target - filled) / len(presentations) / max(rate, 0.05) * 1.1) + 1)
        if target is not None and filled == 0:  # never past the give-up point, wherever the rounds end
            count = max(1, min(count, math.ceil((give_up(target) - seen) / len(presentations))))
        started = time.perf_counter()
        models = sample_task(name, count, seed, batch, cursor)
        seconds["sample"] += time.perf_counter() - started

        def tick(admitted: int, rejected: int, filled: int = filled, seen: int = seen) -> None:
            done = seen + admitted + rejected if target is None else min(target, filled + admitted)
            report("advanced", key, admitted=filled + admitted, rejected=seen - filled + rejected, done=done)

        try:
            out = _round(wh, name, models, passages, presentations, split, None if target is None else target - filled,
                         llm, run_id, tick, select, counted)
        except SetterUnavailable as exc:  # nothing of this round is written
            failed = str(exc)
            break
        started = time.perf_counter()
        _write(wh, run_id, out)
        seconds["write"] += time.perf_counter() - started
        for stage, spent in out["stage_seconds"].items():
            seconds[stage] += spent
        for kind in ("computed", "found"):
            for stage in STAGES:
                totals[kind][stage] += out[kind][stage]
        filled, seen = filled + out["admitted"], seen + out["seen"] + out["chosen"]["outside"]
        chosen["tried"] += out["chosen"]["tried"]
        chosen["outside"] += out["chosen"]["outside"]
        for value in out["chosen"]["values"]:
            chosen["low"] = value if chosen["low"] is None else min(chosen["low"], value)
            chosen["high"] = value if chosen["high"] is None else max(chosen["high"], value)
        for env, _, _ in out["rows"]:
            new_admitted += env.admitted
            new_rejected += not env.admitted
            if not env.admitted:
                gate = env.reason.split(":")[0]
                reasons[gate] = reasons.get(gate, 0) + 1
        # the models this round decided: the next round draws from there, skipping what it walked of the next
        walked, counted = out["walked"], frozenset(out["partial"])
        if not walked and not counted:  # (the first pending candidate is always checked: never stand still)
            walked = 1
        del out, models  # this round is written: its records are not held while the next round runs
        _forget_results()
        cursor, rounds = cursor + walked, rounds + 1
        if target is None or filled >= target:
            break
        if rounds >= MAX_ROUNDS or (seen >= give_up(target) and filled == 0):
            break  # reported as a shortfall below, never padded
    row = {"split": split or family.split, "admitted": new_admitted, "rejected": new_rejected,
           "reused": totals["found"]["check"], "reasons": reasons, **totals,
           "stage_seconds": {stage: round(spent, 3) for stage, spent in seconds.items()}}
    if failed:
        row["failed"] = failed
    if target is not None:
        row.update(target=target, filled=filled, short=max(0, target - filled))
    if select is not None:
        row["select"] = {"kind": select.kind, **select.record(), **chosen}
        if row["short"]:
            seen_range = ("none measured" if chosen["low"] is None
                          else f"{chosen['low']:.3f}–{chosen['high']:.3f}")
            row["select"]["why_short"] = (
                f"{row['short']} of {target} short: {chosen['tried']} candidates tried ({rounds} rounds), "
                f"{chosen['tried'] - chosen['outside']} in {select.describe()} (values seen: {seen_range}); "
                f"the knobs give too few θ there" + ("" if filled else ", none admitted"))
    _finished(key, row, per_family, presentations)
    return row


def _finished(key: str, row: dict[str, Any], per_family: int | None, presentations: tuple[str, ...]) -> None:
    """Report a slot's end: its environments admitted (a preset's slot: all it holds; else this
    run's), rejected by this run, and how much of its total is done."""
    admitted = row.get("filled", row["admitted"])
    done = row["target"] - row["short"] if "target" in row else (per_family or 0) * len(presentations)
    report("finished", key, admitted=admitted, rejected=row["rejected"], done=done)


@task(cache_policy=NO_CACHE, task_run_name="quality suite")
def quality_task(frame: Any, expected_splits: dict[str, int] | None, texts: Any = ()) -> dict[str, Any]:
    return quality_stage.validate(frame, registry, expected_splits, texts)


@task(cache_policy=NO_CACHE, task_run_name="audit")
def audit_task(chains: Any, versions: list, runs: set[str]) -> dict[str, Any]:
    """The publish gate's audit of `chains` (a dict, or batches of them as `chain_batches` yields them)."""
    return gate_stage.gate(chains, versions, runs)


def publish(wh: Warehouse, run_id: str, expected_splits: dict[str, int] | None = None,
            note: dict[str, Any] | None = None, seals: str | None = None
            ) -> tuple[str | None, bool, dict[str, Any] | None, dict[str, Any]]:
    """On every attempt, the audit of the next corpus version; then, when it passes and the corpus
    changed (its digest covers every grading field) and the data-quality suite passes, a new version,
    whose seal is appended to the seal file (`warehouse.seals`, default `<db>.seals.jsonl`).

    The audit follows change (issue 31): the seal of every published version is recomputed from the
    stored rows (SQL, `seals.sealed_chain`) and compared with the seal file. When every version is
    anchored and matches, the environments of the latest one are trusted with the grading digests
    its manifest lists, and only the others (new or changed) are audited and replayed; otherwise
    (no seal file, an unanchored or mismatching version: a warning naming it) every environment of
    the next version and of every published one is audited, as before. `note` (a `--follow` run's
    plan and the environments it made) goes into the new version's manifest as `follow`.
    Returns (version, published?, quality report or None when nothing changed, audit report)."""
    refuse_forged(wh)  # a forged superseded mark would drop an environment from the version silently
    seal_file = seal_store.seals_path(wh.path, seals)
    anchors = seal_store.read_anchors(seal_file)
    keys = wh.environment_keys()
    versions = load_versions(wh)
    sealed = seal_store.sealed_chain(wh)
    code = publish_stage.code_digest()
    plan = gate_stage.seal_plan(sealed, anchors, versions, code)
    for warning in plan["warnings"]:
        print(f"warning: {warning} ({seal_file}); the publish gate recomputes every environment")
    runs = {r.run_id for r in wh.runs()}
    if plan["incremental"]:
        current = {k["env_id"] for k in keys}
        # new or changed environments; and any the anchored version holds that left the corpus without
        # a (verified) superseded mark — e.g. `admitted` flipped by a stray UPDATE — lest it drop silently
        todo = (current - set(plan["trusted"])) | (set(plan["trusted"]) - current - set(wh.superseded()))
        audit = audit_task(_unwalked(chain_batches(wh, todo)), [], runs)
    else:
        named = {i for v, _, _ in versions if isinstance(v.manifest, dict)
                 for i in v.manifest.get("env_ids") or [] if isinstance(i, str)}
        audit = audit_task(_unwalked(chain_batches(wh, {k["env_id"] for k in keys} | named)), _unwalked(versions), runs)
    audit["seal"] = {"file": str(seal_file), "incremental": plan["incremental"], "why": plan["why"],
                     "trusted": len(plan["trusted"]), "warnings": plan["warnings"],
                     "versions": [dict(row) for row in plan["versions"]],
                     "note": gate_stage.seal_note(plan, audit["replayed"])}
    print(audit["seal"]["note"])
    latest = versions[-1][0].version if versions else None
    if not audit["verified"]:
        return latest, False, None, audit
    if not plan["incremental"] and not plan["mismatch"] and (plan["unanchored"] or plan["recode"]):
        # every version has just been recomputed from first principles by this code and none contradicts
        # the seal file: anchor the ones it lacks (trust on first use), and the latest again under this
        # code; a mismatching version is never anchored again
        again = [row for row in sealed if row["version"] in plan["unanchored"] or row is sealed[-1]]
        audit["seal"]["anchored"] = _anchor(seal_file, again, "verified", code=code)
    digests = {**plan["trusted"], **audit["digests"]}
    manifest = publish_stage.manifest_of_keys(keys, digests)  # the audit digested every environment of `keys`
    if note is not None:
        manifest["follow"] = note
    if versions and versions[-1][0].manifest.get("digest") == manifest["digest"]:
        return latest, False, None, audit
    if not manifest["env_ids"]:
        return None, False, None, audit
    quality = quality_task(wh.quality_frame(), expected_splits, _unwalked(wh.quality_texts()))
    if not quality["passed"]:
        return latest, False, quality, audit
    version = publish_stage.next_version([v.version for v, _, _ in versions])
    with wh.transaction():
        wh.insert([CorpusVersionRecord(version=version, created_at=_now(), run_id=run_id,
                                       admitted=len(manifest["env_ids"]), manifest=manifest)])
    content = seal_store.version_contents(wh, [version])[version]
    previous = sealed[-1]["seal"] if sealed else ""
    row = {"version": version, "seal": seal_store.seal_of(previous, content["content"]), "previous": previous,
           "envs": content["envs"]}
    audit["seal"]["anchored"] = _anchor(seal_file, [row], "published", code, manifest)
    return version, True, quality, audit


def _anchor(seal_file: Any, rows: list[dict[str, Any]], how: str, code: str,
            manifest: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Append one seal line per version to the seal file, and publish each as a Prefect artifact."""
    lines = []
    for row in rows:
        line = {"version": row["version"], "seal": row["seal"], "previous": row["previous"], "created_at": _now(),
                "anchored_by": how, "admitted": row["envs"], "code": code}
        if manifest is not None:
            line.update(corpus_digest=manifest["digest"], counts=manifest["counts"])
        seal_store.append_anchor(seal_file, line)
        lines.append(line)
        if FlowRunContext.get() is None:  # `publish` called outside a flow run (tests, benches): the file only
            continue
        create_markdown_artifact(
            key=f"seal-{str(row['version']).lower()}",
            markdown=(f"# Seal of corpus version `{row['version']}`\n\n`{row['seal']}`\n\n"
                      f"chained on `{row['previous'] or '(none: the first version)'}`; appended to `{seal_file}` "
                      f"({how}). Keep this value (or the seal file) outside the warehouse: `vhd verify` checks "
                      "the stored rows against it."),
            description=f"seal of corpus version {row['version']}")
    return lines


@flow(name="refresh", log_prints=True, task_runner=bounded_runner(), flow_run_name=refresh_run_name)
def refresh(
    families: list[str] | None = None,
    per_family: int = 20,
    seed: int = 0,
    batch: str | None = None,
    db_path: str = "data/vhd.duckdb",
    presentations: tuple[str, ...] = ("I", "A"),
    preset: str | None = None,
    scale: float = 1.0,
    setter: str = "template",
    difficulty: tuple[float, float] | None = None,
    follow: str | None = None,
    follow_band: tuple[float, float] | None = None,
    seals: str | None = None,
) -> dict[str, Any]:
    """Add a batch per family (default batch: today's date), recompute what is missing, publish.
    `families`: None for every family registered when the run starts (so the nightly deployment
    takes a new family by its file alone).

    With `preset` (see `vhd.tasks.corpus.presets`), its slots replace `families` and `per_family`:
    each slot is filled to its target of admitted environments in the preset's presentations.
    With `difficulty` (LO, HI) every slot is filled from candidates whose difficulty score lies in
    it; with `follow` (a learner's results file, `vhd.tasks.corpus.follow`) each family the learner played
    is filled from candidates whose predicted reward lies in `follow_band` (default 0.3–0.7), in the
    presentations it played (`presentations` ignored). `seals`: the seal file (default: `VHD_SEALS`,
    else `<db_path>.seals.jsonl`; `warehouse.seals`).
    """
    return run_batch("refresh", families or registry.names(), per_family, seed, batch or date.today().isoformat(), db_path,
                     presentations, preset, scale, setter=setter, band=difficulty, follow=follow,
                     follow_band=follow_band, seals=seals)


def with_workers(flow_: Any, workers: int | None) -> Any:
    """`flow_` with its submitted tasks (the check stage, one future per module) on a local Dask
    cluster of `workers` single-threaded worker processes; unchanged for None. The flow process
    stays the warehouse's only writer: workers return records, nothing else."""
    if workers is None:
        return flow_
    from prefect_dask import DaskTaskRunner

    return flow_.with_options(task_runner=DaskTaskRunner(cluster_kwargs={
        "n_workers": workers, "threads_per_worker": 1, "processes": True, "dashboard_address": None}))


def run_batch(flow_name: str, families: list[str], per_family: int, seed: int, batch: str, db_path: str,
              presentations: tuple[str, ...], preset: str | None = None, scale: float = 1.0,
              only: list[str] | None = None, setter: str = "template", band: tuple[float, float] | None = None,
              follow: str | None = None, follow_band: tuple[float, float] | None = None,
              seals: str | None = None) -> dict[str, Any]:
    """The body of `refresh` and `backfill` (call it inside a flow): one run row, every family
    through `refresh_family`, superseded marks, the quality gate, a corpus version, a summary
    artifact. With `only`, superseded marks are limited to those families (a backfill touches
    no other family's rows)."""
    started = time.perf_counter()
    if per_family > sample_stage.MAX_PER_FAMILY:
        raise InvalidParams(f"per_family {per_family}: at most {sample_stage.MAX_PER_FAMILY:,} θ draws per family "
                            "and run; run several batches for more")
    plan = presets.preset(preset, registry.all(), scale) if preset else None
    select = difficulty_stage.Band(band) if band is not None else None
    parameters = {"families": families, "per_family": per_family, "seed": seed, "batch": batch,
                  "preset": preset, "scale": scale, "setter": setter}
    if band is not None:
        parameters["difficulty"] = list(select.band)
    aims: dict[str, Any] = {}
    if follow is not None and (band is not None or preset is not None):
        raise InvalidParams("--follow chooses each family's θ itself; drop --difficulty and --preset")
    seal_store.read_anchors(seal_store.seals_path(db_path, seals))  # a bad seal file: one line, nothing written
    passages = builtin_passages()
    llm, setter_note = None, "template"
    if setter == "anthropic":
        from vhd.tasks.setters.settings import LLMSettings
        llm = LLMSettings.from_env()
        if llm.api_key:
            setter_note = f"anthropic ({llm.model})"
        else:
            llm, setter_note = None, "template (no ANTHROPIC_API_KEY: the LLM setter was not used)"
    with Warehouse.open(db_path) as wh:
        if follow is not None:  # the learner's results, joined with the stored difficulty of what it played
            results = follow_stage.read_results(follow)
            played = wh.verified(EnvironmentRecord, list(results))
            follow_stage.check_results(results, played, str(follow))
            target_band = tuple(follow_band) if follow_band is not None else follow_stage.DEFAULT_BAND
            aims = follow_stage.plan_of(results, played.values(), target_band,
                                        families if set(families) != set(registry.names()) else None)
            families = [name for name, aim in aims.items() if aim.aimed]
            presentations = follow_stage.played_presentations(played.values(), results)
            parameters["follow"] = {"results": str(follow), "results_digest": follow_stage.results_digest(results),
                                    "band": list(target_band), "presentations": list(presentations),
                                    "plan": {name: aim.record() for name, aim in aims.items()}}
        run = RunRecord(run_id=str(flow_run.id or "local"), flow=flow_name, started_at=_now(),
                        code_version=__version__, parameters=parameters)
        with wh.transaction():
            interrupted = wh.mark_interrupted(run.run_id, _now())  # runs whose process died: we hold the only lock
            wh.upsert_run(run)
            stored = wh.present(PassageRecord, [p.passage_id for p in passages])
            wh.insert([p for p in passages if p.passage_id not in stored])
        if plan is None:
            for name in families:
                report("planned", name, total=per_family * len(presentations))
            selects = {name: aims[name] if name in aims else select for name in families}
            per = {name: refresh_family(wh, run.run_id, name, per_family, seed,
                                        batch + (selects[name].key() if selects[name] is not None else ""),
                                        passages, presentations, llm=llm, select=selects[name])
                   for name in families}
        else:
            keys = {slot: slot.key for slot in plan.slots}
            for slot in plan.slots:
                report("planned", keys[slot], total=slot.target)
            per = {}
            for slot in plan.slots:
                per[keys[slot]] = refresh_family(wh, run.run_id, slot.family, None, seed,
                                                 slot.batch(batch + (select.key() if select is not None else "")),
                                                 passages, plan.presentations, slot.split, slot.target, llm=llm,
                                                 key=keys[slot], select=select)
        current = {f.name: f.version for f in registry.all() if only is None or f.name in only}
        with wh.transaction():
            marked = wh.mark_superseded(current, annotate_stage.CODE_VERSION, run.run_id, _now(),
                                        setters={TEMPLATE_SETTER: TEMPLATE_SETTER_VERSION})
        expected = None
        if plan is not None:
            expected = {}
            for slot in plan.slots:
                expected[slot.split] = expected.get(slot.split, 0) + slot.target
        note = _follow_note(wh, run, aims, per) if follow is not None else None
        # the warm zygotes served the checks; publishing plays nothing in the sandbox (a render is
        # replayed in process), so they leave before its peak (the next check starts a pool again)
        sandbox_pool.shutdown_default()
        version, published, quality, audit = publish(wh, run.run_id, expected, note, seals)
        summary = _summary(run.run_id, batch, per, version, published, time.perf_counter() - started)
        if band is not None:
            summary["difficulty"] = {"band": list(select.band),
                                     "tried": sum(row["select"]["tried"] for row in per.values() if "select" in row),
                                     "outside": sum(row["select"]["outside"] for row in per.values()
                                                    if "select" in row),
                                     "short": {name: row["select"]["why_short"] for name, row in per.items()
                                               if row.get("select", {}).get("why_short")}}
        if note is not None:
            summary["follow"] = note
        summary["flow"] = flow_name
        summary["preset"] = preset
        summary["setter"] = setter_note
        summary["failed"] = {name: row["failed"] for name, row in per.items() if row.get("failed")}
        summary["quality"] = quality
        summary["audit"] = gate_stage.brief(audit)
        summary["superseded"] = marked
        summary["interrupted"] = interrupted
        summary["worlds"] = wh.worlds()
        with wh.transaction():
            wh.upsert_run(run.model_copy(update={"finished_at": _now(), "status": "completed", "summary": summary}))
    create_markdown_artifact(key=f"{flow_name}-summary", markdown=_markdown(summary, db_path),
                             description=f"{flow_name} summary")
    return summary


def _follow_note(wh: Warehouse, run: RunRecord, aims: dict[str, Any], per: dict[str, dict]) -> dict[str, Any]:
    """Why each environment of a `--follow` run was made: the learner's results (their digest), the
    target band, and per family the plan (`follow.Aim.record`: the fitted line, the aim) with the
    admitted environments this run made for it, or why the family was left as it is."""
    follow = run.parameters["follow"]
    made: dict[str, list[str]] = {}
    for env in wh.environments():
        if env.run_id == run.run_id and env.family in aims:
            made.setdefault(env.family, []).append(env.env_id)
    families = {}
    for name, aim in aims.items():
        row = per.get(name, {})
        select = row.get("select", {})
        status = (f"not aimed at: {aim.reason}" if not aim.aimed else
                  f"short: {select['why_short']}" if select.get("why_short") else
                  f"aimed at a predicted reward of {aim.aim[0]:g}–{aim.aim[1]:g}")
        families[name] = {**aim.record(), "status": status, "env_ids": sorted(made.get(name, [])),
                          "tried": select.get("tried", 0), "short": row.get("short", 0)}
    return {"run_id": run.run_id, "results": follow["results"], "results_digest": follow["results_digest"],
            "band": follow["band"], "presentations": follow["presentations"], "families": families}


def _summary(run_id: str, batch: str, per: dict[str, dict], version: str | None, published: bool,
             seconds: float) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(row[key] for row in per.values())

    computed = {s: sum(row["computed"][s] for row in per.values()) for s in STAGES}
    splits: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for row in per.values():
        splits[row["split"]] = splits.get(row["split"], 0) + row.get("filled", row["admitted"])
        for gate, n in row["reasons"].items():
            reasons[gate] = reasons.get(gate, 0) + n
    return {
        "run_id": run_id, "batch": batch, "admitted": total("admitted"), "rejected": total("rejected"),
        "reused": total("reused"), "computed": computed, "splits": splits, "reasons": reasons,
        "found": {s: sum(row["found"][s] for row in per.values()) for s in STAGES},
        "stage_seconds": {s: round(sum(row["stage_seconds"][s] for row in per.values()), 3) for s in TIMED},
        "nothing_to_do": not any(computed.values()) and not any(row.get("failed") for row in per.values()),
        "corpus_version": version, "published": published,
        "families": per, "seconds": round(seconds, 3),
    }


def _markdown(summary: dict[str, Any], db_path: str = "") -> str:
    """The summary artifact: run, batch, warehouse, seconds per stage, one row per family.

    >>> print(_markdown({"run_id": "r1", "batch": "b", "seconds": 2.5, "corpus_version": "v1", "published": True,
    ...                  "stage_seconds": {"sample": 0.1, "check": 2.0}, "families": {}}, "data/vhd.duckdb"))
    # Refresh summary
    <BLANKLINE>
    run `r1`, batch `b`, warehouse `data/vhd.duckdb`, 2.5 s; corpus version `v1` (new)
    <BLANKLINE>
    seconds per stage: sample 0.1, check 2
    <BLANKLINE>
    | family | split | admitted | rejected | admission rate | rejected by | already there |
    |---|---|---|---|---|---|---|
    """
    stages = ", ".join(f"{stage} {spent:g}" for stage, spent in summary.get("stage_seconds", {}).items())
    lines = [f"# {summary.get('flow', 'refresh').capitalize()} summary", "",
             f"run `{summary['run_id']}`, batch `{summary['batch']}`" + (f", warehouse `{db_path}`" if db_path else "")
             + f", {summary['seconds']} s; corpus version `{summary['corpus_version']}`"
             + (" (new)" if summary["published"] else ""), "", f"seconds per stage: {stages or '–'}", "",
             "| family | split | admitted | rejected | admission rate | rejected by | already there |",
             "|---|---|---|---|---|---|---|"]
    audit = summary.get("audit")
    if audit and audit.get("seal"):
        lines[3:3] = [audit["seal"]["note"] + "".join(f"; **warning: {w}**" for w in audit["seal"]["warnings"]), ""]
    if audit and not audit["verified"]:
        lines[3:3] = [f"**The audit found {audit['count']} problems: no corpus version was published.**", ""] + [
            f"- `{p}`" for p in audit["lines"][:20]] + [""]
    quality = summary.get("quality")
    if quality and not quality["passed"]:
        lines[3:3] = ["**The data-quality suite failed: no corpus version was published.**", ""] + [
            f"- `{e['expectation']}` on `{e['column']}`: {e['unexpected']} rows, e.g. {', '.join(e['rows'][:5])}"
            for e in quality["expectations"] if not e["passed"]] + [""]
    for name, row in summary["families"].items():
        seen = row["admitted"] + row["rejected"]
        rate = f"{row['admitted'] / seen:.1%}" if seen else "–"
        why = ", ".join(f"{gate} {n}" for gate, n in sorted(row["reasons"].items())) or "–"
        lines.append(f"| {name} | {row['split']} | {row['admitted']} | {row['rejected']} | {rate} | {why} "
                     f"| {row['reused']} |")
    return "\n".join(lines)
