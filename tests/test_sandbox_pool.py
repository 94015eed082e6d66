"""The warm sandbox pool: a check after a hostile one is unaffected, a dead zygote is replaced
(the check retried, or crashed, never passed), verdicts match the spawn path, no process is left."""

import json
import os
import signal
import threading
import time

import pytest

from vhd.mechanisms import registry
from vhd.tasks.stages.check import check_batch
from vhd.tasks.sandbox import Limits, plan, run_job
from vhd.tasks.sandbox import pool as pools
from vhd.tasks.sandbox.pool import SandboxPool

pytestmark = pytest.mark.skipif(not pools.enabled(), reason="no PID namespace here: the pool is not used")

FAST = Limits(cpu_seconds=3, memory_bytes=512 << 20)  # RLIMIT_CPU decides; the wall-clock backstop is 20 s
REPORT = "\ndef create(config):\n    raise ValueError('REPORT ' + json.dumps(SEEN))\n"


def job(source):
    return {"module": source, "episodes": [{"key": "k", "config": {}, "trajectories": [[]]}]}


def reported(result):
    text = result.episodes["k"]["describe"]["exception"]
    return json.loads(text.split("REPORT ", 1)[1].strip().splitlines()[0])


# what a fresh child sees: its scratch, limits, signal dispositions, module state, the other processes
# of its PID namespace (under bwrap /proc is the namespace's own; under `unshare -p` it is the host's,
# whose processes are told apart by their PID namespace, and whose pids are host pids)
OBSERVE = ("import json, os, resource, signal, sys\n"
           "ME, NS = os.readlink('/proc/self'), os.readlink('/proc/self/ns/pid')\n"
           "def mine(p):\n    if ME == str(os.getpid()):\n        return p != ME\n    try:\n"
           "        return p != ME and os.readlink(f'/proc/{p}/ns/pid') == NS\n    except OSError:\n        return False\n"
           "SEEN = {'cwd': sorted(os.listdir('.')), 'home': os.environ.get('HOME') == os.getcwd(),\n"
           "        'nproc': resource.getrlimit(resource.RLIMIT_NPROC)[0], 'cpu': resource.getrlimit(resource.RLIMIT_CPU)[0],\n"
           "        'as': resource.getrlimit(resource.RLIMIT_AS)[0], 'core': resource.getrlimit(resource.RLIMIT_CORE)[0],\n"
           "        'term': signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, 'poison': hasattr(json, 'POISON'),\n"
           "        'leader': os.getpgid(0) == os.getpid() == os.getsid(0), 'uid': os.getuid(),\n"
           "        'procs': sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and mine(p)),\n"
           "        'fds': sorted(int(f) for f in os.listdir('/proc/self/fd'))}\n" + REPORT)

# a child that leaves everything it can behind: files, a daemon, signal games, a poisoned module
HOSTILE = ("import json, os, signal, sys, time\n"
           "open('left-behind.txt', 'w').write('x')\n"
           "os.makedirs('dir/sub', exist_ok=True)\n"
           "json.POISON = True\n"
           "os.environ['HOME'] = '/nowhere'\n"
           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        open('daemon-up', 'w').close()\n"
           "        time.sleep(60)\n    os._exit(0)\n"
           "for sig in (signal.SIGKILL, signal.SIGTERM):\n    try:\n        os.kill(1, sig)\n    except OSError:\n        pass\n"
           "while not os.path.exists('daemon-up'):  # the daemon is up (a state, not a time)\n    time.sleep(0.01)\n"
           "def create(config):\n    raise ValueError('hostile')\n")


def test_a_check_after_a_hostile_check_is_unaffected():
    with SandboxPool() as pool:
        baseline = pool.run(job(OBSERVE), FAST)
        hostile = pool.run(job(HOSTILE), FAST)
        after = pool.run(job(OBSERVE), FAST)
        assert pool.started == 1 and pool.replaced == 0, "the hostile child took the zygote down"
    assert baseline.status == "ok" and "warm pool" in baseline.isolation
    assert hostile.status == "violation" and "os.fork" in hostile.message and "os.kill" in hostile.message
    seen, again = reported(baseline), reported(after)
    assert seen == again  # a fresh scratch, the same limits, default signals, no poisoned module
    assert seen["cwd"] == [] and seen["home"] and not seen["poison"] and seen["term"] and seen["leader"]
    assert seen["cpu"] == FAST.cpu_seconds and seen["as"] == FAST.memory_bytes and seen["core"] == 0
    assert seen["nproc"] == FAST.processes and seen["fds"] == [0, 1, 2, 3, 4]  # 4: the listing's own directory fd
    assert len(seen["procs"]) == 1  # only the zygote (pid 1 under bwrap): the daemon of the hostile check is gone
    if plan().uid is not None:  # root, and the drop works here (the plan's probe says so)
        assert seen["uid"] == 65534


