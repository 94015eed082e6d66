"""The passage corpus: domain-tagged real-world passages that give a skin its vocabulary.

    >>> passages = builtin_passages()
    >>> passages[0].domain
    'bakery'
    >>> import json
    >>> good = passages[0].model_dump(include={"domain", "source", "text", "vocabulary"})
    >>> bad = {**good, "vocabulary": {k: v for k, v in good["vocabulary"].items() if k != "currency"}}
    >>> path = scratch / "my_passages.jsonl"        # a user's corpus: JSONL or Parquet
    >>> with path.open("w") as file:
    ...     for line in (good, bad):
    ...         print(json.dumps(line), file=file)
    >>> records, errors = load_passages(path)
    >>> len(records), errors
    (1, ['row 2: vocabulary lacks currency'])

The rules a row must meet are in docs/PASSAGES.md.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from vhd.schemas.errors import PassageFormatError, SetterError, VhdError
from vhd.schemas.records import VOCABULARY_KEYS, ModelRecord, PassageRecord

# The parts a passage may give its own word for. They name the SQLite tables (`<site>_<word>`),
# which the player does not see; the only one that reaches a tool name is `staff` (rostering's
# `list_<staff>`). A tool's name is a verb and a noun of the passage's domain's lexicon
# (`vhd/tasks/setters/lexicon.py`, `vhd/tasks/setters/data/lexicon.json`) with the passage's unit, staff or
# supplier in their slots, never a synonym in place of a word of the name (the synonyms made
# `place_escort` and `view_safebox`). A domain the lexicon does not know takes the families' own
# words. Every built-in passage gives the first six; the last five are optional.
CORE_SYNONYMS = ("order", "orders", "stock", "cash", "day", "sales")
EXTRA_SYNONYMS = ("item", "items", "shift", "staff", "roster")
SYNONYM_PARTS = CORE_SYNONYMS + EXTRA_SYNONYMS
_WORD = re.compile(r"[a-z]+")
_ROW_FIELDS = ("domain", "source", "text", "vocabulary")
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")


def builtin_passages() -> list[PassageRecord]:
    """The passages shipped with the package, in file order."""
    text = resources.files("vhd.tasks.setters").joinpath("data/passages.jsonl").read_text(encoding="utf-8")
    return [PassageRecord.build(**json.loads(line)) for line in text.splitlines() if line.strip()]


def load_passages(path: str | Path) -> tuple[list[PassageRecord], list[str]]:
    """A user's passage file (JSONL, one object a line, or Parquet) → (valid passages, errors).

    Each error reads "row N: reason" (N is 1-based: the line number in JSONL, the row number in
    Parquet). Invalid rows are left out and the rest are returned, in file order. A file that
    cannot be read at all raises `PassageFormatError`."""
    path = Path(path)
    rows = _read_rows(path)
    records: list[PassageRecord] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    for number, row in rows:
        try:
            record = _validate(row)
        except _Reject as exc:
            errors.append(f"row {number}: {exc}")
            continue
        if record.passage_id in seen:
            errors.append(f"row {number}: the same passage as row {seen[record.passage_id]}")
            continue
        seen[record.passage_id] = number
        records.append(record)
    return records, errors


# -- reading ---------------------------------------------------------------------------------
def _read_rows(path: Path) -> list[tuple[int, Any]]:
    if not path.is_file():
        raise PassageFormatError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return _read_parquet(path)
    if suffix in JSONL_SUFFIXES:
        return _read_jsonl(path)
    raise PassageFormatError(f"{path}: unknown format {suffix or '(no suffix)'!r}; use .jsonl or .parquet")


class _BadJson:
    def __init__(self, reason: str):
        self.reason = reason


def _read_jsonl(path: Path) -> list[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PassageFormatError(f"{path}: cannot read as UTF-8 text: {exc}") from exc
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            rows.append((number, _BadJson(f"not valid JSON ({exc.msg} at column {exc.colno})")))
    return rows


def _read_parquet(path: Path) -> list[tuple[int, Any]]:
    import polars as pl

    try:
        frame = pl.read_parquet(path)
    except Exception as exc:  # polars raises several exception types for a bad file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PassageFormatError(f"{path}: cannot read as Parquet: {first}") from exc
    return [(number, _drop_nulls(row)) for number, row in enumerate(frame.to_dicts(), start=1)]


def _drop_nulls(value: Any) -> Any:
    """Parquet structs share one schema across rows, so a key one row lacks reads back as null."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    return value


# -- validating ------------------------------------------------------------------------------
class _Reject(Exception):
    """One row's reason for being left out."""


