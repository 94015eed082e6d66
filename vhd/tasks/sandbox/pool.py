"""A pool of warm sandbox zygotes: the same boundary as a spawned runner, without the spawn.

    >>> from vhd.tasks.sandbox.launch import Limits
    >>> job = {"module": setter_output.module, "episodes": [{"key": "score", "config": row["grader"]["config"],
    ...                                                      "finish": True, "trajectories": [[]]}]}
    >>> with SandboxPool() as pool:
    ...     result = pool.run(job, Limits(), hash_seed=1)
    >>> result.status, result.episodes["score"]["trajectories"][0]["turns_used"]
    ('ok', 0)

A zygote (`zygote.py`) is a long-lived interpreter started under the outside boundary
(`unshare -n` + bwrap, or `unshare -n -p`; scrubbed environment; stdin and stdout on /dev/null;
PID 1 of its own PID namespace) with the runner and its imports preloaded. Each check borrows
one idle zygote of its hash seed exclusively, and the zygote forks one fresh child for it (own
session, own scratch dir, rlimits before the module runs). The parent keeps everything that
decides the verdict: it creates the scratch dir and the job file, holds the read ends of the
result and stderr pipes (size-capped, HMAC-checked by `_parse`, exactly as for a spawned child),
enforces the wall-clock backstop (the child's RLIMIT_CPU decides "too slow"; a backstop expiry is
judged from the child's CPU and run-queue figures, `sandbox._wall_expired`), and on a timeout, an
oversize channel, or anything it does not expect kills the whole zygote (its PID namespace takes
every descendant with it). A zygote that dies during a check is replaced and the check retried
once on a fresh one; if that dies too the check is `crashed`, never passed. The pool is used only where the child gets its own PID
namespace (plan mode bwrap or unshare); elsewhere `run_job` spawns as before.

`run_job(..., pool=False)` or `VHD_SANDBOX_POOL=0` selects the spawn path.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from vhd.tasks.sandbox.launch import (MARKER, RUNNER, Limits, Plan, SandboxResult, _Channel, _drain, _masks, _parse, _run,
                               _wall_expired, descendants, plan, usage)

ZYGOTE = RUNNER.with_name("zygote.py")
ENV_SWITCH = "VHD_SANDBOX_POOL"
START_SECONDS = 20.0


def enabled() -> bool:
    """Whether run_job uses the warm pool by default here (env switch, and a PID namespace)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "no", "off", "false") \
        and plan().mode in ("bwrap", "unshare")


class ZygoteDied(Exception):
    pass


class ZygoteFailedToStart(ZygoteDied):
    """Before any module ran: the check falls back to a spawned runner (the same boundary)."""


