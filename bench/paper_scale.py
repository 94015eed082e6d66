"""The paper preset from an empty warehouse, through the real Prefect engine, in one process.

    python bench/paper_scale.py --scale 0.1 --workers 2 --out /tmp/paper-bench

Reports: wall time of `refresh(preset="paper", scale=S)` on an empty warehouse, admitted
environments per second, per-stage seconds (the flow's own `stage_seconds`: sample, solve,
synthesize, check, annotate, write), peak resident memory of this process tree (sampled every
0.2 s; it includes the Prefect server this process starts and every sandbox child), the
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
import threading
import time
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="vhd-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

import psutil  # noqa: E402
from prefect import flow  # noqa: E402

from vhd.flows.refresh import refresh, with_workers  # noqa: E402
from vhd.warehouse import Warehouse  # noqa: E402


@flow(name="empty")
def empty() -> None:
    """The floor: a flow that does nothing, on the same server."""


def _rollup(pid: int) -> tuple[int, int, int]:
    """(RSS, PSS, USS) in bytes of one process, from /proc/PID/smaps_rollup (one cheap read).
    RSS counts every shared page in full in each process that maps it (forked zygote children,
    shared libraries); PSS splits a shared page among its sharers, so PSS sums to what the tree
    really occupies; USS is what only this process holds."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
        for line in handle:
            key, _, rest = line.partition(b":")
            if key in (b"Rss", b"Pss", b"Private_Clean", b"Private_Dirty"):
                fields[key] = int(rest.split()[0]) * 1024
    return fields[b"Rss"], fields[b"Pss"], fields[b"Private_Clean"] + fields[b"Private_Dirty"]


def _role(proc: psutil.Process, me: int) -> str:
    if proc.pid == me:
        return "flow"
    try:
        command = " ".join(proc.cmdline())
    except psutil.Error:
        return "other"
    if "zygote.py" in command or "runner.py" in command or command.startswith(("unshare", "bwrap")) \
            or "/unshare " in command or "/bwrap " in command:
        return "sandbox"
    if "prefect" in command and ("server" in command or "uvicorn" in command):
        return "server"
    if "dask" in command or "distributed" in command or "multiprocessing" in command:
        return "dask"
    return "other"


class PeakRSS:
    """Peaks of this process tree's memory, sampled in a thread every `every` seconds.

    `peak` (kept for the report's old keys): the summed RSS of this process and all of its
    descendants (it double-counts pages shared between processes, e.g. a zygote and its forked
    children). Also: the summed PSS (the honest total), the flow process's own RSS, PSS and USS,
    and, at the moment of each total's peak, its split by role (flow, server, sandbox, dask, other)."""

    def __init__(self, every: float = 0.2):
        self.every, self.peak, self._stop = every, 0, threading.Event()
        self.peak_pss = self.flow_rss = self.flow_pss = self.flow_uss = 0
        self.roles_at_rss_peak: dict[str, int] = {}
        self.roles_at_pss_peak: dict[str, int] = {}
        self.max_processes = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            rss_roles: dict[str, int] = {}
            pss_roles: dict[str, int] = {}
            procs = [me, *me.children(recursive=True)]
            for proc in procs:
                try:
                    rss, pss, uss = _rollup(proc.pid)
                except (OSError, KeyError, ValueError):
                    continue
                role = _role(proc, me.pid)
                rss_roles[role] = rss_roles.get(role, 0) + rss
                pss_roles[role] = pss_roles.get(role, 0) + pss
                if role == "flow":
                    self.flow_rss, self.flow_pss = max(self.flow_rss, rss), max(self.flow_pss, pss)
                    self.flow_uss = max(self.flow_uss, uss)
            self.max_processes = max(self.max_processes, len(procs))
            if sum(rss_roles.values()) > self.peak:
                self.peak, self.roles_at_rss_peak = sum(rss_roles.values()), rss_roles
            if sum(pss_roles.values()) > self.peak_pss:
                self.peak_pss, self.roles_at_pss_peak = sum(pss_roles.values()), pss_roles
            self._stop.wait(self.every)

    def report(self) -> dict:
        mb = lambda n: round(n / 2**20)  # noqa: E731
        return {"tree_rss_mb": mb(self.peak), "tree_pss_mb": mb(self.peak_pss),
                "flow_rss_mb": mb(self.flow_rss), "flow_pss_mb": mb(self.flow_pss), "flow_uss_mb": mb(self.flow_uss),
                "rss_by_role_at_peak_mb": {k: mb(v) for k, v in sorted(self.roles_at_rss_peak.items())},
                "pss_by_role_at_peak_mb": {k: mb(v) for k, v in sorted(self.roles_at_pss_peak.items())},
                "max_processes": self.max_processes}

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


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
