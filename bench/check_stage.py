"""The check stage on template modules, with a render's runs played once and played twice, side by side.

    python bench/check_stage.py --families inventory_dp,routing,negotiation --per-family 12 --repeats 3

For each family: `--per-family` θ (seed 0), presentation A, the template setter's modules, checked
in this process (no Prefect, no warehouse) two ways in alternation: as the check stage does
(`batch._play_and_judge`: a module that is the template setter's render plays its call sequences
once, its own runs standing for the reference World's) and with every module treated as another
setter's (`is_render` answering False: the reference World's runs in a sandbox child of their
own, as before). Prints the median wall seconds and flow-process CPU seconds of each, their
ratio, and whether the two gave the same verdicts (gate by gate, passed and message); one
run of each first, not counted, warms the process (renders, compiled references, zygotes).
"""

from __future__ import annotations

import argparse
import statistics
import time

from vhd.mechanisms import registry
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.stages.annotate import by_module, make_candidates
from vhd.tasks.stages.check import batch
from vhd.tasks.stages.check import check_batch
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.stages.solve import solve_models
from vhd.tasks.stages.synthesize import synthesize


def groups(name: str, count: int):
    family = registry.get(name)
    models = sample_models(family, count, 0, "check-bench")
    solutions = {s.model_id: s for s in solve_models(family, models)}
    outputs, assignment = synthesize(family, models, builtin_passages())
    candidates = make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs}, assignment, ("A",))
    return family, by_module(outputs, candidates)


def once(family, grouped, render: bool) -> tuple[float, float, list]:
    real = batch.is_render
    batch.is_render = real if render else (lambda family, output: False)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        verdicts = [v for output, group in grouped for v in check_batch(family, output, group)]
        return time.perf_counter() - wall, time.process_time() - cpu, verdicts
    finally:
        batch.is_render = real


def judged(verdicts) -> list:
    return [(v.candidate.env_id, [(g.name, g.passed, g.message) for g in v.gates]) for v in verdicts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="inventory_dp,routing,negotiation")
    parser.add_argument("--per-family", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'family':<14}{'cands':>6}  {'once: wall / cpu s':>20}  {'twice: wall / cpu s':>20}  {'wall ratio':>10}  same verdicts")
    for name in args.families.split(","):
        family, grouped = groups(name, args.per_family)
        runs = {True: [], False: []}
        same = True
        once(family, grouped, True), once(family, grouped, False)  # warm: renders, compiled references, zygotes
        for _ in range(args.repeats):
            for render in (True, False):
                wall, cpu, verdicts = once(family, grouped, render)
                runs[render].append((wall, cpu, judged(verdicts)))
            same = same and runs[True][-1][2] == runs[False][-1][2]
        med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in runs.items()}
        count = sum(len(g) for _, g in grouped)
        print(f"{name:<14}{count:>6}  {med[True][0]:>9.2f} / {med[True][1]:>7.2f}  {med[False][0]:>10.2f} / {med[False][1]:>7.2f}"
              f"  {med[True][0] / med[False][0]:>10.2f}  {same}", flush=True)


if __name__ == "__main__":
    main()