class Zygote:
    """One warm interpreter for one hash seed, serving one check at a time."""

    def __init__(self, hash_seed: int, how: Plan):
        self.hash_seed, self.how = hash_seed, how
        self.root = Path(tempfile.mkdtemp(prefix="vhd-zygote-"))
        if how.uid is not None:
            os.chown(self.root, how.uid, how.uid)
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.control = parent_end
        env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": str(hash_seed), "LC_ALL": "C.UTF-8", "HOME": str(self.root)}
        command = [*self._prefix(), sys.executable, "-s", "-B", str(ZYGOTE), str(child_end.fileno())]
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, cwd=self.root, env=env,
                                         pass_fds=(child_end.fileno(),), start_new_session=True,
                                         preexec_fn=_no_core)
        except OSError as exc:
            parent_end.close()
            shutil.rmtree(self.root, ignore_errors=True)
            raise ZygoteFailedToStart(f"the zygote could not be started: {exc}") from exc
        finally:
            child_end.close()
        try:
            ready = self._receive(time.perf_counter() + START_SECONDS)
        except ZygoteDied as exc:
            self.kill()
            raise ZygoteFailedToStart(str(exc)) from exc
        if "ready" not in ready:
            self.kill()
            raise ZygoteFailedToStart(f"the zygote sent {ready!r} instead of ready")
        self.served = 0
        self.pid = self._inner()
        if self.pid is None:
            self.kill()
            raise ZygoteFailedToStart("the zygote process could not be found under its launcher")

    def _inner(self) -> int | None:
        """The zygote's pid as seen from here: the launcher's (bwrap's or unshare's) only child."""
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children", encoding="ascii") as handle:
                children = handle.read().split()
        except OSError:
            return None
        return int(children[0]) if len(children) == 1 else None

    def _prefix(self) -> list[str]:
        root = str(self.root)
        if self.how.mode == "bwrap":  # as for a spawned runner, with the zygote as PID 1 of its namespace;
            # no --die-with-parent (tied to the launching thread): the zygote exits when its socket closes
            return [shutil.which("unshare") or "unshare", "-n", "--", shutil.which("bwrap") or "bwrap",
                    "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *_masks(), "--bind", root, root,
                    "--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts", "--new-session",
                    "--chdir", root, "--"]
        if self.how.mode == "unshare":
            return [shutil.which("unshare") or "unshare", "-n", "-p", "-f", "--kill-child", "--"]
        raise ValueError(f"the warm pool needs a PID namespace (bwrap or unshare), not {self.how.mode!r}")

    def _receive(self, deadline: float) -> dict[str, Any]:
        remaining = deadline - time.perf_counter()
        ready, _, _ = select.select([self.control], [], [], max(0.0, remaining))
        if not ready:
            raise ZygoteDied("the zygote did not answer in time")
        message = self.control.recv(1 << 16)
        if not message:
            raise ZygoteDied("the zygote closed its control socket")
        return json.loads(message)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the zygote, PID 1 of its namespace: the kernel kills every process in the
        namespace, and the launcher (bwrap or unshare) reaps the zygote only once they are all
        gone, then exits. The launcher's process group is killed only if it lingers."""
        pid = getattr(self, "pid", None)
        if pid is not None and self.proc.poll() is None:
            try:
                with open(f"/proc/{pid}/stat", "rb") as handle:
                    parent = int(handle.read().rsplit(b")", 1)[1].split()[1])
                if parent == self.proc.pid:  # still the launcher's child (not a recycled pid)
                    os.kill(pid, signal.SIGKILL)
                    self.proc.wait(timeout=5)
            except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.control.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def close(self) -> None:
        """Orderly shutdown: closing the socket makes an idle zygote exit; kill it if it lingers."""
        try:
            self.control.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def run(self, job: dict[str, Any], limits: Limits) -> tuple[SandboxResult, bool]:
        """Play `job` in a fresh child of this zygote; the result and whether the zygote is reusable."""
        started = time.perf_counter()
        scratch = self.root / f"job-{secrets.token_hex(8)}"
        key = secrets.token_bytes(32)
        marker = secrets.token_hex(8)
        os.mkdir(scratch, 0o700)
        try:
            if self.how.uid is not None:
                os.chown(scratch, self.how.uid, self.how.uid)
            job_path = scratch / "job.json"
            fd = os.open(job_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(json.dumps({**job, "nonce": key.hex()}))  # dumps: C encoder; dump streams in Python
            request = {"job": str(job_path), "scratch": str(scratch), "uid": self.how.uid,
                       "limits": [limits.cpu_seconds, limits.memory_bytes, limits.file_bytes, limits.open_files,
                                  limits.processes],
                       "env": {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": str(self.hash_seed), "LC_ALL": "C.UTF-8",
                               "HOME": str(scratch), MARKER: marker}}
            result_r, result_w = os.pipe()
            err_r, err_w = os.pipe()
            try:
                socket.send_fds(self.control, [json.dumps(request).encode()], [result_w, err_w])
            except OSError as exc:
                for fd in (result_r, err_r):
                    os.close(fd)
                raise ZygoteDied(f"the zygote does not take requests: {exc}") from exc
            finally:
                os.close(result_w)
                os.close(err_w)
            try:
                data, stderr, status, note, returncode, reusable = self._collect(result_r, err_r, limits, started)
            finally:
                os.close(result_r)
                os.close(err_r)
            expected = [episode["key"] for episode in job.get("episodes", [])]
            killed_by = -returncode if returncode is not None and returncode < 0 else None
            result = _parse(data, status, killed_by, returncode, stderr, key, expected, note)
            result.seconds = time.perf_counter() - started
            result.isolation = (self.how.mode + ", warm pool"
                                + (f", uid {self.how.uid}" if self.how.uid is not None else f", uid {os.getuid()} (not dropped)"))
            result.scratch = str(scratch)
            self.served += 1
            return result, reusable
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _collect(self, result_fd: int, err_fd: int, limits: Limits,
                 started: float) -> tuple[bytes, bytes, str, str, int | None, bool]:
        channel = _Channel(result_fd, err_fd, limits)
        deadline = started + limits.wall
        returncode, status, control_open = None, "done", True

        def give_up(why: str, note: str = "") -> tuple[bytes, bytes, str, str, int | None, bool]:
            self.kill()
            _drain(channel.open)
            return channel.data, bytes(channel.stderr), why, note, returncode, False

        while channel.open or returncode is None:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                if returncode is not None:
                    return give_up(status)
                # the child and whatever it left in the namespace: everything below the zygote
                return give_up(*_wall_expired(usage(descendants(self.pid)), limits))
            watch = list(channel.open) + ([self.control] if control_open and returncode is None else [])
            if not watch:  # the control socket closed before the status: the zygote died
                self.kill()
                raise ZygoteDied("the zygote died during the check")
            ready, _, _ = select.select(watch, [], [], min(remaining, 0.25))
            for item in ready:
                if item is self.control:
                    message = self.control.recv(1 << 16)
                    if not message:
                        control_open = False
                        continue
                    answer = json.loads(message)
                    if "status" in answer:
                        returncode = answer["status"]
                        # the child is dead and its namespace empty: what it wrote is in the pipes
                        if channel.take_all_now() == "oversize":
                            return give_up("oversize")
                        deadline = min(deadline, time.perf_counter() + 1.0)
                    continue
                if channel.take(item) == "oversize":
                    return give_up("oversize")
            if not control_open and returncode is None and not self.alive():
                self.kill()
                raise ZygoteDied("the zygote died during the check")
        return channel.data, bytes(channel.stderr), status, "", returncode, True


def _no_core() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class SandboxPool:
    """Idle zygotes per hash seed; a check borrows one exclusively and returns it if reusable.

    Use as a context manager (or call close()): every zygote is shut down and its namespace
    emptied on exit. Thread-safe: concurrent checks each get their own zygote."""

    def __init__(self, how: Plan | None = None, max_idle: int = 4):
        self.how = how or plan()
        self.max_idle = max_idle
        self._idle: dict[int, list[Zygote]] = {}
        self._busy: set[Zygote] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.started = 0
        self.replaced = 0
        self.fallbacks = 0

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _borrow(self, hash_seed: int) -> Zygote:
        with self._lock:
            if self._closed:
                raise RuntimeError("the sandbox pool is closed")
            idle = self._idle.setdefault(hash_seed, [])
            while idle:
                zygote = idle.pop()
                if zygote.alive():
                    self._busy.add(zygote)
                    return zygote
                zygote.kill()
                self.replaced += 1
        zygote = Zygote(hash_seed, self.how)
        with self._lock:
            self.started += 1
            self._busy.add(zygote)
        return zygote

    def _return(self, zygote: Zygote, reusable: bool) -> None:
        with self._lock:
            self._busy.discard(zygote)
            idle = self._idle.setdefault(zygote.hash_seed, [])
            if reusable and not self._closed and zygote.alive() and len(idle) < self.max_idle:
                idle.append(zygote)
                return
        zygote.close() if reusable else zygote.kill()

    def run(self, job: dict[str, Any], limits: Limits = Limits(), hash_seed: int = 0) -> SandboxResult:
        """Play `job` in a fresh child of a warm zygote; retried once if the zygote dies."""
        started = time.perf_counter()
        failures = []
        for _ in range(2):
            zygote = None
            try:
                zygote = self._borrow(hash_seed)
            except ZygoteFailedToStart:
                self.fallbacks += 1
                return _run(job, limits, hash_seed, self.how)
            try:
                result, reusable = zygote.run(job, limits)
            except ZygoteDied as exc:
                failures.append(str(exc))
                if zygote is not None:
                    self._return(zygote, False)
                    with self._lock:
                        self.replaced += 1
                continue
            except BaseException:
                if zygote is not None:
                    self._return(zygote, False)
                raise
            self._return(zygote, reusable)
            return result
        return SandboxResult("crashed", message="sandbox crashed: " + "; ".join(failures),
                             seconds=time.perf_counter() - started, isolation=self.how.mode + ", warm pool")

    def zygotes(self) -> list[Zygote]:
        with self._lock:
            return [z for zs in self._idle.values() for z in zs] + list(self._busy)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            zygotes = [z for zs in self._idle.values() for z in zs] + list(self._busy)
            self._idle.clear()
        for zygote in zygotes:
            zygote.close()


# --- the process-wide default pool -----------------------------------------------------------

_default: SandboxPool | None = None
_default_lock = threading.Lock()
_default_pid = 0


def default_pool() -> SandboxPool:
    """The pool `run_job` uses: one per process, started lazily, shut down at exit."""
    global _default, _default_pid
    with _default_lock:
        if _default is None or _default_pid != os.getpid() or _default._closed:
            _default, _default_pid = SandboxPool(), os.getpid()
        return _default


def shutdown_default() -> None:
    """Shut the process-wide pool down (every zygote and its namespace); the next check starts a new one."""
    global _default
    with _default_lock:
        pool, _default = _default, None
    if pool is not None and _default_pid == os.getpid():
        pool.close()


atexit.register(shutdown_default)
