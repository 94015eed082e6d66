"""Content addressing: an artifact's id is the SHA-256 of its canonical JSON.

    >>> content_id("model", "inventory_dp@1", {"seed": 7})
    '…64 hex digits…'

The definition (also in docs/ARCHITECTURE.md):

    id = sha256( canonical_json({"kind": kind, "version": version, "content": content}) )

where canonical_json sorts keys, uses "," and ":" separators, keeps non-ASCII as UTF-8,
writes floats with Python's shortest round-trip repr, and refuses NaN and infinities.
"""

from __future__ import annotations

import hashlib
import json
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