def _kill_zygotes(pool, count, stop):
    """Kill the zygote of the first `count` checks in flight once their child is playing (it has
    written `playing` in its scratch dir), from outside the sandbox; let every later one go on
    (write `go` beside it). Each step waits for a state, never for a time."""
    killed, let_go = set(), set()
    while not stop.is_set():
        with pool._lock:
            busy = list(pool._busy)
        for zygote in busy:
            for playing in zygote.root.glob("job-*/playing"):
                if playing in let_go or zygote.pid in killed:
                    continue
                if len(killed) < count:
                    os.kill(zygote.pid, signal.SIGKILL)
                    killed.add(zygote.pid)
                else:
                    (playing.parent / "go").touch()
                    let_go.add(playing)
        time.sleep(0.01)


# the child is mid-check until the test lets it go (or kills its zygote)
SLOW = ("import json, os, time\nopen('playing', 'w').close()\nwhile not os.path.exists('go'):\n    time.sleep(0.01)\n"
        "SEEN = 'played'\n" + REPORT)


@pytest.mark.parametrize("kills, status", [(1, "ok"), (2, "crashed")])
def test_a_zygote_killed_mid_check_is_replaced_and_the_check_retried_or_crashed(kills, status):
    with SandboxPool() as pool:
        stop = threading.Event()
        killer = threading.Thread(target=_kill_zygotes, args=(pool, kills, stop))
        killer.start()
        try:
            result = pool.run(job(SLOW), FAST)
        finally:
            stop.set()
            killer.join()
        assert result.status == status, result.message
        assert pool.replaced == kills
        if status == "ok":
            assert reported(result) == "played"
        else:
            assert "zygote died" in result.message and not result.episodes
        after = pool.run(job(OBSERVE), FAST)  # the rest of the batch goes on
        assert after.status == "ok"
        zygotes = pool.zygotes()
    assert all(z.proc.poll() is not None and not os.path.exists(f"/proc/{z.pid}") for z in zygotes)


def test_an_idle_zygote_killed_between_checks_is_replaced():
    with SandboxPool() as pool:
        assert pool.run(job(OBSERVE), FAST).status == "ok"
        (zygote,) = pool.zygotes()
        os.kill(zygote.pid, signal.SIGKILL)
        zygote.proc.wait()
        assert pool.run(job(OBSERVE), FAST).status == "ok"
        assert pool.started == 2


def test_closing_the_pool_leaves_no_process():
    pool = SandboxPool()
    results = [pool.run(job(OBSERVE), FAST, hash_seed=seed) for seed in (1, 2)]
    zygotes = pool.zygotes()
    assert len(zygotes) == 2 and all(r.status == "ok" for r in results)
    pool.close()
    assert all(z.proc.poll() is not None and not os.path.exists(f"/proc/{z.pid}") for z in zygotes)
    with pytest.raises(RuntimeError, match="closed"):
        pool.run(job(OBSERVE), FAST)


def test_the_switch_selects_the_spawn_path(monkeypatch):
    monkeypatch.setenv(pools.ENV_SWITCH, "0")
    assert "warm pool" not in run_job(job(OBSERVE), FAST).isolation
    assert "warm pool" not in run_job(job(OBSERVE), FAST, pool=False).isolation
    monkeypatch.setenv(pools.ENV_SWITCH, "1")
    assert "warm pool" in run_job(job(OBSERVE), FAST).isolation


def _batch(name):
    from vhd.tasks.stages.annotate import make_candidates
    from vhd.tasks.setters.passages import builtin_passages
    from vhd.tasks.stages.sample import sample_models
    from vhd.tasks.stages.solve import solve_models
    from vhd.tasks.stages.synthesize import synthesize

    family = registry.get(name)
    models = sample_models(family, 1, seed=3, batch="pool")
    solutions = {s.model_id: s for s in solve_models(family, models)}
    outputs, assignment = synthesize(family, models, builtin_passages()[:1])
    candidates = make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs}, assignment,
                                 ("I", "A"))
    return family, outputs[0], [c for c in candidates if c.setter_output is outputs[0]]


@pytest.mark.parametrize("name", ["inventory_dp", "knapsack", "rostering"])
def test_verdicts_are_identical_with_and_without_the_pool(name, monkeypatch):
    family, output, candidates = _batch(name)
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(pools.ENV_SWITCH, switch)
        verdicts = check_batch(family, output, candidates)
        runs[switch] = [(v.admitted, [(g.name, g.passed, g.message) for g in v.gates], v.instruction, v.tools)
                        for v in verdicts]
    assert runs["1"] == runs["0"]
    assert any(admitted for admitted, *_ in runs["1"])
