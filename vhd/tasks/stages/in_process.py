"""The stages wired in process, without Prefect or a warehouse: for tests, benchmarks, notebooks.

    >>> run = check_models(registry.get("knapsack"), count=2, seed=4)    # 2 θ, each in I and A
    >>> sum(v.admitted for v in run.verdicts), len(run.verdicts), len(run.outputs)
    (4, 4, 2)
"""

from __future__ import annotations

from dataclasses import dataclass

from vhd.mechanisms import Family
from vhd.schemas.records import ModelRecord, PassageRecord, SetterOutputRecord
from vhd.tasks.stages.annotate import by_module, make_candidates
from vhd.tasks.stages.check import Candidate, Verdict, check_batch
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.stages.solve import solve_models
from vhd.tasks.stages.synthesize import synthesize


@dataclass
class CheckedBatch:
    models: list[ModelRecord]
    outputs: list[SetterOutputRecord]
    candidates: list[Candidate]
    verdicts: list[Verdict]


def check_models(family: Family, count: int, seed: int, batch: str = "t", presentations: tuple[str, ...] = ("I", "A"),
                 passages: list[PassageRecord] | None = None) -> CheckedBatch:
    """sample → solve → synthesize → check, every module's candidates in one sandbox batch, and
    every candidate played whatever its θ (`every_candidate`: a family's tests judge its module
    on the θ that default_band rejects too)."""
    models = sample_models(family, count, seed, batch)
    solutions = {s.model_id: s for s in solve_models(family, models)}
    passages = passages if passages is not None else builtin_passages()
    outputs, assignment = synthesize(family, models, passages)
    candidates = make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs}, assignment,
                                 presentations, {p.passage_id: p for p in passages})
    verdicts = [v for output, group in by_module(outputs, candidates)
                for v in check_batch(family, output, group, every_candidate=True)]
    return CheckedBatch(models, outputs, candidates, verdicts)
