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

from vhd.mechanisms import Family
from vhd.schemas.errors import InvalidParams

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

    def batch(self, batch: str) -> str:
        """The batch key this slot's seeds derive from."""
        return batch + HELDOUT_SUFFIX if self.split == "heldout" else batch


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


def diagnostic(families: list[Family], scale: float = 1.0) -> Preset:
    known = {f.name: f for f in families}
    missing = [n for n in DIAGNOSTIC_FAMILIES if n not in known]
    if missing:
        raise ValueError(f"the diagnostic preset needs families {missing}")
    per = _scaled(DIAGNOSTIC_PER_FAMILY, scale)
    slots = tuple(Slot(n, known[n].split, per) for n in DIAGNOSTIC_FAMILIES)
    return Preset("diagnostic", f"the five-family F/I/A diagnostic: {per} environments per family over "
                  "presentations F, I and A", ("F", "I", "A"), slots)


PRESETS = {"paper": paper, "diagnostic": diagnostic}


def preset(name: str, families: list[Family], scale: float = 1.0) -> Preset:
    """The named preset over the registered `families`, every target multiplied by `scale`."""
    try:
        build = PRESETS[name]
    except KeyError:
        raise InvalidParams(f"unknown preset {name!r}; expected one of: {', '.join(PRESETS)}") from None
    if not 0 < scale <= 10:
        raise InvalidParams(f"a preset's scale must be in (0, 10], got {scale}")
    return build(families, scale)
