"""The result channel is read whole even when the parent is slow to run after the runner exits.

A paper-scale refresh under heavy load (load average 15) rejected six correct inventory modules
as "exited with code 0 before the end of the report": the parent's `select` timed out just as the
runner wrote its report and exited; the parent noticed the exit, gave the pipes a one-second
grace and was not scheduled again within it, so the report, already in the pipe, was never read.
These tests replay that interleaving exactly.
"""

import os
import select
import subprocess
import sys
import time

from vhd.tasks.sandbox import launch as sandbox

REPORT = 60_000  # fits in a pipe buffer: the child can write it all and exit without a reader


class _Clock:
    """`time` for the sandbox module: real time, plus ten seconds from the second reading after
    the child's exit was noticed (the first one sets the grace deadline): the stalled thread."""

    def __init__(self):
        self.after_exit = None

    def perf_counter(self):
        now = time.perf_counter()
        if self.after_exit is None:
            return now
        self.after_exit += 1
        return now + (10.0 if self.after_exit > 1 else 0.0)


class _Select:
    """`select` for the sandbox module: the first call times out after the child has written its
    report and exited; later calls are the real one."""

    def __init__(self, proc):
        self.proc, self.calls = proc, 0

    def select(self, *args):
        self.calls += 1
        if self.calls == 1:
            self.proc.wait()
            return [], [], []
        return select.select(*args)


def _child(tmp_path, size=REPORT):
    read_end, write_end = os.pipe()
    code = f"import os\nview = memoryview(b'y' * {size})\nwhile view:\n    view = view[os.write({write_end}, view):]\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, pass_fds=(write_end,), start_new_session=True, cwd=tmp_path)
    os.close(write_end)
    return proc, read_end


def _collect(proc, read_end, limits):
    try:
        return sandbox._collect(proc, read_end, limits, time.perf_counter(), sandbox.Plan("unshare", None), "no-marker")
    finally:
        os.close(read_end)
        proc.stderr.close()


def test_the_report_is_read_after_a_stall(tmp_path, monkeypatch):
    clock = _Clock()
    proc, read_end = _child(tmp_path)
    monkeypatch.setattr(sandbox, "time", clock)
    monkeypatch.setattr(sandbox, "select", _Select(proc))
    poll = proc.poll

    def noticing_poll():
        code = poll()
        if code is not None and clock.after_exit is None:
            clock.after_exit = 0
        return code

    proc.poll = noticing_poll
    data, _, status, _ = _collect(proc, read_end, sandbox.Limits())
    assert clock.after_exit is not None and clock.after_exit > 1, "the stall was never simulated"
    assert status == "done"
    assert len(data) == REPORT


def test_a_report_over_the_cap_is_still_oversize(tmp_path, monkeypatch):
    proc, read_end = _child(tmp_path)
    monkeypatch.setattr(sandbox, "select", _Select(proc))
    data, _, status, _ = _collect(proc, read_end, sandbox.Limits(result_bytes=REPORT // 2))
    assert status == "oversize"
    assert len(data) <= REPORT // 2


def test_a_report_over_the_cap_read_while_the_child_runs_is_oversize(tmp_path):
    proc, read_end = _child(tmp_path, size=4 * REPORT)
    data, _, status, _ = _collect(proc, read_end, sandbox.Limits(result_bytes=REPORT))
    assert status == "oversize"
    assert len(data) <= REPORT
