"""The `prober`: reads every probe it can afford, then plays the exact optimum of what it read.

    >>> from vhd.mechanisms import registry
    >>> from vhd.tasks.stages.sample import draw
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
from vhd.tasks.stages.difficulty import affordable, read_then_play, reads_probes

__all__ = ["affordable", "probe_then_play", "reads_probes"]


def probe_then_play(family: Family, theta: dict[str, Any], presentation: str, turn_budget: int, episode_seed: int,
                    plan_of: Callable[[dict[str, Any]], np.ndarray] | None = None, share: float = 1.0,
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the probe calls it reads, the calls it then plays), canonical names, on one episode.
    `plan_of(θ̂)` is the plan it plays for what it knows: the exact optimum by default (the
    `prober`); the `greedy` agent passes its heuristic. `share` < 1 reads only that share of the
    turns it could spare (a weaker reader; in F and I it changes nothing). The reading is
    `tasks.difficulty.read_then_play`, which also measures every environment's difficulty."""
    if presentation != "A":
        return [], family.simulate(theta, (plan_of or (lambda known: family.solve(known).policy))(theta),
                                   episode_seed).calls
    if not reads_probes(family):
        raise InvalidParams(f"{family.name} does not declare probe_calls and belief; an agent cannot read its A probes")
    return read_then_play(family, theta, turn_budget, episode_seed, family.solve(theta).policy, plan_of, share)
