"""The sandbox's launcher: limits, the launch plan, one spawned child, its signed report.

`vhd.tasks.sandbox.run_job` is the entry point; this module is what it and the warm pool
(`sandbox.pool`) share. See the package docstring and docs/RELIABILITY.md.
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from vhd.tasks.sandbox.report import SandboxResult, _parse
from vhd.tasks.sandbox.usage import Usage, descendants, usage  # noqa: F401  (re-exported)

RUNNER = Path(__file__).with_name("runner.py")
SANDBOX_UID = 65534  # nobody / nogroup
MARKER = "VHD_SANDBOX_ID"


@dataclass(frozen=True)
class Limits:
    """What one job may use. `cpu_seconds` (RLIMIT_CPU, per process: SIGXCPU at cpu_seconds,
    SIGKILL at cpu_seconds + 1, which is where PID 1 of a namespace, deaf to SIGXCPU, ends)
    decides "too slow": status `timeout`. The wall clock is only a backstop, `wall` =
    max(wall_seconds, wall_factor × (cpu_seconds + 1)): a job is never cut before it could have
    used its whole CPU allowance with 1/wall_factor of a core, and what an expiry means is
    decided by `_wall_expired`."""

    wall_seconds: float = 0.0  # a floor under the backstop, never below wall_factor × (cpu_seconds + 1)
    cpu_seconds: int = 120
    memory_bytes: int = 2 << 30
    result_bytes: int = 64 << 20
    file_bytes: int = 16 << 20
    open_files: int = 256
    processes: int = 64  # RLIMIT_NPROC of the sandbox uid (enforced only once privileges are dropped)
    stderr_bytes: int = 64 << 10
    wall_factor: float = 5.0

    @property
    def wall(self) -> float:
        """Seconds of wall clock after which the parent stops the job (the backstop)."""
        return max(self.wall_seconds, self.wall_factor * (self.cpu_seconds + 1))


@dataclass(frozen=True)
class Plan:
    """How children are launched on this machine (probed once per process)."""

    mode: str  # bwrap | unshare | none
    uid: int | None  # the uid the runner drops to, or None (runs as the parent's uid)


# --- launching ---------------------------------------------------------------------------


def _hidden_ancestors(target: str) -> tuple[str, list[str]] | None:
    """The topmost ancestor of `target` that others cannot traverse, and the dirs below it."""
    parts = Path(target).parts
    for depth in range(2, len(parts)):
        ancestor = os.path.join(*parts[:depth])
        try:
            mode = os.stat(ancestor).st_mode
        except OSError:
            return None
        if not mode & stat.S_IXOTH:
            return ancestor, [os.path.join(*parts[:k]) for k in range(depth + 1, len(parts))]
    return None


@lru_cache(maxsize=1)
def _masks() -> tuple[str, ...]:
    """bwrap arguments that make the interpreter, venv and runner reachable for the sandbox uid
    when they sit under a directory it cannot traverse (e.g. /root/.pyenv): the directory is
    replaced by an empty tmpfs and only the needed trees are bound back, read-only."""
    targets = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)),
                                                    str(RUNNER.parent))})
    tmpfs, dirs, binds = [], [], []
    for target in targets:
        hidden = _hidden_ancestors(target)
        if hidden is None:
            continue
        ancestor, between = hidden
        if ancestor not in tmpfs:
            tmpfs.append(ancestor)
        dirs += [d for d in between if d not in dirs]
        binds.append(target)
    args: list[str] = []
    for path in tmpfs:
        args += ["--perms", "0755", "--tmpfs", path]
    for path in dirs:
        args += ["--perms", "0755", "--dir", path]
    for path in binds:
        args += ["--ro-bind", path, path]
    return tuple(args)


def _prefix(mode: str, scratch: str) -> list[str]:
    if mode == "bwrap":  # `unshare -n` outside: bwrap would bring loopback up in its own net namespace
        return [shutil.which("unshare") or "unshare", "-n", "--", shutil.which("bwrap") or "bwrap",
                "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *_masks(), "--bind", scratch, scratch,
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session",
                "--chdir", scratch, "--"]
    if mode == "unshare":
        return [shutil.which("unshare") or "unshare", "-n", "-p", "-f", "--kill-child", "--"]
    return []


def _limit(limits: Limits):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))

    return apply


_PROBE = ("import os, json, fractions, hashlib\n"
          "def create(config):\n    raise ValueError('probe uid=%d' % os.getuid())\n")


def _probe(mode: str, uid: int | None) -> bool:
    try:
        result = _run({"module": _PROBE, "episodes": [{"key": "p", "config": {}, "trajectories": []}]},
                      Limits(wall_seconds=20, cpu_seconds=10), 0, Plan(mode, uid))
    except OSError:
        return False
    described = result.episodes.get("p", {}).get("describe", {}).get("exception", "")
    expected = "probe uid=%d" % (uid if uid is not None else os.getuid())
    return result.status == "ok" and expected in described


def _works(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@lru_cache(maxsize=1)
def plan() -> Plan:
    """The strongest launch this machine supports: bwrap > unshare -n -p > none; uid 65534 if root."""
    modes = []
    if shutil.which("bwrap") and shutil.which("unshare") and _works(
            [shutil.which("unshare"), "-n", "--", shutil.which("bwrap"), "--ro-bind", "/", "/", "--dev", "/dev",
             "--proc", "/proc", "--unshare-pid", "--die-with-parent", "--", "true"]):
        modes.append("bwrap")
    if shutil.which("unshare") and _works([shutil.which("unshare"), "-n", "-p", "-f", "--kill-child", "--", "true"]):
        modes.append("unshare")
    modes.append("none")
    uids = [SANDBOX_UID, None] if os.geteuid() == 0 else [None]
    for uid in uids:
        for mode in modes:
            if _probe(mode, uid):
                return Plan(mode, uid)
    return Plan("none", None)


def network_isolation() -> tuple[str, ...]:
    """The command prefix that gives the child no network, or () where none works here."""
    mode = plan().mode
    return tuple(_prefix(mode, "SCRATCH")) if mode in ("bwrap", "unshare") else ()


# --- running ---------------------------------------------------------------------------


def _run(job: dict[str, Any], limits: Limits, hash_seed: int, how: Plan) -> SandboxResult:
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="vhd-sandbox-"))
    key = secrets.token_bytes(32)
    marker = secrets.token_hex(8)
    try:
        if how.uid is not None:
            os.chown(scratch, how.uid, how.uid)
        job_path = scratch / "job.json"
        fd = os.open(job_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # readable by the launcher only
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({**job, "nonce": key.hex()}))  # dumps: C encoder; dump streams in Python
        read_end, write_end = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": str(hash_seed), "LC_ALL": "C.UTF-8", "HOME": str(scratch),
               MARKER: marker}
        command = [*_prefix(how.mode, str(scratch)), sys.executable, "-s", "-B", str(RUNNER), str(job_path), str(write_end)]
        if how.uid is not None:
            command.append(str(how.uid))
        try:
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=scratch,
                env=env, pass_fds=(write_end,), preexec_fn=_limit(limits), start_new_session=True,
            )
        finally:
            os.close(write_end)
        try:
            data, stderr, status, note = _collect(proc, read_end, limits, started, how, marker)
        finally:
            os.close(read_end)
            proc.stderr.close()
        expected = [episode["key"] for episode in job.get("episodes", [])]
        result = _parse(data, status, _signal_of(proc.returncode, how, bytes(stderr)), proc.returncode, stderr, key, expected,
                        note)
        result.seconds = time.perf_counter() - started
        result.isolation = how.mode + (f", uid {how.uid}" if how.uid is not None else f", uid {os.getuid()} (not dropped)")
        result.scratch = str(scratch)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _signal_of(returncode: int | None, how: Plan, stderr: bytes = b"") -> int | None:
    """The signal that ended the runner (bwrap and `unshare --kill-child` report 128 + signal number;
    unshare cannot re-raise a child's SIGKILL and exits 1 saying so)."""
    if returncode is None:
        return None
    if how.mode == "unshare" and returncode == 1 and b"unshare: sigprocmask unblock failed" in stderr:
        return signal.SIGKILL
    if returncode < 0:
        return -returncode
    if how.mode in ("bwrap", "unshare") and 128 < returncode < 128 + 65:
        return returncode - 128
    return None


def _kill(proc: subprocess.Popen, how: Plan, marker: str) -> None:
    """SIGKILL the child's process group; the PID namespace (bwrap, unshare) takes every
    descendant with it. Without a namespace, also every process carrying this job's marker."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if how.mode == "none":
        for pid in marked_processes(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    proc.wait()


def marked_processes(marker: str) -> list[int]:
    """Pids whose environment or command line carries `marker` (a /proc scan; readable as root)."""
    needle, found = marker.encode(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        for name in ("environ", "cmdline"):
            try:
                with open(f"/proc/{entry}/{name}", "rb") as handle:
                    if needle in handle.read():
                        found.append(int(entry))
                        break
            except OSError:
                pass
    return found


class _Channel:
    """The result pipe and stderr of one check, read under the caps of `limits`."""

    def __init__(self, result_fd: int, err_fd: int, limits: Limits):
        self.result_fd, self.err_fd, self.limits = result_fd, err_fd, limits
        self.open = {result_fd, err_fd}
        self.chunks: list[bytes] = []
        self.size, self.stderr = 0, bytearray()

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)

    def take(self, fd: int) -> str:
        """One read from `fd`: 'data', 'eof', 'empty' (non-blocking and nothing there yet) or
        'oversize' (the result channel went over its cap)."""
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return "empty"
        if not chunk:
            self.open.discard(fd)
            return "eof"
        if fd == self.err_fd:
            self.stderr.extend(chunk)
            cap = self.limits.stderr_bytes
            if len(self.stderr) > cap:  # keep the head and the tail
                del self.stderr[cap // 2: len(self.stderr) - cap // 2]
            return "data"
        self.size += len(chunk)
        if self.size > self.limits.result_bytes:
            return "oversize"
        self.chunks.append(chunk)
        return "data"

    def take_all_now(self) -> str:
        """Once the writer is dead, everything it wrote is in the pipes: read all of it now,
        whatever the clock says (on a loaded machine the reading thread may not run again within
        a grace period, and a report cut short reads as forged). 'oversize' or 'done'."""
        for fd in list(self.open):
            os.set_blocking(fd, False)
            got = "data"
            while got == "data":
                got = self.take(fd)  # 'empty': still held open (a namespace being torn down)
            if got == "oversize":
                return "oversize"
        return "done"


# --- the wall-clock backstop: a verdict or the machine? -----------------------------------

def _wall_expired(measured: Usage | None, limits: Limits) -> tuple[str, str]:
    """The status of a job the wall-clock backstop stopped before it ended.

    `wall_timeout` (transient, not a verdict) when the job was starved: it wanted a CPU (running,
    or runnable and waiting in the run queue) for at least half of its life, and got less than
    half of one core. A single process that is still under its CPU limit when the backstop
    (≥ wall_factor × (cpu_seconds + 1)) expires got less than 1/wall_factor of a core, so if it
    was runnable, other work held the CPUs. Otherwise `timeout`, a verdict: the job spent most of its
    life neither running nor runnable (it slept or blocked: hostile or broken, whatever the load),
    or it kept half a core or more busy itself (its waiting was its own processes crowding each
    other out). Without run-queue figures the load average stands in: starved when the job's CPU
    reached half the share a runnable process gets at this load (cores / load, at most 1)."""
    wall = limits.wall
    if measured is None:
        return "wall_timeout", (f"sandbox wall_timeout: the {wall:g} s wall-clock backstop expired and the job's "
                                f"processes could not be measured; not a verdict")
    cpu, life = measured.cpu, max(measured.life, 1e-9)
    if measured.waited is not None:
        wanted = cpu + measured.waited
        starved = wanted >= 0.5 * life and cpu < 0.5 * life
        how = f"it ran {cpu:.2f} s and waited {measured.waited:.2f} s for a CPU in {life:.2f} s"
    else:
        share = min(1.0, (os.cpu_count() or 1) / max(os.getloadavg()[0], 1e-9))
        starved = 0.5 * share * life <= cpu < 0.5 * life
        how = f"it ran {cpu:.2f} s in {life:.2f} s at a load average of {os.getloadavg()[0]:.1f}"
    if starved:
        return "wall_timeout", (f"sandbox wall_timeout: the {wall:g} s wall-clock backstop expired on a busy machine "
                                f"({how}, under its CPU limit of {limits.cpu_seconds} s); not a verdict, retry")
    return "timeout", (f"sandbox timeout: the {wall:g} s wall-clock backstop expired while the module was not "
                       f"waiting for a CPU ({how}): it slept, blocked or crowded out its own processes")


def _collect(proc: subprocess.Popen, fd: int, limits: Limits, started: float, how: Plan,
             marker: str) -> tuple[bytes, bytes, str, str]:
    """The result channel and stderr, and how the job ended: 'done', 'oversize', or on the
    backstop 'timeout' or 'wall_timeout' with the measurement that decided it."""
    channel = _Channel(fd, proc.stderr.fileno(), limits)
    status, note, deadline, exited = "done", "", started + limits.wall, False
    while channel.open:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            if not exited:
                pids = [proc.pid, *descendants(proc.pid)] + (marked_processes(marker) if how.mode == "none" else [])
                status, note = _wall_expired(usage(pids), limits)
            break
        ready, _, _ = select.select(list(channel.open), [], [], min(remaining, 0.25))
        oversize = any(channel.take(ready_fd) == "oversize" for ready_fd in ready)
        if not oversize and not exited and proc.poll() is not None:
            exited = True  # the runner is gone: nothing it forked may outlive the check
            _kill(proc, how, marker)
            oversize = channel.take_all_now() == "oversize"
            deadline = min(deadline, time.perf_counter() + 1.0)
        if oversize:
            _kill(proc, how, marker)
            _drain(channel.open)
            return channel.data, bytes(channel.stderr), "oversize", ""
    _kill(proc, how, marker)
    _drain(channel.open)
    return channel.data, bytes(channel.stderr), status, note


def _drain(fds: set[int], seconds: float = 3.0) -> None:
    """Read the pipes to EOF: every write end closed means every process that held one is dead
    (the PID namespace is torn down asynchronously after its init is killed)."""
    deadline = time.perf_counter() + seconds
    while fds and time.perf_counter() < deadline:
        ready, _, _ = select.select(list(fds), [], [], max(0.0, deadline - time.perf_counter()))
        for fd in ready:
            if not os.read(fd, 1 << 16):
                fds.discard(fd)


# --- the verdict on the channel ----------------------------------------------------------