def _validate(row: Any) -> PassageRecord:
    if isinstance(row, _BadJson):
        raise _Reject(row.reason)
    if not isinstance(row, dict):
        raise _Reject(f"expected an object, got {type(row).__name__}")
    unknown = sorted(set(row) - set(_ROW_FIELDS) - {"passage_id"})
    if unknown:
        raise _Reject(f"unknown fields {unknown}")
    for name in ("domain", "source", "text"):
        if name not in row:
            raise _Reject(f"missing {name}")
        if not isinstance(row[name], str) or not row[name].strip():
            raise _Reject(f"{name} must be a non-empty string")
    vocabulary = row.get("vocabulary")
    if isinstance(vocabulary, str):  # a Parquet file may hold it as JSON text
        try:
            vocabulary = _drop_nulls(json.loads(vocabulary))
        except json.JSONDecodeError:
            raise _Reject("vocabulary is a string that is not JSON") from None
    if vocabulary is None:
        raise _Reject("missing vocabulary")
    if not isinstance(vocabulary, dict):
        raise _Reject("vocabulary must be an object")
    vocabulary = _check_vocabulary(vocabulary)
    record = PassageRecord.build(domain=row["domain"], source=row["source"], text=row["text"], vocabulary=vocabulary)
    if "passage_id" in row and row["passage_id"] != record.passage_id:
        raise _Reject(f"passage_id {str(row['passage_id'])[:16]} does not match its content ({record.passage_id[:16]})")
    _check_renders(record)
    return record


def _check_vocabulary(vocabulary: dict) -> dict:
    missing = [key for key in VOCABULARY_KEYS if key not in vocabulary]
    if missing:
        raise _Reject(f"vocabulary lacks {', '.join(missing)}")
    unknown = sorted(set(vocabulary) - set(VOCABULARY_KEYS) - {"synonyms", "lexicon"})
    if unknown:
        raise _Reject(f"vocabulary has unknown keys {unknown}")
    for key in VOCABULARY_KEYS:
        if not isinstance(vocabulary[key], str) or not vocabulary[key].strip():
            raise _Reject(f"vocabulary.{key} must be a non-empty string")
    if not re.match(r"[a-z]", re.sub(r"[^a-z0-9]+", "_", vocabulary["site"].lower()).strip("_")):
        raise _Reject("vocabulary.site must start with a letter (it prefixes the table names)")
    clean = {key: vocabulary[key] for key in VOCABULARY_KEYS}
    if "synonyms" in vocabulary:
        synonyms = vocabulary["synonyms"]
        if not isinstance(synonyms, dict):
            raise _Reject("vocabulary.synonyms must be an object")
        unknown = sorted(set(synonyms) - set(SYNONYM_PARTS))
        if unknown:
            raise _Reject(f"vocabulary.synonyms has unknown parts {unknown}; allowed: {', '.join(SYNONYM_PARTS)}")
        for part, word in synonyms.items():
            if not isinstance(word, str) or not _WORD.fullmatch(word):
                raise _Reject(f"vocabulary.synonyms.{part} must be one lowercase word ([a-z]+), got {word!r}")
        clean["synonyms"] = {part: synonyms[part] for part in SYNONYM_PARTS if part in synonyms}
    if "lexicon" in vocabulary:  # the passage's own verbs and nouns for its tools' names
        from vhd.tasks.setters.lexicon import entry_problem

        problem = entry_problem(vocabulary["lexicon"])
        if problem:
            raise _Reject(f"vocabulary.lexicon: {problem}")
        clean["lexicon"] = vocabulary["lexicon"]
    return clean


def _check_renders(record: PassageRecord) -> None:
    """Every registered family must be able to take the passage's skin (two tools or two tables
    given one name, or a tool name the contract does not allow, would make it unusable for that family)."""
    from vhd.mechanisms import registry
    from vhd.tasks.setters.template import render_module

    for family in registry.all():
        try:
            out = render_module(family, record)
        except SetterError:
            raise _Reject(f"its words give two tools or two tables of {family.name} the same name") from None
        except (VhdError, KeyError, ValueError) as exc:
            raise _Reject(f"cannot skin {family.name}: {exc}") from None
        bad = [b.name for b in out.interface if not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", b.name)]
        if bad:
            raise _Reject(f"gives {family.name} invalid tool names {bad}")


def passage_for(model: ModelRecord, passages: list[PassageRecord]) -> PassageRecord:
    """The passage that skins a model: fixed by its seed, so reruns pick the same world."""
    ordered = sorted(passages, key=lambda p: p.passage_id)
    return ordered[model.seed % len(ordered)]
