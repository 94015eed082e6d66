"""Stage 1, sample: θ draws of a family from recorded seeds.

    >>> from vhd.mechanisms import registry
    >>> inventory = registry.get("inventory_dp")
    >>> models = sample_models(inventory, count=3, seed=7, batch="2026-12-02")
    >>> [m.knobs for m in models]
    [{'horizon': 69, 'size': 19}, {'horizon': 103, 'size': 22}, {'horizon': 44, 'size': 27}]
    >>> draw(inventory, models[0].seed) == (models[0].knobs, models[0].theta)   # (knobs, θ) again
    True

Each model's seed is derived from (run seed, family, batch, index) through numpy's
SeedSequence; the knobs and then θ are drawn from one Generator built from that seed, so
`draw(family, model.seed)` reproduces a model exactly (the audit does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vhd.mechanisms import Family
from vhd.schemas.errors import InvalidParams
from vhd.schemas.hashing import sha256_hex
from vhd.schemas.records import ModelRecord

# θ draws per family in one run (`--per-family`: one round holds them all)
MAX_PER_FAMILY = 1000
# θ draws per round of a preset's slot: a round holds its candidates' rows (the environment with
# its reference trajectories, its checks: ~150 KB a candidate, two presentations a draw) until it
# is written, so a slot of any size fills in rounds of at most this many draws and the flow's
# memory is bounded by the round, not by the slot or the corpus (docs/BENCHMARKS.md)
ROUND_DRAWS = 250


def _key(text: str) -> int:
    return int(sha256_hex(text)[:8], 16)


def model_seed(seed: int, family: str, batch: str, index: int) -> int:
    """The recorded seed of the index-th model of a family in a batch (63 bits)."""
    state = np.random.SeedSequence([seed, _key(family), _key(batch), index]).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def episode_seed(model_seed_value: int) -> int:
    """The episode seed of a model's environments (the demand path, the noise draws…)."""
    state = np.random.SeedSequence([model_seed_value, 1]).generate_state(1, dtype=np.uint32)
    return int(state[0])


def draw(family: Family, seed: int, knobs: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(knobs, θ) from one seed: knobs uniformly from the family's ranges unless given."""
    rng = np.random.default_rng(seed)
    drawn = {name: int(rng.integers(lo, hi + 1)) for name, (lo, hi) in sorted(family.knob_ranges.items())}
    knobs = drawn if knobs is None else dict(knobs)
    theta = family.sample(family.params(knobs), rng)
    return knobs, theta


CELL = "+cell:"  # a batch key's suffix naming pinned knobs: "2026-12-02+cell:horizon=5,size=6"


def cell_batch(batch: str, knobs: dict[str, int]) -> str:
    """The batch key of a preset cell: `batch` with its pinned knobs (sorted by name)."""
    return batch + CELL + ",".join(f"{name}={int(value)}" for name, value in sorted(knobs.items()))


def cell_knobs(batch: str) -> dict[str, int] | None:
    """The knobs a cell's batch key pins (None for an ordinary batch): every model of the batch has
    them, and `draw(family, model.seed, cell_knobs(model.batch))` reproduces it."""
    if CELL not in batch:
        return None
    pairs = [item.partition("=") for item in batch.rpartition(CELL)[2].split(",")]
    if not all(name and value.lstrip("-").isdigit() for name, _, value in pairs):
        raise InvalidParams(f"batch key {batch[:80]!r} names a cell ({CELL}) but not as knob=integer pairs; "
                            "expected e.g. 2026-12-04+cell:horizon=5,size=6")
    return {name: int(value) for name, _, value in pairs}


def sample_models(family: Family, count: int, seed: int, batch: str, start: int = 0) -> list[ModelRecord]:
    """Models `start` … `start + count − 1` of a family's seed stream in a batch (with the knobs a
    cell's batch key pins, `cell_knobs`; otherwise drawn from the family's knob ranges)."""
    pinned = cell_knobs(batch)
    models = []
    for index in range(start, start + count):
        s = model_seed(seed, family.name, batch, index)
        knobs, theta = draw(family, s, pinned)
        models.append(ModelRecord.build(family=family.name, family_version=family.version, knobs=knobs,
                                        seed=s, theta=theta, batch=batch))
    return models
