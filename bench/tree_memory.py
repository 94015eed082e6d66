"""Peaks of a process tree's memory, sampled by a process of its own.

    with PeakRSS() as memory:          # in the process whose tree is measured
        ...
    memory.report()["tree_rss_mb"]

The sampler runs as `python bench/tree_memory.py PID EVERY` (psutil only, no Prefect, no numpy),
reads /proc/PID/smaps_rollup of PID and of every descendant but itself every EVERY seconds, and
answers each "report" line on its stdin with its peaks so far as one JSON line. Sampling in a
process of its own keeps the measurement out of the measured process: a sampling thread there
held its GIL for psutil's work (8.6 % of the flow process's busy samples at 0.2 s, py-spy).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys

import psutil


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


def _role(proc: psutil.Process, root: int) -> str:
    if proc.pid == root:
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


class Peaks:
    """The sampler's state: the summed RSS of the tree (it double-counts pages shared between
    processes, e.g. a zygote and its forked children), the summed PSS (the honest total), the root
    process's own RSS, PSS and USS, and at each total's peak its split by role (flow, server,
    sandbox, dask, other)."""

    def __init__(self, root: int):
        self.root, self.me = psutil.Process(root), os.getpid()
        self.peak = self.peak_pss = self.flow_rss = self.flow_pss = self.flow_uss = self.max_processes = 0
        self.roles_at_rss_peak: dict[str, int] = {}
        self.roles_at_pss_peak: dict[str, int] = {}
        self._roles: dict[int, str] = {}  # a process's role, read from its command line once

    def sample(self) -> None:
        rss_roles: dict[str, int] = {}
        pss_roles: dict[str, int] = {}
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        procs = [proc for proc in procs if proc.pid != self.me]
        for proc in procs:
            try:
                rss, pss, uss = _rollup(proc.pid)
            except (OSError, KeyError, ValueError):
                continue
            role = self._roles.get(proc.pid) or self._roles.setdefault(proc.pid, _role(proc, self.root.pid))
            rss_roles[role] = rss_roles.get(role, 0) + rss
            pss_roles[role] = pss_roles.get(role, 0) + pss
            if role == "flow":
                self.flow_rss, self.flow_pss = max(self.flow_rss, rss), max(self.flow_pss, pss)
                self.flow_uss = max(self.flow_uss, uss)
        if len(self._roles) > 4096:  # pids of children long gone
            self._roles.clear()
        self.max_processes = max(self.max_processes, len(procs))
        if sum(rss_roles.values()) > self.peak:
            self.peak, self.roles_at_rss_peak = sum(rss_roles.values()), rss_roles
        if sum(pss_roles.values()) > self.peak_pss:
            self.peak_pss, self.roles_at_pss_peak = sum(pss_roles.values()), pss_roles

    def report(self) -> dict:
        mb = lambda n: round(n / 2**20)  # noqa: E731
        return {"tree_rss_mb": mb(self.peak), "tree_pss_mb": mb(self.peak_pss),
                "flow_rss_mb": mb(self.flow_rss), "flow_pss_mb": mb(self.flow_pss), "flow_uss_mb": mb(self.flow_uss),
                "rss_by_role_at_peak_mb": {k: mb(v) for k, v in sorted(self.roles_at_rss_peak.items())},
                "pss_by_role_at_peak_mb": {k: mb(v) for k, v in sorted(self.roles_at_pss_peak.items())},
                "max_processes": self.max_processes, "peak_bytes": self.peak}


class PeakRSS:
    """The peaks of this process's tree, sampled every `every` seconds by a sampler process
    (`python bench/tree_memory.py`); `report()` asks it for its peaks so far, `peak` is the
    summed-RSS peak in bytes."""

    def __init__(self, every: float = 0.2):
        self.every = every
        self._proc: subprocess.Popen | None = None
        self._final: dict | None = None

    def __enter__(self) -> "PeakRSS":
        self._proc = subprocess.Popen([sys.executable, __file__, str(os.getpid()), str(self.every)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self

    def report(self) -> dict:
        if self._final is not None:
            return self._final
        self._proc.stdin.write("report\n")
        self._proc.stdin.flush()
        return json.loads(self._proc.stdout.readline())

    @property
    def peak(self) -> int:
        return self.report()["peak_bytes"]

    def __exit__(self, *exc) -> None:
        self._final = self.report()
        self._proc.stdin.close()
        self._proc.wait()


def _serve(root: int, every: float) -> None:
    peaks = Peaks(root)
    while True:
        peaks.sample()
        readable, _, _ = select.select([sys.stdin], [], [], every)
        if readable:
            line = sys.stdin.readline()
            if not line:
                return
            print(json.dumps(peaks.report()), flush=True)


if __name__ == "__main__":
    _serve(int(sys.argv[1]), float(sys.argv[2]))
