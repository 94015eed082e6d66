"""The parent's reading of a child's signed report: a non-finite number anywhere a verdict reads is
a verdict of its own ("invalid"), named by where it is; elsewhere the report is the child's.

The reader finds non-finite numbers while it parses (`json.loads`' hooks), and walks a record only
when one was parsed: these tests hold it to the walk over every part of an episode record.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math

import pytest

from vhd.tasks.sandbox.report import _nonfinite, _parse

KEY = b"k" * 32


def _signed(records: list[str]) -> bytes:
    """Each record's JSON text signed as the runner signs its lines."""
    lines = [hmac.new(KEY, b"%d:" % seq + text.encode(), hashlib.sha256).hexdigest().encode() + b" " + text.encode()
             for seq, text in enumerate(records)]
    return b"\n".join(lines) + b"\n"


def _trajectory(utility="1.5", terminal="true", numbers='["a1"]', first_error="null") -> str:
    return (f'{{"utility": {utility}, "terminal": {terminal}, "turns_used": 3, "errors": 0, "first_error": '
            f'{first_error}, "obs_digest": "d", "obs_numbers": {numbers}, "answers": [[true, "ab"]], "exception": null}}')


def _episode(key: str = "e", describe: str = '{"instruction": "x", "tools": []}', trajectories: list[str] | None = None,
             fuzz: str | None = None) -> str:
    text = f'{{"key": "{key}", "describe": {describe}, "trajectories": [{", ".join(trajectories or [_trajectory()])}]'
    if fuzz is not None:
        text += f', "fuzz": {fuzz}'
    return text + "}"


def _read(*episodes: str):
    keys = [json.loads(e)["key"] for e in episodes]
    data = _signed(list(episodes) + [json.dumps({"end": True, "episodes": len(episodes)})])
    return _parse(data, "ok", None, 0, b"", KEY, keys)


FUZZ = '{"calls": 1, "played": 1, "episodes": 1, "failures": [VALUE], "failed": 0, "digest": "f"}'
CASES = {
    "a terminal utility": [_episode(trajectories=[_trajectory(utility="NaN")])],
    "an infinite terminal utility": [_episode(trajectories=[_trajectory(utility="-Infinity")])],
    "a number in a trajectory field": [_episode(trajectories=[_trajectory(), _trajectory(numbers="[1.0, Infinity]")])],
    "a number in describe": [_episode(describe='{"instruction": "x", "tools": [{"bound": NaN}]}')],
    "a number in the fuzz report": [_episode(fuzz=FUZZ.replace("VALUE", "Infinity"))],
    "an overflowing literal": [_episode(trajectories=[_trajectory(numbers="[1e999]")])],
    "the second episode's": [_episode("a"), _episode("b", trajectories=[_trajectory(first_error="[2, -1e400]")])],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_non_finite_number_where_a_verdict_reads_makes_the_report_invalid(case):
    episodes = CASES[case]
    result = _read(*episodes)
    walked = [_nonfinite(json.loads(e)) for e in episodes]
    where = next(w for w in walked if w)
    assert result.status == "invalid"
    assert where in result.message  # the same place the walk names, the first episode that has one


@pytest.mark.parametrize("utility", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_the_utility_of_an_unfinished_trajectory_may_be_anything(utility):
    result = _read(_episode(trajectories=[_trajectory(utility=utility, terminal="false")]))
    assert result.status == "ok", result.message
    assert not math.isfinite(result.episodes["e"]["trajectories"][0]["utility"])


def test_finite_reports_are_read_as_they_are():
    episode = _episode(trajectories=[_trajectory(), _trajectory(utility="-2.25e3", numbers='[0.5, "len3"]')],
                       fuzz=FUZZ.replace("VALUE", "1e300"))
    result = _read(episode)
    assert result.status == "ok", result.message
    assert result.episodes["e"] == json.loads(episode)
