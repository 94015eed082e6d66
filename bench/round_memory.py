"""What a round's records cost in the flow process: tracemalloc around `check_batch` and `annotate`.

    PYTHONPATH=. python bench/round_memory.py inventory_dp routing negotiation

For each family: 8 θ draws (seed 0), presentation A, one module each, checked in this process
(no Prefect). Reports the traced memory held per candidate by the verdicts, by the stored rows
(`annotate`) and by the rows alone once the verdicts are dropped, and the peak of one module's
check. The first family's figures include one-time caches (compiled schemas and regexes).
"""

from __future__ import annotations

import gc
import sys
import tracemalloc

from vhd.mechanisms import registry
from vhd.tasks.stages import annotate, check, sample, solve, synthesize
from vhd.tasks.setters.passages import builtin_passages


def probe(name: str, count: int = 8) -> dict:
    family = registry.get(name)
    models = sample.sample_models(family, count, 0, "probe", 0)
    solutions = {s.model_id: s for s in solve.solve_models(family, models)}
    passages = builtin_passages()
    outputs, assignment = synthesize.synthesize(family, models, passages)
    candidates = annotate.make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs},
                                          assignment, ("A",), {p.passage_id: p for p in passages}, "train")
    groups = annotate.by_module(outputs, candidates)
    tracemalloc.start()
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    verdicts = [v for output, group in groups for v in check.check_batch(family, output, group)]
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    rows = [annotate.annotate(family, v) for v in verdicts]
    gc.collect()
    with_rows = tracemalloc.get_traced_memory()[0]
    del verdicts
    gc.collect()
    rows_only = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    n = len(candidates)
    return {"family": name, "candidates": n, "modules": len(groups), "rows": len(rows),
            "verdicts_kb_per_candidate": round((held - base) / 1024 / n),
            "rows_kb_per_candidate_added": round((with_rows - held) / 1024 / n),
            "rows_only_kb_per_candidate": round((rows_only - base) / 1024 / n),
            "peak_kb_checking": round((peak - base) / 1024)}


if __name__ == "__main__":
    for family_name in sys.argv[1:] or ["inventory_dp"]:
        print(probe(family_name))
