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
from dataclasses import dataclass
from typing import Any, Iterable

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


@dataclass(frozen=True)
class EnvKey:
    """What a version check (`publish.check_version`) reads of an environment once its chain is
    audited: the publish gate keeps this (and the grading digest), not the chain, across chunks."""

    env_id: str
    admitted: bool
    family: str
    split: str
    presentation: str


def gate(chains: dict[str, Chain] | Iterable[dict[str, Chain]],
         versions: list[tuple[Any, dict[str, Any], dict[str, str]]], runs: set[str]) -> dict[str, Any]:
    """The publish gate's audit: every chain (hashes, digests, lineage, verdicts, θ re-derived,
    u*/u₀/u_idle and trajectories replayed, the module against the template setter's render, the
    verdict's θ-dependent gates recomputed; π* is not re-solved) and every published version. No
    environment is skipped because a stored manifest lists its grading digest (issue 31): what
    decides a verdict is recomputed on every attempt (`recompute`).

    `chains`: one dict of chains, or batches of them (the flow loads a few hundred at a time,
    `warehouse.lineage.chain_batches`), so that memory does not grow with the corpus: of each
    environment only its `EnvKey` and grading digest outlive its batch."""
    started = time.perf_counter()
    auditor = Auditor(resolve=False, measure=False)
    found: list[dict[str, str]] = []
    kept: dict[str, EnvKey] = {}
    for batch in ([chains] if isinstance(chains, dict) else chains):
        found += auditor.chains(batch)
        for env_id, chain in batch.items():
            env = chain.environment
            auditor.grading(env, env_id=env_id)
            kept[env_id] = EnvKey(env.env_id, env.admitted, env.family, env.split, env.presentation)
        if not isinstance(chains, dict):
            auditor.forget(batch)
    found += audit_versions(versions, kept, runs, auditor.digests)
    report = summary(found, len(kept), len(versions), time.perf_counter() - started, auditor.notes,
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
    superseded marks (`marks`: findings and notes, `tasks.marks.mark_findings`); π* re-solved with `resolve`.
    Environments whose chains are not in `chains` (plain `vhd verify`: those a matching anchored seal
    covers) are audited row by row with every other row — hashes, ids, field digests, lineage edges,
    manifests — but not replayed or re-solved."""
    started = time.perf_counter()
    auditor = Auditor(resolve=resolve)
    found = auditor.chains(chains)
    envs = {record.id: record for record, _, _ in tables.get("environments", [])}  # those no chain was asked for
    envs.update((i, c.environment) for i, c in chains.items())
    found += audit_versions(versions, envs, runs, auditor.digests)
    for table, rows in tables.items():
        found += auditor.rows(table, rows)
    found += edge_findings(edges, tables)
    found += list(marks[0])
    return summary(found, len(chains), len(versions), time.perf_counter() - started, [*auditor.notes, *marks[1]],
                   version_hint(auditor.unbumped))


# -- the seal chain against its anchor (issue 31) ------------------------------------------------------
def seal_plan(sealed: list[dict[str, Any]], anchors: dict[str, dict[str, Any]] | None,
              versions: list[tuple[Any, dict[str, Any], dict[str, str]]], code: str | None = None) -> dict[str, Any]:
    """What the publish gate may trust, from the seals recomputed from the stored rows (`sealed`,
    `warehouse.seals.sealed_chain`: oldest first) and the seal file (`anchors`, None when there is
    none): `incremental` when every stored version is anchored and its recomputed seal equals the
    anchored one and no anchored version is missing from the warehouse; then `trusted` maps every
    env id of the latest version to its grading digest in that version's manifest (the gate
    replays none of them). Else `incremental` is False and `why` says why (the full recompute
    runs); `mismatch` lists the anchored versions that no longer match (a finding worth a warning:
    the file was rewritten, or the seal file belongs to another warehouse); a version row whose
    values no longer match its own field digests (checked here, in Python: a few rows) counts as
    one. `versions` as `lineage.load_versions`; `code` (`publish.code_digest`): the latest
    version's seal line must name the same code, else `recode` is True and the full recompute runs
    once (the gate's verdicts came from other code).

        >>> seal_plan([], None, [])["why"]
        'no seal file: nothing is anchored yet'
    """
    rows = {v["version"]: v for v in sealed}
    table = []
    mismatch: list[str] = []
    unanchored: list[str] = []
    for found in sealed:
        name = found["version"]
        anchored = (anchors or {}).get(name)
        status, why = "unanchored", ""
        if anchored is not None:
            status = "match" if anchored["seal"] == found["seal"] else "mismatch"
            if status == "mismatch":
                why = ("its stored rows no longer give the anchored seal "
                       f"({found['seal'][:12]}… ≠ {anchored['seal'][:12]}…)")
        stored = next((row for v, row, _ in versions if v.version == name), None)
        problems = digest_problems(stored) if stored is not None else []
        if problems or found["missing"]:  # a value of the version row (its manifest) edited without its digest
            status = "mismatch" if anchored is not None else status
            why = (f"{found['missing']} of its environments are not stored" if found["missing"] else
                   f"its row's {problems[0][0]} {problems[0][1]}")
        if status == "mismatch":
            mismatch.append(name)
        elif status == "unanchored":
            unanchored.append(name)
        table.append({"version": name, "seal": found["seal"], "anchored": anchored["seal"] if anchored else None,
                      "status": status, "why": why, "envs": found["envs"]})
    gone = sorted(set(anchors or {}) - set(rows))
    for name in gone:
        mismatch.append(name)
        table.append({"version": name, "seal": None, "anchored": anchors[name]["seal"], "status": "missing",
                      "why": "anchored in the seal file, but the warehouse holds no such version", "envs": 0})
    plan: dict[str, Any] = {"versions": table, "mismatch": mismatch, "unanchored": unanchored, "incremental": False,
                            "trusted": {}, "why": "", "warnings": [], "recode": False}
    for name in mismatch:
        row = next(r for r in table if r["version"] == name)
        plan["warnings"].append(f"seal of {name} does not match the seal file: {row['why']}")
    if anchors is None:
        plan["why"] = "no seal file: nothing is anchored yet"
    elif not sealed:
        plan["why"] = "no published version yet"
    elif mismatch:
        plan["why"] = f"the seal of {mismatch[0]} does not match the seal file"
    elif unanchored:
        plan["why"] = f"{unanchored[-1]} is not anchored in the seal file"
    elif code is not None and anchors[sealed[-1]["version"]].get("code") != code:
        plan["recode"] = True
        plan["why"] = (f"the code changed since {sealed[-1]['version']} was anchored (its seal line names other "
                       "sources of the families, stages or checker)")
    else:
        latest = versions[-1][0] if versions else None
        manifest = latest.manifest if latest is not None and isinstance(latest.manifest, dict) else {}
        ids, digests = manifest.get("env_ids"), manifest.get("env_digests")
        if latest is None or latest.version != sealed[-1]["version"] or not isinstance(ids, list) \
                or not isinstance(digests, list) or len(ids) != len(digests):
            plan["why"] = "the latest version's manifest lists no grading digest per environment"
        else:
            plan["incremental"] = True
            plan["trusted"] = dict(zip(ids, digests))
            plan["latest"] = latest.version
    return plan


def seal_note(plan: dict[str, Any], replayed: int) -> str:
    """One line for the publish report: which path the gate took and why."""
    if plan["incremental"]:
        return (f"publish gate: incremental — {len(plan['trusted'])} environments of {plan['latest']} trusted under "
                f"its anchored seal, {replayed} replayed")
    return f"publish gate: full recompute ({plan['why']}), {replayed} replayed"


def version_seal(plan: dict[str, Any], version: Any, seal_file: Any) -> dict[str, Any]:
    """What `vhd export` writes as OUT/SEAL for `version`: its seal recomputed from the stored rows,
    the previous one, its corpus digest, and whether the seal file anchors it. An IntegrityError of
    one line when the seal file anchors it with another seal (the warehouse was rewritten)."""
    from vhd.schemas.errors import IntegrityError

    row = next((r for r in plan["versions"] if r["version"] == version.version), None)
    if row is None or row["seal"] is None:
        raise IntegrityError(f"corpus version {version.version} seal: cannot be computed; run `vhd verify`")
    if row["status"] == "mismatch":
        raise IntegrityError(f"corpus version {version.version} seal: does not match the seal file {seal_file} "
                             f"({row['why']}); run `vhd verify`")
    previous = ""
    for r in plan["versions"]:
        if r["version"] == version.version:
            break
        previous = r["seal"] or previous
    return {"format": "vhd-seal@1", "version": version.version, "seal": row["seal"], "previous": previous,
            "corpus_digest": version.manifest.get("digest"), "admitted": version.admitted,
            "anchored": row["status"] == "match", "seal_file": str(seal_file)}
