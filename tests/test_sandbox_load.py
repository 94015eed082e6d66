"""Verdicts do not depend on the machine's load.

RLIMIT_CPU decides "too slow" (`timeout`). The wall clock is only a backstop, and when it expires
the parent measures the job (`sandbox._wall_expired`): a job that wanted a CPU for most of its
life and got little of one was starved by the machine, `wall_timeout`, which is not a verdict
(the check stage raises it as a transient SandboxError and the flows retry the task); a module
that slept or blocked is still `timeout`, whatever the load.

The load is made here, not hoped for: the test pins itself, the sandbox child and BURNERS busy
loops to one core, and waits until every burner is running before it starts the job.
"""

import dataclasses
import os
import signal
import subprocess
import sys

import pytest

from vhd.mechanisms import registry
from vhd.schemas.errors import SandboxError
from vhd.tasks.stages import check
from vhd.tasks.sandbox import launch as sandbox
from vhd.tasks.sandbox import Limits, SandboxResult, Usage, run_job
from vhd.tasks.sandbox.launch import _wall_expired
from vhd.tasks.sandbox import pool as pools
from vhd.tasks.sandbox.pool import SandboxPool

EPISODE = {"key": "k", "config": {}, "trajectories": [[]]}
REPORT = "\ndef create(config):\n    raise ValueError('REPORT ' + repr(SEEN))\n"
LIMITS = Limits(cpu_seconds=2, wall_factor=3, memory_bytes=512 << 20)  # backstop 9 s
ROOMY = Limits(cpu_seconds=2, wall_factor=30, memory_bytes=512 << 20)  # the same CPU limit, a 90 s backstop
NEEDS = "import time\nwhile time.process_time() < 1.5:\n    pass\nSEEN = 'done'\n" + REPORT  # 1.5 s of CPU, under 2
SLEEPS = "import time\ntime.sleep(600)\n"
BURNERS = 8  # on one core the job gets at most 1/9 of it: 1 s of CPU in the 9 s backstop, not the 1.5 s it needs


def job(source):
    return {"module": source, "episodes": [dict(EPISODE)]}


def reported(result):
    return result.episodes["k"]["describe"]["exception"].split("REPORT ", 1)[1].strip().splitlines()[0]


# --- the rule --------------------------------------------------------------------------------

@pytest.mark.parametrize("measured, status", [
    (Usage(cpu=0.4, waited=8.4, life=9.0), "wall_timeout"),  # runnable all along, 4 % of a core: starved
    (Usage(cpu=0.0, waited=0.0, life=9.0), "timeout"),  # asleep from the start
    (Usage(cpu=0.2, waited=1.6, life=9.0), "timeout"),  # a slow start on a busy machine, then asleep
    (Usage(cpu=4.5, waited=4.4, life=9.0), "timeout"),  # its own processes kept a core busy and crowded each other
    (None, "wall_timeout"),  # nothing could be measured: no verdict
], ids=["starved", "asleep", "slow-start-then-asleep", "self-crowded", "unmeasured"])
def test_the_backstop_rule(measured, status):
    got, message = _wall_expired(measured, LIMITS)
    assert got == status, message
    assert message.startswith(f"sandbox {status}: the 9 s wall-clock backstop")


