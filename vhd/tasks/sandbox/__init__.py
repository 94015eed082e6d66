"""Run generated modules out of process, under limits set from outside the child.

    >>> result = run_job({"module": source, "episodes": [...]}, Limits(wall_seconds=30))
    >>> result.status, len(result.episodes)
    ('ok', 1)

The child is a fresh interpreter (`python -s -B runner.py`) with a scrubbed environment, stdin
closed, cwd in a fresh scratch dir, rlimits on CPU, address space, file size and open files,
its own session (so the whole process group is killed), and no network when `unshare -n`
works here. Results come back on a dedicated pipe, read by the parent up to a size cap.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

RUNNER = Path(__file__).with_name("runner.py")


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 120.0
    cpu_seconds: int = 120
    memory_bytes: int = 2 << 30
    result_bytes: int = 64 << 20
    file_bytes: int = 16 << 20
    open_files: int = 256


@dataclass
class SandboxResult:
    status: str  # ok | import_error | timeout | memory | crashed | invalid | oversize
    episodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    message: str = ""
    seconds: float = 0.0


@lru_cache(maxsize=1)
def network_isolation() -> tuple[str, ...]:
    """The command prefix that gives the child no network, or () where none works here."""
    unshare = shutil.which("unshare")
    if unshare:
        try:
            probe = subprocess.run([unshare, "-n", "--", "true"], capture_output=True, timeout=10)
            if probe.returncode == 0:
                return (unshare, "-n", "--")
        except (OSError, subprocess.TimeoutExpired):
            pass
    return ()


def _limit(limits: Limits):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_job(job: dict[str, Any], limits: Limits = Limits(), *, hash_seed: int = 0) -> SandboxResult:
    """Play `job` in a fresh sandboxed interpreter and collect its per-episode reports."""
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="vhd-sandbox-"))
    try:
        job_path = scratch / "job.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        read_end, write_end = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": str(hash_seed), "LC_ALL": "C.UTF-8", "HOME": str(scratch)}
        command = [*network_isolation(), sys.executable, "-s", "-B", str(RUNNER), str(job_path), str(write_end)]
        with open(scratch / "stderr.txt", "wb") as stderr:
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, cwd=scratch, env=env,
                pass_fds=(write_end,), preexec_fn=_limit(limits), start_new_session=True,
            )
        os.close(write_end)
        data, status = _collect(proc, read_end, limits, started)
        os.close(read_end)
        stderr_tail = (scratch / "stderr.txt").read_bytes()[-2000:].decode("utf-8", "replace")
        result = _parse(data, status, proc.returncode, stderr_tail)
        result.seconds = time.perf_counter() - started
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _collect(proc: subprocess.Popen, fd: int, limits: Limits, started: float) -> tuple[bytes, str]:
    chunks, size = [], 0
    while True:
        remaining = limits.wall_seconds - (time.perf_counter() - started)
        if remaining <= 0:
            _kill_group(proc)
            return b"".join(chunks), "timeout"
        ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        size += len(chunk)
        if size > limits.result_bytes:
            _kill_group(proc)
            return b"".join(chunks), "oversize"
        chunks.append(chunk)
    try:
        proc.wait(timeout=max(0.1, limits.wall_seconds - (time.perf_counter() - started)))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return b"".join(chunks), "timeout"
    _kill_group(proc)  # nothing the module forked may outlive the check
    return b"".join(chunks), "done"


def _parse(data: bytes, status: str, returncode: int | None, stderr_tail: str) -> SandboxResult:
    if status in ("timeout", "oversize"):
        return SandboxResult(status, message=f"sandbox {status}: the module exceeded its limits")
    if returncode == -signal.SIGXCPU or returncode == -signal.SIGKILL:
        return SandboxResult("timeout", message=f"sandbox killed by signal {-returncode} (CPU limit)")
    if "MemoryError" in stderr_tail:
        return SandboxResult("memory", message="sandbox ran out of memory")
    episodes: dict[str, dict[str, Any]] = {}
    ended = False
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            return SandboxResult("invalid", message="sandbox result channel carried a line that is not JSON")
        if "import_error" in record:
            return SandboxResult("import_error", message="module failed to import: " + record["import_error"][-500:])
        if record.get("end"):
            ended = True
        elif "key" in record:
            episodes[record["key"]] = record
    if returncode != 0 or not ended:
        return SandboxResult("crashed", episodes, f"sandbox exited with code {returncode}: {stderr_tail[-300:]}")
    return SandboxResult("ok", episodes)
