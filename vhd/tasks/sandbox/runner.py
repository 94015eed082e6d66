"""Sandbox child: plays trajectories through one generated module (standard library only).

    python -s -B runner.py JOB.json RESULT_FD

Reads the job, executes the module source in a fresh namespace, plays every trajectory of
every episode, and writes one JSON object per episode to RESULT_FD. It reports raw facts
(utilities, error counts, observation digests); the parent computes every verdict.
"""

import hashlib
import json
import os
import sys
import traceback
import types

MAX_TEXT = 20000


def _short(text):
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


def _play(module, config, trajectory, pad_with):
    digest = hashlib.sha256()
    errors, first_error = 0, None
    try:
        env = module.create(config)
        for step in trajectory:
            observation = env.call(step["tool"], step["arguments"])
            digest.update(json.dumps(observation, sort_keys=True, default=repr).encode("utf-8"))
            if not (isinstance(observation, dict) and observation.get("ok") is True):
                errors += 1
                if first_error is None:
                    first_error = str(observation.get("error") if isinstance(observation, dict) else observation)
        pads = 0
        while pad_with and not env.done and pads <= config["turn_budget"]:
            env.call(pad_with, {})
            pads += 1
        outcome = env.outcome()
    except Exception:
        return {"exception": _short(traceback.format_exc(limit=3))}
    return {
        "utility": outcome.get("utility"),
        "terminal": outcome.get("terminal"),
        "turns_used": outcome.get("turns_used"),
        "errors": errors,
        "first_error": _short(first_error) if first_error else None,
        "obs_digest": digest.hexdigest(),
        "exception": None,
    }


def _digest(env):
    probe = getattr(env, "state_digest", None)
    return probe() if callable(probe) else None


def _fuzz(module, config, prefix, calls, rest):
    """Invalid calls mid-episode and after the end: each must be a structured error, state unchanged."""
    failures = []
    try:
        env = module.create(config)
        for step in prefix:
            env.call(step["tool"], step["arguments"])
        for phase, trajectory in (("mid-episode", []), ("after the end", rest)):
            for step in trajectory:
                env.call(step["tool"], step["arguments"])
            for call in calls if phase == "mid-episode" else calls[:3]:
                before = _digest(env)
                observation = env.call(call["tool"], call["arguments"])
                structured = (isinstance(observation, dict) and observation.get("ok") is False
                              and isinstance(observation.get("error"), str))
                if not structured or _digest(env) != before:
                    failures.append("%s %s(%s): %s" % (phase, call["tool"], json.dumps(call["arguments"])[:80],
                                                       "state changed" if structured else "not a structured error"))
    except Exception:
        return {"exception": _short(traceback.format_exc(limit=3))}
    return {"calls": len(calls) + 3, "failures": failures[:5], "failed": len(failures),
            "digest": _digest(env) is not None}


def _describe(module, config):
    try:
        env = module.create(config)
        return {"instruction": _short(str(env.instruction)), "tools": env.tools}
    except Exception:
        return {"exception": _short(traceback.format_exc(limit=3))}


def main(job_path, result_fd):
    with open(job_path, encoding="utf-8") as handle:
        job = json.load(handle)
    out = os.fdopen(result_fd, "w", encoding="utf-8")
    module = types.ModuleType("vhd_env")
    try:
        exec(compile(job["module"], "vhd_env.py", "exec"), module.__dict__)
    except BaseException:
        out.write(json.dumps({"import_error": _short(traceback.format_exc(limit=3))}) + "\n")
        out.flush()
        return
    for episode in job["episodes"]:
        record = {"key": episode["key"], "describe": _describe(module, episode["config"])}
        record["trajectories"] = [
            _play(module, episode["config"], trajectory, episode.get("pad_with"))
            for trajectory in episode["trajectories"]
        ]
        fuzz = episode.get("fuzz")
        if fuzz:
            record["fuzz"] = _fuzz(module, episode["config"], fuzz["prefix"], fuzz["calls"], fuzz["rest"])
        out.write(json.dumps(record) + "\n")
        out.flush()
    out.write(json.dumps({"end": True}) + "\n")
    out.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
