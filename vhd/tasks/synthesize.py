"""Stage 3, synthesize: a setter renders one module per (family, passage) in use.

    >>> outputs, assignment = synthesize(family, models, passages)
    >>> assignment[models[0].model_id]  # the setter_output_id that serves this model
"""

from __future__ import annotations

from vhd.mechanisms import Family
from vhd.schemas.records import ModelRecord, PassageRecord, SetterOutputRecord
from vhd.tasks.setters.template import render_module


def passage_for(model: ModelRecord, passages: list[PassageRecord]) -> PassageRecord:
    """The passage that skins a model: fixed by its seed, so reruns pick the same world."""
    ordered = sorted(passages, key=lambda p: p.passage_id)
    return ordered[model.seed % len(ordered)]


def synthesize(
    family: Family, models: list[ModelRecord], passages: list[PassageRecord]
) -> tuple[list[SetterOutputRecord], dict[str, str]]:
    outputs: dict[str, SetterOutputRecord] = {}
    assignment: dict[str, str] = {}
    for model in models:
        passage = passage_for(model, passages)
        if passage.passage_id not in outputs:
            outputs[passage.passage_id] = render_module(family, passage)
        assignment[model.model_id] = outputs[passage.passage_id].setter_output_id
    return list(outputs.values()), assignment
