"""Hostile generated modules: each is contained, classified, leaves no process, and does not stop
the pipeline. Every 'denied' probe has a control that runs the same code outside the sandbox
(a plain subprocess) and succeeds, so a broken probe cannot pass.

Every sandboxed probe runs twice: through the warm pool (a fork of a zygote; the default where a
PID namespace exists) and through a freshly spawned interpreter (VHD_SANDBOX_POOL=0)."""

import hashlib
import hmac
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time

import pytest

from vhd.mechanisms import registry
from vhd.tasks.stages.check import check_batch
from vhd.tasks.sandbox import Limits, marked_processes, plan, run_job
from vhd.tasks.sandbox.launch import _parse
from vhd.tasks.sandbox import pool as pools

# RLIMIT_CPU 2 s decides; the wall-clock backstop, 30 × 3 = 90 s, only ends a job that stops using CPU: a
# CPU-bound probe reaches its CPU limit first even with a thirtieth of a core (load 15 on these 2 cores gave a
# spawned probe less than a tenth), and a passing probe ends at once, so the room costs nothing
FAST = Limits(cpu_seconds=2, wall_factor=30, memory_bytes=512 << 20)
SLEEPY = Limits(cpu_seconds=1, wall_factor=2, memory_bytes=512 << 20)  # for modules that sleep: a 4 s backstop
EPISODE = {"key": "k", "config": {}, "trajectories": [[]]}
ISOLATED = plan().mode in ("bwrap", "unshare")
DROPPED = plan().uid is not None

# a probe reports what it saw through create(): the exception text is the report
REPORT = "\ndef create(config):\n    raise ValueError('REPORT ' + repr(SEEN))\n"


def job(source, episodes=None):
    return {"module": source, "episodes": episodes or [dict(EPISODE)]}


POOLED = pools.enabled()


def pytest_generate_tests(metafunc):
    """Every probe runs on both paths; the hostile-batch tests through the pool only (the spawn
    path is covered per probe), and the channel-parsing tests, which start no sandbox, once."""
    if "launch" not in metafunc.fixturenames:
        return
    both = ["pool", "spawn"] if POOLED else ["spawn"]
    once = "batch" in metafunc.fixturenames or metafunc.function.__name__.startswith("test_the_parent_rejects")
    metafunc.parametrize("launch", both[:1] if once else both, indirect=True)


@pytest.fixture(autouse=True)
def launch(request, monkeypatch):
    """Which path run_job takes: a warm zygote's child, or a freshly spawned interpreter."""
    monkeypatch.setenv(pools.ENV_SWITCH, "1" if request.param == "pool" else "0")
    return request.param


def namespace_of(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def pool_leftovers(namespaces):
    """Processes other than a live zygote itself in any of these PID namespaces."""
    zygotes = {z.pid for z in pools.default_pool().zygotes()}
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in zygotes
            and namespace_of(p) in namespaces]


def sandboxed(source, limits=FAST, marker=None):
    pooled = pools.enabled()
    before = {namespace_of(z.pid) for z in pools.default_pool().zygotes()} if pooled else set()
    result = run_job(job(source), limits)
    assert ("warm pool" in result.isolation) == pooled
    if pooled:  # every namespace a zygote served this check from is empty but for the zygote
        namespaces = (before | {namespace_of(z.pid) for z in pools.default_pool().zygotes()}) - {None}
        for _ in range(3000):  # a killed zygote's namespace is torn down asynchronously: wait for it, up to 30 s
            if not pool_leftovers(namespaces):
                break
            time.sleep(0.01)
        assert not pool_leftovers(namespaces), "a sandbox process survived in a zygote's namespace"
    assert not marked_processes(os.path.basename(result.scratch)), "a sandbox process survived"
    if marker:
        assert not marked_processes(marker), "a process the module started survived"
    return result


def reported(result):
    text = result.episodes["k"]["describe"]["exception"]
    return text.split("REPORT ", 1)[1].strip().splitlines()[0]


