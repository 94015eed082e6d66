"""What a turn budget buys in presentation A: π*'s play, a full reading of θ, the reading π* needs.

    >>> from vhd.mechanisms import registry
    >>> from vhd.tasks.stages.sample import draw
    >>> knapsack = registry.get("knapsack")
    >>> _, theta = draw(knapsack, 3)
    >>> b = measure(knapsack, theta)
    >>> b
    Budget(budget=..., play=..., full_reading=..., needed_reading=...)
    >>> b.play + b.full_reading > b.budget >= b.play + b.needed_reading, b.binds, b.why_not()
    (True, True, '')

A budget *binds* when a player cannot both read everything hidden and play π*, yet can read what
π*'s decisions depend on and play them (issue 26: "budgets that bind"). The figures, in turns,
use only the family's own declarations (`probe_calls`, `belief`, `solve`, `simulate`, the tools'
turn costs), so a new family is measured by the same code:

- `play`: the turns of π*'s play. In a deterministic family, its calls with every decision dropped
  that the reference World shows to change nothing (a job left to the dispatch rule's machine 0):
  the shortest play worth u* found. In a stochastic one, its longest play over the prober's fixed
  episode seeds (`reserved_turns`): a player keeps back what the draws may ask before it sees them;
- `full_reading`: the turns of the cheapest reading of `probe_calls` that leaves the belief as
  exact as all of them: redundant probes dropped, the most expensive first (a noisy sticker once
  every entry under it is read);
- `needed_reading`: the turns of a reading whose belief's optimum is still worth u* on the true θ,
  within NEAR of the span u* − u_default (a threshold policy depends on every number a little):
  from the full reading, probes dropped while that holds, the most expensive first. It is an
  irreducible reading, not always the cheapest, so it bounds what π* needs from above.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from vhd.mechanisms import Family, Solution

TOLERANCE = 1e-6  # relative: a play is worth u* within this share of |u*| (exact solvers agree to ~1e-9)
NEAR = 0.05  # a reading is enough when its plan loses at most this share of the span u* − u_default


def turns_of(family: Family, calls: list[dict[str, Any]]) -> int:
    """The turns canonical `calls` use if every one is accepted."""
    return sum(family.tool(call["tool"]).turn_cost for call in calls)


RESERVE_SEEDS = 16  # the episodes π*'s longest play is taken over (fixed seeds: not the episode's own draws)


_RESERVED: "OrderedDict[tuple[str, str, str], int]" = OrderedDict()
_RESERVED_KEPT = 8192  # a few ints: the gate's budget check and the difficulty measure share them
_RESERVED_LOCK = threading.Lock()


def reserved_turns(family: Family, theta: dict[str, Any], policy: np.ndarray) -> int:
    """The turns kept back for playing: the longest of π*'s plays on RESERVE_SEEDS fixed episode
    seeds (one in a deterministic family). Fixed seeds, so what is kept back does not tell the
    agent how this episode's draws will go (π* accepting on the first day of this seed).
    Kept for the last θ seen (the default_band gate and `tasks/stages/difficulty.py` ask for the same θ)."""
    array = np.ascontiguousarray(policy)
    key = (family.code_version, json.dumps(theta, sort_keys=True, default=str),
           hashlib.sha256(str((array.dtype.str, array.shape)).encode() + array.tobytes()).hexdigest())
    with _RESERVED_LOCK:
        if key in _RESERVED:
            _RESERVED.move_to_end(key)
            return _RESERVED[key]
    seeds = range(RESERVE_SEEDS if family.stochastic else 1)
    turns = max(turns_of(family, family.simulate(theta, policy, seed).calls) for seed in seeds)
    with _RESERVED_LOCK:
        _RESERVED[key] = turns
        while len(_RESERVED) > _RESERVED_KEPT:
            _RESERVED.popitem(last=False)
    return turns


@dataclass(frozen=True)
class Budget:
    """One θ's budget and what it buys, in turns (see the module docstring)."""

    budget: int
    play: int
    full_reading: int
    needed_reading: int

    @property
    def binds(self) -> bool:
        """Whether reading everything and playing π* do not fit while reading what π* needs does."""
        return self.play + self.full_reading > self.budget >= self.play + self.needed_reading

    def why_not(self) -> str:
        """'' when the budget binds; else what fits that should not, or what does not fit that should."""
        if self.play + self.full_reading <= self.budget:
            return (f"reading everything ({self.full_reading} turns) and π*'s play ({self.play}) fit in the "
                    f"{self.budget}-turn budget: nothing hidden costs a choice")
        if self.play + self.needed_reading > self.budget:
            return (f"π*'s play ({self.play} turns) and the reading it needs ({self.needed_reading}) do not fit in "
                    f"the {self.budget}-turn budget")
        return ""


