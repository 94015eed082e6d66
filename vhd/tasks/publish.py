"""Stage 6, publish: the manifest of a corpus version.

    >>> manifest = build_manifest(wh.environment_keys())
    >>> manifest["digest"] == previous["digest"]   # nothing changed: publish nothing
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from vhd.schemas.hashing import content_id


def build_manifest(envs: list[dict[str, str]]) -> dict[str, Any]:
    """Sorted env ids, counts per family, split and presentation, and a digest of the ids;
    `envs` are rows with those keys (`Warehouse.environment_keys`)."""
    ids = sorted(e["env_id"] for e in envs)
    return {
        "env_ids": ids,
        "counts": {
            "family": dict(sorted(Counter(e["family"] for e in envs).items())),
            "split": dict(sorted(Counter(e["split"] for e in envs).items())),
            "presentation": dict(sorted(Counter(e["presentation"] for e in envs).items())),
        },
        "digest": content_id("corpus", "manifest@1", ids),
    }


def next_version(existing: list[str]) -> str:
    numbers = [int(v[1:]) for v in existing if v.startswith("v") and v[1:].isdigit()]
    return f"v{max(numbers, default=0) + 1}"
