"""Content addressing: an artifact's id is the SHA-256 of its canonical JSON.

    >>> content_id("model", "inventory_dp@1", {"seed": 7})
    '5a63b7fd635227d1...'
    >>> content_id("model", "inventory_dp@1", {"seed": 7}) == content_id("model", "inventory_dp@1", {"seed": 8})
    False

The definition (also in docs/ARCHITECTURE.md):

    id = sha256( canonical_json({"kind": kind, "version": version, "content": content}) )

where canonical_json sorts keys, uses "," and ":" separators, keeps non-ASCII as UTF-8,
writes floats with Python's shortest round-trip repr, and refuses NaN and infinities.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any


def canonical_json(value: Any) -> str:
    """Serialise `value` the one way the ids are defined on."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def content_id(kind: str, version: str, content: Any) -> str:
    """The id of an artifact of `kind`, made by code at `version`, with `content`."""
    return sha256_hex(canonical_json({"kind": kind, "version": version, "content": content}))


DIGEST_HEX = 16  # a field digest is the first 16 hex digits (64 bits) of a SHA-256


def field_digest(value: Any) -> str:
    """The digest of one stored value, cut to DIGEST_HEX hex digits: SHA-256 of its UTF-8 text
    (a VARCHAR; JSON columns are stored as text, so their text is what is hashed) or of its bytes
    (a BLOB), each behind a type tag; any other value (a number, a boolean, NULL) by its JSON.
    NaN and infinities are written as JSON's NaN/Infinity, so a digest never refuses a row."""
    if isinstance(value, str):
        return hashlib.sha256(b"str:" + value.encode("utf-8")).hexdigest()[:DIGEST_HEX]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return hashlib.sha256(b"blob:" + bytes(value)).hexdigest()[:DIGEST_HEX]
    if value is None or isinstance(value, bool):
        text = "null" if value is None else "true" if value else "false"
    elif isinstance(value, float):
        text = repr(value) if math.isfinite(value) else json.dumps(value)  # shortest round trip, as JSON writes it
    elif isinstance(value, int):
        text = str(value)
    else:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(b"json:" + text.encode("utf-8")).hexdigest()[:DIGEST_HEX]


def field_digests(row: dict[str, Any]) -> dict[str, str]:
    """{column: field_digest(value)} of a row as the warehouse stores it: the audit recomputes
    them from the stored row to name the field that changed after the row was written."""
    return {name: field_digest(value) for name, value in row.items()}


# columns added after migration 006 -> the default a row written before them holds: such a row's
# digests cannot name them, and the column is accepted undigested only while it holds that default
LATE_COLUMNS = {"difficulty": "{}"}  # migration 007


def digest_problems(row: dict[str, Any], column: str = "field_digests") -> list[tuple[str, str]]:
    """(field, problem) for every field of a stored row whose value no longer matches the digest
    written with it (the row's `column`, canonical JSON {field: digest}); [] for an intact row."""
    raw = row.get(column)
    if not raw:
        return [(column, "unsealed: the row carries no field digests (written before migration 006)")]
    try:
        stored = json.loads(raw)
    except (TypeError, ValueError):
        return [(column, "not JSON")]
    if not isinstance(stored, dict):
        return [(column, "not a JSON object")]
    fresh = field_digests({k: v for k, v in row.items() if k != column})
    problems = [(name, "changed after the row was written (its value no longer matches its digest)")
                for name in sorted(fresh) if name in stored and stored[name] != fresh[name]]
    problems += [(name, "has no digest") for name in sorted(set(fresh) - set(stored))
                 if not (name in LATE_COLUMNS and row.get(name) == LATE_COLUMNS[name])]
    problems += [(column, f"names a field the row does not have: {name}") for name in sorted(set(stored) - set(fresh))]
    return problems
