"""Refreshes that follow a learner: its results in, per family the θ to make next out.

    >>> rows = read_results_text('{"env_id": "e1", "reward": 0.9}\\n{"env_id": "e1", "reward": 0.7}\\n', "r.jsonl")
    >>> rows
    {'e1': 0.8}
    >>> read_results_text("env_id,reward\\ne2,1.5\\n", "r.csv")
    Traceback (most recent call last):
    ...
    vhd.schemas.errors.InvalidParams: --follow r.csv line 2: reward 1.5 is not in [0, 1]; expected rows of env_id, reward (JSONL objects with those keys, or CSV with that header)

`vhd refresh --follow RESULTS [--follow-band 0.3:0.7]` reads a learner's results (`read_results`:
JSON Lines whose objects carry `env_id` and `reward`, e.g. the episodes `vhd eval` stores, one a
line; or a CSV whose header names `env_id` and `reward`; several rows of one environment are
averaged), joins them with the stored difficulty of the environments played (their knobs and the
prober's loss in their presentation: `tasks/stages/difficulty.py`), and fits, per family, the learner's
expected reward as a line in those two figures (`fit`: least squares, with a tiny ridge so that
one knob value or one loss still gives a fit):

    r̂(θ, presentation) = clip01(b0 + b1·knob_position + b2·(1 − prober))

The next corpus version's environments of that family are the sampled candidates whose r̂ lies in
the target band less a tenth of its width at each end (`Aim.aim`: 0.34–0.66 for the default
0.3–0.7, so that the fit's error leaves the mean inside), found like a
`--difficulty` band's (seeded draws in order, a bounded number of tries). A family is not aimed at
(`Aim.reason` says why, and the refresh makes nothing of it) when the learner's results there are
too few (< MIN_RESULTS) or flat (its reward does not move with what the knobs and the difficulty
vary: no θ can be chosen for it); a family whose slot comes back short is reported with the
predicted rewards the tries found. The plan (`plan_of`) is recorded in the run's parameters and
summary and in the next version's manifest (`follow`), with the environments it made.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from vhd.schemas.errors import InvalidParams
from vhd.schemas.hashing import content_id

DEFAULT_BAND = (0.3, 0.7)
MIN_RESULTS = 3  # a family with fewer results is not aimed at
FLAT = 1e-3  # a fit whose predictions over what was played span less than this is flat
RIDGE = 1e-6
AIM_MARGIN = 0.1  # the aim leaves this share of the band's width out at each end
EXPECTED = "expected rows of env_id, reward (JSONL objects with those keys, or CSV with that header)"


def read_results(path: str | Path, what: str = "--follow") -> dict[str, float]:
    """{env_id: mean reward} of a results file; InvalidParams of one line naming the problem."""
    p = Path(path)
    if not p.is_file():
        raise InvalidParams(f"{what} {path}: no such file; {EXPECTED}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidParams(f"{what} {path}: cannot be read ({type(exc).__name__}); {EXPECTED}") from None
    return read_results_text(text, str(path), what)


def _reward(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise InvalidParams(f"{where}: reward {value!r} is not a number; {EXPECTED}")
    try:
        reward = float(value)
    except (TypeError, ValueError):
        raise InvalidParams(f"{where}: reward {value!r} is not a number; {EXPECTED}") from None
    if not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
        raise InvalidParams(f"{where}: reward {value} is not in [0, 1]; {EXPECTED}")
    return reward


def _env_id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidParams(f"{where}: env_id {value!r} is not an environment id; {EXPECTED}")
    return value.strip()


def read_results_text(text: str, source: str, what: str = "--follow") -> dict[str, float]:
    rows: list[tuple[str, float]] = []
    lines = text.splitlines()
    first = next((line.strip() for line in lines if line.strip()), "")
    if not first:
        raise InvalidParams(f"{what} {source}: the file holds no rows; {EXPECTED}")
    if first.startswith("{"):
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{what} {source} line {number}"
            try:
                row = json.loads(line)
            except ValueError:
                raise InvalidParams(f"{where}: not a JSON object; {EXPECTED}") from None
            if not isinstance(row, dict) or "env_id" not in row or "reward" not in row:
                raise InvalidParams(f"{where}: no env_id and reward keys; {EXPECTED}")
            rows.append((_env_id(row["env_id"], where), _reward(row["reward"], where)))
    else:
        reader = csv.reader(io.StringIO(text))
        header = [h.strip() for h in next(reader, [])]
        if "env_id" not in header or "reward" not in header:
            raise InvalidParams(f"{what} {source} line 1: the header {','.join(header)[:80]!r} does not name env_id "
                                f"and reward; {EXPECTED}")
        at, reward_at = header.index("env_id"), header.index("reward")
        for number, record in enumerate(reader, 2):
            if not any(cell.strip() for cell in record):
                continue
            where = f"{what} {source} line {number}"
            if len(record) <= max(at, reward_at):
                raise InvalidParams(f"{where}: {len(record)} fields, the header has {len(header)}; {EXPECTED}")
            rows.append((_env_id(record[at], where), _reward(record[reward_at].strip(), where)))
    if not rows:
        raise InvalidParams(f"{what} {source}: the file holds no rows; {EXPECTED}")
    sums: dict[str, list[float]] = {}
    for env_id, reward in rows:
        sums.setdefault(env_id, []).append(reward)
    return {env_id: math.fsum(r) / len(r) for env_id, r in sums.items()}


def results_digest(results: dict[str, float]) -> str:
    """The digest of a results file's rows as read ({env_id: mean reward}): what the run records."""
    return content_id("follow-results", "results@1", sorted([k, round(v, 12)] for k, v in results.items()))


