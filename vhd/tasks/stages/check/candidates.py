"""What check judges: a candidate environment, the simulator's episodes on its seed, its verdict.

    >>> CODE_VERSION  # in every candidate's environment id: new gates give new ids
    '1+checker11'

Candidates are built here (`make_candidates`), before check, and re-exported by annotate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vhd.mechanisms import Episode, Family
from vhd.schemas.records import EnvironmentRecord, ModelRecord, PassageRecord, SetterOutputRecord, SolutionRecord
from vhd.tasks.grading import written
from vhd.tasks.stages.sample import episode_seed
from vhd.tasks.setters.skin import shown_calls
from vhd.tasks.setters.template import narrative
from vhd.tasks.stages.solve import unpack_policy

CHECKER_VERSION = "11"  # what the gates prove (CHANGELOG.md lists each version's change)
ANNOTATOR_VERSION = "1"  # how annotate.py builds an environment record from a verdict
# an environment's id covers the code that judged it: new gates (a CHECKER_VERSION bump) give new ids
CODE_VERSION = f"{ANNOTATOR_VERSION}+checker{CHECKER_VERSION}"
RANDOM_TRAJECTORIES = 3
NOT_RUN = "not run: "  # the message of a gate recorded as failed without being run


@dataclass(frozen=True)
class Candidate:
    """One would-be environment: a solved θ, a module, a presentation, an episode seed."""

    env_id: str
    model: ModelRecord
    solution: SolutionRecord
    setter_output: SetterOutputRecord
    presentation: str
    episode_seed: int
    turn_budget: int
    narrative: str = ""
    split: str = ""

    def config(self) -> dict[str, Any]:
        return {"params": self.model.theta, "presentation": self.presentation,
                "episode_seed": self.episode_seed, "turn_budget": self.turn_budget}


def candidate_from(env: Any, model: ModelRecord, solution: SolutionRecord, output: SetterOutputRecord,
                   narrative: str = "") -> Candidate:
    """The candidate a stored environment was made from (to check it again, or its mutants)."""
    return Candidate(env.env_id, model, solution, output, env.presentation, env.episode_seed, env.turn_budget,
                     narrative, env.split)


def make_candidates(
    family: Family,
    models: list[ModelRecord],
    solutions: dict[str, SolutionRecord],
    outputs: dict[str, SetterOutputRecord],
    assignment: dict[str, str],
    presentations: tuple[str, ...],
    passages: dict[str, PassageRecord] | None = None,
    split: str | None = None,
) -> list[Candidate]:
    """One candidate per (model, presentation), in model order; `solutions` keyed by model_id,
    `outputs` by id, `passages` by id (they give presentation F its narrative); `split`
    defaults to the family's."""
    candidates = []
    for model in models:
        solution, output = solutions[model.model_id], outputs[assignment[model.model_id]]
        seed = episode_seed(model.seed)
        passage = (passages or {}).get(output.passage_id)
        story = narrative(passage) if passage else ""
        for presentation in presentations:
            budget = written.TURN_BUDGET if presentation == "F" else family.turn_budget(model.theta)
            env_id = EnvironmentRecord.id_for(
                CODE_VERSION, family=family.name, presentation=presentation, model_id=model.model_id,
                solution_id=solution.solution_id, setter_output_id=output.setter_output_id,
                episode_seed=seed, turn_budget=budget,
            )
            candidates.append(Candidate(env_id, model, solution, output, presentation, seed, budget, story,
                                        split or family.split))
    return candidates


@dataclass(frozen=True)
class References:
    """The family simulator's episodes on the candidate's seed, and exact expected values."""

    optimal: Episode
    default: Episode
    idle: Episode
    random: list[Episode]
    random_values: list[float]

    def episodes(self) -> list[tuple[str, Episode]]:
        """Every episode by name: optimal, default, idle, random_0, random_1, ..."""
        named = [("optimal", self.optimal), ("default", self.default), ("idle", self.idle)]
        return named + [(f"random_{k}", ep) for k, ep in enumerate(self.random)]

    def baselines(self) -> list[tuple[str, Episode]]:
        """Every episode but π*'s, by name: the policies π* is compared with."""
        return [(name, episode) for name, episode in self.episodes() if name != "optimal"]


def references(family: Family, candidate: Candidate) -> References:
    """π*, the default, the idle policy and RANDOM_TRAJECTORIES random policies simulated on the
    candidate's episode seed, and the random policies' exact expected values."""
    theta, seed = candidate.model.theta, candidate.episode_seed
    rng = np.random.default_rng([seed, 0x5EED])
    policies = [family.random_policy(theta, rng) for _ in range(RANDOM_TRAJECTORIES)]
    return References(
        optimal=family.simulate(theta, unpack_policy(candidate.solution.policy), seed),
        default=family.simulate(theta, family.default_policy(theta), seed),
        idle=family.simulate(theta, family.idle_policy(theta), seed),
        random=[family.simulate(theta, policy, seed) for policy in policies],
        random_values=[family.evaluate(theta, policy) for policy in policies],
    )


def to_calls(setter_output: SetterOutputRecord, canonical: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Canonical tool calls as the module's player makes them (`skin.shown_calls`: its tool names,
    argument names and ids)."""
    return shown_calls(setter_output, canonical)


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict on one candidate: passed or not, why, and the seconds it took."""

    name: str
    passed: bool
    message: str
    seconds: float = 0.0


@dataclass
class Verdict:
    """Every gate's result on one candidate, and what the admitted environment records."""

    candidate: Candidate
    references: References | None  # None in presentation F: no episode is played
    gates: list[GateResult] = field(default_factory=list)
    instruction: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    graded: tuple[float, float] | None = None  # presentation F: (u*, u₀) as the plan grader computes them
    idle: float | None = None  # what doing nothing realizes (I, A: the module's episode finished at once; F: E[idle])

    @property
    def admitted(self) -> bool:
        """Whether every gate passed."""
        return all(gate.passed for gate in self.gates)

    @property
    def reason(self) -> str:
        """The first gate that failed when it ran (the gates after it may be recorded as not run)."""
        failed = [gate for gate in self.gates if not gate.passed]
        ran = [gate for gate in failed if not gate.message.startswith(NOT_RUN)]
        return f"{(ran or failed)[0].name}: {(ran or failed)[0].message}" if failed else ""
