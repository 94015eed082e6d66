"""Difficulty, read off the solved model: what each environment asks of a player, and one score.

    >>> from vhd.mechanisms import registry
    >>> from vhd.schemas.records import ModelRecord
    >>> from vhd.tasks.stages.sample import draw
    >>> from vhd.tasks.stages.solve import solve_models
    >>> knapsack = registry.get("knapsack")
    >>> knobs, theta = draw(knapsack, 3)
    >>> model = ModelRecord.build(family="knapsack", family_version=knapsack.version, knobs=knobs, seed=3,
    ...                           theta=theta, batch="doctest")
    >>> [solution] = solve_models(knapsack, [model])
    >>> informed, agentic = (measure(knapsack, model, solution, p) for p in ("I", "A"))
    >>> informed["agents"]["prober"]["I"], informed["score"] <= agentic["score"]   # I is never harder than A
    (1.0, True)
    >>> 0.0 <= agentic["agents"]["prober"]["A"] <= 1.0, agentic["hidden_price"] == 1.0 - agentic["agents"]["prober"]["A"]
    (True, True)

Every figure is exact for the environment's θ (no sampled pass rate, no learner):

| field | what it is |
|---|---|
| `size`, `horizon` | the family's knobs as drawn (None for a knob the family does not have) |
| `knob_position` | where the knobs sit in the family's ranges: the mean over its knobs of (v − lo)/(hi − lo), in [0, 1] |
| `state_space` | the states (or nodes, or branches) the exact solver searched (`Solution.certificate.state_space`) |
| `span` | E[u*] − E[u0], u0 = max(default, idle): the expected utility a player can win over doing the default |
| `agents.prober` | the `prober`'s expected reward (vhd/agents/prober.py) in I and in A: 1 in I (θ is told, it plays π*); in A it reads the probes the budget affords beside π*'s play and plays the optimum of what it read. `A_basis`: `expected` (its plan is a plan of θ and fits the budget: E[u] by the family's exact `evaluate`) or `episode` (else: its calls replayed on the family's own World on the episode seed, the decision reward `vhd eval` gives) |
| `agents.greedy` | the `greedy` agent's expected reward in I and in A (`A_basis` as the prober's), for the five families with a heuristic (`greedy.py`); null for the others |
| `agents.random` | the `random` agent's expected reward (its episode-0 policy: `Family.random_policy` seeded by (episode seed, 0)); it plays from θ in every presentation |
| `hidden_price` | prober in I − prober in A: what hiding θ behind probes costs a perfect planner, per environment |
| `score` | the summary in [0, 1] below |

Rewards are the decision reward every surface grades with (`tasks/grading/reward.py`), in expectation:
clip01((E[u] − E[u0]) / (E[u*] − E[u0])), as E[Σ A*] = E[u] − E[u*]. An expectation, not one
episode's draws: cheaper (no replay, no advantage tables) and exact.

**The score** (docs/EVAL.md, "Difficulty"): `score = ⅔·knob_position + ⅓·(1 − prober)`, with `prober`
the prober's reward in the environment's presentation (1 in F and I). So:
- it lies in [0, 1]; in F and I it is at most ⅔, and it is never lower in A than in I for the same θ
  (the prober in A scores at most 1);
- it grows with each of the family's knobs (size, horizon) on average: through `knob_position`, and
  in A through what the budget leaves unread, which does not always grow with the knobs (in qp more
  projects come with turns to read them: the prober loses less at the top of the size range, 0.03
  against 0.65 at the bottom), hence the knobs' ⅔ share; tests/test_difficulty_score.py checks it;
- the greedy heuristics (`greedy.py`, five families) are measured beside it (`agents.greedy`, in I
  and in A, as the `greedy` agent plays them) but not in it: a score of every family cannot lean on
  an agent that exists for five.

The prober's reading is the family's own declaration (`probe_calls`, `belief`, `solve`), so it is
measured here; `vhd/agents/prober.py` plays the same `read_then_play`. One measure per θ and
episode seed is computed once in a process and shared by its presentations (`_CACHE`).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from vhd.mechanisms import Family
from vhd.schemas.errors import InvalidParams
from vhd.schemas.records import ModelRecord, SolutionRecord

VERSION = "difficulty@2"  # @2: agents.greedy
KNOB_WEIGHT = 2 / 3  # the score's share of knob_position; the rest (⅓) is what the prober loses
_CACHE: OrderedDict[tuple[str, int, int], dict[str, Any]] = OrderedDict()
_CACHE_KEPT = 4096  # small dicts: a round measures its candidates, annotate reads them back
_LOCK = threading.Lock()


def knob_position(family: Family, knobs: dict[str, Any]) -> float:
    """The mean over the family's knobs of (v − lo)/(hi − lo), clipped to [0, 1] (0 for a knob whose
    range is one value; a preset's cell may pin a knob outside the sampled range)."""
    parts = []
    for name, (lo, hi) in sorted(family.knob_ranges.items()):
        value = knobs.get(name)
        if not isinstance(value, (int, float)):
            continue
        parts.append(0.0 if hi <= lo else min(1.0, max(0.0, (value - lo) / (hi - lo))))
    return math.fsum(parts) / len(parts) if parts else 0.0


