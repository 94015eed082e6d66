"""The audit over a whole corpus: the publish gate (`gate`, on every publish attempt) and `vhd
verify` (`whole`, the whole warehouse), both built on `audit.Auditor`; their reports.

    >>> report = gate({env.env_id: chain}, [], {"doctest"})   # chains, published versions, the runs' ids
    >>> report["verified"], report["envs"], report["lines"]
    (True, 1, [])
    >>> import dataclasses
    >>> edited = dataclasses.replace(chain, environment=env.model_copy(update={"u_star": env.u_star + 1}))
    >>> gate({env.env_id: edited}, [], {"doctest"})["lines"]
    ['environments ... u_star: stored ... differs from the value replayed from its solution and θ (env ...)']

The warehouse side loads the inputs (`warehouse.lineage`: `load_chains`, `load_versions`,
`audit_inputs` for `whole`).
"""

from __future__ import annotations

import time
from typing import Any

from vhd.schemas.hashing import digest_problems
from vhd.schemas.records import Chain
from vhd.tasks.corpus.audit import Auditor, line, version_hint
from vhd.tasks.corpus.publish import check_version, finding


def audit_versions(versions: list[tuple[Any, dict[str, Any], dict[str, str]]], envs: dict[str, Any],
                   runs: set[str], digests: dict[str, str] | None = None) -> list[dict[str, str]]:
    """Findings on published corpus versions: their rows' field digests and values, and their
    manifests against the stored environments (`publish.check_version`). `versions` as
    `lineage.load_versions` gives them; `envs` holds every environment they name."""
    found = []
    for version, row, invalid in versions:
        name = str(version.version)
        problems = [(field, f"invalid value: {why}") for field, why in invalid.items()] + digest_problems(row)
        found += [finding("", "corpus_versions", name, field, problem) for field, problem in problems]
        if not invalid:
            ids = version.manifest.get("env_ids", []) if isinstance(version.manifest, dict) else []
            found += check_version(version, {i: envs.get(i) for i in ids if isinstance(i, str)}, runs, digests)
    return found


def summary(findings: list[dict[str, str]], envs: int, versions: int, seconds: float,
            notes: list[str] = (), hint: str = "") -> dict[str, Any]:
    """The audit's report as the publish gate and `vhd verify` give it; `hint`: what to do about
    the findings, when the audit knows (`audit.version_hint`)."""
    return {"verified": not findings, "envs": envs, "versions": versions, "seconds": round(seconds, 3),
            "findings": findings, "problems": [f["problem"] for f in findings],
            "lines": [line(f) + (f" (env {f['env_id']})" if f["env_id"] else "") for f in findings],
            "notes": sorted(set(notes)), "hint": hint}


def gate(chains: dict[str, Chain], versions: list[tuple[Any, dict[str, Any], dict[str, str]]],
         runs: set[str]) -> dict[str, Any]:
    """The publish gate's audit: every chain (hashes, digests, lineage, verdicts, θ re-derived,
    u*/u₀/u_idle and trajectories replayed, the module against the template setter's render, the
    verdict's θ-dependent gates recomputed; π* is not re-solved) and every published version. No
    environment is skipped because a stored manifest lists its grading digest (issue 31): what
    decides a verdict is recomputed on every attempt (`recompute`)."""
    started = time.perf_counter()
    auditor = Auditor(resolve=False, measure=False)
    found = auditor.chains(chains)
    found += audit_versions(versions, {i: c.environment for i, c in chains.items()}, runs, auditor.digests)
    report = summary(found, len(chains), len(versions), time.perf_counter() - started, auditor.notes,
                     version_hint(auditor.unbumped))
    report["replayed"] = auditor.replayed
    report["digests"] = auditor.digests
    return report


def brief(report: dict[str, Any], keep: int = 20) -> dict[str, Any]:
    """The report with its first `keep` findings only (what a run's summary stores)."""
    return {**{k: v for k, v in report.items() if k != "digests"}, "count": len(report["findings"]),
            "findings": report["findings"][:keep], "problems": report["problems"][:keep],
            "lines": report["lines"][:keep]}


# relation -> (the child's table, the parent's table, the child's field that names the parent)
RELATIONS = {"instance_of": ("environments", "models", "model_id"),
             "graded_by": ("environments", "solutions", "solution_id"),
             "rendered_by": ("environments", "setter_outputs", "setter_output_id"),
             "checks": ("checks", "environments", "env_id"),
             "solves": ("solutions", "models", "model_id"),
             "skinned_by": ("setter_outputs", "passages", "passage_id")}


def edge_findings(edges: list[Any], tables: dict[str, list[tuple[Any, dict[str, Any], dict[str, str]]]]
                  ) -> list[dict[str, str]]:
    """Every stored lineage edge must be the edge its child row implies: a known relation, a
    stored child and parent of the relation's tables, the parent the child names."""
    records = {table: {record.id: record for record, _, _ in rows} for table, rows in tables.items()}
    found = []
    for edge in edges:
        where = f"{edge.child_id[:12]}→{edge.parent_id[:12]}"
        if edge.relation not in RELATIONS:
            found.append(finding("", "lineage_edges", where, "relation", f"unknown relation {edge.relation!r}"))
            continue
        child_table, parent_table, field = RELATIONS[edge.relation]
        child = records.get(child_table, {}).get(edge.child_id)
        envs = records.get("environments", {})
        env_id = next((i for i in ((edge.child_id,) if child_table == "environments" else
                                   (edge.parent_id,) if edge.relation == "checks" else ()) if i in envs), "")
        if child is None:
            found.append(finding(env_id, "lineage_edges", where, "child_id",
                                 f"names no stored {child_table} row ({edge.relation})"))
        elif getattr(child, field, None) != edge.parent_id:
            found.append(finding(env_id, "lineage_edges", where, "parent_id",
                                 f"is not the {field} of its child ({edge.relation})"))
        if edge.parent_id not in records.get(parent_table, {}):
            found.append(finding(env_id, "lineage_edges", where, "parent_id",
                                 f"names no stored {parent_table} row ({edge.relation})"))
    return found


def whole(chains: dict[str, Chain], versions: list[tuple[Any, dict[str, Any], dict[str, str]]], runs: set[str],
          tables: dict[str, list[tuple[Any, dict[str, Any], dict[str, str]]]], edges: list[Any],
          marks: tuple[list[dict[str, str]], list[str]] = ((), ()), *, resolve: bool = True) -> dict[str, Any]:
    """`vhd verify`: every environment's chain (admitted or not, superseded included), every
    published version, every other row of the record tables, every lineage edge and the
    superseded marks (`marks`: findings and notes, `tasks.marks.mark_findings`); π* re-solved with `resolve`."""
    started = time.perf_counter()
    auditor = Auditor(resolve=resolve)
    found = auditor.chains(chains)
    found += audit_versions(versions, {i: c.environment for i, c in chains.items()}, runs, auditor.digests)
    for table, rows in tables.items():
        found += auditor.rows(table, rows)
    found += edge_findings(edges, tables)
    found += list(marks[0])
    return summary(found, len(chains), len(versions), time.perf_counter() - started, [*auditor.notes, *marks[1]],
                   version_hint(auditor.unbumped))
