"""Instance files: public benchmark files parsed into θ of a family, with their published optima.

    >>> from vhd.tasks.corpus.instances import SHIPPED      # the public instances in the repository's tests/data
    >>> source = read_source(SHIPPED / "knapsack" / "mknap1.txt")          # --format auto → orlib
    >>> [(i.name, i.n, i.m, i.published) for i in source.instances][:2]
    [('mknap1.txt#1', 6, 10, 3800), ('mknap1.txt#2', 10, 10, 8706.1)]

The knapsack family's two formats (docs/INSTANCES.md):

- `pisinger`: the 0/1 text format of Pisinger's / the "low-dimensional" instances: a first line
  `n W`, then n lines `value weight`. The published optimum is read from a sidecar file, either
  `FILE.optimum` or, as the public collection lays it out, `<dir>-optimum/<name>` next to
  `<dir>/<name>` (its first line; later lines such as an optimal 0/1 vector are ignored).
- `orlib`: OR-Library's multi-dimensional format (mknap1.txt, mknapcb*.txt): the number of
  problems, then per problem `n m optimum`, the n values, the m×n weights (row by row), the m
  capacities, read as one stream of numbers whatever the line breaks; an optimum of 0 means unknown.

A 0/1 instance is the m = 1 case of the knapsack θ. An instance the family cannot take (numbers
that are not whole, negative numbers, more lots or resources than its Params allow: n ≤ 100 with one
resource, n ≤ 50 with two or more, m ≤ 12) is *refused*:
it keeps a one-line reason and is not imported. A file's batch key is
`import:<file name>:<first 12 hex of the file's sha256>` (`Source.batch`). What is done with the
parsed instances (models, solutions, gates, the warehouse, the audit) is `vhd.tasks.corpus.instances`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vhd.mechanisms import registry
from vhd.schemas.errors import VhdError
from vhd.schemas.hashing import sha256_hex

BATCH_PREFIX = "import:"
FORMATS = ("pisinger", "orlib")


class InstanceError(VhdError):
    """An instance file that cannot be read, parsed or imported, or a published optimum the solver misses."""


@dataclass(frozen=True)
class Number:
    text: str
    line: int
    value: Fraction


@dataclass(frozen=True)
class Instance:
    """One problem of a source file: θ of the family (None when refused) and its published optimum."""

    name: str
    line: int  # where the problem starts in the file
    n: int
    m: int
    theta: dict[str, Any] | None
    published: float | None  # None: unknown (OR-Library's 0, or no sidecar file)
    refused: str = ""


@dataclass(frozen=True)
class Source:
    path: Path
    name: str
    digest: str  # sha256 of the file's bytes
    format: str
    instances: tuple[Instance, ...]

    @property
    def batch(self) -> str:
        return f"{BATCH_PREFIX}{self.name}:{self.digest[:12]}"


# --- numbers ---------------------------------------------------------------------------------


def _numbers(text: str, name: str, first_line: int = 1) -> list[Number]:
    out = []
    for k, line in enumerate(text.splitlines(), start=first_line):
        for token in line.split():
            try:
                value = Fraction(token)
            except (ValueError, ZeroDivisionError):
                raise InstanceError(f"{name} line {k}: expected a number, got {token!r}") from None
            out.append(Number(token, k, value))
    return out


def _several(count: int) -> str:
    return f"{count} number" + ("" if count == 1 else "s")


def _plain(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def _count(number: Number, name: str, what: str) -> int:
    if number.value.denominator != 1 or number.value < 1:
        raise InstanceError(f"{name} line {number.line}: {what} must be a positive whole number, got {number.text}")
    return int(number.value)


def _theta(n: int, m: int, values: list[Number], weights: list[list[Number]], capacities: list[Number]
           ) -> tuple[dict[str, Any] | None, str]:
    """The knapsack θ of one problem, or (None, why the family cannot take it)."""
    for what, numbers in (("values", values), ("weights", [w for row in weights for w in row]),
                          ("capacities", capacities)):
        for number in numbers:
            if number.value.denominator != 1:
                return None, (f"{what} are not all whole numbers ({number.text} on line {number.line}); "
                              "the knapsack family takes integer data only")
            if number.value < 0:
                return None, f"{what} must not be negative ({number.text} on line {number.line})"
    family = registry.get("knapsack")
    try:
        family.Params(size=n, horizon=m)
    except ValidationError as exc:
        limits = ", ".join(f"{key} ≤ {meta.le}" for key, field in family.Params.model_fields.items()
                           for meta in field.metadata if getattr(meta, "le", None) is not None)
        joint = [e["msg"].removeprefix("Value error, ") for e in exc.errors() if not e["loc"]]
        why = joint[0] if joint else limits
        return None, f"n = {n} lots, m = {m} resources is beyond the knapsack family's bounds ({why})"
    return {
        "n_items": n,
        "n_resources": m,
        "values": [int(v.value) for v in values],
        "weights": [[int(w.value) for w in row] for row in weights],
        "capacities": [int(c.value) for c in capacities],
    }, ""


def _instance(name: str, line: int, n: int, m: int, values, weights, capacities, published) -> Instance:
    theta, refused = _theta(n, m, values, weights, capacities)
    return Instance(name, line, n, m, theta, published, refused)


# --- the two formats -----------------------------------------------------------------------


def parse_pisinger(text: str, name: str, published: float | None = None) -> tuple[Instance, ...]:
    """`n W`, then n lines `value weight` (blank lines allowed anywhere, nothing else after the items)."""
    rows = [(k, line.split()) for k, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not rows:
        raise InstanceError(f"{name} is empty; expected a first line 'n W'")
    k, header = rows[0]
    if len(header) != 2:
        raise InstanceError(f"{name} line {k}: expected 'n W' (number of items, capacity), got {_several(len(header))}")
    n_num, cap = _numbers(" ".join(header), name, k)
    n = _count(n_num, name, "the number of items n")
    items = rows[1:]
    if len(items) < n:
        last = items[-1][0] if items else k
        raise InstanceError(f"{name} line {last}: the file ends after {len(items)} of the {n} item lines")
    if len(items) > n:
        raise InstanceError(f"{name} line {items[n][0]}: more than the {n} item lines the header announces")
    values, weights = [], []
    for k, fields in items:
        if len(fields) != 2:
            raise InstanceError(f"{name} line {k}: expected 'value weight', got {_several(len(fields))}")
        value, weight = _numbers(" ".join(fields), name, k)
        values.append(value)
        weights.append(weight)
    return (_instance(name, 1, n, 1, values, [weights], [cap], published),)


def parse_orlib(text: str, name: str) -> tuple[Instance, ...]:
    """OR-Library mknap: P, then per problem `n m optimum`, n values, m×n weights, m capacities."""
    numbers = _numbers(text, name)
    if not numbers:
        raise InstanceError(f"{name} is empty; expected the number of problems first")
    at = 0

    def take(count: int, what: str) -> list[Number]:
        nonlocal at
        if at + count > len(numbers):
            last = numbers[-1].line
            raise InstanceError(f"{name} line {last}: the file ends inside problem {problem} (reading {what})")
        chunk = numbers[at:at + count]
        at += count
        return chunk

    problem = 0
    count = _count(take(1, "the number of problems")[0], name, "the number of problems")
    out = []
    for problem in range(1, count + 1):
        head = take(3, "'n m optimum'")
        n = _count(head[0], name, f"problem {problem}'s number of items n")
        m = _count(head[1], name, f"problem {problem}'s number of constraints m")
        if head[2].value < 0:
            raise InstanceError(f"{name} line {head[2].line}: problem {problem}'s optimum must not be negative")
        published = None if head[2].value == 0 else _plain(head[2].value)
        values = take(n, f"the {n} values")
        weights = [take(n, f"row {r + 1} of the {m}×{n} weights") for r in range(m)]
        capacities = take(m, f"the {m} capacities")
        out.append(_instance(f"{name}#{problem}", head[0].line, n, m, values, weights, capacities, published))
    if at < len(numbers):
        raise InstanceError(f"{name} line {numbers[at].line}: more data after the {count} problems "
                            "the first line announces")
    return tuple(out)


def detect(text: str, name: str) -> str:
    """orlib when the first non-blank line is one number (the problem count), pisinger when two."""
    for k, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if fields:
            if len(fields) == 1:
                return "orlib"
            if len(fields) == 2:
                return "pisinger"
            raise InstanceError(f"{name} line {k}: {_several(len(fields))}; expected 'n W' (pisinger) or the number "
                                "of problems (orlib); pass --format")
    raise InstanceError(f"{name} is empty")


def sidecar_optimum(path: Path) -> float | None:
    """The published optimum of a pisinger file: FILE.optimum or <dir>-optimum/<name>, if present."""
    found: dict[Path, int | float] = {}
    for candidate in (path.with_name(path.name + ".optimum"),
                      path.parent.parent / f"{path.parent.name}-optimum" / path.name):
        if candidate.is_file():
            text = _read(candidate).decode("utf-8", errors="replace")
            lines = [(k, line.split()) for k, line in enumerate(text.splitlines(), start=1) if line.strip()]
            if not lines or len(lines[0][1]) != 1:
                k = lines[0][0] if lines else 1
                raise InstanceError(f"{candidate} line {k}: expected the published optimum alone on the first line")
            number = _numbers(lines[0][1][0], str(candidate), lines[0][0])[0]
            found[candidate] = _plain(number.value)
    if len(set(found.values())) > 1:
        raise InstanceError(f"{path.name}: the optimum files disagree: "
                            + ", ".join(f"{p} says {v}" for p, v in found.items()))
    return next(iter(found.values()), None)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InstanceError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_source(path: Path, fmt: str = "auto") -> Source:
    """Read and parse one instance file (InstanceError with the line number when it is malformed)."""
    path = Path(path)
    if fmt not in ("auto", *FORMATS):
        raise InstanceError(f"--format must be auto, {' or '.join(FORMATS)}; got {fmt!r}")
    raw = _read(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InstanceError(f"{path.name}: not a text file ({exc.reason} at byte {exc.start})") from None
    fmt = detect(text, path.name) if fmt == "auto" else fmt
    instances = (parse_pisinger(text, path.name, sidecar_optimum(path)) if fmt == "pisinger"
                 else parse_orlib(text, path.name))
    return Source(path, path.name, sha256_hex(raw), fmt, instances)
