"""Decision reward vs outcome reward, and the cost of grading, per family, over many episode seeds of one θ.

    python bench/decision_rewards.py [--seeds 200] [--families a,b] [--repeats 3] [--json OUT]
    python bench/decision_rewards.py --optimal 100      # π* on fresh seeds: how often exactly 1

For each family of the registry (a deterministic one too: its seeds change only the random
plans), the first sampled θ with a positive span (`draw(family, k)`,
k = 0, 1, …) is played on `--seeds` fresh episode seeds by the default, the random (a new random
plan per seed), the greedy agent (where the family has a heuristic) and a hindsight player (the
best of 20 random plans on that seed's own draws, chosen after seeing them: memorised draws).
Each episode is graded as every surface grades it (`vhd.tasks.grading.step_advantages.decision_grade`: the reference World
replays the calls; the outcome reward's references are that seed's own π*, default and finishing
at once). Printed per family and agent: mean and standard deviation of the decision reward, of
the unclipped 1 + ΣA*/span (whose mean is the policy's expected value on the reward's scale: 0
for the default when it beats idling) and of the outcome reward. A second table gives, per
stochastic family, the default's mean decision reward and its unclipped mean with the 95 %
interval mean ± 1.96 · sd / √n, and whether that interval holds 0 (what the lemma predicts for
the default when it beats idling: E[1 + ΣA*/span] = (E[u_default] − E[u0]) / span).

A third table gives the cost of grading, per family: the median and the 99th percentile (nearest
rank) over its graded episodes (every agent, every seed) of the milliseconds `decision_grade`
takes, with the θ's decision values cached (as when one environment is scored many times), in
wall-clock time and in the CPU time of the grading thread (what the grading itself costs: a shared
machine's other work is not in it); each episode is graded `--repeats` times and counts with the
median of its times. Then the seconds of `decision_values` (once per θ) and whether the family is
within the bar of issue 31 (median ≤ 5 ms, p99 ≤ 20 ms), by either clock.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np

from vhd.tasks.stages.greedy import HEURISTICS
from vhd.mechanisms import registry
from vhd.tasks.grading.step_advantages import Advantages, decision_grade, decision_values, declares_advantages
from vhd.tasks.grading.reward import reward
from vhd.tasks.stages.sample import draw

HINDSIGHT_TRIES = 20
BAR_MS = (5.0, 20.0)  # issue 31: grading within a few milliseconds (median, p99 per graded episode)


def percentile(values, share):
    """The nearest-rank `share` percentile of `values` (the least value with at least `share` of
    them at or below it)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def positive_span(family):
    for k in range(50):
        _, theta = draw(family, k)
        s = family.solve(theta)
        if s.u_star - max(s.u_default, s.u_idle) > 1e-6 * max(1.0, abs(s.u_star)):
            return theta, s
    raise SystemExit(f"{family.name}: no θ with a positive span in 50 draws")


def plans(family, theta, seed):
    rng = np.random.default_rng([seed, 0xDEC])
    out = {"default": family.default_policy(theta), "random": family.random_policy(theta, rng)}
    if family.name in HEURISTICS:
        out["greedy"] = HEURISTICS[family.name](theta)
    tries = [family.random_policy(theta, rng) for _ in range(HINDSIGHT_TRIES)]
    out["hindsight"] = max(tries, key=lambda p: family.simulate(theta, p, seed).utility)
    return out


def measure(family, seeds, repeats=1):
    theta, s = positive_span(family)
    expected = {"u_star": s.u_star, "u_default": s.u_default, "u_idle": s.u_idle}
    span = s.u_star - max(s.u_default, s.u_idle)
    started = time.perf_counter()
    decision_values(family, theta)
    values_seconds = time.perf_counter() - started
    base = {"params": theta, "presentation": "I", "episode_seed": 0, "turn_budget": family.turn_budget(theta)}
    rows: dict[str, dict[str, list[float]]] = {}
    grading_seconds, grading_cpu = [], []
    for seed in range(seeds):
        config = dict(base, episode_seed=seed)
        idle = Advantages(family, config)
        idle.finish()
        refs = (family.simulate(theta, s.policy, seed).utility,
                family.simulate(theta, family.default_policy(theta), seed).utility, idle.utility)
        for agent, plan in plans(family, theta, seed).items():
            calls = family.simulate(theta, plan, seed).calls
            times, cpu = [], []
            for _ in range(max(1, repeats)):
                started, started_cpu = time.perf_counter(), time.thread_time()
                graded = decision_grade(family, config, calls, expected)
                times.append(time.perf_counter() - started)
                cpu.append(time.thread_time() - started_cpu)
            grading_seconds.append(statistics.median(times))
            grading_cpu.append(statistics.median(cpu))
            row = rows.setdefault(agent, {"decision": [], "unclipped": [], "outcome": []})
            row["decision"].append(graded["reward"])
            row["unclipped"].append(1 + graded["advantage"] / span)
            row["outcome"].append(reward(graded["reference_utility"], *refs))
    summary = {agent: {kind: {"mean": statistics.fmean(v), "sd": statistics.stdev(v),
                              "ci95": 1.96 * statistics.stdev(v) / len(v) ** 0.5} for kind, v in r.items()}
               for agent, r in rows.items()}
    return {"family": family.name, "stochastic": family.stochastic,
            "theta_knobs": {k: theta.get(k) for k in ("horizon",)}, "seeds": seeds, "episodes": len(grading_seconds),
            "values_seconds": values_seconds, "ms_per_episode": 1000 * statistics.median(grading_seconds),
            "ms_p99": 1000 * percentile(grading_seconds, 0.99), "cpu_ms_per_episode": 1000 * statistics.median(grading_cpu),
            "cpu_ms_p99": 1000 * percentile(grading_cpu, 0.99),
            "expected_unclipped_default": (s.u_default - max(s.u_default, s.u_idle)) / span, "agents": summary}


