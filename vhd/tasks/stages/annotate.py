"""Stage 5, annotate: verdicts in, environment, check and lineage records out.

    env, checks, edges = annotate(family, verdict)

`make_candidates`, which runs before check, lives in `check.candidates` beside the versions
in every environment id (ANNOTATOR_VERSION, CODE_VERSION); this module re-exports them.
"""

from __future__ import annotations

from vhd.mechanisms import Family
from vhd.schemas.records import CheckRecord, EnvironmentRecord, LineageEdge, SetterOutputRecord, SolutionRecord
from vhd.tasks.stages import difficulty
from vhd.tasks.grading import written
from vhd.tasks.stages.check import Candidate, Verdict, to_calls
from vhd.tasks.stages.check.candidates import ANNOTATOR_VERSION, CHECKER_VERSION, CODE_VERSION, make_candidates
from vhd.tasks.stages.solve import unpack_policy

__all__ = ["ANNOTATOR_VERSION", "CODE_VERSION", "annotate", "by_module", "make_candidates", "upstream_edges"]


def annotate(family: Family, verdict: Verdict) -> tuple[EnvironmentRecord, list[CheckRecord], list[LineageEdge]]:
    """The environment record of one verdict (admitted or not), its check records and its lineage edges.
    An admitted environment carries its difficulty (`tasks/difficulty.measure`), measured here."""
    c, refs = verdict.candidate, verdict.references
    if refs is None:  # presentation F: expected values as the plan grader computes them, one submit_plan call
        u_star, u_default = verdict.graded
        reference = written.calls_for(unpack_policy(c.solution.policy))
        default = written.calls_for(family.default_policy(c.model.theta))
    else:
        u_star, u_default = refs.optimal.utility, refs.default.utility
        reference = to_calls(c.setter_output, refs.optimal.calls)
        default = to_calls(c.setter_output, refs.default.calls)
    env = EnvironmentRecord(
        env_id=c.env_id, family=family.name, presentation=c.presentation, split=c.split or family.split,
        model_id=c.model.model_id, solution_id=c.solution.solution_id, setter_output_id=c.setter_output.setter_output_id,
        episode_seed=c.episode_seed, turn_budget=c.turn_budget, knobs=c.model.knobs,
        u_star=u_star, u_default=u_default, u_idle=verdict.idle, reference_trajectory=reference, default_trajectory=default,
        instruction=verdict.instruction, tools=verdict.tools, admitted=verdict.admitted, reason=verdict.reason,
        gate_seconds={g.name: round(g.seconds, 6) for g in verdict.gates}, annotator_version=CODE_VERSION,
        difficulty=difficulty.measure(family, c.model, c.solution, c.presentation) if verdict.admitted else {},
    )
    checks = [
        CheckRecord.build(env_id=c.env_id, gate=g.name, passed=g.passed, message=g.message,
                          checker_version=CHECKER_VERSION, seconds=g.seconds)
        for g in verdict.gates
    ]
    edges = [
        LineageEdge(child_id=c.env_id, parent_id=c.model.model_id, relation="instance_of"),
        LineageEdge(child_id=c.env_id, parent_id=c.solution.solution_id, relation="graded_by"),
        LineageEdge(child_id=c.env_id, parent_id=c.setter_output.setter_output_id, relation="rendered_by"),
        *(LineageEdge(child_id=check.check_id, parent_id=c.env_id, relation="checks") for check in checks),
    ]
    return env, checks, edges


def upstream_edges(solutions: list[SolutionRecord], outputs: list[SetterOutputRecord]) -> list[LineageEdge]:
    """Edges from solutions to their models and from modules to their passages."""
    return [
        *(LineageEdge(child_id=s.solution_id, parent_id=s.model_id, relation="solves") for s in solutions),
        *(LineageEdge(child_id=o.setter_output_id, parent_id=o.passage_id, relation="skinned_by") for o in outputs),
    ]


def by_module(outputs: list[SetterOutputRecord], candidates: list[Candidate]) -> list[tuple[SetterOutputRecord, list[Candidate]]]:
    """Candidates grouped by the module that serves them (one sandbox batch each); empty groups dropped."""
    groups = [(o, [c for c in candidates if c.setter_output.setter_output_id == o.setter_output_id]) for o in outputs]
    return [(o, group) for o, group in groups if group]
