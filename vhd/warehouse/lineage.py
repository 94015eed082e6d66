"""Lineage queries: the chain of records from an environment back to its θ and passage.

    >>> chain = load_chain(wh, env.env_id)          # wh: a Warehouse, open read-only
    >>> chain.model.model_id == env.model_id, chain.passage.domain, len(chain.checks)
    (True, 'bakery', 13)
    >>> list(load_chains(wh, [env.env_id, "0" * 64]))   # many at once (one query per table): the stored ones
    ['...']
    >>> from vhd.tasks.corpus.publish_audit import whole
    >>> whole(**audit_inputs(wh))["verified"]       # `vhd verify`: everything, by name (tasks/corpus/publish_audit.py)
    True

Rows are loaded as stored (`Chain.stored`: JSON as text, field digests included) and parsed
leniently (`Chain.invalid`), so that an audit of an edited row names every bad field instead of
failing on the first.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

from vhd.schemas.errors import IntegrityError, UnknownEnvironment
from vhd.schemas.records import (
    Chain, CheckRecord, CorpusVersionRecord, EnvironmentRecord, LineageEdge, ModelRecord, PassageRecord,
    SetterOutputRecord, SolutionRecord,
)
from vhd.schemas.hashing import field_digest
import vhd.warehouse.files as files
from vhd.warehouse.store import DIGESTS, SEALED, TABLES, Warehouse, parse_row

AUDITED = {cls: TABLES[cls][0] for cls in (PassageRecord, ModelRecord, SolutionRecord, SetterOutputRecord,
                                           CheckRecord, EnvironmentRecord)}  # audited row by row by `vhd verify`


def load_chain(wh: Warehouse, env_id: str) -> Chain:
    chains = load_chains(wh, [env_id])
    if env_id not in chains:
        raise UnknownEnvironment(f"no environment {env_id!r} in {wh.path}; list them with `vhd envs`")
    return chains[env_id]


CHAIN_BATCH = 256  # chains loaded at once by `chain_batches` (a chain holds ~140 KB: its rows as stored and parsed)


def chain_batches(wh: Warehouse, env_ids: Iterable[str], size: int = CHAIN_BATCH) -> Iterator[dict[str, Chain]]:
    """`load_chains` of `env_ids`, `size` at a time in id order: what an audit of the whole corpus
    walks, so that it holds a batch of chains, never the corpus's (nor DuckDB's cache of it:
    `Warehouse.trim` between batches)."""
    ordered = sorted(set(env_ids))
    for start in range(0, len(ordered), size):
        wh.trim()  # DuckDB's cache before this batch: the seals' SQL over every row, the last batch's runs
        yield load_chains(wh, ordered[start:start + size])


def load_chains(wh: Warehouse, env_ids: Iterable[str]) -> dict[str, Chain]:
    """env_id -> its Chain, for the stored ones among `env_ids`; rows shared by several chains
    (a module, a passage, a run) are loaded once. A row referred to by an id that is no longer
    stored is looked for by the digest of its id field (`moved`), and a check by its `checks`
    edge too, so that a row whose id or owner was changed is audited where it belongs."""
    stored: dict[str, dict[str, Any]] = {}
    invalid: dict[str, dict[str, str]] = {}

    def rows_of(cls: type, column: str, values: Iterable[Any]) -> list[dict[str, Any]]:
        # a few rows of a table read by scanning all of it: DuckDB caches every block the scan read,
        # so each table's blocks are dropped before the next is read (`Warehouse.trim`); else a batch
        # of 256 chains held all seven tables' blocks at once, the most memory of a publish and
        # growing with the corpus (the audit's high-water mark 413 -> 322 MB at scale 3, 337 -> 301
        # at scale 1, in a fresh process: docs/BENCHMARKS.md)
        rows = wh.stored_rows(cls, column, values)
        wh.trim()
        return rows

    def load(cls: type, values: Iterable[Any], column: str | None = None) -> dict[str, Any]:
        # rows read in bulk are not run through pydantic (their field digests and ids say whether
        # they changed since they were written, valid records); modules and passages are (their
        # interface and vocabulary are nested models)
        table, key = TABLES[cls]
        column, wanted = column or key, sorted(set(values))
        pairs = [(row[key] if column != key else row[column], row) for row in rows_of(cls, column, wanted)]
        if column == key:
            pairs += list(moved(wh, cls, set(wanted) - {ident for ident, _ in pairs}).items())
        out = {}
        for ident, row in pairs:
            record, bad = parse_row(cls, row, validate=cls in (SetterOutputRecord, PassageRecord))
            stored[row[key]] = row
            if bad:
                invalid[row[key]] = bad
            out[ident] = record
        return out

    envs = load(EnvironmentRecord, env_ids)
    models = load(ModelRecord, (e.model_id for e in envs.values()))
    solutions = load(SolutionRecord, (e.solution_id for e in envs.values()))
    outputs = load(SetterOutputRecord, (e.setter_output_id for e in envs.values()))
    passages = load(PassageRecord, (o.passage_id for o in outputs.values()))
    by_edge = {row["child_id"]: row["parent_id"] for row in rows_of(LineageEdge, "parent_id", list(envs))
               if row["relation"] == "checks"}  # a check whose env_id was changed keeps its edge
    checks: dict[str, list[CheckRecord]] = {}
    found = load(CheckRecord, envs, "env_id")
    found.update(load(CheckRecord, set(by_edge) - set(found)))
    for check_id, check in found.items():
        for owner in {check.env_id, by_edge.get(check_id)}:
            if owner in envs:
                checks.setdefault(owner, []).append(check)
    children = set(envs) | set(solutions) | set(outputs) | {r.id for r in (*envs.values(), *solutions.values(),
                                                                         *outputs.values())}
    children |= {c.check_id for cs in checks.values() for c in cs}
    edges: dict[str, list[LineageEdge]] = {}
    for row in rows_of(LineageEdge, "child_id", sorted(children)):
        edges.setdefault(row["child_id"], []).append(LineageEdge(**row))
    runs = {r.run_id: r for r in wh.runs()}
    chains = {}
    for requested, env in envs.items():
        model, solution = models.get(env.model_id), solutions.get(env.solution_id)
        output = outputs.get(env.setter_output_id)
        passage = passages.get(output.passage_id) if output is not None else None
        own_checks = sorted(checks.get(requested, []), key=lambda c: c.check_id)
        members = [r for r in (env, model, solution, output, passage, *own_checks) if r is not None]
        ids = {r.id for r in members}
        run_ids = {r.run_id for r in members if not isinstance(r, PassageRecord)}
        chains[requested] = Chain(
            environment=env, model=model, solution=solution, setter_output=output, passage=passage, checks=own_checks,
            edges={child: sorted(edges.get(child, []), key=lambda e: (e.relation, e.parent_id))
                   for child in ids | {requested} if child in children},
            runs={run_id: runs.get(run_id) for run_id in sorted(run_ids)},
            stored={i: stored[i] for i in ids if i in stored},
            invalid={i: invalid[i] for i in ids if i in invalid},
        )
    return chains


def moved(wh: Warehouse, cls: type, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """id -> the stored row of `cls` whose id field held `id` when it was written (the digest of
    its id field says so) and holds something else now; for ids that are not stored."""
    ids = sorted(set(ids))
    table, key = TABLES[cls]
    if not ids or table not in SEALED:
        return {}
    wanted = {field_digest(i): i for i in ids}
    cursor = wh.con.execute(f"SELECT * FROM {table} WHERE list_contains(?, json_extract_string("
                            f"CASE WHEN json_valid(field_digests) THEN field_digests END, ?))", [list(wanted), f"$.{key}"])
    columns = [d[0] for d in cursor.description]
    out = {}
    for values in cursor.fetchall():
        row = dict(zip(columns, values))
        out[wanted[json.loads(row["field_digests"])[key]]] = row
    return out


def load_versions(wh: Warehouse) -> list[tuple[CorpusVersionRecord, dict[str, Any], dict[str, str]]]:
    """Every published corpus version as (record, row as stored, {field: why invalid}), parsed
    leniently so that an edited row is audited rather than refused."""
    rows = wh.con.execute("SELECT * FROM corpus_versions ORDER BY created_at, version")
    columns = [d[0] for d in rows.description]
    out = []
    for values in rows.fetchall():
        row = dict(zip(columns, values))
        record, invalid = parse_row(CorpusVersionRecord, row)
        out.append((record, row, invalid))
    return out


def load_environments(wh: Warehouse, env_ids: Iterable[str]) -> dict[str, EnvironmentRecord | None]:
    """env_id -> its stored row (parsed leniently), None for the ids that are not stored."""
    ids = sorted(set(env_ids))
    found = {row["env_id"]: parse_row(EnvironmentRecord, row)[0]
             for row in wh.stored_rows(EnvironmentRecord, "env_id", ids)}
    return {i: found.get(i) for i in ids}


def load_rows(wh: Warehouse, cls: type) -> list[tuple[Any, dict[str, Any], dict[str, str]]]:
    """Every row of `cls`'s table as (record, row as stored, {field: why invalid})."""
    out = []
    for row in wh.stored_rows(cls):
        record, invalid = parse_row(cls, row)
        out.append((record, row, invalid))
    return out


