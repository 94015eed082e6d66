"""Sandbox child: plays trajectories through one generated module (standard library only).

    python -s -B runner.py JOB.json RESULT_FD [UID]

Reads the job (as the launching user), deletes the job file, takes the per-job key out of it,
drops to UID when one is given (and checks the drop cannot be undone), installs a tripwire
audit hook, executes the module in a fresh namespace (its source, or the code the parent compiled
from it, `job["code"]`: see `vhd.tasks.sandbox.compiled`), plays every trajectory of every
episode, and writes one signed JSON line per record to RESULT_FD:

    <hex HMAC-SHA256(key, "<line number>:" + json)> <json>

It reports raw facts (utilities, error counts, observation digests, attempted denied actions);
the parent computes every verdict and checks every signature, the schema and the key order.
The key lives only in this process's memory: a module that reads the interpreter's memory can
still recover it (see docs/RELIABILITY.md). The operating-system limits are the boundary; the
audit hook is a tripwire that makes attempts visible.
"""

import base64
import hashlib
import hmac
import json
import marshal
import os
import sys
import traceback
import types

MAX_TEXT = 20000
MAX_VIOLATIONS = 20


def _short(text):
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


def _numbers(value, out):
    """The numbers in an observation (bools and text left out) and the length of every list in it,
    in no particular order (the caller sorts them). Iterative: an observation has already been
    through json.dumps, which refuses a circular or too deeply nested one."""
    stack = [value]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is dict:
            stack.extend(value.values())
        elif kind is list or kind is tuple:
            out.append("len%d" % len(value))
            stack.extend(value)
        elif kind is int or kind is float:
            out.append("%.10g" % value)
        elif kind is bool or kind is str or value is None:
            pass
        elif isinstance(value, dict):  # subclasses, as rare as they are slow
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            out.append("len%d" % len(value))
            stack.extend(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append("%.10g" % float(value))


def _numeric(observation):
    """A short digest of the sorted numbers in one observation: the same for two worlds that
    report the same facts, whatever their keys are called, their order, or their wording."""
    found = []
    _numbers(observation, found)
    return hashlib.sha256(" ".join(sorted(found)).encode("utf-8")).hexdigest()[:12]


PAST_END = 2  # clock calls recorded after a tailed trajectory's episode is over: both must be refused
MAX_REFUSAL = 300  # characters of a refusal text kept in a trajectory's `answers`


def _play(module, config, trajectory, finish, numbers=True, answered=True):
    """Play one trajectory and report what happened. A trajectory is a list of calls, or
    {"calls": [...], "then": CLOCK}: the calls, then CLOCK while the episode is not over (at most
    the turn budget), then PAST_END more CLOCK calls, every answer recorded; or {"calls": [...],
    "finish": true}; either dict may carry "params" and "turn_budget", which replace the episode's for it. `finish` (or the trajectory's own "finish"): after the calls, the episode is
    ended by the module's `Env.finish()`, the contract's one rule for an unfinished episode.
    `answers` holds one [ok, text] per recorded call: a refusal's error text (at most MAX_REFUSAL
    characters), or the first 12 hex digits of an accepted answer's SHA-256 (the information-hiding
    gate compares them between worlds), or nothing when `answered` is false (an episode whose job
    says "answers": false: the determinism replay, compared by `obs_digest`). `obs_numbers` holds
    each answer's `_numeric` digest, or nothing when `numbers` is false (an episode whose job says
    "numbers": false: no gate reads them)."""
    digest = hashlib.sha256()
    errors, first_error, answers = 0, None, []
    found = [] if numbers else None
    if isinstance(trajectory, dict):
        calls, then = trajectory["calls"], trajectory.get("then")
        finish = finish or trajectory.get("finish") is True
        if "params" in trajectory:  # a θ of its own (the information-hiding twin of one call sequence)
            config = dict(config, params=trajectory["params"])
        if "turn_budget" in trajectory:  # a budget of its own (a call sequence: `sequences.tailed`)
            config = dict(config, turn_budget=trajectory["turn_budget"])
    else:
        calls, then = trajectory, None
    try:
        env = module.create(config)

        def record(tool, arguments):
            nonlocal errors, first_error
            observation = env.call(tool, arguments)
            text = json.dumps(observation, sort_keys=True, default=repr).encode("utf-8")
            digest.update(text)
            if found is not None:
                found.append(_numeric(observation))
            if not (isinstance(observation, dict) and observation.get("ok") is True):
                errors += 1
                error = str(observation.get("error") if isinstance(observation, dict) else observation)
                if answered:
                    answers.append([False, error[:MAX_REFUSAL]])
                if first_error is None:
                    first_error = error
            elif answered:
                answers.append([True, hashlib.sha256(text).hexdigest()[:12]])

        for step in calls:
            record(step["tool"], step["arguments"])
        if then is not None:
            ticks = 0
            while not env.done and ticks < config["turn_budget"]:
                record(then, {})
                ticks += 1
            for _ in range(PAST_END):
                record(then, {})
        if finish:
            env.finish()
        outcome = env.outcome()
    except MemoryError:
        raise
    except Exception:
        return {"exception": _short(traceback.format_exc(limit=3))}
    return {
        "utility": outcome.get("utility"),
        "terminal": outcome.get("terminal"),
        "turns_used": outcome.get("turns_used"),
        "errors": errors,
        "first_error": _short(first_error) if first_error else None,
        "obs_digest": digest.hexdigest(),
        "obs_numbers": found or [],
        "answers": answers,
        "exception": None,
    }


def _digest(env):
    """The world's state digest and the turns used: an invalid call (malformed, or after the end)
    must change neither (a refusal by the world uses its turn, but the fuzz makes none)."""
    probe = getattr(env, "state_digest", None)
    return "%s|%s" % (probe(), env.outcome().get("turns_used")) if callable(probe) else None


def _fuzz(module, config, prefix, calls, rest, limit=None):
    """Invalid calls mid-episode and after the end: each must be a structured error, state unchanged.

    Each invalid call is judged against the state the call before it left, after `prefix` (half of
    π*'s calls). An episode takes at most `limit` - 1 calls (`limit`: the call limit of its turn
    budget, whose own call ends the episode by the turns-ran-out rule, a change of state that is
    no fault of the call): when the next invalid call would be that one, or the episode is over,
    the fuzz goes on in a fresh episode (the same config, `prefix` again; at least one call in
    each), until every invalid call has been made. Then `rest` ends π*'s play (in a fresh episode
    when it would not fit before the limit) and the first three are made after the end. `played`
    counts the invalid calls that met an episode not yet over, `episodes` the episodes it took."""
    failures = []
    try:
        def fresh():
            env = module.create(config)
            for step in prefix:
                env.call(step["tool"], step["arguments"])
            return env, len(prefix)

        def judged(env, phase, call, observation, before):  # the state after: the next call's "before"
            structured = (isinstance(observation, dict) and observation.get("ok") is False
                          and isinstance(observation.get("error"), str))
            after = _digest(env)
            if not structured or after != before:
                failures.append("%s %s(%s): %s" % (phase, call["tool"], json.dumps(call["arguments"])[:80],
                                                   "state changed" if structured else "not a structured error"))
            return after

        env, used = fresh()
        before, episodes, made, played = _digest(env), 1, 0, 0
        for call in calls:
            if made and (getattr(env, "done", False) is True or (limit is not None and used + 1 >= limit)):
                env, used = fresh()
                before, episodes, made = _digest(env), episodes + 1, 0
            played += getattr(env, "done", False) is not True
            before = judged(env, "mid-episode", call, env.call(call["tool"], call["arguments"]), before)
            used, made = used + 1, made + 1
        if getattr(env, "done", False) is True or (limit is not None and used + len(rest) >= limit):
            env, used = fresh()
            episodes += 1
        for step in rest:
            env.call(step["tool"], step["arguments"])
        before = _digest(env)
        for call in calls[:3]:
            before = judged(env, "after the end", call, env.call(call["tool"], call["arguments"]), before)
    except MemoryError:
        raise
    except Exception:
        return {"exception": _short(traceback.format_exc(limit=3))}
    return {"calls": len(calls) + 3, "played": played, "episodes": episodes, "failures": failures[:5],
            "failed": len(failures), "digest": _digest(env) is not None}


def _describe(module, config):
    try:
        env = module.create(config)
        return {"instruction": _short(str(env.instruction)), "tools": env.tools}
    except MemoryError:
        raise
    except Exception:
        return {"exception": _short(traceback.format_exc(limit=3))}


class _Channel:
    """Signed, numbered JSON lines on the result fd (references bound before the module runs)."""

    def __init__(self, fd, key):
        self._fd, self._key, self._seq = fd, key, 0
        self._write, self._dumps, self._new, self._sha = os.write, json.dumps, hmac.new, hashlib.sha256

    def send(self, record):
        payload = self._dumps(record).encode("utf-8")
        if self._key is None:  # a parent from before signed channels: plain JSON lines
            data = payload + b"\n"
        else:
            mac = self._new(self._key, b"%d:" % self._seq + payload, self._sha).hexdigest().encode("ascii")
            data = mac + b" " + payload + b"\n"
        self._seq += 1
        while data:
            data = data[self._write(self._fd, data):]


# --- the tripwire: attempts at denied actions, recorded (the OS denies them) ------------------

_NETWORK = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
            "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo", "urllib.Request",
            "http.client.connect", "ftplib.connect", "smtplib.connect", "poplib.connect", "imaplib.open",
            "nntplib.connect", "telnetlib.Telnet.open", "webbrowser.open"}
