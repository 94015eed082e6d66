"""Warm sandbox zygote: a long-lived interpreter that forks one fresh runner child per check.

    python -s -B zygote.py CONTROL_FD   # launched by vhd.tasks.sandbox.pool under bwrap / unshare

Started by the parent under the same outside boundary as a spawned runner (no network, own PID
namespace in which the zygote is PID 1, scrubbed environment, stdin and stdout on /dev/null),
with the runner and the standard-library modules generated code imports preloaded. It never
executes generated code itself. Per request on the control socket (a SOCK_SEQPACKET message
`{"job", "scratch", "uid", "limits"}` carrying the write ends of the result and stderr pipes) it

1. forks a child, which: starts its own session, moves the result pipe to fd 3 and the stderr
   pipe to fd 2, closes every other descriptor (the control socket included), chdirs into its
   fresh scratch dir, sets CPU, AS, FSIZE, NOFILE, CORE and NPROC rlimits, and only then calls
   `runner.main` exactly as a spawned runner would (which drops to the sandbox uid, installs the
   tripwire and executes the module);
2. waits for that child, then SIGKILLs every other process in the namespace (`kill(-1)` from
   PID 1: fork bombs, daemons, anything the child left) and reaps until it has no children;
3. reports `{"pid"}` on fork and `{"status"}` (the child's exit code, -N for signal N) when the
   namespace is empty again.

A child cannot signal the zygote (PID 1 of the namespace ignores signals from inside it that it
has no handler for, and the child runs as another uid when the parent is root). When the control
socket reaches end of file (the parent is gone), the zygote exits, and the namespace with it.
"""

import json
import os
import resource
import signal
import socket
import sys
import time

import runner  # preloaded: the child calls runner.main
import fcntl  # noqa: F401
import fractions  # noqa: F401  (standard-library modules the generated modules import)
import hashlib  # noqa: F401
import hmac  # noqa: F401
import math  # noqa: F401
import random  # noqa: F401
import sqlite3  # noqa: F401
import traceback
import types  # noqa: F401

RESULT_FD = 3


def _limits(values):
    cpu, memory, file_bytes, open_files, processes = values
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))


def _child(request, result_w, err_w):
    """The forked child: its own session, fds, scratch and limits, then the runner."""
    code = 1
    try:
        os.setsid()
        for signum in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        result_high = fcntl.fcntl(result_w, fcntl.F_DUPFD, 64)
        err_high = fcntl.fcntl(err_w, fcntl.F_DUPFD, 64)
        os.dup2(err_high, 2)
        os.dup2(result_high, RESULT_FD)
        os.closerange(RESULT_FD + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        os.chdir(request["scratch"])
        os.environ.clear()
        os.environ.update(request["env"])
        _limits(request["limits"])
        uid = request["uid"]
        sys.argv = [runner.__file__, request["job"], str(RESULT_FD)] + ([str(uid)] if uid is not None else [])
        sys.modules["__main__"] = runner  # as in a spawned runner, where runner.py is __main__
        try:
            runner.main(request["job"], RESULT_FD, uid)
            code = 0
        except SystemExit as exc:  # what the interpreter does with SystemExit at the top level
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code & 0xFF
            else:
                sys.stderr.write(str(exc.code) + "\n")
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        try:  # the rest of interpreter shutdown: non-daemon threads, then atexit handlers
            threading = sys.modules.get("threading")
            if threading is not None:
                threading._shutdown()
            import atexit
            atexit._run_exitfuncs()
        except BaseException:
            traceback.print_exc()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
    finally:
        os._exit(code)


def _empty_namespace():
    """SIGKILL every process in the namespace but this one (PID 1) and reap until none is left."""
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.002)


def _serve(control):
    control.send(json.dumps({"ready": os.getpid()}).encode())
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 2)
        except OSError:
            return
        if not message:
            return  # the parent is gone
        request = json.loads(message)
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            control.send(json.dumps({"error": "expected two descriptors"}).encode())
            continue
        result_w, err_w = fds
        pid = os.fork()
        if pid == 0:
            control.close()
            _child(request, result_w, err_w)
        os.close(result_w)
        os.close(err_w)
        control.send(json.dumps({"pid": pid}).encode())
        status = None
        while status is None:
            try:
                done, raw = os.waitpid(-1, 0)
            except ChildProcessError:
                status = -signal.SIGKILL
                break
            if done == pid:
                status = os.waitstatus_to_exitcode(raw)
        _empty_namespace()
        control.send(json.dumps({"status": status}).encode())


def main(control_fd):
    control = socket.socket(fileno=control_fd)
    try:
        _serve(control)
    finally:
        _empty_namespace()


if __name__ == "__main__":
    main(int(sys.argv[1]))
