"""Run generated modules out of process, under limits set from outside the child.

    >>> close_at_once = [{"tool": "end_day", "arguments": {}}]       # inventory_dp's clock, in the bakery
    >>> job = {"module": setter_output.module, "episodes": [{"key": "score", "config": row["grader"]["config"],
    ...                                                      "finish": True, "trajectories": [close_at_once]}]}
    >>> result = run_job(job, Limits(cpu_seconds=30))
    >>> result.status, list(result.episodes)
    ('ok', ['score'])
    >>> result.episodes["score"]["trajectories"][0]
    {'utility': -318.0, 'terminal': True, 'turns_used': 1, 'errors': 0, 'first_error': None, ...}

The child is a fresh interpreter (`python -s -B runner.py`) with a scrubbed environment, stdin
and stdout on /dev/null, stderr on a size-capped pipe, cwd in a fresh scratch dir owned by the
sandbox uid, rlimits on CPU, address space, file size, open files and processes, its own
session, and — where the machine allows it — bubblewrap (read-only `/`, writable scratch only,
no network, own PID namespace) or else `unshare -n -p` (no network, own PID namespace). When
the parent is root the runner drops to uid/gid 65534 before the module runs. Results come back
on a dedicated pipe as HMAC-signed, numbered JSON lines, read by the parent up to a size cap and
checked against the job (schema, key order, end marker). See docs/RELIABILITY.md.

Where the launch has a PID namespace, `run_job` forks the child from a warm zygote started under
the same boundary instead of spawning an interpreter (`sandbox.pool`; `pool=False` or
VHD_SANDBOX_POOL=0 spawns).

Statuses: ok | import_error | timeout | memory | oversize | crashed | violation | forged | invalid,
and wall_timeout, which is not a verdict: the wall-clock backstop stopped a job that was waiting
for a CPU on a busy machine (`_wall_expired`); `SandboxResult.settled()` raises it as a
transient `SandboxError`, to be retried.
"""

from __future__ import annotations

import base64
import functools
import marshal
from typing import Any

from vhd.tasks.sandbox import pool as pools
from vhd.tasks.sandbox.launch import (
    MARKER, RUNNER, SANDBOX_UID, Limits, Plan, _run, marked_processes, network_isolation, plan,
)
from vhd.tasks.sandbox.report import TRANSIENT, SandboxResult
from vhd.tasks.sandbox.usage import Usage, descendants, usage

__all__ = ["MARKER", "RUNNER", "SANDBOX_UID", "TRANSIENT", "Limits", "Plan", "SandboxResult", "Usage", "compiled",
           "descendants", "marked_processes", "network_isolation", "plan", "run_job", "usage"]


def run_job(job: dict[str, Any], limits: Limits = Limits(), *, hash_seed: int = 0, pool: Any = None) -> SandboxResult:
    """Play `job` in a fresh sandboxed child and collect its per-episode reports.

    `pool`: None = the process-wide warm pool where it is enabled (`sandbox.pool.enabled()`: a PID
    namespace is available and VHD_SANDBOX_POOL is not 0), else a spawned interpreter; False =
    always spawn a fresh interpreter; a `SandboxPool` = a child of one of its zygotes."""
    if pool is False:
        return _run(job, limits, hash_seed, plan())
    if pool is None:
        if not pools.enabled():
            return _run(job, limits, hash_seed, plan())
        pool = pools.default_pool()
    return pool.run(job, limits, hash_seed)


RENDERS_KEPT = 96  # a family's renders (one per built-in passage: 90), each compiled once a build


@functools.lru_cache(maxsize=RENDERS_KEPT)
def compiled(source: str) -> str | None:
    """`source` compiled here as the runner compiles it (file name vhd_env.py, no future flag of
    this process inherited), as a job carries it: `job["code"]`, base64 of the marshalled code
    object, which the runner executes instead of compiling the source again. None when it does
    not compile (the runner then compiles it and reports the error).

    For trusted source only (the template setter's renders, `renders.is_render`): compiling runs
    none of the module's code, but the compiler is not the sandbox's to expose to generated text.
    Every job of a check compiled a 40 KB render again (7.6 ms; 0.3 ms to load the code instead),
    two jobs per module and round: docs/BENCHMARKS.md, "A render compiled once". A slot's rounds
    come back to the same modules, so RENDERS_KEPT are kept (source and code, ~125 KB each: 12 MB);
    with 16 kept, a scale-1 build compiled about once per batch (4.6 % of the flow's CPU)."""
    try:
        code = compile(source, "vhd_env.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    return base64.b64encode(marshal.dumps(code)).decode("ascii")