def named_env_ids(versions: list[tuple[CorpusVersionRecord, dict[str, Any], dict[str, str]]]) -> set[str]:
    """The env ids the published versions' manifests name (audited even if no row has them now)."""
    return {i for v, _, _ in versions if isinstance(v.manifest, dict)
            for i in v.manifest.get("env_ids") or [] if isinstance(i, str)}


def audit_inputs(wh: Warehouse, covered: set[str] | None = None) -> dict[str, Any]:
    """What the audit of the whole warehouse (`vhd verify`, `tasks.gate.whole`) reads, by its
    parameter names: the chains of every stored environment and of every id a version names, the
    versions, the run ids, every row of the `AUDITED` tables, every lineage edge and the findings
    (the superseded marks are checked against today's code by `tasks.marks.mark_findings`). Every
    block is read first, so a corrupted one is one `WarehouseError` naming its table.

    `covered`: the env ids whose chains a matching anchored seal covers (plain `vhd verify`,
    `seals.covered_ids`): their chains are not loaded (so not replayed); their rows are audited
    with every other row by `whole`."""
    files.check_blocks(wh.raw, wh.path, write=False)
    versions = load_versions(wh)
    return {"chains": load_chains(wh, (named_env_ids(versions) | set(wh.env_ids())) - (covered or set())),
            "versions": versions,
            "runs": {r.run_id for r in wh.runs()},
            "tables": {table: load_rows(wh, cls) for cls, table in AUDITED.items()},
            "edges": [LineageEdge(**row) for row in wh.stored_rows(LineageEdge)]}


def unsealed(report: dict[str, Any]) -> dict[str, set[str]]:
    """table -> ids of the rows the audit `report` found unsealed (written before migration 006,
    no field digests): what `vhd verify --seal` seals. An IntegrityError when it found anything else."""
    findings = report["findings"]
    rows = [f for f in findings if f["field"] == DIGESTS and f["problem"].startswith("unsealed")]
    if len(rows) != len(findings):
        raise IntegrityError(f"--seal: {len(findings) - len(rows)} problems other than unsealed rows; "
                             f"nothing sealed: {report['lines'][0]}")
    by_table: dict[str, set[str]] = {}
    for f in rows:
        by_table.setdefault(f["table"], set()).add(f["id"])
    return by_table


def seal_rows(wh: Warehouse, rows: dict[str, set[str]]) -> int:
    """Seal the rows `unsealed` lists (table -> ids) in one transaction; returns how many were sealed."""
    kinds = {table: cls for cls, (table, _) in TABLES.items()}
    with wh.transaction():
        return sum(wh.seal(kinds[table], ids) for table, ids in rows.items())