def summary_score(position: float, prober: float) -> float:
    """⅔·knob_position + ⅓·(1 − prober's reward in the presentation), in [0, 1].

    >>> summary_score(0.0, 1.0), summary_score(0.75, 1.0), summary_score(1.0, 0.0)
    (0.0, 0.5, 1.0)
    """
    return round(KNOB_WEIGHT * position + (1.0 - KNOB_WEIGHT) * (1.0 - min(1.0, max(0.0, prober))), 12)


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


def reads_probes(family: Family) -> bool:
    """Whether the family tells a player what its probes show (`probe_calls` and `belief`)."""
    return family.probe_calls is not None and family.belief is not None


def read_then_play(family: Family, theta: dict[str, Any], turn_budget: int, episode_seed: int, policy: np.ndarray,
                   plan_of: Callable[[dict[str, Any]], np.ndarray] | None = None, share: float = 1.0,
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The prober's episode in presentation A, canonical calls: (the probes it reads, the calls it
    plays). It keeps back the turns π*'s (`policy`) longest play needs, reads the probes that fit in
    `share` of the rest, forms the family's belief and plays `plan_of(belief)` (default: the belief's
    exact optimum). `share` < 1 is a weaker reader (the simulated learner of tests/test_follow.py)."""
    read, _, play, _ = _reading(family, theta, turn_budget, episode_seed, policy, plan_of, share)
    return read, play


def _reading(family: Family, theta: dict[str, Any], turn_budget: int, episode_seed: int, policy: np.ndarray,
             plan_of: Callable[[dict[str, Any]], np.ndarray] | None = None, share: float = 1.0,
             ) -> tuple[list[dict[str, Any]], np.ndarray, list[dict[str, Any]], bool]:
    """(reads, the plan played, its calls, whether the true θ took the plan whole)."""
    from vhd.tasks.stages.check.budget import reserved_turns

    def optimum(known: dict[str, Any]) -> np.ndarray:
        return family.solve(known).policy

    plan_of = plan_of or optimum
    reserve = reserved_turns(family, theta, policy)
    read = affordable(family, theta, int(math.floor(max(turn_budget - reserve, 0) * share)))
    guess = family.belief(theta, read)
    plan = plan_of(guess)
    try:
        return read, plan, family.simulate(theta, plan, episode_seed).calls, True
    except ValueError:  # the true θ refuses the belief's plan as a whole: offer it call by call
        return read, plan, family.simulate(guess, plan, episode_seed).calls, False


def _expected_reward(utility: float, solution: SolutionRecord) -> float:
    """clip01((E[u] − E[u0]) / (E[u*] − E[u0])), u0 = max(default, idle): the decision reward's expectation
    for a plan whose expected utility is `utility` (E[Σ A*] = E[u] − E[u*])."""
    from vhd.tasks.grading.reward import decision_reward

    return decision_reward(utility - solution.u_star, solution.u_star, solution.u_default, solution.u_idle)


def _prober_a(family: Family, theta: dict[str, Any], budget: int, seed: int, policy: np.ndarray,
              solution: SolutionRecord, plan_of: Callable[[dict[str, Any]], np.ndarray] | None = None,
              ) -> tuple[float, str]:
    """The prober's reward in A (or, with `plan_of`, the reward of a reader that plays `plan_of` of
    what it read: the greedy agent) and how it was obtained: `expected` (its belief's plan is a
    valid plan of θ and its reads and play fit the budget: E[u] by the family's exact `evaluate`) or
    `episode` (else: its calls replayed on the family's own World on the episode seed, as `vhd eval`
    grades them: the budget cuts the play, the world refuses what does not fit)."""
    read, plan, play, whole = _reading(family, theta, budget, seed, policy, plan_of)
    return _reward_of(family, theta, plan, read, play, whole, budget, seed, "A", solution)


def _reward_of(family: Family, theta: dict[str, Any], plan: np.ndarray, read: list[dict[str, Any]],
               play: list[dict[str, Any]], whole: bool, budget: int, seed: int, presentation: str,
               solution: SolutionRecord) -> tuple[float, str]:
    """The expected decision reward of playing `plan` after the probe calls `read` (`expected`), or,
    when θ refuses the plan as a whole (`whole` False) or the calls do not fit the budget, the reward
    of the calls `read + play` on the episode (`episode`)."""
    from vhd.tasks.stages.check.budget import turns_of

    utility, fits = math.nan, whole and turns_of(family, read) + turns_of(family, play) <= budget
    if fits:
        try:
            utility = float(family.evaluate(theta, plan))
        except ValueError:
            fits = False
    if fits and math.isfinite(utility):
        return _expected_reward(utility, solution), "expected"
    config = {"params": theta, "presentation": presentation, "episode_seed": seed, "turn_budget": budget}
    if not family.stochastic:  # Σ A* = u − u* exactly (the decision_reward gate checks it): no tables needed
        return _expected_reward(_played(family, config, read + play), solution), "episode"
    from vhd.tasks.grading.step_advantages import decision_grade

    expected = {"u_star": solution.u_star, "u_default": solution.u_default, "u_idle": solution.u_idle}
    return float(decision_grade(family, config, read + play, expected)["reward"]), "episode"


def _played(family: Family, config: dict[str, Any], calls: list[dict[str, Any]]) -> float:
    """What canonical `calls` realize on the family's own World (its turn and refusal rules), the
    episode finished after them as every surface finishes it."""
    from vhd.tasks.grading.oracle import reference_module

    module, output = reference_module(family)
    env = module.create(config)
    for call in calls:
        if env.done:
            break
        env.call(output.tool_name(call["tool"]), call["arguments"])
    if not env.done:
        env.finish()
    return float(env.outcome()["utility"])


def _greedy(family: Family, theta: dict[str, Any], budget: int, seed: int, policy: np.ndarray,
            solution: SolutionRecord) -> dict[str, Any] | None:
    """The `greedy` agent's rewards, as it plays (vhd/agents): in I its heuristic's plan of θ; in A,
    like the prober, the probes it can afford, then its heuristic's plan of what it read (a family
    without probe beliefs: every no-argument probe, then the plan of θ). None for a family with no
    heuristic (`greedy.HEURISTICS`)."""
    from vhd.tasks.stages.greedy import HEURISTICS

    heuristic = HEURISTICS.get(family.name)
    if heuristic is None:
        return None
    plan = heuristic(theta)
    calls = family.simulate(theta, plan, seed).calls
    informed, _ = _reward_of(family, theta, plan, [], calls, True, budget, seed, "I", solution)
    if reads_probes(family):
        agentic, basis = _prober_a(family, theta, budget, seed, policy, solution, plan_of=heuristic)
    else:
        probes = [{"tool": spec.name, "arguments": {}} for spec in family.tools_with_role("probe")
                  if not spec.input_schema.get("required")]
        agentic, basis = _reward_of(family, theta, plan, probes, calls, True, budget, seed, "A", solution)
    return {"I": informed, "A": agentic, "A_basis": basis}


def _per_theta(family: Family, model: ModelRecord, solution: SolutionRecord) -> dict[str, Any]:
    """What the presentations of one θ share (its A budget and episode seed are the same for all)."""
    from vhd.tasks.grading.step_advantages import declares_advantages
    from vhd.tasks.stages.sample import episode_seed as seed_of
    from vhd.tasks.stages.solve import unpack_policy

    seed, budget = seed_of(model.seed), family.turn_budget(model.theta)
    key = (solution.solution_id, seed, budget)
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    theta, knobs = model.theta, model.knobs
    zero = max(solution.u_default, solution.u_idle)
    out: dict[str, Any] = {
        "version": VERSION, "size": knobs.get("size"), "horizon": knobs.get("horizon"),
        "knob_position": knob_position(family, knobs),
        "state_space": int(solution.certificate.get("state_space", 0)) if isinstance(solution.certificate, dict) else 0,
        "span": solution.u_star - zero,
    }
    prober_a = random = basis = greedy = None
    if declares_advantages(family) and out["span"] > 0:
        if reads_probes(family):
            prober_a, basis = _prober_a(family, theta, budget, seed, unpack_policy(solution.policy), solution)
        else:  # no probe beliefs: the prober plays π* in A too (vhd/agents/prober.py)
            prober_a, basis = 1.0, "expected"
        rng = np.random.default_rng([seed, 0, 0xA6E7])  # the `random` agent's episode 0 (vhd/agents)
        random = _expected_reward(float(family.evaluate(theta, family.random_policy(theta, rng))), solution)
        greedy = _greedy(family, theta, budget, seed, unpack_policy(solution.policy), solution)
    out["agents"] = {"prober": {"I": 1.0 if prober_a is not None else None, "A": prober_a, "A_basis": basis},
                     "greedy": greedy, "random": random}
    out["hidden_price"] = None if prober_a is None else 1.0 - prober_a
    with _LOCK:
        _CACHE[key] = out
        while len(_CACHE) > _CACHE_KEPT:
            _CACHE.popitem(last=False)
    return out


def measure(family: Family, model: ModelRecord, solution: SolutionRecord, presentation: str) -> dict[str, Any]:
    """The difficulty record of one environment of `model` in `presentation` (see the module
    docstring); `score` is None when θ has no span or its family declares no advantages (such a
    candidate fails the default_band or decision_reward gate)."""
    shared = _per_theta(family, model, solution)
    prober = shared["agents"]["prober"]["A" if presentation == "A" else "I"]
    greedy = shared["agents"]["greedy"]
    return {**shared, "agents": {"prober": dict(shared["agents"]["prober"]), "greedy": greedy and dict(greedy),
                                 "random": shared["agents"]["random"]},
            "presentation": presentation,
            "score": None if prober is None else summary_score(shared["knob_position"], prober)}


def parse_band(text: str, what: str = "--difficulty") -> tuple[float, float]:
    """`LO:HI` with 0 ≤ LO ≤ HI ≤ 1, as floats; InvalidParams of one line otherwise.

    >>> parse_band("0.4:0.7")
    (0.4, 0.7)
    >>> parse_band("0.7:0.4")
    Traceback (most recent call last):
    ...
    vhd.schemas.errors.InvalidParams: --difficulty 0.7:0.4: the low end is above the high end; expected LO:HI with 0 ≤ LO ≤ HI ≤ 1, e.g. 0.4:0.7
    """
    expected = "expected LO:HI with 0 ≤ LO ≤ HI ≤ 1, e.g. 0.4:0.7"
    lo_text, sep, hi_text = str(text).strip().partition(":")
    try:
        if not sep:
            raise ValueError
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        raise InvalidParams(f"{what} {text!r} is not a band; {expected}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo < 0 or hi > 1:
        raise InvalidParams(f"{what} {text}: the ends must lie in [0, 1]; {expected}")
    if lo > hi:
        raise InvalidParams(f"{what} {text}: the low end is above the high end; {expected}")
    return lo, hi


def in_band(difficulty: dict[str, Any], band: tuple[float, float]) -> bool:
    score = difficulty.get("score")
    return score is not None and band[0] <= score <= band[1]


def band_key(band: tuple[float, float]) -> str:
    """The batch suffix of a banded refresh: its models are draws of their own seed stream.

    >>> band_key((0.4, 0.7))
    '~d0.4-0.7'
    """
    return f"~d{band[0]:g}-{band[1]:g}"


class Band:
    """`vhd refresh --difficulty LO:HI`: the candidates whose score lies in [LO, HI] (both ends in)."""

    kind = "difficulty"

    def __init__(self, band: tuple[float, float]):
        self.band = (float(band[0]), float(band[1]))

    def value(self, difficulty: dict[str, Any]) -> float | None:
        return difficulty.get("score")

    def accepts(self, difficulty: dict[str, Any]) -> bool:
        return in_band(difficulty, self.band)

    def key(self) -> str:
        return band_key(self.band)

    def record(self) -> dict[str, Any]:
        return {"band": list(self.band)}

    def describe(self) -> str:
        return f"difficulty {self.band[0]:g}–{self.band[1]:g}"