_PROCESS = {"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system", "os.startfile",
            "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill"}
_PATHS = {"os.remove": 0, "os.rmdir": 0, "os.mkdir": 0, "os.rename": 1, "os.link": 1, "os.symlink": 1,
          "os.chmod": 0, "os.chown": 0, "os.truncate": 0, "os.utime": 0, "shutil.rmtree": 0, "os.chflags": 0,
          "os.setxattr": 0, "os.removexattr": 0, "shutil.move": 1, "shutil.copyfile": 1}
_TAMPER = {"ctypes.dlopen": "ctypes", "ctypes.dlsym": "ctypes", "gc.get_objects": "introspection",
           "gc.get_referrers": "introspection", "gc.get_referents": "introspection",
           "sys._current_frames": "introspection", "resource.setrlimit": "limits", "resource.prlimit": "limits",
           "sys.addaudithook": "tamper", "os.setuid": "privilege"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _tripwire(channel, scratch):
    seen, busy = set(), [False]
    inside = scratch.rstrip("/") + "/"
    abspath, isinstance_, str_, bytes_ = os.path.abspath, isinstance, str, bytes

    def outside(path):
        if isinstance_(path, bytes_):
            path = path.decode("utf-8", "replace")
        if not isinstance_(path, str_):
            return False
        full = abspath(path)
        return not (full + "/").startswith(inside) and full != "/dev/null"

    def hook(event, args):
        if busy[0]:
            return
        busy[0] = True
        try:
            what = None
            if event == "open":
                path, mode, flags = (tuple(args) + (None, None, None))[:3]
                writes = (isinstance_(flags, int) and flags & _WRITE_FLAGS) or (
                    isinstance_(mode, str_) and any(c in mode for c in "wax+"))
                if writes and outside(path):
                    what = "write outside scratch: open(%r, %r)" % (path, mode)
            elif event in _PATHS:
                paths = args[: _PATHS[event] + 1]
                if any(outside(p) for p in paths):
                    what = "file system outside scratch: %s%r" % (event, tuple(paths))
            elif event in _NETWORK:
                what = "network: %s%r" % (event, tuple(args)[:2])
            elif event in _PROCESS or event.startswith("os.exec") or event.startswith("os.spawn"):
                what = "process: %s" % event
            elif event in _TAMPER:
                what = "%s: %s" % (_TAMPER[event], event)
            if what and what not in seen and len(seen) < MAX_VIOLATIONS:
                seen.add(what)
                channel.send({"violation": what[:500]})
        except Exception:
            pass
        finally:
            busy[0] = False

    return hook


def drop_privileges(uid, child="sandbox"):
    """Become `uid` (no supplementary groups) and check there is no way back to root; the
    session child (session.py) drops with this too."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise SystemExit("%s: privileges could not be dropped" % child)


_TRUSTED = ("_play", "_fuzz", "_describe", "_digest", "_short", "_Channel", "_numeric", "_numbers")


def main(job_path, result_fd, uid=None):
    with open(job_path, "rb") as handle:
        job = json.loads(handle.read())
    os.unlink(job_path)
    nonce = job.pop("nonce", None)
    channel = _Channel(result_fd, bytes.fromhex(nonce) if nonce else None)
    del nonce
    if uid is not None:
        drop_privileges(uid)
    play, fuzz_, describe = _play, _fuzz, _describe
    trusted = {name: globals()[name] for name in _TRUSTED}
    library = (json.dumps, hashlib.sha256, hmac.new, os.write, traceback.format_exc)
    module = types.ModuleType("vhd_env")
    episodes = job["episodes"]
    source = job.pop("module")
    code = job.pop("code", None)
    del job
    sys.addaudithook(_tripwire(channel, os.getcwd()))

    reported = []

    def tampered():
        changed = [name for name, value in trusted.items() if globals().get(name) is not value]
        if library != (json.dumps, hashlib.sha256, hmac.new, os.write, traceback.format_exc):
            changed.append("library functions")
        if changed and not reported:
            reported.append(True)
            channel.send({"violation": "tamper: runner functions replaced: " + ", ".join(changed)})

    try:
        try:
            code = compile(source, "vhd_env.py", "exec") if code is None else marshal.loads(base64.b64decode(code))
            exec(code, module.__dict__)
        except MemoryError:
            raise
        except BaseException:
            channel.send({"import_error": _short(traceback.format_exc(limit=3))})
            return
        for episode in episodes:
            record = {"key": episode["key"], "describe": describe(module, episode["config"])}
            record["trajectories"] = [
                play(module, episode["config"], trajectory, episode.get("finish") is True,
                     episode.get("numbers") is not False, episode.get("answers") is not False)
                for trajectory in episode["trajectories"]
            ]
            fuzz = episode.get("fuzz")
            if fuzz:
                record["fuzz"] = fuzz_(module, episode["config"], fuzz["prefix"], fuzz["calls"], fuzz["rest"],
                                       fuzz.get("limit"))
            tampered()
            channel.send(record)
        channel.send({"end": True, "episodes": len(episodes)})
    except MemoryError:
        module = record = None
        channel.send({"memory": "MemoryError: the module exceeded its address-space limit"})


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
