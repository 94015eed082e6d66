"""Corpus presets: how many admitted environments of which family, split and presentation.

    >>> plan = preset("paper", registry.all())
    >>> sum(s.target for s in plan.slots), sorted({s.split for s in plan.slots})
    (3300, ['heldout', 'ood', 'train'])

A *slot* asks for `target` admitted environments of one family in one split. Its model seeds
derive from (run seed, family, slot batch, index) like any refresh, where the slot batch is
the run's batch key, suffixed for held-out draws, so held-out instances are new draws of the
training families that no training environment shares. A refresh fills a slot by walking
its seeds in index order and keeping candidates until `target` of them are admitted (the
rejections on the way are kept too, with their reasons): the same seed and batch always give
the same environments, and a rerun finds the slot full.

The splits follow the reference paper: `train` (the three training families), `heldout`
(new instances of those families) and `ood` (the eight unseen families of the other groups).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from vhd.mechanisms import Family
from vhd.schemas.errors import InvalidParams
from vhd.tasks.stages.sample import cell_batch

HELDOUT_SUFFIX = "+heldout"
PAPER_TRAIN, PAPER_HELDOUT, PAPER_OOD = 2200, 300, 800
DIAGNOSTIC_FAMILIES = ("inventory_dp", "knapsack", "lp", "qp", "routing")
DIAGNOSTIC_PER_FAMILY = 150
PAPER_OOD_GROUPS = ("near_ood", "far_ood", "probe_budgeted")


@dataclass(frozen=True)
class Slot:
    family: str
    split: str
    target: int
    knobs: tuple[tuple[str, int], ...] = ()  # a cell: every draw of the slot has these knobs

    def batch(self, batch: str) -> str:
        """The batch key this slot's seeds derive from; a cell's key names its knobs
        (`sample.cell_batch`), so each cell has its own seed stream and `sample_models` pins them."""
        key = batch + HELDOUT_SUFFIX if self.split == "heldout" else batch
        return cell_batch(key, dict(self.knobs)) if self.knobs else key

    @property
    def key(self) -> str:
        """A name for the slot unique within a preset: the family, `+heldout`, and a cell's knobs."""
        return self.batch(self.family)


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    presentations: tuple[str, ...]
    slots: tuple[Slot, ...]


def _spread(total: int, names: list[str]) -> list[int]:
    """`total` split as evenly as possible, the first names taking the remainder."""
    base, extra = divmod(total, len(names))
    return [base + (1 if k < extra else 0) for k in range(len(names))]


def _scaled(total: int, scale: float) -> int:
    return max(1, round(total * scale))


def paper(families: list[Family], scale: float = 1.0) -> Preset:
    train = sorted(f.name for f in families if f.group == "train")
    ood = sorted(f.name for f in families if f.group in PAPER_OOD_GROUPS)
    if not train or not ood:
        raise ValueError("the paper preset needs training families and unseen families registered")
    counts = [_scaled(n, scale) for n in (PAPER_TRAIN, PAPER_HELDOUT, PAPER_OOD)]
    slots = [Slot(n, "train", t) for n, t in zip(train, _spread(counts[0], train))]
    slots += [Slot(n, "heldout", t) for n, t in zip(train, _spread(counts[1], train))]
    slots += [Slot(n, "ood", t) for n, t in zip(ood, _spread(counts[2], ood))]
    return Preset("paper", f"the reference paper's mix: {counts[0]} train on {len(train)} families / "
                  f"{counts[1]} held-out / {counts[2]} on {len(ood)} unseen families, presentation A",
                  ("A",), tuple(s for s in slots if s.target > 0))


def _needs(families: list[Family], names: Iterable[str], preset_name: str) -> dict[str, Family]:
    """The families by name; a ValueError naming those of `names` missing."""
    known = {f.name: f for f in families}
    missing = [n for n in names if n not in known]
    if missing:
        raise ValueError(f"the {preset_name} preset needs families {missing}")
    return known


def diagnostic(families: list[Family], scale: float = 1.0) -> Preset:
    known = _needs(families, DIAGNOSTIC_FAMILIES, "diagnostic")
    per = _scaled(DIAGNOSTIC_PER_FAMILY, scale)
    slots = tuple(Slot(n, known[n].split, per) for n in DIAGNOSTIC_FAMILIES)
    return Preset("diagnostic", f"the five-family F/I/A diagnostic: {per} environments per family over "
                  "presentations F, I and A", ("F", "I", "A"), slots)


# The paper's co-scaling grid of the knapsack family, lots n × resources m (size × horizon), then
# beyond it up to the solver's reach (docs/BENCHMARKS.md "Headroom": every cell's median solve time),
# and routing's stops from its old limit (9) to MAX_STOPS = 18 at the widest time budget.
SCALING_PAPER_CELLS = ((6, 5), (8, 7), (9, 9), (11, 11))
SCALING_CELLS = {
    "knapsack": SCALING_PAPER_CELLS + ((14, 12), (20, 12), (30, 12), (50, 5), (100, 1)),
    "routing": ((9, 30), (12, 30), (14, 30), (16, 30), (18, 30)),
}
SCALING_PER_CELL = 20


def scaling(families: list[Family], scale: float = 1.0) -> Preset:
    known = _needs(families, SCALING_CELLS, "scaling")
    per = _scaled(SCALING_PER_CELL, scale)
    slots = tuple(Slot(name, known[name].split, per, (("horizon", m), ("size", n)))
                  for name, cells in SCALING_CELLS.items() for n, m in cells)
    for slot in slots:
        known[slot.family].params(dict(slot.knobs))  # InvalidParams if a cell is past the family's bounds
    grid = "; ".join(f"{name} " + ", ".join(f"{n}×{m}" for n, m in cells) for name, cells in SCALING_CELLS.items())
    return Preset("scaling", f"the paper's knapsack co-scaling grid (lots × resources) and beyond, and routing's "
                  f"stops × time budget: {grid}; {per} environments per cell, presentations I and A",
                  ("I", "A"), slots)


PRESETS = {"paper": paper, "diagnostic": diagnostic, "scaling": scaling}


def preset(name: str, families: list[Family], scale: float = 1.0) -> Preset:
    """The named preset over the registered `families`, every target multiplied by `scale`."""
    try:
        build = PRESETS[name]
    except KeyError:
        raise InvalidParams(f"unknown preset {name!r}; expected one of: {', '.join(PRESETS)}") from None
    if not 0 < scale <= 10:
        raise InvalidParams(f"a preset's scale must be in (0, 10], got {scale}")
    return build(families, scale)
