"""The paper preset from an empty warehouse, through the real Prefect engine, in one process.

    python bench/paper_scale.py --scale 0.1 --workers 2 --out /tmp/paper-bench

Reports: wall time of `refresh(preset="paper", scale=S)` on an empty warehouse, admitted
environments per second, per-stage seconds (the flow's own `stage_seconds`: sample, solve,
synthesize, check, annotate, write), peak resident memory of this process tree (sampled every
0.2 s by a process of its own, `tree_memory.py`; it includes the Prefect server this process starts and every sandbox child), the
warehouse size; a no-op refresh (the same batch again) against an empty Prefect flow on the
same server (median of `--repeats`); and with `--workers N`, the same build on a second empty
warehouse with the check stage on a local Dask cluster, its speed-up, and whether it admitted
exactly the same environment ids. Targets (issue 6, 2 cores, scale 1): ≤ 10 min, no-op ≤ 1.5×
empty flow, peak ≤ 1.5 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="vhd-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

from prefect import flow  # noqa: E402

from vhd.flows.refresh import refresh, with_workers  # noqa: E402
from vhd.warehouse import Warehouse  # noqa: E402
from tree_memory import PeakRSS  # noqa: E402  (bench/tree_memory.py: the sampler, in a process of its own)


@flow(name="empty")
def empty() -> None:
    """The floor: a flow that does nothing, on the same server."""


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return time.perf_counter() - start, value


def size_mb(db: Path) -> float:
    return round(sum(p.stat().st_size for p in db.parent.glob(db.name + "*")) / 1e6, 1)


def env_ids(db: Path) -> set[str]:
    with Warehouse.open(db, read_only=True) as wh:
        return {e.env_id for e in wh.environments()}


def build(db: Path, params: dict) -> tuple[float, dict]:
    wall, summary = timed(refresh, db_path=str(db), **params)
    return wall, {
        "wall_s": round(wall, 2), "flow_s": summary["seconds"], "admitted": summary["admitted"],
        "rejected": summary["rejected"], "admitted_per_s": round(summary["admitted"] / wall, 2),
        "stage_seconds": summary["stage_seconds"], "computed": summary["computed"],
        "reasons": summary["reasons"],
        "short": {k: r["short"] for k, r in summary["families"].items() if r.get("short")},
        "corpus_version": summary["corpus_version"], "warehouse_mb": size_mb(db)}


def noop_vs_empty(db: Path, params: dict, repeats: int) -> dict:
    """The empty flow and the no-op refresh, alternated, `repeats` times each."""
    empties, noops = [], []
    for _ in range(repeats):
        empties.append(timed(empty)[0])
        seconds, again = timed(refresh, db_path=str(db), **params)
        assert again["nothing_to_do"], again["computed"]
        noops.append(seconds)
    return {"empty_flow_s": [round(s, 3) for s in empties], "noop_refresh_s": [round(s, 3) for s in noops],
            "noop_over_empty": round(statistics.median(noops) / statistics.median(empties), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="the paper preset's scale (1.0 = 3,300 admitted)")
    parser.add_argument("--batch", default="paper-bench")
    parser.add_argument("--workers", type=int, default=None, help="also build with a Dask cluster of N workers")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the empty flow and of the no-op refresh")
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="vhd-paper-bench-")))
    parser.add_argument("--noop-only", type=Path, default=None, metavar="DB",
                        help="no build: copy DB (built with the same --scale and --batch) and time only the no-op "
                             "refresh against the empty flow")
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    db = args.out / "paper.duckdb"
    params = dict(families=[], preset="paper", scale=args.scale, batch=args.batch)
    report: dict = {"scale": args.scale, "cores": os.cpu_count(), "load_before": os.getloadavg()}

    with PeakRSS() as memory:
        report["server_start_and_first_empty_flow_s"] = round(timed(empty)[0], 2)
        if args.noop_only:
            shutil.copy(args.noop_only, db)
        else:
            wall, report["build"] = build(db, params)
            report["build_peak_rss_mb"] = round(memory.peak / 2**20)
            report["build_memory"] = memory.report()
        report.update(noop_vs_empty(db, params, args.repeats))
        if args.workers and not args.noop_only:
            dask_db = args.out / "paper-dask.duckdb"
            wall_d, summary_d = timed(with_workers(refresh, args.workers), db_path=str(dask_db), **params)
            report["workers"] = {
                "n": args.workers, "wall_s": round(wall_d, 2), "flow_s": summary_d["seconds"],
                "admitted": summary_d["admitted"], "stage_seconds": summary_d["stage_seconds"],
                "reasons": summary_d["reasons"], "speedup": round(wall / wall_d, 2),
                "same_env_ids": env_ids(dask_db) == env_ids(db)}
    report["peak_rss_mb"] = round(memory.peak / 2**20)
    report["memory"] = memory.report()
    report["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
