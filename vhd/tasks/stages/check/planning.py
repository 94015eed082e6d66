"""Slot planning: which candidates a slot must check, guessing their verdicts by default_band."""

from __future__ import annotations

import math

from vhd.mechanisms import Family, Solution
from vhd.schemas.records import SolutionRecord
from vhd.tasks.grading import written
from vhd.tasks.stages.check.budget import why_not
from vhd.tasks.stages.check.candidates import Candidate
from vhd.tasks.stages.solve import unpack_policy


def default_band(family: Family, s: SolutionRecord, optimal: float, default: float) -> tuple[bool, str]:
    """The default's value sits in the family's band between idle and π*, and on the episode
    π* (realizing `optimal`) does better than the default (realizing `default`)."""
    lo, hi = family.default_band
    position = family.default_position(s.u_star, s.u_default, s.u_idle)
    realized_gap = optimal - default
    if position == math.inf:
        return False, f"doing nothing is already optimal (u* = {s.u_star:g} ≤ u_idle = {s.u_idle:g}): nothing to learn"
    if not lo <= position <= hi:
        return False, f"default sits at {position:.3f} between idle (0) and optimal (1); admissible band [{lo}, {hi}]"
    if not realized_gap > 1e-9 * max(1.0, abs(optimal)):
        return False, f"on this episode the default ({default}) is not below π* ({optimal})"
    return True, f"default at {position:.3f} in [{lo}, {hi}]; realized gap {realized_gap:g}"


_BINDS: dict[tuple[str, str, int], str] = {}  # (family version, model, budget) → why_not: a θ's, not a module's


def budget_binds(family: Family, candidate: Candidate) -> tuple[bool, str]:
    """In presentation A of a family that declares `BUDGET_BINDS`, the candidate's turn budget binds
    (`vhd/tasks/stages/check/budget.py`): π*'s play and every probe do not fit in it, π*'s play and the probes
    it depends on do. Anything else passes. Measured once per model and budget in a process (the
    planning guess, the gate and every self-test mutant ask again about the same θ)."""
    if candidate.presentation != "A" or not family.budget_binds:
        return True, "no binding budget declared for this presentation"
    key = (family.code_version, candidate.model.model_id, candidate.turn_budget)
    if key not in _BINDS:
        s = candidate.solution
        solution = Solution(s.u_star, unpack_policy(s.policy), s.u_default, s.u_idle, None)
        if len(_BINDS) >= 100_000:
            _BINDS.clear()
        _BINDS[key] = why_not(family, candidate.model.theta, solution, candidate.turn_budget)
    problem = _BINDS[key]
    return (False, "in presentation A " + problem) if problem else (True, "and the turn budget binds in A")


def in_band(family: Family, candidate: Candidate) -> bool:
    """Whether the candidate passes `default_band` and `budget_binds` (simulator episodes and the
    family's solver, no module involved)."""
    s, theta = candidate.solution, candidate.model.theta
    if candidate.presentation == "F":
        return written.gate_default_band(family, s.u_star, s.u_default, s.u_idle)[0]
    optimal = family.simulate(theta, unpack_policy(s.policy), candidate.episode_seed).utility
    default = family.simulate(theta, family.default_policy(theta), candidate.episode_seed).utility
    return default_band(family, s, optimal, default)[0] and budget_binds(family, candidate)[0]


def needed_checks(family: Family, candidates: list[Candidate], verdicts: dict[str, bool], wanted: int) -> list[Candidate]:
    """The candidates without a verdict that a slot wanting `wanted` admitted environments (in
    candidate order) must check: those up to where the known verdicts, and for the others
    `in_band` as the guess, reach `wanted`. Nearly every in-band candidate is admitted, so the
    slot checks few candidates it will not keep; a guess that fails leaves the slot short, and
    the next round makes up for it."""
    pending, count = [], 0
    for c in candidates:
        if count >= wanted:
            break
        if c.env_id in verdicts:
            count += verdicts[c.env_id]
        else:
            pending.append(c)
            count += in_band(family, c)
    return pending