@pytest.mark.parametrize("load, status", [(0.5, "timeout"), (40.0, "wall_timeout")])
def test_without_run_queue_figures_the_load_average_stands_in(monkeypatch, load, status):
    monkeypatch.setattr(sandbox.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(sandbox.os, "getloadavg", lambda: (load, load, load))
    assert _wall_expired(Usage(cpu=0.4, waited=None, life=9.0), LIMITS)[0] == status  # share 2/40: 0.225 s ≤ 0.4
    assert _wall_expired(Usage(cpu=0.0, waited=None, life=9.0), LIMITS)[0] == "timeout"  # asleep, at any load


def test_the_backstop_is_a_multiple_of_the_cpu_allowance():
    assert Limits().wall == 5 * (Limits().cpu_seconds + 1)
    assert Limits(cpu_seconds=2, wall_seconds=3).wall == 15  # wall_seconds is a floor, never a tighter clock
    assert Limits(cpu_seconds=1, wall_factor=2, wall_seconds=30).wall == 30


def test_usage_measures_a_live_process():
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile time.process_time() < 0.3:\n    pass\n"
                                                    "print('spent', flush=True)\ntime.sleep(60)\n"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "spent"  # the CPU is spent; now it sleeps
        measured = sandbox.usage([child.pid])
    finally:
        child.kill()
        child.wait()
    assert measured is not None and 0.25 <= measured.cpu <= 1.0 and measured.life >= measured.cpu
    assert measured.waited is not None and measured.waited >= 0
    assert sandbox.usage([child.pid]) is None  # gone


# --- the rule on a really busy core ---------------------------------------------------------------

def _running(burner):
    """Whether this burner has been on a CPU yet (its own CPU time is above zero)."""
    with open(f"/proc/{burner.pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return int(fields[11]) + int(fields[12]) > 0


@pytest.fixture
def one_core():
    """Pin this thread (and so every process it starts) to one core; yield a function that starts
    the burners there and returns once each of them is running. Restores everything after."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {max(before)})
    burners = []

    def burn():
        burners.extend(subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"], start_new_session=True)
                       for _ in range(BURNERS))  # each its own session: with autogroup scheduling a session
        #                                           shares the core as one, and the sandbox child has its own
        while not all(_running(b) for b in burners):  # a state, not a time: every burner has run
            os.sched_yield()

    try:
        yield burn
    finally:
        for burner in burners:
            os.kill(burner.pid, signal.SIGKILL)
            burner.wait()
        os.sched_setaffinity(0, before)


@pytest.mark.parametrize("launch", ["pool", "spawn"] if pools.enabled() else ["spawn"])
def test_a_starved_job_is_not_a_verdict_and_a_sleeping_one_is(one_core, launch):
    with SandboxPool() as pool:  # started here, on the pinned core (zygotes and children inherit it)
        where = pool if launch == "pool" else False
        control = run_job(job(NEEDS), ROOMY, pool=where)  # the same job and CPU limit, no burners: correct
        assert control.status == "ok" and reported(control) == "'done'", control.message
        one_core()
        starved = run_job(job(NEEDS), LIMITS, pool=where)
        asleep = run_job(job(SLEEPS), LIMITS, pool=where)
    assert starved.status == "wall_timeout" and starved.transient, starved.message
    assert "busy machine" in starved.message and starved.seconds >= LIMITS.wall
    with pytest.raises(SandboxError, match="wall_timeout"):
        starved.settled()
    assert asleep.status == "timeout" and not asleep.transient, asleep.message
    assert "not waiting for a CPU" in asleep.message and asleep.settled() is asleep


# --- the check stage: a wall_timeout is raised (and retried), never a verdict ----------------------

@pytest.fixture(scope="module")
def batch():
    from vhd.tasks.stages.annotate import make_candidates
    from vhd.tasks.setters.passages import builtin_passages
    from vhd.tasks.stages.sample import sample_models
    from vhd.tasks.stages.solve import solve_models
    from vhd.tasks.stages.synthesize import synthesize

    family = registry.get("inventory_dp")
    models = sample_models(family, 1, seed=1, batch="load")
    solutions = {s.model_id: s for s in solve_models(family, models)}
    outputs, assignment = synthesize(family, models, builtin_passages()[:1])
    candidates = make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs}, assignment, ("I",))
    return family, outputs[0], candidates


def _patch_run_job(monkeypatch, fake):
    """`fake` in place of `run_job` in every module of the check package that launches jobs
    (the reference run in `reference.py`, the module's two runs in `batch.py`)."""
    launchers = [module for name, module in sorted(sys.modules.items())
                 if name.startswith(check.__name__ + ".") and getattr(module, "run_job", None) is run_job]
    assert launchers, "the check package no longer launches sandbox jobs through run_job"
    for module in launchers:
        monkeypatch.setattr(module, "run_job", fake)


@pytest.mark.parametrize("which", [0, 1, 2], ids=["reference", "first", "determinism"])
def test_check_raises_a_wall_timeout_as_a_transient_error(batch, monkeypatch, which):
    family, output, candidates = batch
    if which == 0:  # the reference World's own child runs for a module that is not the template's render
        output = output.model_copy(update={"setter": "anthropic", "setter_version": "1"})
        candidates = [dataclasses.replace(c, setter_output=output) for c in candidates]

    def machine_busy_on(job, limits, hash_seed=0, **kwargs):
        if hash_seed == which:
            return SandboxResult("wall_timeout", message="sandbox wall_timeout: the test's busy machine")
        return run_job(job, limits, hash_seed=hash_seed, **kwargs)

    _patch_run_job(monkeypatch, machine_busy_on)
    with pytest.raises(SandboxError, match="busy machine"):
        check.check_batch(family, output, candidates)


def test_a_timeout_is_still_a_verdict(batch, monkeypatch):
    family, output, candidates = batch
    _patch_run_job(monkeypatch, lambda job, limits, hash_seed=0, **kw: SandboxResult(
        "timeout", message="sandbox timeout: asleep") if hash_seed == 1 else run_job(job, limits, hash_seed=hash_seed))
    verdicts = check.check_batch(family, output, candidates)
    assert all(not v.admitted and not v.gates[0].passed and "asleep" in v.gates[0].message for v in verdicts)


def test_the_flows_retry_a_sandbox_error_and_not_a_verdict():
    from prefect.states import Failed

    from vhd.flows.refresh import transient

    assert transient(None, None, Failed(data=SandboxError("sandbox wall_timeout: busy")))
    assert not transient(None, None, Failed(data=ValueError("a gate failed")))