def optimal(family, seeds):
    """On `seeds` fresh episode seeds (1000, 1001, …), how often π* scores exactly 1 with every step 0."""
    theta, s = positive_span(family)
    expected = {"u_star": s.u_star, "u_default": s.u_default, "u_idle": s.u_idle}
    base = {"params": theta, "presentation": "A", "episode_seed": 0, "turn_budget": family.turn_budget(theta)}
    ones = 0
    for seed in range(1000, 1000 + seeds):
        graded = decision_grade(family, dict(base, episode_seed=seed), family.simulate(theta, s.policy, seed).calls,
                                expected)
        ones += graded["reward"] == 1.0 and set(graded["advantages"]) <= {0.0}
    return ones


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--families", default="", help="comma-separated (default: every family that declares "
                                                         "advantages)")
    parser.add_argument("--repeats", type=int, default=3, help="grade each episode this many times; its time is "
                                                               "the median")
    parser.add_argument("--json", default="", help="also write the figures to this file")
    parser.add_argument("--optimal", type=int, default=0, help="only count π*'s exact 1s on this many fresh seeds")
    args = parser.parse_args()
    wanted = [n for n in args.families.split(",") if n] or [f.name for f in registry.all()
                                                             if declares_advantages(f)]
    if args.optimal:
        for name in wanted:
            print(f"{name}: π* scores exactly 1 (every step 0) on {optimal(registry.get(name), args.optimal)}/"
                  f"{args.optimal} fresh seeds", flush=True)
        return
    results = [measure(registry.get(name), args.seeds, args.repeats) for name in wanted]
    print("| family | agent | decision reward | unclipped 1 + ΣA*/span | outcome reward |")
    print("|---|---|---|---|---|")
    for r in results:
        for agent, k in r["agents"].items():
            d, u, o = k["decision"], k["unclipped"], k["outcome"]
            print(f"| {r['family']} | {agent} | {d['mean']:.3f} ± {d['sd']:.3f} | {u['mean']:.3f} ± {u['sd']:.3f} | "
                  f"{o['mean']:.3f} ± {o['sd']:.3f} |")
    print()
    print("| family | default: decision reward (mean ± 95 %) | unclipped mean ± 95 % | expected "
          "| interval holds it |")
    print("|---|---|---|---|---|")
    for r in (r for r in results if r["stochastic"]):
        default, e = r["agents"]["default"], r["expected_unclipped_default"]
        d, u = default["decision"], default["unclipped"]
        holds = abs(u["mean"] - e) <= u["ci95"]
        print(f"| {r['family']} | {d['mean']:.3f} ± {d['ci95']:.3f} | {u['mean']:.3f} ± {u['ci95']:.3f} | {e:.3f} | "
              f"{'yes' if holds else 'no'} |")
    print()
    print(f"| family | episodes | grading ms, median | p99 | CPU ms, median | p99 | values s "
          f"| within {BAR_MS[0]:g} / {BAR_MS[1]:g} ms: wall, CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        wall = r["ms_per_episode"] <= BAR_MS[0] and r["ms_p99"] <= BAR_MS[1]
        cpu = r["cpu_ms_per_episode"] <= BAR_MS[0] and r["cpu_ms_p99"] <= BAR_MS[1]
        print(f"| {r['family']} | {r['episodes']} | {r['ms_per_episode']:.1f} | {r['ms_p99']:.1f} | "
              f"{r['cpu_ms_per_episode']:.1f} | {r['cpu_ms_p99']:.1f} | {r['values_seconds']:.2f} | "
              f"{'yes' if wall else 'no'}, {'yes' if cpu else 'no'} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
