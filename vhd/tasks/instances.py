"""External instances: public benchmark files parsed into θ of a family, with their published optima.

    >>> source = read_source(Path("tests/data/knapsack/mknap1.txt"))          # --format auto → orlib
    >>> [(i.name, i.n, i.m, i.published) for i in source.instances][:2]
    [('mknap1.txt#1', 6, 10, 3800), ('mknap1.txt#2', 10, 10, 8706.1)]
    >>> models = import_models(registry.get("knapsack"), source)   # the instances the family can take
    >>> solved = solve_checked(family, models)     # InstanceError unless every u* is the published optimum

Only `knapsack` has an importer (`IMPORTERS`). Its two formats (docs/INSTANCES.md):

- `pisinger`: the 0/1 text format of Pisinger's / the "low-dimensional" instances: a first line
  `n W`, then n lines `value weight`. The published optimum is read from a sidecar file, either
  `FILE.optimum` or, as the public collection lays it out, `<dir>-optimum/<name>` next to
  `<dir>/<name>` (its first line; later lines such as an optimal 0/1 vector are ignored).
- `orlib`: OR-Library's multi-dimensional format (mknap1.txt, mknapcb*.txt): the number of
  problems, then per problem `n m optimum`, the n values, the m×n weights (row by row), the m
  capacities, read as one stream of numbers whatever the line breaks; an optimum of 0 means unknown.

A 0/1 instance is the m = 1 case of the knapsack θ. An instance the family cannot take (numbers
that are not whole, negative numbers, more lots or resources than its Params allow) is *refused*:
it keeps a one-line reason and is not imported. A model made here has the batch key
`import:<file name>:<first 12 hex of the file's sha256>`, the knobs {"size": n, "horizon": m} and
a seed derived from θ (`instance_seed`), so its ids depend on the file's content only. The audit
checks such a model against its source file instead of re-drawing θ from the seed (`verify_import`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from vhd.mechanisms import Family, registry
from vhd.schemas.errors import InvalidParams, VhdError
from vhd.schemas.hashing import canonical_json, sha256_hex
from vhd.schemas.records import ModelRecord, PassageRecord, RunRecord, SetterOutputRecord, SolutionRecord
from vhd.tasks.annotate import annotate, by_module, make_candidates
from vhd.tasks.check import Candidate, check_batch
from vhd.tasks.solve import solve_models
from vhd.tasks.synthesize import synthesize

BATCH_PREFIX = "import:"
FORMATS = ("pisinger", "orlib")
IMPORTERS: dict[str, tuple[str, ...]] = {"knapsack": FORMATS}  # family → the formats it can import
SEARCH_PATH = "VHD_INSTANCE_PATH"  # directories (os.pathsep-separated) the audit looks for source files in
SHIPPED = Path(__file__).resolve().parents[2] / "tests" / "data"  # the public instances shipped with the repo
TOLERANCE = 1e-9  # relative: u* against the published optimum


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


@dataclass(frozen=True)
class Imported:
    instance: Instance
    model: ModelRecord


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
        family.params({"size": n, "horizon": m})
    except InvalidParams:
        limits = ", ".join(f"{key} ≤ {meta.le}" for key, field in family.Params.model_fields.items()
                           for meta in field.metadata if getattr(meta, "le", None) is not None)
        return None, f"n = {n} lots, m = {m} resources is beyond the knapsack family's bounds ({limits})"
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


# --- models, solutions, gates ------------------------------------------------------------------


def importer_family(name: str) -> Family:
    family = registry.get(name)  # UnknownFamily for a name that is not registered
    if name not in IMPORTERS:
        raise InstanceError(f"family {name!r} has no instance importer; families with one: {', '.join(IMPORTERS)}")
    return family


def instance_seed(theta: dict[str, Any]) -> int:
    """The model seed of an imported θ: 63 bits of the sha256 of its canonical JSON."""
    return int(sha256_hex(canonical_json(theta))[:16], 16) & ((1 << 63) - 1)


def knobs_of(theta: dict[str, Any]) -> dict[str, int]:
    return {"size": theta["n_items"], "horizon": theta["n_resources"]}


def import_models(family: Family, source: Source) -> list[Imported]:
    """A ModelRecord per instance the family can take, in file order."""
    out = []
    for inst in source.instances:
        if inst.theta is None:
            continue
        model = ModelRecord.build(family=family.name, family_version=family.version, knobs=knobs_of(inst.theta),
                                  seed=instance_seed(inst.theta), theta=inst.theta, batch=source.batch)
        out.append(Imported(inst, model))
    return out


def matches(u_star: float, published: float | None) -> bool:
    return published is None or abs(u_star - published) <= TOLERANCE * max(1.0, abs(published))


def solve_checked(family: Family, imported: list[Imported]) -> dict[str, SolutionRecord]:
    """Solve every model; InstanceError at the first u* that is not the published optimum."""
    solutions = {}
    for item, solution in zip(imported, solve_models(family, [i.model for i in imported])):
        if not matches(solution.u_star, item.instance.published):
            raise InstanceError(f"{item.instance.name}: the published optimum is {item.instance.published} but the "
                                f"solver's u* is {solution.u_star:g}; nothing was written")
        solutions[item.model.model_id] = solution
    return solutions


def candidates_for(family: Family, imported: list[Imported], solutions: dict[str, SolutionRecord],
                   passages: list[PassageRecord], presentations: tuple[str, ...]
                   ) -> tuple[list[SetterOutputRecord], list[Candidate]]:
    models = [i.model for i in imported]
    outputs, assignment = synthesize(family, models, passages)
    candidates = make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs}, assignment,
                                 presentations, {p.passage_id: p for p in passages})
    return outputs, candidates


def run_gates(family: Family, outputs: list[SetterOutputRecord], pending: list[Candidate]) -> list[tuple]:
    """The real admission gates, one sandbox batch per module: [(environment, checks, edges)]."""
    verdicts = [v for output, group in by_module(outputs, pending) for v in check_batch(family, output, group)]
    return [annotate(family, v) for v in verdicts]


def report(source: Source, imported: list[Imported], solutions: dict[str, SolutionRecord],
           candidates: list[Candidate], verdicts: dict[str, tuple[bool, str]]) -> list[dict[str, Any]]:
    """One row per instance of the file: n, m, published, u*, and the verdict per presentation."""
    by_name = {i.instance.name: i for i in imported}
    rows = []
    for inst in source.instances:
        row: dict[str, Any] = {"name": inst.name, "n": inst.n, "m": inst.m, "published": inst.published}
        item = by_name.get(inst.name)
        if item is None:
            rows.append({**row, "status": "refused", "reason": inst.refused})
            continue
        mine = [c for c in candidates if c.model.model_id == item.model.model_id]
        row.update(status="imported", u_star=solutions[item.model.model_id].u_star, model_id=item.model.model_id,
                   verified=inst.published is not None,
                   admitted={c.presentation: verdicts[c.env_id][0] for c in mine},
                   reasons={c.presentation: verdicts[c.env_id][1] for c in mine if not verdicts[c.env_id][0]},
                   env_ids={c.presentation: c.env_id for c in mine})
        rows.append(row)
    return rows


def run_record(run_id: str, started_at: str, finished_at: str, code_version: str, family: Family, source: Source,
               presentations: tuple[str, ...], rows: list[dict[str, Any]]) -> RunRecord:
    """The event row of one import; the audit finds the source file again through `parameters["file"]`."""
    return RunRecord(
        run_id=run_id, flow="import-instances", started_at=started_at, finished_at=finished_at, status="completed",
        parameters={"family": family.name, "file": str(source.path.resolve()), "name": source.name,
                    "sha256": source.digest, "format": source.format, "presentations": list(presentations)},
        code_version=code_version,
        summary={"instances": [{k: r.get(k) for k in ("name", "status", "published", "u_star", "admitted")}
                               for r in rows]},
    )


# --- the audit's side --------------------------------------------------------------------------


def is_imported(model: ModelRecord) -> bool:
    return model.batch.startswith(BATCH_PREFIX)


def _split_batch(batch: str) -> tuple[str, str]:
    name, _, digest = batch[len(BATCH_PREFIX):].rpartition(":")
    return name, digest


def locate(name: str, digest12: str, family: str, hint: str | None = None) -> Path | None:
    """The source file called `name` whose sha256 starts with `digest12`: at the path the import run
    recorded, else in $VHD_INSTANCE_PATH's directories, else among the shipped tests/data/<family>."""
    places: list[Path] = [Path(hint)] if hint else []
    for root in [*(Path(d) for d in os.environ.get(SEARCH_PATH, "").split(os.pathsep) if d), SHIPPED / family]:
        if root.is_dir():
            places += [root / name, *sorted(root.rglob(name))]
    for place in places:
        if place.is_file() and place.name == name and sha256_hex(place.read_bytes()).startswith(digest12):
            return place
    return None


