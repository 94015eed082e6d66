"""External instances into the corpus: the parsed problems of a public benchmark file
(`vhd.tasks.corpus.instances_formats`) become models, solutions checked against their published optima,
gated environments and one run, stored in one transaction; and the audit's check of such a model.

    >>> source = read_source(SHIPPED / "knapsack" / "mknap1.txt")       # SHIPPED: the repository's tests/data
    >>> knapsack = registry.get("knapsack")
    >>> imported = import_models(knapsack, source)      # the instances the family can take
    >>> len(source.instances), len(imported), imported[0].model.batch
    (7, 6, 'import:mknap1.txt:1e147ca351fb')
    >>> solved = solve_checked(knapsack, imported)      # InstanceError unless every u* is the published optimum
    >>> [s.u_star for s in solved.values()][:3]
    [3800.0, 4015.0, 6120.0]
    >>> from vhd.warehouse.store import Warehouse      # `vhd import-instances`: gates, then one transaction
    >>> path = SHIPPED / "knapsack" / "low-dimensional" / "f3_l-d_kp_4_20"
    >>> summary = import_file("knapsack", path, "auto", ("I",), lambda: Warehouse.open(scratch / "instances.duckdb"))
    >>> summary["format"], summary["admitted"], summary["instances"][0]["u_star"]
    ('pisinger', 1, 35.0)

Only `knapsack` has an importer (`IMPORTERS`; its formats are described in `instances_formats`).
A model made here has the file's batch key `import:<file name>:<first 12 hex of its sha256>`,
the knobs {"size": n, "horizon": m} and a seed derived from θ (`instance_seed`), so its ids
depend on the file's content only. The audit checks such a model against its source file
instead of re-drawing θ from the seed (`verify_import`).

The parsing names (`read_source`, `parse_orlib`, `InstanceError`, …) are importable from here too.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable

from vhd import __version__
from vhd.mechanisms import Family, registry
from vhd.schemas.hashing import canonical_json, sha256_hex
from vhd.schemas.records import (EnvironmentRecord, ModelRecord, PassageRecord, RunRecord, SetterOutputRecord,
                                 SolutionRecord)
from vhd.tasks.stages.annotate import annotate, by_module, make_candidates, upstream_edges
from vhd.tasks.stages.check import Candidate, check_batch
from vhd.tasks.corpus.instances_formats import (BATCH_PREFIX, FORMATS, Instance, InstanceError, Number, Source, detect,
                                         parse_orlib, parse_pisinger, read_source, sidecar_optimum)
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.stages.solve import solve_models
from vhd.tasks.stages.synthesize import synthesize

__all__ = [  # the parsing side, re-exported: `from vhd.tasks.corpus.instances import read_source` keeps working
    "BATCH_PREFIX", "FORMATS", "Instance", "InstanceError", "Number", "Source", "detect", "parse_orlib",
    "parse_pisinger", "read_source", "sidecar_optimum",
    # the import side
    "IMPORTERS", "SEARCH_PATH", "SHIPPED", "TOLERANCE", "Imported", "importer_family", "instance_seed", "knobs_of",
    "import_models", "matches", "solve_checked", "candidates_for", "run_gates", "report", "run_record",
    "import_file", "with_run", "is_imported", "locate", "verify_import",
]

IMPORTERS: dict[str, tuple[str, ...]] = {"knapsack": FORMATS}  # family → the formats it can import
SEARCH_PATH = "VHD_INSTANCE_PATH"  # directories (os.pathsep-separated) the audit looks for source files in
SHIPPED = Path(__file__).resolve().parents[3] / "tests" / "data"  # the public instances shipped with the repo
TOLERANCE = 1e-9  # relative: u* against the published optimum


@dataclass(frozen=True)
class Imported:
    instance: Instance
    model: ModelRecord


# --- models, solutions, gates ------------------------------------------------------------------


def importer_family(name: str) -> Family:
    family = registry.get(name)  # UnknownFamily for a name that is not registered
    if name not in IMPORTERS:
        raise InstanceError(f"family {name!r} has no instance importer; families with one: {', '.join(IMPORTERS)}")
    return family


def instance_seed(theta: dict[str, Any]) -> int:
    """The model seed of an imported θ: 63 bits of the sha256 of its canonical JSON."""
    return int(sha256_hex(canonical_json(theta))[:16], 16) & ((1 << 63) - 1)


def knobs_of(theta: dict[str, Any]) -> dict[str, int]:
    return {"size": theta["n_items"], "horizon": theta["n_resources"]}


def import_models(family: Family, source: Source) -> list[Imported]:
    """A ModelRecord per instance the family can take, in file order."""
    out = []
    for inst in source.instances:
        if inst.theta is None:
            continue
        model = ModelRecord.build(family=family.name, family_version=family.version, knobs=knobs_of(inst.theta),
                                  seed=instance_seed(inst.theta), theta=inst.theta, batch=source.batch)
        out.append(Imported(inst, model))
    return out


def matches(u_star: float, published: float | None) -> bool:
    return published is None or abs(u_star - published) <= TOLERANCE * max(1.0, abs(published))


def solve_checked(family: Family, imported: list[Imported]) -> dict[str, SolutionRecord]:
    """Solve every model; InstanceError at the first u* that is not the published optimum."""
    solutions = {}
    for item, solution in zip(imported, solve_models(family, [i.model for i in imported])):
        if not matches(solution.u_star, item.instance.published):
            raise InstanceError(f"{item.instance.name}: the published optimum is {item.instance.published} but the "
                                f"solver's u* is {solution.u_star:g}; nothing was written")
        solutions[item.model.model_id] = solution
    return solutions


def candidates_for(family: Family, imported: list[Imported], solutions: dict[str, SolutionRecord],
                   passages: list[PassageRecord], presentations: tuple[str, ...]
                   ) -> tuple[list[SetterOutputRecord], list[Candidate]]:
    models = [i.model for i in imported]
    outputs, assignment = synthesize(family, models, passages)
    candidates = make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs}, assignment,
                                 presentations, {p.passage_id: p for p in passages})
    return outputs, candidates


def run_gates(family: Family, outputs: list[SetterOutputRecord], pending: list[Candidate]) -> list[tuple]:
    """The real admission gates, one sandbox batch per module: [(environment, checks, edges)]."""
    verdicts = [v for output, group in by_module(outputs, pending) for v in check_batch(family, output, group)]
    return [annotate(family, v) for v in verdicts]


def report(source: Source, imported: list[Imported], solutions: dict[str, SolutionRecord],
           candidates: list[Candidate], verdicts: dict[str, tuple[bool, str]]) -> list[dict[str, Any]]:
    """One row per instance of the file: n, m, published, u*, and the verdict per presentation."""
    by_name = {i.instance.name: i for i in imported}
    rows = []
    for inst in source.instances:
        row: dict[str, Any] = {"name": inst.name, "n": inst.n, "m": inst.m, "published": inst.published}
        item = by_name.get(inst.name)
        if item is None:
            rows.append({**row, "status": "refused", "reason": inst.refused})
            continue
        mine = [c for c in candidates if c.model.model_id == item.model.model_id]
        row.update(status="imported", u_star=solutions[item.model.model_id].u_star, model_id=item.model.model_id,
                   verified=inst.published is not None,
                   admitted={c.presentation: verdicts[c.env_id][0] for c in mine},
                   reasons={c.presentation: verdicts[c.env_id][1] for c in mine if not verdicts[c.env_id][0]},
                   env_ids={c.presentation: c.env_id for c in mine})
        rows.append(row)
    return rows


def run_record(run_id: str, started_at: str, finished_at: str, code_version: str, family: Family, source: Source,
               presentations: tuple[str, ...], rows: list[dict[str, Any]]) -> RunRecord:
    """The event row of one import; the audit finds the source file again through `parameters["file"]`."""
    return RunRecord(
        run_id=run_id, flow="import-instances", started_at=started_at, finished_at=finished_at, status="completed",
        parameters={"family": family.name, "file": str(source.path.resolve()), "name": source.name,
                    "sha256": source.digest, "format": source.format, "presentations": list(presentations)},
        code_version=code_version,
        summary={"instances": [{k: r.get(k) for k in ("name", "status", "published", "u_star", "admitted")}
                               for r in rows]},
    )


def import_file(family_name: str, path: Path, fmt: str, presentations: tuple[str, ...],
                open_warehouse: Callable[[], Any]) -> dict[str, Any]:
    """`vhd import-instances`: parse the file and solve every instance the family can take
    (InstanceError, before the warehouse is opened, unless each u* is its published optimum);
    then, in the warehouse `open_warehouse()` opens, run the gates on the environments not stored
    yet and write every row of the file in one transaction (all or none). Returns the summary."""
    family, started = importer_family(family_name), _now()
    source = read_source(path, fmt)
    imported = import_models(family, source)
    if not imported:
        raise InstanceError(f"{source.name}: the {family.name} family can take none of its instances ("
                            + "; ".join(f"{i.name}: {i.refused}" for i in source.instances) + ")")
    solved = solve_checked(family, imported)
    passages, run_id = builtin_passages(), f"import-{uuid.uuid4()}"
    with open_warehouse() as wh:
        known = wh.solutions_for(solved.keys())
        fresh = [s for model_id, s in solved.items() if model_id not in known]
        outputs, candidates = candidates_for(family, imported, {**solved, **known}, passages, presentations)
        done = wh.present(EnvironmentRecord, [c.env_id for c in candidates])
        annotated = run_gates(family, outputs, [c for c in candidates if c.env_id not in done])
        new = [env for env, _, _ in annotated]
        verdicts = {env.env_id: (env.admitted, env.reason)
                    for env in [wh.get(EnvironmentRecord, env_id) for env_id in done] + new}
        rows = report(source, imported, {**solved, **known}, candidates, verdicts)
        run = run_record(run_id, started, _now(), __version__, family, source, presentations, rows)
        with wh.transaction():  # one file, one commit: all of its rows or none
            wh.upsert_run(run)
            wh.insert(passages)
            wh.insert(with_run([i.model for i in imported], run_id))
            wh.insert(with_run(fresh, run_id))
            wh.insert(with_run(outputs, run_id))
            wh.insert(with_run(new, run_id))
            wh.insert(with_run([c for _, checks, _ in annotated for c in checks], run_id))
            wh.insert(upstream_edges(fresh, outputs) + [e for _, _, edges in annotated for e in edges])
    return {"family": family.name, "file": str(path), "format": source.format, "sha256": source.digest,
            "batch": source.batch, "run_id": run_id, "db": str(wh.path), "instances": rows,
            "admitted": sum(e.admitted for e in new), "rejected": sum(not e.admitted for e in new),
            "reused": len(done)}


def with_run(records: list, run_id: str) -> list:
    """The records stamped with the run that writes them (the run id stays out of every hash)."""
    return [r.model_copy(update={"run_id": run_id}) for r in records]


def _now() -> str:
    return datetime.now(UTC).isoformat()


# --- the audit's side --------------------------------------------------------------------------


def is_imported(model: ModelRecord) -> bool:
    return model.batch.startswith(BATCH_PREFIX)


def _split_batch(batch: str) -> tuple[str, str]:
    name, _, digest = batch[len(BATCH_PREFIX):].rpartition(":")
    return name, digest


def locate(name: str, digest12: str, family: str, hint: str | None = None) -> Path | None:
    """The source file called `name` whose sha256 starts with `digest12`: at the path the import run
    recorded, else in $VHD_INSTANCE_PATH's directories, else among the shipped tests/data/<family>."""
    places: list[Path] = [Path(hint)] if hint else []
    for root in [*(Path(d) for d in os.environ.get(SEARCH_PATH, "").split(os.pathsep) if d), SHIPPED / family]:
        if root.is_dir():
            places += [root / name, *sorted(root.rglob(name))]
    for place in places:
        if place.is_file() and place.name == name and sha256_hex(place.read_bytes()).startswith(digest12):
            return place
    return None


