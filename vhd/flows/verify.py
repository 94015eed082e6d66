"""The `verify` flow: `vhd verify --full` as a Prefect flow, which `vhd serve` schedules weekly.

    >>> from vhd.flows.serve import weekly_verify
    >>> weekly_verify(db_path="/srv/vhd/vhd.duckdb").parameters
    {'db_path': '/srv/vhd/vhd.duckdb', 'full': True}

A nightly refresh replays only what changed since the last anchored seal (the incremental publish
gate); this run replays and re-solves every environment, whatever the seals say, so that what the
nightly runs trust is recomputed from first principles once a week. Its report is a Prefect
artifact (`verify-report`); a problem fails the run (IntegrityError, its first line in the message).
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from vhd.flows.verification import verify_warehouse
from vhd.schemas.errors import IntegrityError

SHOWN = 20  # findings listed in the artifact


@flow(name="verify", log_prints=True, flow_run_name="verify {db_path}")
def verify(db_path: str = "data/vhd.duckdb", full: bool = True, resolve: bool = True,
           seals: str | None = None) -> dict[str, Any]:
    """Audit the warehouse at `db_path` against its seal file (`seals`, default `<db>.seals.jsonl`):
    with `full`, every environment replayed (with `resolve`, every θ re-solved). Returns the
    report's summary; raises IntegrityError when it found any problem."""
    report = verify_warehouse(db_path, seals, full=full, resolve=resolve)
    verdict = "verified" if report["verified"] else f"{len(report['findings'])} problems"
    scope = "every environment replayed" + (" and re-solved" if resolve else "") if report["seals"]["full"] else \
        f"{report['seals']['covered_envs']} environments covered by anchored seals (not replayed)"
    lines = [f"# verify `{db_path}`: {verdict}", "",
             f"{report['envs']} environments audited ({scope}), {report['versions']} corpus versions, "
             f"{report['seconds']} s; seal file `{report['seals']['file']}`.", ""]
    lines += [f"- {row['version']}: {row['status']}" + (f" ({row['why']})" if row["why"] else "")
              for row in report["seals"]["versions"]]
    lines += [f"- {line}" for line in report["lines"][:SHOWN]]
    create_markdown_artifact(key="verify-report", markdown="\n".join(lines), description=f"vhd verify: {verdict}")
    print(lines[0][2:])
    if not report["verified"]:
        raise IntegrityError(f"verify {db_path}: {len(report['findings'])} problems; first: {report['lines'][0]}")
    return {key: report[key] for key in ("verified", "envs", "versions", "seconds", "seals")}
