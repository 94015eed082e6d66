"""The `prober`: reads every probe it can afford, then plays the exact optimum of what it read.

    >>> from vhd.mechanisms import registry
    >>> from vhd.tasks.sample import draw
    >>> knapsack = registry.get("knapsack")
    >>> _, theta = draw(knapsack, 3)
    >>> read, play = probe_then_play(knapsack, theta, "A", knapsack.turn_budget(theta), episode_seed=0)
    >>> [call["tool"] for call in read][:3]      # what it paid for, in the family's reading order
    ['read_capacities', 'inspect_item', 'inspect_item']
    >>> play[-1]["tool"]
    'submit_selection'

It is the measuring stick of presentation A (issue 16): in I, θ is told, so it reads nothing and
plays π* (reward 1); in A it keeps back the turns that π*'s longest play needs (over fixed
episode seeds, `reserved_turns`), spends the rest on `Family.probe_calls(θ)` in order (skipping a probe it cannot afford), forms
`Family.belief(θ, read)` — what it read, and the family's stated guess for everything else — and
plays the exact optimum of that belief with the family's own solver. What it loses in A is the
value of what the budget left unread. It reads the probes' answers through `belief`, never
through π* or θ's unread entries.

Its play is the belief-optimal plan turned into calls by the family's simulator on the true θ
(a feedback rule observes the true states, as every scripted agent's does); a plan the true θ
refuses (a selection that overflows a capacity the prober guessed) is offered call by call as
simulated on its belief, and the world refuses what does not fit.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from vhd.mechanisms import Family
from vhd.schemas.errors import InvalidParams
from vhd.tasks.budget import reserved_turns


def reads_probes(family: Family) -> bool:
    """Whether the family tells the prober what its probes show (`probe_calls` and `belief`)."""
    return family.probe_calls is not None and family.belief is not None


def affordable(family: Family, theta: dict[str, Any], budget: int) -> list[dict[str, Any]]:
    """The probe calls, in the family's reading order, that fit in `budget` turns (a probe that
    does not fit is skipped; a cheaper one after it may still fit)."""
    read, used = [], 0
    for call in family.probe_calls(theta):
        cost = family.tool(call["tool"]).turn_cost
        if used + cost <= budget:
            read.append(call)
            used += cost
    return read


def probe_then_play(family: Family, theta: dict[str, Any], presentation: str, turn_budget: int, episode_seed: int,
                    plan_of: Callable[[dict[str, Any]], np.ndarray] | None = None,
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the probe calls it reads, the calls it then plays), canonical names, on one episode.
    `plan_of(θ̂)` is the plan it plays for what it knows: the exact optimum by default (the
    `prober`); the `greedy` agent passes its heuristic."""
    def optimum(known: dict[str, Any]) -> np.ndarray:
        return family.solve(known).policy

    plan_of = plan_of or optimum
    if presentation != "A":
        return [], family.simulate(theta, plan_of(theta), episode_seed).calls
    if not reads_probes(family):
        raise InvalidParams(f"{family.name} does not declare probe_calls and belief; an agent cannot read its A probes")
    reserve = reserved_turns(family, theta, optimum(theta))
    read = affordable(family, theta, max(turn_budget - reserve, 0))
    guess = family.belief(theta, read)
    plan = plan_of(guess)
    try:
        play = family.simulate(theta, plan, episode_seed).calls
    except ValueError:  # the true θ refuses the belief's plan as a whole: offer it call by call
        play = family.simulate(guess, plan, episode_seed).calls
    return read, play
