"""Solve time and state space at the corners of every family's knob ranges.

    python bench/solve_scaling.py [--repeats 3] [--seeds 3] [--families a,b] [--markdown]

For each family and each corner (low: every knob at the bottom of its range; high: every knob
at the top) it draws `--seeds` instances with `draw(family, seed, knobs)`, solves each
`--repeats` times and reports the median seconds of one solve, the median state space from
the certificate and the mean gap u* − u₀, so the two corners sit side by side in one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

from vhd.mechanisms import registry
from vhd.tasks.stages.sample import draw


def corner(family, which: str) -> dict[str, int]:
    return {name: (lo if which == "low" else hi) for name, (lo, hi) in family.knob_ranges.items()}


def timed_solves(family, knobs: dict[str, int], seeds: int, repeats: int) -> tuple[list, list, list]:
    """Per θ drawn with `knobs` pinned (seeds 10,000 …): the median seconds of `repeats` solves,
    the certificate's state space and the gap u* − u₀."""
    seconds, spaces, gaps = [], [], []
    for seed in range(seeds):
        _, theta = draw(family, 10_000 + seed, knobs)
        runs = []
        for _ in range(repeats):
            started = time.perf_counter()
            solution = family.solve(theta)
            runs.append(time.perf_counter() - started)
        seconds.append(statistics.median(runs))
        spaces.append(solution.certificate.state_space)
        gaps.append(solution.u_star - solution.u_default)
    return seconds, spaces, gaps


def measure(family, which: str, seeds: int, repeats: int) -> dict:
    knobs = corner(family, which)
    family.solve(draw(family, 9_999, knobs)[1])  # warm-up: the first solve pays the solver's imports
    seconds, spaces, gaps = timed_solves(family, knobs, seeds, repeats)
    return {"knobs": knobs, "seconds": statistics.median(seconds), "state_space": statistics.median(spaces),
            "gap": statistics.fmean(gaps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--families", default="")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args()
    names = [n for n in args.families.split(",") if n] or registry.names()
    rows = []
    for name in names:
        family = registry.get(name)
        low, high = (measure(family, which, args.seeds, args.repeats) for which in ("low", "high"))
        rows.append((name, low, high))
        if not args.markdown:
            print(f"{name:16} low {low['knobs']} {low['seconds'] * 1e3:9.2f} ms  space {low['state_space']:>9}  "
                  f"gap {low['gap']:10.3f} | high {high['knobs']} {high['seconds'] * 1e3:9.2f} ms  "
                  f"space {high['state_space']:>9}  gap {high['gap']:10.3f}", flush=True)
    if args.markdown:
        print("| family | low knobs | solve (low) | state space (low) | high knobs | solve (high) | state space (high) "
              "| ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for name, low, high in rows:
            ratio = high["seconds"] / low["seconds"] if low["seconds"] else float("inf")
            knobs = lambda r: ", ".join(f"{k} {v}" for k, v in r["knobs"].items())  # noqa: E731
            print(f"| {name} | {knobs(low)} | {low['seconds'] * 1e3:.2f} ms | {low['state_space']:g} | {knobs(high)} "
                  f"| {high['seconds'] * 1e3:.2f} ms | {high['state_space']:g} | {ratio:.1f}× |")


if __name__ == "__main__":
    main()
