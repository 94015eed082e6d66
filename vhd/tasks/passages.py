"""The passage corpus: domain-tagged real-world passages that give a skin its vocabulary.

    >>> passages = builtin_passages()
    >>> passages[0].domain
    'bakery'
"""

from __future__ import annotations

import json
from importlib import resources

from vhd.schemas.records import PassageRecord


def builtin_passages() -> list[PassageRecord]:
    """The passages shipped with the package, in file order."""
    text = resources.files("vhd.tasks").joinpath("data/passages.jsonl").read_text(encoding="utf-8")
    return [PassageRecord.build(**json.loads(line)) for line in text.splitlines() if line.strip()]
