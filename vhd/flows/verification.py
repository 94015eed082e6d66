"""The audit of a whole warehouse against its seal file: what `vhd verify` prints and what the
weekly `verify` flow (vhd/flows/verify.py) runs. No Prefect here: the command runs no flow.

    >>> report = verify_warehouse(db, resolve=False)      # db: a warehouse file
    >>> report["verified"], report["envs"], report["seals"]["full"], report["seals"]["why_full"]
    (True, 1, True, 'no seal file: nothing is anchored yet')

Each published version's seal is recomputed from the stored rows and compared with the seal
file; then every environment's chain (admitted or not), every published version and every other
stored row are audited. The environments that matching anchored seals cover are audited row by
row but not replayed or re-solved, unless `full` (docs/RELIABILITY.md, "What is verified where").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vhd.tasks.corpus.marks import mark_findings
from vhd.tasks.corpus.publish import code_digest
from vhd.tasks.corpus.publish_audit import seal_plan, whole
from vhd.warehouse import Warehouse
from vhd.warehouse import seals as seal_store
from vhd.warehouse.lineage import audit_inputs, load_versions


def verify_warehouse(db: str | Path | None, seals: str | Path | None = None, *, full: bool = False,
                     resolve: bool = True) -> dict[str, Any]:
    """The audit report of the warehouse `db` (read-only) against the seal file `seals` (default
    `<db>.seals.jsonl`): `verified`, `findings` (a seal that does not match the seal file among
    them), `lines`, and `seals` (the file, each version's status, how many environments the seals
    covered, and why the audit was full). `full`: replay every environment whatever the seals say;
    `resolve`: also re-solve every θ."""
    with Warehouse.open(db, read_only=True) as wh:
        seal_file = seal_store.seals_path(wh.path, seals)
        anchors = seal_store.read_anchors(seal_file)
        plan = seal_plan(seal_store.sealed_chain(wh), anchors, load_versions(wh), code_digest())
        covered: set[str] = set()
        if plan["incremental"] and not full:
            covered = seal_store.covered_ids(wh, [row["version"] for row in plan["versions"]])
        why_full = "--full" if full else plan["why"]
        if covered:
            report = whole(**audit_inputs(wh, covered), marks=mark_findings(wh), resolve=resolve)
            if report["findings"]:  # a covered row changed without its digest: audit all, to name the environments
                covered, why_full = set(), "the rows the seals cover hold problems"
        if not covered:
            report = whole(**audit_inputs(wh), marks=mark_findings(wh), resolve=resolve)
    report["seals"] = {"file": str(seal_file), "present": anchors is not None, "versions": plan["versions"],
                       "covered_envs": len(covered), "full": not covered, "why_full": "" if covered else why_full}
    for row in plan["versions"]:
        if row["status"] in ("mismatch", "missing"):
            problem = f"does not match the seal file {seal_file}: {row['why']}"
            report["findings"].append({"env_id": "", "table": "corpus_versions", "id": row["version"],
                                       "field": "seal", "problem": problem})
            report["lines"].append(f"corpus_versions {row['version']} seal: {problem}")
            report["problems"].append(problem)
    report["verified"] = not report["findings"]
    return report
