"""Prefect's API for one command: the server PREFECT_API_URL names, or a temporary one that is
given time to start on a loaded machine and never outlives the process that started it.

For example (it starts a Prefect server, so not a doctest):

    with prefect_api():
        refresh(families=["inventory_dp"], per_family=1, db_path="data/vhd.duckdb")

Prefect starts its temporary server lazily, from whichever thread first needs the API, and waits
20 s for it (`PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`); under load that fails with a
long traceback, and a SIGKILL of the command left the server running. Here the server is started
up front, from the main thread, through a launcher that asks the kernel to SIGKILL it when its
parent dies (`PR_SET_PDEATHSIG`), with Prefect's setting as the start-up timeout when it is set
and `STARTUP_SECONDS` otherwise. It is the same `SubprocessASGIServer` Prefect's clients use (the
instance is Prefect's singleton), stopped when the block ends.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from contextlib import contextmanager
from typing import Any, Iterator

import prefect
from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED, get_current_settings

from vhd.schemas.errors import PrefectUnavailable

STARTUP_SECONDS = 180     # Prefect's 20 s failed 2 of 5 times on an ordinary load (issue 18)
SETTING = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"

# Runs in the server's process before uvicorn: die with the parent (PR_SET_PDEATHSIG = 1), and
# not start at all if the parent is already gone. The signal survives the exec.
_LAUNCHER = ("import ctypes, os, signal, sys\n"
             "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
             "if os.getppid() != int(sys.argv[1]):\n"
             "    os._exit(1)\n"
             "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n")


def startup_timeout() -> int:
    """Seconds to wait for the temporary server: Prefect's setting when set (environment or
    profile), else `STARTUP_SECONDS`."""
    ephemeral = get_current_settings().server.ephemeral
    return ephemeral.startup_timeout_seconds if "startup_timeout_seconds" in ephemeral.model_fields_set \
        else STARTUP_SECONDS


@functools.cache
def _temporary_server_class() -> type:
    """`SubprocessASGIServer` started through `_LAUNCHER`, so that it dies with us. Prefect's
    server stack is imported here, not at module level: it costs ~2 s of CPU that a command
    talking to a running server never needs. Built once, so the singleton test below holds."""
    from prefect.server.api.server import SubprocessASGIServer

    class TemporaryServer(SubprocessASGIServer):
        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:  # Prefect's command, behind the launcher
            server_env = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
            return subprocess.Popen(
                args=[sys.executable, "-c", _LAUNCHER, str(os.getpid()),
                      "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent),
                      "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1",
                      "--port", str(self.port), "--log-level", "error", "--lifespan", "on"],
                env={**os.environ, **server_env, **get_current_settings().to_environment_variables(exclude_unset=True)},
            )

    return TemporaryServer


def temporary_server() -> tuple[Any, bool]:
    """Prefect's temporary API server (the instance is Prefect's singleton, so its clients use
    it too) and whether it is ours: False when Prefect's own already runs in this process."""
    cls = _temporary_server_class()
    server = cls()
    return server, isinstance(server, cls)


@contextmanager
def prefect_api() -> Iterator[str | None]:
    """The API for the flows run inside the block: PREFECT_API_URL when set (yields it), else a
    `temporary_server()` (yields its URL), stopped at the end. A server that does not answer in
    `startup_timeout()` seconds is a one-line `PrefectUnavailable`."""
    configured = PREFECT_API_URL.value()
    if configured or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        yield configured  # a running server, or none allowed: Prefect says so itself
        return
    (server, ours), timeout = temporary_server(), startup_timeout()
    if not ours:  # Prefect's own singleton already runs in this process
        yield server.api_url
        return
    try:
        server.start(timeout=timeout)
    except Exception as exc:
        server.stop()
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PrefectUnavailable(f"Prefect's temporary server did not answer within {timeout} s ({why[:160]}); "
                                 f"raise {SETTING} on a loaded machine, or set PREFECT_API_URL to a running "
                                 "server (docs/OPERATIONS.md)") from None
    try:
        yield server.api_url
    finally:
        server.stop()
