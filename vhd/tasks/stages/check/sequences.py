"""What the module is made to play: random, look and edge call sequences, invalid calls, a twin θ.

    >>> perturbed([10, [1.0, 2.0], True])  # a hidden field's value, every number moved
    [11, [1.75, 3.0], True]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vhd.mechanisms import Family
from vhd.schemas.records import SetterOutputRecord
from vhd.tasks.stages.check.candidates import Candidate, References, to_calls
from vhd.tasks.grading.oracle import fitted_bounds

RANDOM_CALL_SEQUENCES = 4
RANDOM_CALLS = 60
INSERTED_DECISIONS = 6
IDLE = {"calls": [], "finish": True}  # doing nothing: the episode finished at once (`Env.finish()`)


def perturbed(value: Any) -> Any:
    """Every number moved (ints by +1), structure kept: a θ that differs in every hidden field."""
    if isinstance(value, bool) or not isinstance(value, (int, float, list)):
        return value
    if isinstance(value, list):
        return [perturbed(v) for v in value]
    return value + 1 if isinstance(value, int) else value * 1.25 + 0.5


def twin_theta(family: Family, theta: dict[str, Any], read: list[dict[str, Any]]) -> dict[str, Any] | None:
    """θ with every hidden number that the accepted calls `read` did not show moved (`perturbed`),
    and every number they showed kept: the world a player who made those calls cannot tell from θ
    by anything paid for. What calls show is the family's `belief`: a number is shown when the
    belief after `read` follows it (differs between θ and the fully moved θ), a noisy sticker's
    figure included (a number moved within the sticker's rounding stays moved). None when a probe
    was read and the family declares no `belief` (what it showed is unknown).

        >>> from vhd.mechanisms import registry
        >>> theta = {"n_sites": 2, "n_towns": 2, "opening_costs": [30, 40], "service_costs": [[1, 2], [3, 4]]}
        >>> twin_theta(registry.get("facility"), theta, [{"tool": "survey_town", "arguments": {"town": 1}}])
        {'n_sites': 2, 'n_towns': 2, 'opening_costs': [31, 41], 'service_costs': [[2, 3], [3, 4]]}
    """
    moved = {k: perturbed(v) if k in family.hidden else v for k, v in theta.items()}
    if family.belief is None:
        probes = {t.name for t in family.tools_with_role("probe")}
        return None if any(call["tool"] in probes for call in read) else moved
    if not read:
        return moved
    known, known_moved = family.belief(theta, read), family.belief(moved, read)
    return {k: _unshown(theta[k], moved[k], known.get(k), known_moved.get(k)) if k in family.hidden else v
            for k, v in theta.items()}


def probed(calls: list[dict[str, Any]], run: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls of a canonical call sequence that the reference World's `run` of it accepted: what
    the family's `belief` reads as the player's knowledge (a probe's reading, a drive's leg)."""
    return [call for call, (ok, _) in zip(calls, run.get("answers") or []) if ok]


def _unshown(true: Any, moved: Any, known: Any, known_moved: Any) -> Any:
    """`moved` where the belief does not follow the number (not shown), `true` where it does."""
    if isinstance(true, list) and all(isinstance(x, list) and len(x) == len(true) for x in (moved, known, known_moved)):
        return [_unshown(*four) for four in zip(true, moved, known, known_moved)]
    return moved if known == known_moved else true


def _random_value(prop: dict[str, Any], rng: np.random.Generator, scale: int) -> Any:
    """A value the schema accepts: near the bottom of the range most of the time, anywhere else."""
    if "enum" in prop:
        return prop["enum"][int(rng.integers(len(prop["enum"])))]
    kind = prop.get("type")
    if kind in ("integer", "number"):
        lo = prop.get("minimum", 0)
        hi = min(prop.get("maximum", lo + 3 * scale), lo + (scale if rng.random() < 0.7 else 3 * scale))
        value = int(rng.integers(int(math.ceil(lo)), int(math.floor(hi)) + 1))
        return value if kind == "integer" else value + (0.5 if value + 0.5 <= hi and rng.random() < 0.3 else 0.0)
    if kind == "boolean":
        return bool(rng.integers(2))
    return "note " + str(int(rng.integers(100)))


CALL_PROFILES = (  # role weights of the random sequences: balanced, long decision runs, the clock to the end, mixed
    {"decision": 0.5, "clock": 0.2, "observe": 0.15, "probe": 0.15},
    {"decision": 0.8, "clock": 0.02, "observe": 0.09, "probe": 0.09},
    {"decision": 0.0, "clock": 0.6, "observe": 0.2, "probe": 0.2},
    {"decision": 0.3, "clock": 0.5, "observe": 0.1, "probe": 0.1},
)


def _choice_cdf(p: np.ndarray) -> np.ndarray:
    """The table `Generator.choice(n, p=p)` searches: one draw of `rng.random()` looked up in it
    (side "right") is the index `rng.choice` returns from the same generator state, without the
    checks of `p` that `choice` makes on every call (most of `random_calls`' time)."""
    cdf = np.ascontiguousarray(p, dtype=np.float64).cumsum()
    cdf /= cdf[-1]
    return cdf


def random_calls(family: Family, knobs: dict[str, Any], rng: np.random.Generator, length: int = RANDOM_CALLS,
                 weights: dict[str, float] = CALL_PROFILES[0]) -> list[dict[str, Any]]:
    """Canonical calls that every schema accepts, valid for the world or not: mostly decisions,
    then the clock, observations and probes (the turn budget is left to the world). Integers
    fall mostly within the knobs' scale (item numbers, quantities, days), so that many calls
    are valid and the refusals that remain are the world's own domain checks."""
    scale = max([int(v) for v in knobs.values() if isinstance(v, int)] + [4])
    tools = [t for t in family.tools]
    p = np.array([weights[t.role] / sum(1 for u in tools if u.role == t.role) for t in tools])
    cdf = _choice_cdf(p / p.sum())
    calls = []
    for _ in range(length):
        spec = tools[int(cdf.searchsorted(rng.random(), side="right"))]  # rng.choice(len(tools), p=...)
        properties = spec.input_schema.get("properties", {})
        required = set(spec.input_schema.get("required", []))
        arguments = {key: _random_value(prop, rng, scale) for key, prop in properties.items()
                     if key in required or rng.random() < 0.5}
        calls.append({"tool": spec.name, "arguments": arguments})
    return calls


def tailed(family: Family, setter_output: SetterOutputRecord, calls: list[dict[str, Any]],
           turn_budget: int) -> dict[str, Any]:
    """A call sequence in the module's tool names, played on by the clock to the end of the
    episode and `runner.PAST_END` calls past it (`runner._play`), with `turn_budget` (the
    candidate's) and one turn more for each of its calls: a refusal by the world uses a turn, so
    under the candidate's own budget a sequence of refusals would end before the rules it aims
    at (a module must be right under any budget; the reference World plays the same)."""
    return {"calls": to_calls(setter_output, calls), "then": setter_output.tool_name(family.tools_with_role("clock")[0].name),
            "turn_budget": turn_budget + len(calls)}


def call_sequences(family: Family, candidate: Candidate, refs: References) -> list[list[dict[str, Any]]]:
    """Random call sequences, each played on by the clock to the end of the episode and two calls
    past it (`tailed`: the calls past the end must be refused on both sides): RANDOM_CALL_SEQUENCES
    from the role profiles, and π*'s and the default's paths with INSERTED_DECISIONS random
    decisions slipped in at random points (the boundary cases: a full knapsack, a spent budget),
    and the family's own near-boundary sequences when it has them (`Family.boundary_calls`)."""
    rng = np.random.default_rng([candidate.episode_seed, 0xCA11])
    sequences = [random_calls(family, candidate.model.knobs, rng, weights=CALL_PROFILES[k % len(CALL_PROFILES)])
                 for k in range(RANDOM_CALL_SEQUENCES)]
    decisions_only = {"decision": 1.0, "clock": 0.0, "observe": 0.0, "probe": 0.0}
    for episode in (refs.optimal, refs.default):
        path = list(episode.calls)
        for extra in random_calls(family, candidate.model.knobs, rng, INSERTED_DECISIONS, decisions_only):
            path.insert(int(rng.integers(len(path) + 1)), extra)
        sequences.append(path)
    if family.boundary_calls is not None:
        sequences += family.boundary_calls(candidate.model.theta, rng)
    sequences += look_sequences(family, refs)
    sequences += edge_sequences(family, candidate.model.theta)
    return sequences


def looks(family: Family) -> list[dict[str, Any]]:
    """One call of every observation tool that needs no argument (the log views with their defaults)."""
    return [{"tool": t.name, "arguments": {}} for t in family.tools_with_role("observe")
            if not t.input_schema.get("required")]


def look_sequences(family: Family, refs: References) -> list[list[dict[str, Any]]]:
    """π*'s and the default's paths with every observation read halfway and before the last
    call, and π*'s first half followed by each no-argument decision and every observation:
    what the module records (counters, log tables, derived columns) is then compared,
    number by number, with what the reference World records for the same decisions."""
    sequences = []
    for episode in (refs.optimal, refs.default):
        path = list(episode.calls)
        half = len(path) // 2
        sequences.append(path[:half] + looks(family) + path[half:])
        sequences.append(path[:-1] + looks(family) + path[-1:])
    path = list(refs.optimal.calls)
    for spec in family.tools_with_role("decision"):  # each no-argument decision (reset, clear, cancel) halfway
        if not spec.input_schema.get("required"):
            sequences.append(path[:len(path) // 2] + [{"tool": spec.name, "arguments": {}}] + looks(family))
    return sequences


TOLERANCE_PROBE = 1e-9  # amounts a hair above and below each θ number: a `>` vs `>=` at x + TOL
MAX_EDGE_IDS = 12  # ids per (integer, number) argument pair that get their own amount sequence


def _theta_numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _theta_numbers(v)]
    return []


def edge_values(prop: dict[str, Any], theta: dict[str, Any]) -> list[Any]:
    """Values at the edges of what θ makes valid, inside what the schema accepts, from both ends
    inward (largest, smallest, second largest…): every call the world answers uses a turn, refused
    or not, and budgets leave little room beyond π*'s play, so the lowest and the highest are tried
    before the turns run out:
    - integers (ids, counts): 0, 1, -1 and n - 1, n, n + 1, 2n - 1, 2n for every integer n of θ
      and every list length of θ (a schema is wider than the true range, so random ids rarely
      land just past it);
    - numbers (amounts): every number of θ, and it ± TOLERANCE_PROBE."""
    lo, hi = prop.get("minimum", -math.inf), prop.get("maximum", math.inf)
    if prop.get("type") == "integer":
        sizes = [v for v in theta.values() if isinstance(v, int) and not isinstance(v, bool)]
        sizes += [len(v) for v in theta.values() if isinstance(v, (list, tuple))]
        found = {0, 1, -1} | {n + d for n in sizes for d in (-1, 0, 1)} | {2 * n - 1 for n in sizes} | {2 * n for n in sizes}
        return _inward(v for v in found if lo <= v <= hi)
    if prop.get("type") == "number":  # θ's numbers from both ends inward, each with its two neighbours
        numbers = sorted(set(_theta_numbers(list(theta.values()))))
        if len(numbers) > 40:  # evenly spread, ends kept
            numbers = [numbers[round(i * (len(numbers) - 1) / 39)] for i in range(40)]
        reach = _inward(x for x in numbers if lo <= x + TOLERANCE_PROBE and x - TOLERANCE_PROBE <= hi)
        return [v for x in reach for v in (x + TOLERANCE_PROBE, x, x - TOLERANCE_PROBE) if lo <= v <= hi]
    return []


def _inward(values: Any) -> list[Any]:
    """`values` from both ends inward: the largest, the smallest, the second largest…"""
    ordered = sorted(values, reverse=True)
    return [ordered[k // 2] if k % 2 == 0 else ordered[-1 - k // 2] for k in range(len(ordered))]


def _within(prop: dict[str, Any], fitted: tuple[float, float] | None) -> dict[str, Any]:
    """The argument's schema narrowed to one step past θ's fitted bounds (`oracle.fitted_bounds`):
    a value further out is refused by the fitted schema before the World sees it, as the one just
    past is (the `robustness` gate's fuzz covers schema refusals)."""
    if fitted is None:
        return prop
    step = 1 if prop.get("type") == "integer" else TOLERANCE_PROBE
    low, high = prop.get("minimum", -math.inf), prop.get("maximum", math.inf)
    return dict(prop, minimum=max(low, fitted[0] - step), maximum=min(high, fitted[1] + step))


def edge_sequences(family: Family, theta: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Per tool (not the clock) and numeric argument: that argument at each edge value
    (`edge_values`, within one step of θ's fitted bounds), each decision made twice (a repeated
    id: a duplicate lot, a job already queued), the other required arguments at their schema
    minimum, then every observation. The reference World says which of these calls are valid."""
    sequences, fitted = [], fitted_bounds(family, theta)
    for spec in family.tools:
        if spec.role == "clock":
            continue
        properties = spec.input_schema.get("properties", {})
        base = {key: properties[key].get("minimum", 0) for key in spec.input_schema.get("required", [])}
        edges = {key: edge_values(_within(prop, fitted.get(spec.name, {}).get(key)), theta)
                 for key, prop in properties.items()}
        repeats = (0, 1) if spec.role == "decision" else (0,)
        for key, values in edges.items():
            if values:
                sequences.append([{"tool": spec.name, "arguments": {**base, key: v}} for v in values for _ in repeats]
                                 + looks(family))
        # an amount is checked against the limit of the id it goes with (a cap per asset, a demand
        # per product): each id's amounts in a fresh episode of their own, so that no earlier
        # call has used up a shared limit first
        for key in [k for k in edges if properties[k].get("type") == "integer" and k in base]:
            for amount in [k for k in edges if properties[k].get("type") == "number" and edges[k]]:
                for v in edges[key][:MAX_EDGE_IDS]:
                    sequences.append([{"tool": spec.name, "arguments": {**base, key: v, amount: x}}
                                      for x in edges[amount]] + looks(family))
    return sequences


def fuzz_calls(setter_output: SetterOutputRecord, family: Family) -> list[dict[str, Any]]:
    """Invalid calls from the tool schemas: unknown tool, non-object, wrong types, out of range,
    extra/missing; made in the module's names and ids (`to_calls`: an id out of range stays out)."""
    calls: list[dict[str, Any]] = [{"tool": "no_such_tool", "arguments": {}}]
    for spec in family.tools:
        name = spec.name
        calls += [{"tool": name, "arguments": "not an object"}, {"tool": name, "arguments": {"bogus_argument": 1}}]
        properties = spec.input_schema.get("properties", {})
        valid = {key: properties[key].get("minimum", 0) for key in spec.input_schema.get("required", [])}
        for required in valid:
            calls.append({"tool": name, "arguments": {k: v for k, v in valid.items() if k != required}})
        for key, prop in properties.items():
            wrong = "seven" if prop.get("type") in ("integer", "number") else 7
            calls.append({"tool": name, "arguments": {**valid, key: wrong}})
            if "minimum" in prop:
                calls.append({"tool": name, "arguments": {**valid, key: prop["minimum"] - 1}})
            if "maximum" in prop:
                calls.append({"tool": name, "arguments": {**valid, key: prop["maximum"] + 1}})
            if prop.get("type") == "integer":
                calls.append({"tool": name, "arguments": {**valid, key: 1.5}})
    return calls[:1] + to_calls(setter_output, calls[1:])
