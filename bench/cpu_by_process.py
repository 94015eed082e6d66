"""Where a refresh's CPU goes, process by process: the flow, the sandbox, Prefect's server.

    PYTHONPATH=bench python bench/cpu_by_process.py --scale 0.1
    PYTHONPATH=bench python bench/cpu_by_process.py -- vhd refresh --families knapsack --per-family 20 --db /tmp/k.duckdb

Runs the command (default: the paper preset at `--scale` from an empty warehouse in a temporary
directory, through the real Prefect engine and its temporary server) and samples its process
tree every `--every` seconds from this process: each process's own user + system CPU seconds, and
for the sandbox's zygotes also those of the children they forked and reaped (every sandbox run
of a module; those children are not counted again). Prints one JSON object:
wall seconds, CPU seconds by role (`tree_memory._role`: flow, sandbox, server, other) and the
machine's busy share over the run (/proc/stat). A process that lives less than one sampling
interval and whose parent is not sampled either is missed: use `--every 0.1` on runs without the
warm zygotes. The flow's CPU is its own, without what it reaped (its children are sampled
themselves).

The 300 s bar of issue 31 is a CPU budget on a machine the checks keep busy: wall ≈ total CPU /
cores, so the split says which process's work a speed-up has to cut (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import psutil

from tree_memory import _role

TICKS = os.sysconf("SC_CLK_TCK")


def _times(pid: int) -> tuple[float, float]:
    """(own, reaped children's) user + system CPU seconds of one process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rpartition(b")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS, (int(fields[13]) + int(fields[14])) / TICKS


def _zygote(command: list[str]) -> bool:
    """A warm zygote's interpreter (not the bwrap or unshare launcher whose command names it too)."""
    return bool(command) and os.path.basename(command[0]) not in ("bwrap", "unshare") and \
        any(part.endswith("zygote.py") for part in command)


def _busy() -> tuple[int, int]:
    """(busy, total) jiffies of the machine since boot."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def measure(command: list[str], every: float) -> dict:
    seen: dict[int, tuple[str, int, bool, float, float]] = {}  # pid -> (role, parent, zygote?, own, reaped)
    busy0, total0 = _busy()
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            break
        for p in tree:
            try:
                own, reaped = _times(p.pid)
                role, parent, zygote = seen[p.pid][:3] if p.pid in seen else \
                    (_role(p, proc.pid), p.ppid(), _zygote(p.cmdline()))
            except (OSError, psutil.Error):
                continue
            seen[p.pid] = (role, parent, zygote, own, reaped)
        time.sleep(every)
    wall = time.perf_counter() - started
    busy1, total1 = _busy()
    cpu: dict[str, float] = {}
    for role, parent, zygote, own, reaped in seen.values():
        if seen.get(parent, ("", 0, False))[2]:
            continue  # a zygote's forked run: in the zygote's reaped time
        cpu[role] = cpu.get(role, 0.0) + own + (reaped if zygote else 0.0)
    return {"command": command, "returncode": proc.returncode, "wall_s": round(wall, 1),
            "cpu_s": {role: round(s, 1) for role, s in sorted(cpu.items(), key=lambda kv: -kv[1])},
            "cpu_total_s": round(sum(cpu.values()), 1), "cores": len(os.sched_getaffinity(0)),
            "machine_busy": round((busy1 - busy0) / max(1, total1 - total0), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1, help="the paper preset's scale (default 0.1)")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples (default 0.5)")
    parser.add_argument("command", nargs="*", help="the command to measure instead of the paper preset")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        command = args.command or [sys.executable, "-m", "vhd.cli", "refresh", "--preset", "paper", "--scale",
                                   str(args.scale), "--seed", "7", "--batch", "cpu", "--db",
                                   os.path.join(scratch, "paper.duckdb"), "--json"]
        print(json.dumps(measure(command, args.every), indent=2))


if __name__ == "__main__":
    main()