def outside(source, timeout=20, **kwargs):
    """The control: the same probe in a plain interpreter (no sandbox); returns what it reported."""
    program = source + "\ntry:\n    create({})\nexcept ValueError as exc:\n    print(exc)\n"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=timeout, **kwargs)
    return done.stdout.strip().split("REPORT ", 1)[-1]


# --- network ---------------------------------------------------------------------------

CONNECT = ("import socket\nSEEN = []\ntry:\n    socket.create_connection(('127.0.0.1', __PORT__), timeout=2).close()\n"
           "    SEEN.append('connected')\nexcept OSError as exc:\n    SEEN.append(type(exc).__name__)\n" + REPORT)
DNS = ("import socket\nSEEN = []\ntry:\n    socket.getaddrinfo('pypi.org', 443)\n    SEEN.append('resolved')\n"
       "except OSError as exc:\n    SEEN.append(type(exc).__name__)\n" + REPORT)


@pytest.mark.skipif(not ISOLATED, reason="no network namespace on this machine (documented fallback)")
def test_network_connect_is_denied():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        probe = CONNECT.replace("__PORT__", str(server.getsockname()[1]))
        assert outside(probe) == "['connected']"  # control
        result = sandboxed(probe)
    assert result.status == "violation" and "socket.connect" in result.message
    assert "connected" not in reported(result)


@pytest.mark.skipif(not ISOLATED, reason="no network namespace on this machine (documented fallback)")
def test_dns_is_denied():
    if outside(DNS) != "['resolved']":
        pytest.skip("no DNS outside the sandbox either: the control cannot succeed here")
    result = sandboxed(DNS)
    assert result.status == "violation" and "getaddrinfo" in result.message
    assert "resolved" not in reported(result)


# --- file system -----------------------------------------------------------------------

WRITE = ("import os\nSEEN = []\nfor path in TARGETS:\n    try:\n        with open(path, 'ab') as f:\n"
         "            f.write(b'pwned')\n        SEEN.append('wrote')\n    except OSError as exc:\n"
         "        SEEN.append(type(exc).__name__)\n" + REPORT)


@pytest.mark.skipif(not DROPPED and plan().mode != "bwrap", reason="running as the parent's uid without bwrap")
def test_writes_outside_scratch_are_denied(tmp_path):
    warehouse = tmp_path / "vhd.duckdb"  # root-owned, mode 644, like the real warehouse
    warehouse.write_bytes(b"DUCK")
    os.chmod(warehouse, 0o644)
    tmp_path.chmod(0o755)
    fresh = f"/tmp/vhd-probe-{secrets.token_hex(4)}"
    # without bwrap, world-writable dirs stay writable for uid 65534 (documented fallback)
    targets = [str(warehouse), fresh, "/dev/shm/vhd-probe"] if plan().mode == "bwrap" else [str(warehouse)]
    probe = WRITE.replace("TARGETS", repr(targets))
    try:
        assert outside(probe) == repr(["wrote"] * len(targets))  # control
    finally:
        for path in (fresh, "/dev/shm/vhd-probe"):
            if os.path.exists(path):
                os.remove(path)
    warehouse.write_bytes(b"DUCK")
    result = sandboxed(probe)
    assert result.status == "violation" and "write outside scratch" in result.message
    assert "wrote" not in reported(result)
    assert warehouse.read_bytes() == b"DUCK" and not os.path.exists(fresh)


def test_writes_inside_scratch_are_allowed():
    probe = WRITE.replace("TARGETS", "['scratch.txt']")
    result = sandboxed(probe)
    assert result.status == "ok" and reported(result) == "['wrote']"


# --- environment secrets ---------------------------------------------------------------

SECRETS = ("import os\nSEEN = []\nfor name, value in os.environ.items():\n"
           "    if 'sk-vhd-test' in value:\n        SEEN.append(name)\n"
           "for pid in os.listdir('/proc'):\n    try:\n        if b'sk-vhd-test' in open('/proc/%s/environ' % pid, 'rb').read():\n"
           "            SEEN.append('proc')\n    except OSError:\n        pass\n" + REPORT)