def _reduced(family: Family, calls: list[dict[str, Any]], keeps, fits=None) -> list[dict[str, Any]]:
    """`calls` with probes dropped, the most expensive first (ties: the last read first), while
    `keeps(rest)` holds; with `fits`, no further once `fits(kept)` holds."""
    kept = list(calls)
    order = sorted(range(len(calls)), key=lambda i: (-family.tool(calls[i]["tool"]).turn_cost, -i))
    for i in order:
        if fits is not None and fits(kept):
            break
        rest = [c for c in kept if c is not calls[i]]
        if keeps(rest):
            kept = rest
    return kept


def full_reading(family: Family, theta: dict[str, Any]) -> list[dict[str, Any]]:
    """The probes of a cheapest reading found that knows θ as well as every probe does."""
    from vhd.tasks.stages.check.sequences import perturbed

    every = family.probe_calls(theta)
    moved = {k: perturbed(v) if k in family.hidden else v for k, v in theta.items()}  # no guess coincides twice
    exact = family.belief(theta, every), family.belief(moved, every)
    return _reduced(family, every, lambda rest: (family.belief(theta, rest), family.belief(moved, rest)) == exact)


def _enough(family: Family, theta: dict[str, Any], floor: float, read: list[dict[str, Any]]) -> bool:
    try:
        plan = family.solve(family.belief(theta, read)).policy
        return family.evaluate(theta, plan) >= floor
    except ValueError:  # the belief's plan is not a plan of the true θ (a selection over a capacity)
        return False


def needed_reading(family: Family, theta: dict[str, Any], u_star: float, u_default: float,
                   within: int | None = None, full: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The probes of an irreducible reading whose belief's optimum loses at most NEAR of the span
    u* − u_default on θ (`full`: θ's `full_reading`, found here unless given). With `within`, the
    reduction stops as soon as the reading takes at most `within` turns: enough to tell whether
    the needed reading fits there (dropping more probes only makes it shorter), not its length."""
    floor = u_star - NEAR * max(u_star - u_default, 0.0)
    fits = None if within is None else (lambda kept: turns_of(family, kept) <= within)
    return _reduced(family, full_reading(family, theta) if full is None else full,
                    lambda rest: _enough(family, theta, floor, rest), fits)


def play_turns(family: Family, theta: dict[str, Any], policy: np.ndarray, u_star: float) -> int:
    """The turns of π*'s play (the module docstring's rule)."""
    if family.stochastic:
        return reserved_turns(family, theta, policy)
    calls = family.simulate(theta, policy, 0).calls
    decisions = {spec.name for spec in family.tools_with_role("decision")}
    kept = list(calls)
    for call in calls:
        if call["tool"] in decisions:
            rest = [c for c in kept if c is not call]
            if _played(family, theta, rest) >= u_star - TOLERANCE * max(1.0, abs(u_star)):
                kept = rest
    return turns_of(family, kept)


def _played(family: Family, theta: dict[str, Any], calls: list[dict[str, Any]]) -> float:
    """The utility of canonical `calls` on the family's reference World (presentation I, turns to
    spare), the episode finished after them."""
    from vhd.tasks.grading.oracle import reference_module

    module, output = reference_module(family)
    env = module.create({"params": theta, "presentation": "I", "episode_seed": 0,
                         "turn_budget": family.turn_budget(theta) + len(calls) + 1})
    for call in calls:
        env.call(output.tool_name(call["tool"]), call["arguments"])
    env.finish()
    return float(env.outcome()["utility"])


def why_not(family: Family, theta: dict[str, Any], solution: Solution, budget: int) -> str:
    """`measure(family, theta, solution, budget).why_not()`, with no more solving than the verdict
    needs: the needed reading is not sought when reading everything already fits beside π*'s play,
    and is reduced only until it fits (`needed_reading`'s `within`). Where it never fits, it is
    reduced all the way, so the message names the same figures."""
    play = play_turns(family, theta, solution.policy, solution.u_star)
    full = full_reading(family, theta)
    everything = turns_of(family, full)
    if play + everything <= budget:  # the verdict reads no needed reading
        return Budget(budget, play, everything, everything).why_not()
    needed = needed_reading(family, theta, solution.u_star, solution.u_default, within=budget - play, full=full)
    return Budget(budget, play, everything, turns_of(family, needed)).why_not()


def measure(family: Family, theta: dict[str, Any], solution: Solution | None = None,
            budget: int | None = None) -> Budget:
    """θ's turn budget (the family's unless given) and the three figures it is measured against
    (`solution`: θ's, solved here unless given)."""
    s = solution or family.solve(theta)
    return Budget(budget=family.turn_budget(theta) if budget is None else budget,
                  play=play_turns(family, theta, s.policy, s.u_star),
                  full_reading=turns_of(family, full_reading(family, theta)),
                  needed_reading=turns_of(family, needed_reading(family, theta, s.u_star, s.u_default)))
