"""Do the families' spans measure decisions? Span, stakes and one mistake, per family, on sampled θ.

    python bench/spans.py [--count 30] [--seed 0] [--families a,b] [--knobs drawn|default] [--mistakes 20] [--json OUT]

The rewards divide by the span u* − u0, u0 = max(u_default, u_idle) (`vhd/tasks/grading/reward.py`). For
`--count` θ of every registered family, drawn as the pipeline draws them (`sample_models`: knobs
from the family's sampled ranges, or with `--knobs default` the Params defaults pinned), each θ is
solved and the table gives the medians over θ of

- span = u* − u0;
- the episode's stakes, two ways: |u*| (what an episode is worth) and u* − u_idle (what playing,
  rather than doing nothing, is worth; for stopping u_idle takes the first offer);
- span / |u*| and span / (u* − u_idle): how much of the stakes the reward's scale is;
- one mistake in r units: π*'s plan with one entry changed (a random entry, to a random value in the
  bounds its `plan_spec` declares), costed where it is acted on: (u* − u(plan)) / P(the changed plan
  plays differently from π*, over SEEDS episode seeds) / span (`one_mistake`); the median over
  `--mistakes` such slips per θ, then over θ. "mistake > 1" is the fraction of θ where that typical
  slip costs more than the whole span (one slip and r is 0). "–": no single-entry change is a
  plan the family accepts (a permutation);
- band: the fraction of θ whose z = (u0 − u_idle) / (u* − u_idle) lies in the family's DEFAULT_BAND
  with the default below u* (`written.gate_default_band`, the expectation form of the gate), and
  "no span" the fraction with span ≤ 0.

The flag column marks span / (u* − u_idle) below 10 %.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np

from vhd.mechanisms import Family, registry
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.grading.written import gate_default_band

THRESHOLD = 0.10  # span / (u* − u_idle) below this: the reward's scale is a sliver of the stakes
SEEDS = 20  # episode seeds on which a changed plan is played against π* (stochastic families)


def one_mistake(family: Family, theta: dict, policy: np.ndarray, u_star: float, tries: int, seeds: list[int],
                rng: np.random.Generator) -> list[float]:
    """The cost of one slip, for up to `tries` copies of π*'s plan with one entry changed within its
    declared bounds: (u* − u(plan)) / P(the change alters the play), P the share of `seeds` on which
    the changed plan's calls differ from π*'s (one seed for a deterministic family). On the other
    seeds both plans play alike, so this is E[u_π* − u_plan | the entry was reached and acted on]:
    what one different decision costs where it is taken. Refused plans, changes never acted on and
    changes that cost nothing (ties) are left out; the draws give up after 5 · `tries` changes."""
    if family.plan_spec is None:
        return []
    spec = family.plan_spec(theta)
    base = np.asarray(policy).reshape(spec.shape)
    seeds = seeds if family.stochastic else seeds[:1]
    played = [family.simulate(theta, base, seed).calls for seed in seeds]
    costs = []
    for _ in range(5 * tries):
        if len(costs) >= tries:
            break
        index = tuple(int(rng.integers(0, n)) for n in spec.shape)
        low, high = spec.bounds(index)
        current = base[index].item()
        if spec.integer:
            low = current - 10 if low is None else int(low)
            high = current + 10 if high is None else int(high)
            if high <= low:
                continue
            value = int(rng.integers(low, high))  # low … high − 1, shifted past the current one
            value += value >= current
        else:
            low = current - max(1.0, abs(current)) if low is None else float(low)
            high = current + max(1.0, abs(current)) if high is None else float(high)
            value = float(rng.uniform(low, high))
        plan = base.copy()
        plan[index] = value
        try:
            acted = sum(family.simulate(theta, plan, seed).calls != calls for seed, calls in zip(seeds, played))
            cost = u_star - family.evaluate(theta, plan)
            if acted and cost > 1e-9 * max(1.0, abs(u_star)):
                costs.append(cost * len(seeds) / acted)
        except ValueError:  # InvalidPlan or a domain check (a capacity, a permutation)
            continue
    return costs


def measure(family: Family, count: int, seed: int, knobs: str, tries: int) -> dict:
    batch = "spans"
    if knobs == "default":
        pinned = {name: family.Params.model_fields[name].default for name in family.knob_ranges}
        batch += "+cell:" + ",".join(f"{k}={v}" for k, v in sorted(pinned.items()))
    rng = np.random.default_rng([seed, 0x5BA])
    rows, started = [], time.perf_counter()
    seeds = [int(x) for x in rng.integers(0, 2**31, size=SEEDS)]
    for model in sample_models(family, count, seed, batch):
        s = family.solve(model.theta)
        u0 = max(s.u_default, s.u_idle)
        span = s.u_star - u0
        value_of_play = s.u_star - s.u_idle
        costs = one_mistake(family, model.theta, s.policy, s.u_star, tries, seeds, rng) if span > 0 else []
        rows.append({
            "span": span, "u_star": s.u_star, "value_of_play": value_of_play,
            "of_u_star": span / abs(s.u_star) if s.u_star else math.inf,
            "of_play": span / value_of_play if value_of_play > 0 else math.inf,
            "mistake": statistics.median(costs) / span if costs else None,
            "band": gate_default_band(family, s.u_star, s.u_default, s.u_idle)[0],
        })
    mistakes = [r["mistake"] for r in rows if r["mistake"] is not None]
    med = lambda key: statistics.median(r[key] for r in rows)  # noqa: E731
    return {
        "family": family.name, "version": family.version, "count": len(rows),
        "span": med("span"), "u_star": statistics.median(abs(r["u_star"]) for r in rows),
        "value_of_play": med("value_of_play"), "of_u_star": med("of_u_star"), "of_play": med("of_play"),
        "mistake": statistics.median(mistakes) if mistakes else None,
        "mistake_over_1": sum(m > 1 for m in mistakes) / len(mistakes) if mistakes else None,
        "band": sum(r["band"] for r in rows) / len(rows),
        "no_span": sum(r["span"] <= 0 for r in rows) / len(rows),
        "seconds": time.perf_counter() - started,
    }


def table(results: list[dict]) -> str:
    def f(x, pct=False):
        if x is None:
            return "–"
        if pct:
            return f"{100 * x:.0f} %"
        return f"{x:.3g}" if math.isfinite(x) else "∞"

    lines = ["| family | span u*−u0 | \\|u*\\| | u*−u_idle | span/\\|u*\\| | span/(u*−u_idle) | one mistake (r) | "
             "mistake > 1 | band | no span | |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        flag = "◀ small" if r["of_play"] < THRESHOLD else ""
        lines.append(f"| {r['family']}@{r['version']} | {f(r['span'])} | {f(r['u_star'])} | {f(r['value_of_play'])} | "
                     f"{f(r['of_u_star'], True)} | {f(r['of_play'], True)} | {f(r['mistake'])} | "
                     f"{f(r['mistake_over_1'], True)} | {f(r['band'], True)} | {f(r['no_span'], True)} | {flag} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=30, help="θ per family")
    parser.add_argument("--seed", type=int, default=0, help="the run seed of sample_models")
    parser.add_argument("--families", default="", help="comma-separated names (default: every registered family)")
    parser.add_argument("--knobs", choices=("drawn", "default"), default="drawn",
                        help="drawn: from the family's sampled ranges (the pipeline); default: the Params defaults")
    parser.add_argument("--mistakes", type=int, default=20, help="single-entry changes of π*'s plan tried per θ")
    parser.add_argument("--json", default="", help="also write the rows here")
    args = parser.parse_args(argv)
    names = [n for n in args.families.split(",") if n] or registry.names()
    results = []
    for name in names:
        results.append(measure(registry.get(name), args.count, args.seed, args.knobs, args.mistakes))
        print(f"  {name}: {results[-1]['seconds']:.1f} s", file=sys.stderr)
    print(f"{args.count} θ per family, knobs {args.knobs}, run seed {args.seed}; medians over θ")
    print(table(results))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