def features(difficulty: dict[str, Any]) -> tuple[float, float] | None:
    """(knob_position, the prober's loss in the environment's presentation) of a stored measure."""
    if not difficulty or difficulty.get("score") is None:
        return None
    prober = (difficulty.get("agents") or {}).get("prober") or {}
    reward = prober.get("A") if difficulty.get("presentation") == "A" else prober.get("I")
    if reward is None:
        return None
    return float(difficulty["knob_position"]), 1.0 - float(reward)


@dataclass(frozen=True)
class Aim:
    """One family's plan: the fitted line, the reward band its new θ are chosen in, why (not)."""

    family: str
    band: tuple[float, float]          # the learner's target band
    aim: tuple[float, float]           # predicted rewards accepted: the band less AIM_MARGIN of it at each end
    coefficients: tuple[float, ...]    # b0, b1 (knob_position), b2 (prober's loss); () when not fitted
    played: int                        # environments of the family in the results
    mean_reward: float | None          # the learner's mean reward on them
    predicted_range: tuple[float, float] | None  # r̂ over what it played
    reason: str = ""                   # '' when aimed at; else why the family is left as it is

    @property
    def aimed(self) -> bool:
        return not self.reason

    def predict(self, difficulty: dict[str, Any]) -> float | None:
        x = features(difficulty)
        if x is None or not self.coefficients:
            return None
        b0, b1, b2 = self.coefficients
        return min(1.0, max(0.0, b0 + b1 * x[0] + b2 * x[1]))

    def accepts(self, difficulty: dict[str, Any]) -> bool:
        r = self.predict(difficulty)
        return r is not None and self.aim[0] <= r <= self.aim[1]

    kind = "follow"

    def value(self, difficulty: dict[str, Any]) -> float | None:
        """What a candidate is chosen by: the learner's predicted reward."""
        return self.predict(difficulty)

    def describe(self) -> str:
        return f"the learner's predicted reward {self.aim[0]:g}–{self.aim[1]:g}"

    def key(self) -> str:
        """The batch suffix of the environments made for this aim: its own seed stream."""
        return "~f" + content_id("follow-aim", "aim@1", self.record())[:10]

    def record(self) -> dict[str, Any]:
        out = asdict(self)
        out["band"], out["aim"] = list(self.band), list(self.aim)
        out["coefficients"] = [round(c, 12) for c in self.coefficients]
        out["predicted_range"] = list(self.predicted_range) if self.predicted_range else None
        return out


def fit(points: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """Least squares r ≈ b0 + b1·k + b2·h over (k, h, r) points, with a tiny ridge on b1, b2."""
    x = np.array([[1.0, k, h] for k, h, _ in points])
    y = np.array([r for _, _, r in points])
    penalty = np.diag([0.0, RIDGE, RIDGE]) * len(points)
    beta = np.linalg.solve(x.T @ x + penalty, x.T @ y)
    return float(beta[0]), float(beta[1]), float(beta[2])


def aim_family(family: str, played: list[tuple[dict[str, Any], float]],
               band: tuple[float, float] = DEFAULT_BAND) -> Aim:
    """The plan for one family from (stored difficulty, the learner's reward) of what it played."""
    margin = (band[1] - band[0]) * AIM_MARGIN
    aim = (round(band[0] + margin, 12), round(band[1] - margin, 12))
    points = [(*x, r) for d, r in played if (x := features(d)) is not None]
    rewards = [r for _, r in played]
    mean = math.fsum(rewards) / len(rewards) if rewards else None
    base = dict(family=family, band=band, aim=aim, played=len(played),
                mean_reward=None if mean is None else round(mean, 12))
    if len(points) < MIN_RESULTS:
        return Aim(**base, coefficients=(), predicted_range=None,
                   reason=f"{len(points)} results with a stored difficulty; at least {MIN_RESULTS} are needed to aim")
    b = fit(points)
    predicted = [min(1.0, max(0.0, b[0] + b[1] * k + b[2] * h)) for k, h, _ in points]
    span = (round(min(predicted), 12), round(max(predicted), 12))
    aimed = Aim(**base, coefficients=b, predicted_range=span)
    if span[1] - span[0] < FLAT:
        where = "above" if mean is not None and mean > band[1] else "below" if mean is not None and mean < band[0] \
            else "in"
        return replace(aimed, reason=f"the learner's reward ({mean:.3f} on {len(points)} environments, {where} the "
                                     "band) does not move with the knobs or the stored difficulty: no θ of this "
                                     "family can be aimed at")
    return aimed


def plan_of(results: dict[str, float], envs: Iterable[Any], band: tuple[float, float] = DEFAULT_BAND,
            families: list[str] | None = None) -> dict[str, Aim]:
    """One Aim per family the learner played (of `families`, when given): `envs` are the stored
    EnvironmentRecords of the results' ids."""
    by_family: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for env in envs:
        if env.env_id in results and (families is None or env.family in families):
            by_family.setdefault(env.family, []).append((env.difficulty, results[env.env_id]))
    return {name: aim_family(name, rows, band) for name, rows in sorted(by_family.items())}


def played_presentations(envs: Iterable[Any], results: dict[str, float]) -> tuple[str, ...]:
    found = {env.presentation for env in envs if env.env_id in results}
    return tuple(p for p in ("F", "I", "A") if p in found)


def check_results(results: dict[str, float], stored: dict[str, Any], source: str) -> None:
    """Every env id of the results is a stored environment (a unique prefix is not enough here)."""
    unknown = [e for e in results if e not in stored]
    if unknown:
        raise InvalidParams(f"--follow {source}: {len(unknown)} of {len(results)} env ids are not environments of "
                            f"this warehouse, e.g. {unknown[0][:40]!r}; expected the ids of environments it holds")
