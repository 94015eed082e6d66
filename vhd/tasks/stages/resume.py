"""Is a slot already done? Answered from the warehouse's counts, so that a rerun of a finished
batch starts no task at all.

    >>> from vhd.tasks.stages.check import CODE_VERSION
    >>> from vhd.tasks.setters.passages import builtin_passages
    >>> passages = builtin_passages()
    >>> state = wh.slot_state("inventory_dp", family.version, "doctest", [p.passage_id for p in passages])
    >>> slot = dict(target=None, presentations=("I",), split="train", env_version=CODE_VERSION, passages=passages,
    ...             stages=("sample", "solve", "synthesize", "check", "annotate"), timed=())
    >>> row = stored_slot(family, state, per_family=1, **slot)   # the batch holds its one model's every row
    >>> row["computed"]["check"], row["found"]["check"], row["reused"]
    (0, 1, 1)
    >>> stored_slot(family, state, per_family=2, **slot) is None   # a second model wanted: the full pass runs
    True

`refresh_family` computes a slot round by round: sample, solve, synthesize, check, annotate,
then one transaction writes the kept rows. Every id is a content hash of its inputs and the
version of the code that made it, so when the stored rows of a batch are exactly what one more
pass would keep, that pass would compute nothing and find exactly those rows. This module
recognises that case from `Warehouse.slot_state` and returns the summary row the pass would
have returned (every `computed` count 0, `found` = the stored rows). Anything else (a version
bump, a changed passage set, a World or runtime edited without a bump, a partly written slot,
a slot written for another target) returns None, and the full pass runs.

Only the template setter's modules can be re-derived this cheaply (one render per slot: the
setter's output depends only on the family's code and the passage); LLM setter runs always take
the full pass.
"""

from __future__ import annotations

from typing import Any

from vhd.mechanisms import Family
from vhd.schemas.records import PassageRecord
from vhd.tasks.setters.template import SETTER, SETTER_VERSION, render_module


def stored_slot(family: Family, state: dict[str, Any], *, per_family: int | None, target: int | None,
                presentations: tuple[str, ...], split: str, env_version: str, passages: list[PassageRecord],
                stages: tuple[str, ...], timed: tuple[str, ...]) -> dict[str, Any] | None:
    """The summary row of a slot whose stored rows are exactly what a full pass would keep, or None."""
    models = state["models"]
    if not models or state["env_models"] != models or state["misassigned"]:
        return None
    if set(state["setters"]) != {(SETTER, SETTER_VERSION)}:
        return None
    if any(s != split or p not in presentations or v != env_version for s, p, v, _ in state["envs"]):
        return None
    envs = sum(state["envs"].values())
    admitted = sum(n for (_, _, _, ok), n in state["envs"].items() if ok)
    if target is None:  # per_family mode stores every candidate of the first per_family models
        if models != per_family or envs != models * len(presentations):
            return None
    elif admitted != target:  # a preset slot stores the prefix up to its target-th admitted candidate
        return None
    passage_id, module_id = state["sample"]
    by_id = {p.passage_id: p for p in passages}
    if passage_id not in by_id or render_module(family, by_id[passage_id]).setter_output_id != module_id:
        return None  # the family's World, the runtime or the setter changed without a version bump
    found = {"sample": models, "solve": state["solutions"], "synthesize": state["modules"], "check": envs,
             "annotate": envs}
    row = {"split": split, "admitted": 0, "rejected": 0, "reused": envs, "reasons": {},
           "computed": dict.fromkeys(stages, 0), "found": {stage: found[stage] for stage in stages},
           "stage_seconds": dict.fromkeys(timed, 0.0)}
    if target is not None:
        row.update(target=target, filled=admitted, short=0)
    return row
