"""Per-stage seconds of the spine for one family, in process (no Prefect, no warehouse).

    python bench/spine_stages.py --family inventory_dp --per-family 20 --repeats 3

Prints the median of `repeats` runs per stage, side by side, and the admitted count.
"""

from __future__ import annotations

import argparse
import statistics
import time

from vhd.mechanisms import registry
from vhd.tasks.stages.annotate import annotate, make_candidates
from vhd.tasks.stages.check import check_batch
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.stages.solve import solve_models
from vhd.tasks.stages.synthesize import synthesize


def once(family, per_family: int, seed: int) -> tuple[dict[str, float], int, int]:
    t, clock = {}, time.perf_counter
    start = clock()
    models = sample_models(family, per_family, seed, "bench")
    t["sample"] = clock() - start
    start = clock()
    solutions = {s.model_id: s for s in solve_models(family, models)}
    t["solve"] = clock() - start
    start = clock()
    outputs, assignment = synthesize(family, models, builtin_passages())
    t["synthesize"] = clock() - start
    candidates = make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs}, assignment, ("I", "A"))
    start = clock()
    verdicts = [v for o in outputs for v in check_batch(family, o, [c for c in candidates if c.setter_output is o])]
    t["check"] = clock() - start
    start = clock()
    admitted = sum(annotate(family, v)[0].admitted for v in verdicts)
    t["annotate"] = clock() - start
    return t, admitted, len(verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="inventory_dp")
    parser.add_argument("--per-family", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    family = registry.get(args.family)
    runs = [once(family, args.per_family, seed=0) for _ in range(args.repeats)]
    print(f"{args.family}: {runs[0][1]}/{runs[0][2]} admitted; median of {args.repeats} runs")
    for stage in runs[0][0]:
        values = [r[0][stage] for r in runs]
        print(f"  {stage:<10} {statistics.median(values):8.3f} s   (runs: {', '.join(f'{v:.3f}' for v in values)})")
    total = statistics.median(sum(r[0].values()) for r in runs)
    print(f"  {'total':<10} {total:8.3f} s   → {runs[0][1] / total:.1f} admitted environments/s")


if __name__ == "__main__":
    main()
