"""Build a small diagnostic warehouse in process (no Prefect), for `vhd eval` measurements.

    PYTHONPATH=. python bench/diagnostic_db.py --db /tmp/diag.duckdb --models 10 --seed 14

For each diagnostic family (inventory_dp, knapsack, lp, qp, routing): sample `--models` θ,
solve, render, check in the sandbox for presentations F, I and A, and store every candidate
with its checks and lineage, exactly the records `vhd refresh` writes (no corpus version).
"""

import argparse
import time

from vhd.mechanisms import registry
from vhd.tasks.stages.annotate import annotate, upstream_edges
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.stages.in_process import check_models
from vhd.tasks.corpus.presets import DIAGNOSTIC_FAMILIES
from vhd.warehouse import Warehouse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    started = time.perf_counter()
    with Warehouse.open(args.db) as wh, wh.transaction():
        wh.insert(builtin_passages())
        for name in DIAGNOSTIC_FAMILIES:
            family = registry.get(name)
            run = check_models(family, count=args.models, seed=args.seed, presentations=("F", "I", "A"))
            rows = [annotate(family, v) for v in run.verdicts]
            solutions = list({v.candidate.solution.solution_id: v.candidate.solution for v in run.verdicts}.values())
            wh.insert(run.models)
            wh.insert(solutions)
            wh.insert(run.outputs)
            wh.insert([env for env, _, _ in rows])
            wh.insert([c for _, checks, _ in rows for c in checks])
            wh.insert([e for _, _, edges in rows for e in edges] + upstream_edges(solutions, run.outputs))
            print(f"{name}: {sum(env.admitted for env, _, _ in rows)}/{len(rows)} admitted")
    print(f"built {args.db} in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
