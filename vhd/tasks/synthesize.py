"""Stage 3, synthesize: a setter renders one module per (family, passage) in use.

    >>> from vhd.tasks.passages import builtin_passages
    >>> from vhd.tasks.sample import sample_models
    >>> models = sample_models(family, count=3, seed=7, batch="2026-12-02")    # family: inventory_dp
    >>> outputs, assignment = synthesize(family, models, builtin_passages())
    >>> len(outputs)                    # one module per passage in use: here each model drew its own
    3
    >>> assignment[models[0].model_id] == outputs[0].setter_output_id   # the module that serves this model
    True
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
