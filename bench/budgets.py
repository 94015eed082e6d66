"""What each family's turn budget buys in presentation A, over sampled θ in the default band.

    PYTHONPATH=. python bench/budgets.py --draws 40            # every family declaring probes
    PYTHONPATH=. python bench/budgets.py --families lp,routing

Prints a markdown table: per family the budget's median, the medians of π*'s play, the full
reading and the needed reading (vhd/tasks/stages/check/budget.py), and the share of θ whose budget binds: in
a family declaring BUDGET_BINDS, the share of in-band A candidates the default_band gate admits.
"""

from __future__ import annotations

import argparse
from statistics import median

from vhd.tasks.stages.check.budget import measure
from vhd.mechanisms import registry
from vhd.tasks.stages.sample import draw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=40, help="θ drawn per family (seeds 9000, 9001, …)")
    parser.add_argument("--families", default="", help="comma list (default: every family with probe beliefs)")
    args = parser.parse_args()
    names = [n for n in args.families.split(",") if n] or [f.name for f in registry.all() if f.belief is not None]
    print("| family | BUDGET_BINDS | θ in band | budget | π*'s play | full reading | needed reading | binds |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        family = registry.get(name)
        rows = []
        for seed in range(args.draws):
            _, theta = draw(family, 9_000 + seed)
            s = family.solve(theta)
            position = family.default_position(s.u_star, s.u_default, s.u_idle)
            if family.default_band[0] <= position <= family.default_band[1]:
                rows.append(measure(family, theta, s))
        if not rows:
            continue
        binds = sum(b.binds for b in rows)
        print(f"| {name} | {'yes' if family.budget_binds else 'no'} | {len(rows)} | "
              f"{median(b.budget for b in rows):g} | {median(b.play for b in rows):g} | "
              f"{median(b.full_reading for b in rows):g} | {median(b.needed_reading for b in rows):g} | "
              f"{binds}/{len(rows)} ({100 * binds / len(rows):.0f} %) |", flush=True)


if __name__ == "__main__":
    main()