def verify_import(family: Family, model: ModelRecord, run: RunRecord | None, u_star: float) -> list[str]:
    """Problems with an imported model: θ must be an instance of its source file (found again and
    re-parsed), the knobs and seed must derive from θ, and u* must be the published optimum."""
    problems = []
    name, digest = _split_batch(model.batch)
    if not name or not re.fullmatch(r"[0-9a-f]{12}", digest):
        return [f"batch {model.batch!r} is not of the form import:<file name>:<12 hex digits of its sha256>"]
    theta = model.theta
    try:
        if model.knobs != knobs_of(theta):
            problems.append(f"knobs {model.knobs} do not match θ's size (n = {theta['n_items']}, "
                            f"m = {theta['n_resources']})")
    except (KeyError, TypeError):
        return [f"θ of {model.model_id[:12]} is not a {family.name} θ"]
    if model.seed != instance_seed(theta):
        problems.append("the seed of an imported model does not derive from its θ")
    params = run.parameters if run is not None and run.flow == "import-instances" else {}
    path = locate(name, digest, family.name, params.get("file"))
    if path is None:
        looked = [p for p in (params.get("file"), os.environ.get(SEARCH_PATH), str(SHIPPED / family.name)) if p]
        return problems + [(f"source file {name} (sha256 {digest}…) not found (looked in {', '.join(looked)}); "
                            f"put it in ${SEARCH_PATH}")]
    try:
        source = read_source(path, params.get("format", "auto"))
    except InstanceError as exc:
        return problems + [f"source file {path} no longer parses: {exc}"]
    found = [inst for inst in source.instances if inst.theta == theta]
    if not found:
        return problems + [f"θ is not among the instances parsed from {path}"]
    if not matches(u_star, found[0].published):
        problems.append(f"u* = {u_star:g} is not {found[0].name}'s published optimum {found[0].published}")
    return problems
