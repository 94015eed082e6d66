"""Solve time per cell of the `scaling` preset: the paper's knapsack co-scaling grid and beyond.

    python bench/scaling.py [--thetas 5] [--repeats 3] [--families knapsack,routing] [--markdown]

For every cell of `vhd.tasks.corpus.presets.SCALING_CELLS` (knapsack: lots × resources, routing: stops ×
horizon) it draws `--thetas` θ with the cell's knobs pinned (`draw(family, seed, knobs)`, the seeds
10,000 …), solves each `--repeats` times (the median of the repeats is one θ's time) and prints the
median over the θ, the slowest θ, the state space of the certificate and the mean gap u* − u₀.
"""

from __future__ import annotations

import argparse
import statistics

from solve_scaling import timed_solves  # bench/ is on the path when a bench script runs
from vhd.mechanisms import registry
from vhd.tasks.corpus.presets import SCALING_CELLS, SCALING_PAPER_CELLS
from vhd.tasks.stages.sample import draw


def measure(family, knobs: dict[str, int], thetas: int, repeats: int) -> dict:
    seconds, spaces, gaps = timed_solves(family, knobs, thetas, repeats)
    return {"median": statistics.median(seconds), "max": max(seconds), "state_space": statistics.median(spaces),
            "gap": statistics.fmean(gaps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thetas", type=int, default=5, help="θ drawn per cell")
    parser.add_argument("--repeats", type=int, default=3, help="solves per θ (their median is the θ's time)")
    parser.add_argument("--families", default=",".join(SCALING_CELLS))
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args()
    if args.markdown:
        print("| family | cell (size × horizon) | in the paper | median solve | slowest θ | state space "
              "| mean u* − u₀ |")
        print("|---|---|---|---|---|---|---|")
    for name in [n for n in args.families.split(",") if n]:
        family = registry.get(name)
        family.solve(draw(family, 9_999)[1])  # warm-up: the first solve pays the solver's imports
        for size, horizon in SCALING_CELLS[name]:
            row = measure(family, {"size": size, "horizon": horizon}, args.thetas, args.repeats)
            paper = "yes" if name == "knapsack" and (size, horizon) in SCALING_PAPER_CELLS else ""
            if args.markdown:
                print(f"| {name} | {size} × {horizon} | {paper} | {row['median'] * 1e3:.1f} ms | "
                      f"{row['max'] * 1e3:.1f} ms | {row['state_space']:g} | {row['gap']:.1f} |", flush=True)
            else:
                print(f"{name:9} {size:4} × {horizon:<3} {'paper' if paper else '     '} median "
                      f"{row['median'] * 1e3:9.1f} ms  slowest {row['max'] * 1e3:9.1f} ms  "
                      f"space {row['state_space']:>10g}  gap {row['gap']:9.1f}", flush=True)


if __name__ == "__main__":
    main()
