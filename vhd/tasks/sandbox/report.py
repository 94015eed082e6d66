"""A sandbox child's report: the result of a job, and the parsing of the child's signed records.

A report is a sequence of HMAC-signed JSON lines; `_parse` turns it (with the child's exit
status and the signal that ended it) into one `SandboxResult`: a forged, truncated or malformed
report, a non-finite number or a denied action is a verdict of its own (docs/RELIABILITY.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import signal
from dataclasses import dataclass, field
from typing import Any

from vhd.schemas.errors import SandboxError

TRANSIENT = ("wall_timeout",)  # statuses that are not a verdict on the module: retry the job


@dataclass
class SandboxResult:
    # ok | import_error | timeout | memory | oversize | crashed | violation | forged | invalid; wall_timeout (transient)
    status: str
    episodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    message: str = ""
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)
    isolation: str = ""
    scratch: str = ""

    @property
    def transient(self) -> bool:
        """The machine, not the module, ended the job: no verdict may be drawn from it."""
        return self.status in TRANSIENT

    def settled(self) -> "SandboxResult":
        """This result when it is a verdict on the module; SandboxError (a transient fault, which
        the flows retry) when it is not."""
        if self.transient:
            raise SandboxError(self.message or f"sandbox {self.status}")
        return self


MAX_REFUSAL = 300  # runner.MAX_REFUSAL: the longest refusal text a trajectory's `answers` may carry
_TRAJECTORY = ["utility", "terminal", "turns_used", "errors", "first_error", "obs_digest", "obs_numbers", "answers",
               "exception"]
_SHAPES = {
    "describe": (["instruction", "tools"], ["exception"]),
    "trajectory": (_TRAJECTORY, ["exception"]),
    "fuzz": (["calls", "played", "episodes", "failures", "failed", "digest"], ["exception"]),
}


class _Forged(Exception):
    pass


def _shape(kind: str, value: Any) -> None:
    if not isinstance(value, dict) or list(value) not in _SHAPES[kind]:
        raise _Forged(f"a {kind} report has keys {list(value) if isinstance(value, dict) else type(value).__name__}")


def _episode(record: dict[str, Any], expected_key: str | None) -> None:
    keys = list(record)
    if keys not in (["key", "describe", "trajectories"], ["key", "describe", "trajectories", "fuzz"]):
        raise _Forged(f"an episode record has keys {keys}")
    if record["key"] != expected_key:
        raise _Forged(f"episode {record['key']!r} where the job expects {expected_key!r} (unknown, duplicate or out of order)")
    _shape("describe", record["describe"])
    if not isinstance(record["trajectories"], list):
        raise _Forged("trajectories is not a list")
    for trajectory in record["trajectories"]:
        _shape("trajectory", trajectory)
        answers = trajectory.get("answers", [])
        if type(answers) is not list:  # exact types: the record is parsed JSON
            raise _Forged("a trajectory's answers are not [ok, text] pairs of the runner's size")
        for a in answers:
            if type(a) is not list or len(a) != 2 or type(a[0]) is not bool or type(a[1]) is not str \
                    or len(a[1]) > MAX_REFUSAL:
                raise _Forged("a trajectory's answers are not [ok, text] pairs of the runner's size")
    if "fuzz" in record:
        _shape("fuzz", record["fuzz"])


def _nonfinite(record: dict[str, Any]) -> str:
    """Where a NaN or infinity appears in an episode report ('' if nowhere).

    The utility of a trajectory that did not reach the end is not a verdict input and may be
    anything; every other number must be finite."""
    found: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            found.append(f"{where} = {value!r}")
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")

    for i, trajectory in enumerate(record["trajectories"]):
        for k, v in trajectory.items():
            if k != "utility" or trajectory.get("terminal") is True:
                walk(v, f"trajectory {i} {k}")
    walk(record["describe"], "describe")
    walk(record.get("fuzz"), "fuzz")
    return found[0] if found else ""


def _loads(payload: bytes) -> tuple[Any, bool]:
    """A record's JSON, and whether a non-finite number was parsed in it (NaN, ±Infinity, or a
    literal such as 1e999 that overflows): found while parsing, so that only such a record is
    walked by `_nonfinite` to say where."""
    seen: list[str] = []

    def constant(name: str) -> float:
        seen.append(name)
        return float(name)

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            seen.append(text)
        return value

    return json.loads(payload, parse_constant=constant, parse_float=number), bool(seen)


def _lines(data: bytes, key: bytes) -> tuple[list[tuple[dict[str, Any], bool]], str]:
    """The signed records up to the first line that is not one, each with whether it holds a
    non-finite number (`_loads`), and why that line was rejected."""
    records: list[tuple[dict[str, Any], bool]] = []
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        return records, "the result channel ended in the middle of a line"
    for seq, line in enumerate(lines):
        mac, _, payload = line.partition(b" ")
        good = hmac.new(key, b"%d:" % seq + payload, hashlib.sha256).hexdigest().encode("ascii")
        if not hmac.compare_digest(mac, good):
            return records, f"line {seq} of the result channel is not signed by the runner (forged, reordered or duplicated)"
        try:
            record, nonfinite = _loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return records, f"line {seq} is not JSON"
        if not isinstance(record, dict) or not record:
            return records, f"line {seq} is not a JSON object"
        records.append((record, nonfinite))
    return records, ""


def _parse(data: bytes, status: str, killed_by: int | None, returncode: int | None, stderr: bytes, key: bytes,
           expected: list[str], note: str = "") -> SandboxResult:
    stderr_tail = stderr[-2000:].decode("utf-8", "replace")
    if status in ("timeout", "wall_timeout", "oversize"):
        return SandboxResult(status, message=note or f"sandbox {status}: the module exceeded its limits")
    if killed_by in (signal.SIGXCPU, signal.SIGKILL):
        return SandboxResult("timeout", message=f"sandbox timeout: killed by signal {killed_by} (the CPU limit)")
    if killed_by == signal.SIGXFSZ:
        return SandboxResult("oversize", message="sandbox killed by SIGXFSZ: a file exceeded the file-size limit")
    records, forged = _lines(data, key)
    episodes: dict[str, dict[str, Any]] = {}
    violations: list[str] = []
    terminal: dict[str, Any] | None = None
    invalid = ""
    for record, nonfinite in records:
        if terminal is not None:
            forged = forged or "data after the end of the report"
            break
        kind = next(iter(record))
        try:
            if kind == "violation" and list(record) == ["violation"] and isinstance(record["violation"], str):
                violations.append(record["violation"])
            elif kind == "key":
                _episode(record, expected[len(episodes)] if len(episodes) < len(expected) else None)
                episodes[record["key"]] = record
                where = _nonfinite(record) if nonfinite and not invalid else ""
                invalid = invalid or (where and f"episode {record['key']}: {where}")
            elif kind == "end" and record == {"end": True, "episodes": len(expected)} and len(episodes) == len(expected):
                terminal = record
            elif kind in ("import_error", "memory") and list(record) == [kind] and isinstance(record[kind], str):
                terminal = record
            else:
                raise _Forged(f"unexpected record {json.dumps(record)[:200]}")
        except _Forged as exc:
            forged = forged or str(exc)
            break
    if (terminal and "memory" in terminal) or (not terminal and "MemoryError" in stderr_tail):
        return SandboxResult("memory", message="sandbox ran out of memory", violations=violations)
    if violations:
        return SandboxResult("violation", episodes, "sandbox violation: the module attempted denied actions: "
                             + "; ".join(violations)[:1000], violations=violations)
    if forged:
        return SandboxResult("forged", message="sandbox result forged: " + forged)
    if terminal and "import_error" in terminal:
        return SandboxResult("import_error", message="module failed to import: " + terminal["import_error"][-500:])
    if not terminal:
        if returncode == 0:
            return SandboxResult("forged", message="sandbox exited with code 0 before the end of the report "
                                                   "(an early exit or a forged result)")
        return SandboxResult("crashed", episodes, f"sandbox exited with code {returncode}: {stderr_tail[-300:]}")
    if returncode != 0:
        return SandboxResult("crashed", episodes, f"sandbox exited with code {returncode}: {stderr_tail[-300:]}")
    if invalid:
        return SandboxResult("invalid", episodes, "sandbox report has a non-finite number: " + invalid)
    return SandboxResult("ok", episodes)