def verify_import(family: Family, model: ModelRecord, run: RunRecord | None, u_star: float) -> list[str]:
    """Problems with an imported model: θ must be an instance of its source file (found again and
    re-parsed), the knobs and seed must derive from θ, and u* must be the published optimum."""
    problems = []
    name, digest = _split_batch(model.batch)
    if not name or not re.fullmatch(r"[0-9a-f]{12}", digest):
        return [f"batch {model.batch!r} is not of the form import:<file name>:<12 hex digits of its sha256>"]
    theta = model.theta
    try:
        if model.knobs != knobs_of(theta):
            problems.append(f"knobs {model.knobs} do not match θ's size (n = {theta['n_items']}, "
                            f"m = {theta['n_resources']})")
    except (KeyError, TypeError):
        return [f"θ of {model.model_id[:12]} is not a {family.name} θ"]
    if model.seed != instance_seed(theta):
        problems.append("the seed of an imported model does not derive from its θ")
    params = run.parameters if run is not None and run.flow == "import-instances" else {}
    path = locate(name, digest, family.name, params.get("file"))
    if path is None:
        looked = [p for p in (params.get("file"), os.environ.get(SEARCH_PATH), str(SHIPPED / family.name)) if p]
        return problems + [(f"source file {name} (sha256 {digest}…) not found (looked in {', '.join(looked)}); "
                            f"put it in ${SEARCH_PATH}")]
    try:
        source = read_source(path, params.get("format", "auto"))
    except InstanceError as exc:
        return problems + [f"source file {path} no longer parses: {exc}"]
    found = [inst for inst in source.instances if inst.theta == theta]
    if not found:
        return problems + [f"θ is not among the instances parsed from {path}"]
    if not matches(u_star, found[0].published):
        problems.append(f"u* = {u_star:g} is not {found[0].name}'s published optimum {found[0].published}")
    return problems


def with_run(records: list, run_id: str) -> list:
    """The records stamped with the run that writes them (the run id stays out of every hash)."""
    return [r.model_copy(update={"run_id": run_id}) for r in records]
