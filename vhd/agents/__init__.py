"""Scripted agents: each turns one admitted environment into a trajectory of tool calls.

    >>> calls = trajectory("greedy", Table(env, model, solution, setter_output, family), episode=0)
    >>> calls[0]                  # inventory_dp's order tool, named with the passage's unit
    {'tool': 'order_loaves', 'arguments': {'quantity': 9}}

| agent | what it plays |
|---|---|
| `oracle` | the stored reference trajectory: π*'s calls on the environment's episode seed |
| `default` | the stored default trajectory (the family's naive default policy) |
| `idle` | the family's idle policy (do nothing: order nothing, take nothing, stay home) |
| `random` | a valid random policy of the family (`Family.random_policy`, seeded by (episode seed, episode index)), cut at the turn budget |
| `greedy` | a myopic heuristic per family (`vhd/tasks/stages/greedy.py`); in A, like the prober, it reads the probes it can afford and applies the heuristic to what it read (a family without `probe_calls`/`belief`: it pays for every no-argument probe and reads θ) |
| `prober` | in A, reads every probe it can afford after keeping back π*'s turns, then plays the exact optimum of what it read (`vhd/agents/prober.py`); in F and I, where θ is told, π* |
| `sidechannel` | an adversary: in A, like the prober, but it also spends up to half its spare turns on refusals, decision answers and observations that could tell candidate θ apart, keeps the candidates whose answers match, and plays the best plan over them (`vhd/agents/sidechannel.py`); in F and I, π* |

A policy (π*, default, idle, random, greedy) is a feedback rule over the world's state (an
order per (day, stock) for inventory, a plan for the one-shot families). It is turned into
calls by the family's reference simulator on the environment's episode seed: the calls the
rule makes when it observes the states the world goes through. The `dynamics_agreement` gate
proved that the generated module goes through the same states for the same calls, so this
equals playing the rule turn by turn against the module. The calls are then *scored by
replaying them in the sandbox* (`tasks/grading/score.py`), never by the simulator.

In presentation F the trajectory is the one `submit_plan` call with the policy as its plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vhd.agents.prober import probe_then_play, reads_probes
from vhd.mechanisms import Family
from vhd.schemas.errors import InvalidParams
from vhd.schemas.records import EnvironmentRecord, ModelRecord, SetterOutputRecord, SolutionRecord

SCRIPTED = ("oracle", "default", "idle", "random", "greedy", "prober", "sidechannel")


@dataclass(frozen=True)
class Table:
    """Everything an agent and the scorer need about one environment."""

    env: EnvironmentRecord
    model: ModelRecord
    solution: SolutionRecord
    setter_output: SetterOutputRecord
    family: Family


def check_agent(name: str) -> str:
    if name not in SCRIPTED:
        raise InvalidParams(f"unknown agent {name!r}; expected one of: {', '.join(SCRIPTED)}")
    return name


def _policy(agent: str, t: Table, episode: int) -> np.ndarray:
    theta = t.model.theta
    if agent == "idle":
        return t.family.idle_policy(theta)
    if agent == "random":
        return t.family.random_policy(theta, np.random.default_rng([t.env.episode_seed, episode, 0xA6E7]))
    if agent in ("prober", "sidechannel"):  # θ is told (F, I), or the family declares no probe beliefs: π*, as stored
        from vhd.tasks.stages.solve import unpack_policy

        return unpack_policy(t.solution.policy)
    from vhd.tasks.stages.greedy import greedy_policy

    return greedy_policy(t.family, theta)


def _probes(t: Table) -> list[dict[str, Any]]:
    """Every no-argument probe once, in the module's names: what A's greedy player pays to read θ."""
    return [{"tool": t.setter_output.tool_name(spec.name), "arguments": {}}
            for spec in t.family.tools_with_role("probe") if not spec.input_schema.get("required")]


def trajectory(agent: str, t: Table, episode: int = 0) -> list[dict[str, Any]]:
    """The calls `agent` makes on `t.env` in episode number `episode` (only `random` depends on it)."""
    check_agent(agent)
    if agent == "oracle":
        return list(t.env.reference_trajectory)
    if agent == "default":
        return list(t.env.default_trajectory)
    if agent in ("prober", "greedy") and t.env.presentation == "A" and reads_probes(t.family):
        from vhd.tasks.stages.greedy import greedy_policy
        from vhd.tasks.stages.check import to_calls

        plan_of = (lambda known: greedy_policy(t.family, known)) if agent == "greedy" else None
        read, play = probe_then_play(t.family, t.model.theta, "A", t.env.turn_budget, t.env.episode_seed, plan_of)
        return to_calls(t.setter_output, read + play)
    if agent == "sidechannel" and t.env.presentation == "A" and reads_probes(t.family):
        from vhd.agents.sidechannel import infer_then_play
        from vhd.tasks.stages.check import to_calls

        run = infer_then_play(t.family, t.model.theta, t.model.knobs, t.env.turn_budget, t.env.episode_seed)
        return to_calls(t.setter_output, run.calls)
    policy = _policy(agent, t, episode)
    if t.env.presentation == "F":
        from vhd.tasks.grading import written

        return written.calls_for(policy)
    from vhd.tasks.stages.check import to_calls

    calls = to_calls(t.setter_output, t.family.simulate(t.model.theta, policy, t.env.episode_seed).calls)
    if agent == "greedy" and t.env.presentation == "A":
        calls = _probes(t) + calls
    return calls  # the module's own turn rule and call limit end the episode, as on every surface