def test_environment_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-vhd-test-123")
    assert "OPENAI_API_KEY" in outside(SECRETS, env=dict(os.environ))  # control
    result = sandboxed(SECRETS)
    assert result.status == "ok" and reported(result) == "[]"


# --- time: RLIMIT_CPU decides "too slow"; the wall clock is a backstop (tests/test_sandbox_load.py) ---

def test_infinite_loop_is_a_timeout():
    result = sandboxed("while True:\n    pass\n")
    assert result.status == "timeout" and "CPU limit" in result.message, result.message
    assert result.seconds < FAST.wall  # ended by its CPU limit, not by the backstop


def test_long_sleep_is_a_timeout():
    result = sandboxed("import time\ntime.sleep(60)\n", SLEEPY)
    assert result.status == "timeout" and "not waiting for a CPU" in result.message, result.message
    assert result.seconds >= SLEEPY.wall  # no CPU used: only the backstop ends it, and that is still a verdict


STDIN = "import os\nSEEN = [os.read(0, 1)]\n" + REPORT


def test_blocking_stdin_read_does_not_block():
    control = subprocess.Popen([sys.executable, "-c", STDIN], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:  # control: with an open stdin the probe blocks
        with pytest.raises(subprocess.TimeoutExpired):
            control.wait(timeout=1)
    finally:
        control.kill()
        control.wait()
        control.stdin.close()
    result = sandboxed(STDIN)
    assert result.status == "ok" and reported(result) == "[b'']"  # read end of file at once: never blocked


@pytest.mark.parametrize("source", [
    "import signal\nfor s in (signal.SIGXCPU, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
    "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n",
    "import signal\ndef again(signum, frame):\n    signal.signal(signum, again)\n"
    "for s in (signal.SIGXCPU, signal.SIGTERM, signal.SIGALRM):\n    signal.signal(s, again)\nwhile True:\n    pass\n",
], ids=["ignored", "re-armed"])
def test_ignoring_or_rearming_signals_is_still_a_timeout(source):
    limits = Limits(cpu_seconds=1, wall_factor=30)
    result = sandboxed(source, limits)
    assert result.status == "timeout" and "CPU limit" in result.message, result.message
    assert result.seconds < limits.wall  # SIGKILL at the hard CPU limit, before the backstop


# --- memory and processes --------------------------------------------------------------

def test_memory_bomb_is_memory():
    result = sandboxed("BLOCKS = []\nwhile True:\n    BLOCKS.append(bytearray(16 << 20))\n",
                       Limits(cpu_seconds=2, memory_bytes=256 << 20))
    assert result.status == "memory"


def test_memory_bomb_in_a_tool_call_is_memory():
    source = "def create(config):\n    return [bytearray(1 << 40)]\n"
    assert sandboxed(source).status == "memory"


FORK = ("import os, time\nSEEN = []\nfor _ in range(LIMIT + 20):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
        "    SEEN.append(pid)\nSEEN = len(SEEN)\n" + REPORT)


@pytest.mark.skipif(not DROPPED, reason="RLIMIT_NPROC is not enforced for root (privileges not dropped here)")
def test_fork_bomb_is_bounded_and_killed():
    limit = 16
    probe = FORK.replace("LIMIT", str(limit)).replace("time.sleep(30)", "time.sleep(0.5)")
    assert outside(probe) == str(limit + 20)  # control: unbounded outside (as root)
    result = sandboxed(FORK.replace("LIMIT", str(limit)), Limits(cpu_seconds=2, processes=limit))
    assert result.status == "violation" and "os.fork" in result.message
    assert int(reported(result)) < limit


# the daemon announces itself (a file in the cwd, then `sleep MARK`); the module waits for that, not for a time
DAEMON = ("import os, time\nSEEN = ['started']\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
          "        null = os.open('/dev/null', os.O_RDWR)\n        for fd in (0, 1, 2):\n            os.dup2(null, fd)\n"
          "        os.execv('/bin/sh', ['sh', '-c', ': > daemon-up; exec sleep MARK'])\n    os._exit(0)\n"
          "for _ in range(3000):\n    if os.path.exists('daemon-up'):\n        break\n    time.sleep(0.01)\nTHEN\n"
          + REPORT)


def test_double_forked_daemon_does_not_survive(tmp_path):
    mark = "%d.%06d" % (300 + secrets.randbelow(300), secrets.randbelow(10 ** 6))
    probe = DAEMON.replace("MARK", mark).replace("THEN", "")
    outside(probe, cwd=tmp_path)  # control: outside the sandbox the daemon survives its parent
    survivors = marked_processes(mark)
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert survivors, "the daemon probe did not leave a daemon outside the sandbox"
    result = sandboxed(probe, marker=mark)
    assert result.status == "violation" and "os.fork" in result.message


def test_daemon_of_a_timed_out_module_does_not_survive():
    mark = "%d.%06d" % (300 + secrets.randbelow(300), secrets.randbelow(10 ** 6))
    result = sandboxed(DAEMON.replace("MARK", mark).replace("THEN", "time.sleep(60)"), SLEEPY, marker=mark)
    assert result.status == "timeout" and "not waiting for a CPU" in result.message, result.message


# --- output ----------------------------------------------------------------------------

def test_unbounded_stdout_and_stderr_are_capped():
    result = sandboxed("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n    sys.stderr.write('y' * 65536)\n")
    assert result.status == "timeout" and len(result.message) < 2000


def test_unbounded_result_channel_is_oversize():
    source = "import os, sys\nwhile True:\n    os.write(int(sys.argv[2]), b'z' * 65536)\n"
    result = sandboxed(source, Limits(cpu_seconds=2, wall_factor=30, result_bytes=1 << 20))
    assert result.status == "oversize"


# --- forged verdicts -------------------------------------------------------------------

FAKE = [{"key": "k", "describe": {"instruction": "x", "tools": []},
         "trajectories": [{"utility": 1.0, "terminal": True, "turns_used": 1, "errors": 0, "first_error": None,
                           "obs_digest": "0" * 64, "obs_numbers": [], "answers": [], "exception": None}]},
        {"end": True, "episodes": 1}]
FAKE_LINES = "".join("%s %s\n" % ("0" * 64, json.dumps(r)) for r in FAKE)


@pytest.mark.parametrize("source", [
    f"print({FAKE_LINES!r}, end='')\nimport os\nos._exit(0)\n",
    f"import os, sys\nos.write(int(sys.argv[2]), {FAKE_LINES.encode()!r})\nos._exit(0)\n",
    f"import os, sys\nos.write(int(sys.argv[2]), {''.join(json.dumps(r) + chr(10) for r in FAKE).encode()!r})\nos._exit(0)\n",
    f"open('result.json', 'w').write({json.dumps(FAKE)!r})\nimport os\nos._exit(0)\n",
    "import os\nos._exit(0)\n",
    "def create(config):\n    raise SystemExit(0)\n",
], ids=["printed", "written-to-the-result-fd", "unsigned-json", "result-file", "early-exit-0", "exit-0-in-create"])
def test_a_forged_passing_verdict_is_forged(source):
    result = sandboxed(source)
    assert result.status == "forged" and not result.episodes


def test_patching_the_runner_is_a_violation():
    source = ("import sys\nrunner = sys.modules['__main__']\n"
              f"runner._play = lambda *a: {FAKE[0]['trajectories'][0]!r}\n"
              "def create(config):\n    raise ValueError('broken')\n")
    result = sandboxed(source)
    assert result.status == "violation" and "tamper" in result.message


def _signed(records, key):
    lines = []
    for seq, record in enumerate(records):
        payload = json.dumps(record).encode()
        lines.append(hmac.new(key, b"%d:" % seq + payload, hashlib.sha256).hexdigest().encode() + b" " + payload + b"\n")
    return b"".join(lines)


@pytest.mark.parametrize("records, expected", [
    ([FAKE[0], FAKE[1]], "ok"),
    ([FAKE[0], FAKE[0], FAKE[1]], "forged"),  # duplicate key
    ([{**FAKE[0], "key": "other"}, FAKE[1]], "forged"),  # unknown key
    ([FAKE[0], FAKE[1], FAKE[0]], "forged"),  # data after the end marker
    ([{**FAKE[0], "extra": 1}, FAKE[1]], "forged"),  # keys not in the schema
    ([{"describe": FAKE[0]["describe"], "key": "k", "trajectories": FAKE[0]["trajectories"]}, FAKE[1]], "forged"),
    ([FAKE[0]], "forged"),  # exit 0 without the end marker
    ([FAKE[0], {"end": True, "episodes": 2}], "forged"),  # wrong count
])
def test_the_parent_rejects_malformed_channels(records, expected):
    key = secrets.token_bytes(32)
    result = _parse(_signed(records, key), "done", None, 0, b"", key, ["k"])
    assert result.status == expected, result.message
    wrong_key = _parse(_signed(records, secrets.token_bytes(32)), "done", None, 0, b"", key, ["k"])
    assert wrong_key.status == "forged"


# --- invalid numbers -------------------------------------------------------------------

NONFINITE = ("class Env:\n    instruction = 'x'\n    tools = []\n    done = True\n"
             "    def call(self, tool, arguments):\n        return {'ok': True}\n"
             "    def outcome(self):\n        return {'utility': float(VALUE), 'terminal': True, 'turns_used': 0}\n"
             "def create(config):\n    return Env()\n")


@pytest.mark.parametrize("value", ["'nan'", "'inf'", "'-inf'"])
def test_nonfinite_utilities_are_invalid(value):
    result = sandboxed(NONFINITE.replace("VALUE", value))
    assert result.status == "invalid" and "utility" in result.message


def test_a_finite_utility_is_ok():
    result = sandboxed(NONFINITE.replace("VALUE", "1.5"))
    assert result.status == "ok" and result.episodes["k"]["trajectories"][0]["utility"] == 1.5


# --- the pipeline goes on ----------------------------------------------------------------

FAMILY = registry.get("inventory_dp")


@pytest.fixture(scope="module")
def batch():
    from vhd.tasks.stages.annotate import make_candidates
    from vhd.tasks.setters.passages import builtin_passages
    from vhd.tasks.stages.sample import sample_models
    from vhd.tasks.stages.solve import solve_models
    from vhd.tasks.stages.synthesize import synthesize

    models = sample_models(FAMILY, 4, seed=1, batch="hostile")
    solutions = {s.model_id: s for s in solve_models(FAMILY, models)}
    outputs, assignment = synthesize(FAMILY, models, builtin_passages()[:1])
    candidates = make_candidates(FAMILY, models, solutions, {o.setter_output_id: o for o in outputs}, assignment, ("I",))
    return outputs[0], candidates


@pytest.mark.parametrize("payload, status", [
    ("import os\nos._exit(0)\n", "forged"),
    ("import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9), timeout=1)\nexcept OSError:\n    pass\n", "violation"),
    ("while True:\n    pass\n", "timeout"),
])
def test_a_hostile_batch_is_rejected_and_the_next_is_admitted(batch, payload, status):
    output, candidates = batch
    hostile = output.model_copy(update={"module": output.module + "\n" + payload})
    verdicts = check_batch(FAMILY, hostile, candidates, Limits(cpu_seconds=2, wall_factor=30))
    assert not any(v.admitted for v in verdicts)
    assert all(v.gates[0].name == "executes" and not v.gates[0].passed for v in verdicts)
    assert status in verdicts[0].gates[0].message
    after = check_batch(FAMILY, output, candidates)
    assert any(v.admitted for v in after)
