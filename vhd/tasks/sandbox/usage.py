"""What a sandbox child and its descendants have used: CPU seconds and memory, read from /proc.

The launcher judges a job by the CPU time its processes used (a machine that is merely busy
starves a job of wall time, not of CPU time: `launch._wall_expired`), so verdicts do not depend
on load (docs/RELIABILITY.md).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    """What a job's processes did with their lives, measured when the backstop expired."""

    cpu: float  # seconds on a CPU: every live process's own (all its threads), plus its reaped children's
    waited: float | None  # seconds runnable but waiting for a CPU (run-queue delay, /proc/*/task/*/schedstat);
    #                       None where the kernel does not keep it
    life: float  # seconds since the oldest of the processes started


def descendants(root: int) -> list[int]:
    """Every live process below `root` (through /proc/PID/task/TID/children), not `root` itself."""
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as handle:
                    children = [int(c) for c in handle.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            stack += children
    return found


def usage(pids: list[int]) -> Usage | None:
    """CPU, run-queue wait and lifetime of these processes (None when none of them can be read)."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu, waited, born, seen, sched = 0.0, 0.0, math.inf, False, True
    now = time.clock_gettime(time.CLOCK_BOOTTIME)  # the clock of a process's start time (not /proc/uptime,
    #                                                which a container may show as its own)
    for pid in set(pids):
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            utime, stime, cutime, cstime = (int(f) for f in fields[11:15])  # stat fields 14-17
            start = int(fields[19]) / tick  # field 22
            wait = 0
            for tid in os.listdir(f"/proc/{pid}/task"):
                try:
                    with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as handle:
                        wait += int(handle.read().split()[1])
                except FileNotFoundError:  # a thread that just ended, or a kernel without schedstat
                    if os.path.isdir(f"/proc/{pid}/task/{tid}"):
                        sched = False
        except (OSError, ValueError, IndexError):
            continue
        seen = True
        cpu += (utime + stime + cutime + cstime) / tick
        waited += wait / 1e9
        born = min(born, start)
    if not seen:
        return None
    return Usage(cpu, waited if sched else None, max(0.0, now - born))
