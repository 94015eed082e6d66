"""Stage 3, synthesize: a setter renders one module per (family, passage) in use.

    >>> from vhd.tasks.setters.passages import builtin_passages
    >>> from vhd.tasks.stages.sample import sample_models
    >>> models = sample_models(family, count=3, seed=7, batch="2026-12-02")    # family: inventory_dp
    >>> outputs, assignment = synthesize(family, models, builtin_passages())
    >>> len(outputs)                    # one module per passage in use: here each model drew its own
    3
    >>> assignment[models[0].model_id] == outputs[0].setter_output_id   # the module that serves this model
    True
"""

from __future__ import annotations

import hashlib

from vhd.mechanisms import Family
from vhd.schemas.records import ModelRecord, PassageRecord, SetterAttemptRecord, SetterOutputRecord, SolutionRecord
from vhd.tasks.setters.passages import passage_for
from vhd.tasks.setters.template import render_module
from vhd.tasks.stages.annotate import make_candidates
from vhd.tasks.stages.check import check_batch

__all__ = ["passage_for", "synthesize", "synthesize_with_llm"]


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


def synthesize_with_llm(setter, family: Family, models: list[ModelRecord], solutions: dict[str, SolutionRecord],
                        passages: list[PassageRecord], exemplars: list[SetterOutputRecord], presentations,
                        run_id: str = "") -> tuple[list[SetterOutputRecord], dict[str, str], list[SetterAttemptRecord]]:
    """Stage 3 with the LLM setter (`vhd.tasks.setters.anthropic.AnthropicSetter`): per passage in
    use, the setter writes a module, and the admission gates check it on the first model it serves;
    a failed gate's message goes back to the setter as a repair turn. Returns (outputs, assignment,
    attempt records); models whose passage got no module are left unassigned."""
    from vhd.tasks.setters.anthropic import SETTER, THETA_GATES, build_prompt, rewritten

    outputs: dict[str, SetterOutputRecord | None] = {}
    assignment: dict[str, str] = {}
    records: list[SetterAttemptRecord] = []
    played = tuple(p for p in presentations if p != "F") or ("A",)
    for model in models:
        passage = passage_for(model, passages)
        if passage.passage_id not in outputs:
            shots = exemplars or [render_module(family, passage)]

            def probe(output, model=model, passage=passage):
                cands = make_candidates(family, [model], {model.model_id: solutions[model.model_id]},
                                        {output.setter_output_id: output}, {model.model_id: output.setter_output_id},
                                        played, {passage.passage_id: passage})
                verdicts = check_batch(family, output, cands, every_candidate=True)
                # default_band judges θ (is u₀ in the family's band), not the module: no repair for it
                bad = [(v.candidate.presentation, g) for v in verdicts for g in v.gates
                       if not g.passed and g.name not in THETA_GATES]
                tools = next((v.tools for v in verdicts if v.tools), [])
                return (not bad, f"{bad[0][0]}: {bad[0][1].name}: {bad[0][1].message}" if bad else "", tools)

            llm = setter.settings.model
            res = setter.write(family, passage, probe,
                               build_prompt(family, model, passage, shots[: setter.settings.exemplars or 0]))
            outputs[passage.passage_id] = res.output
            oid = res.output.setter_output_id if res.output else ""
            records.append(SetterAttemptRecord(
                attempt_id=hashlib.sha256(f"{family.name}|{passage.passage_id}|{llm}|{oid}|"
                                          f"{run_id}".encode()).hexdigest(),
                setter_output_id=oid, family=family.name, passage_id=passage.passage_id, setter=SETTER,
                llm_model=llm, attempts=res.attempts, first_try=res.first_try, passed=res.passed,
                rewritten=bool(res.output) and rewritten(family, passage, res.output, res.tools),
                input_tokens=res.input_tokens, output_tokens=res.output_tokens, cost_usd=res.cost,
                reasons=res.reasons, run_id=run_id))
        out = outputs[passage.passage_id]
        if out is not None:
            assignment[model.model_id] = out.setter_output_id
    return [o for o in outputs.values() if o is not None], assignment, records
