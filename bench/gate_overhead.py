"""Gate overhead: checked environments per second, and where the time goes.

    python bench/gate_overhead.py --families inventory_dp,knapsack,rostering,lp --per-family 4 --workers 2 --repeats 3

Builds the candidates once (sample, solve, synthesize; presentations I and A), then per repeat
and per launch path — `pool` (children forked from warm zygotes, `vhd.tasks.sandbox.pool`) and
`spawn` (a fresh interpreter per child, VHD_SANDBOX_POOL=0), alternating within the repeat:

- **throughput**: `check_batch` on every module, `--workers` modules at a time (threads: each
  check's work is two sandboxed child processes plus the parent's reference simulation), and
  the checked environments per second of wall time;
- **breakdown**, one module at a time, per environment: *spawn* (a sandbox child that executes
  the module and plays nothing), *replay* (the same child playing every trajectory: reference
  policies, random call sequences, looks and probes, minus spawn), *fuzz* (the same child also
  playing the fuzzed invalid calls, minus replay and spawn), and the parent's *reference* time
  (family simulator episodes and the reference World's runs of the random call sequences).

Prints the median of the repeats per path as JSON (the pool is started fresh per repeat, so its
zygote start-up is inside the throughput figure).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from vhd.mechanisms import registry
from vhd.tasks.stages.annotate import make_candidates
from vhd.tasks.stages.check import _job, call_sequences, check_batch, reference_runs, references
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.sandbox import pool as pools
from vhd.tasks.sandbox import run_job
from vhd.tasks.stages.solve import solve_models
from vhd.tasks.stages.synthesize import synthesize


def build(names: list[str], per_family: int) -> list[tuple]:
    batches = []
    for name in names:
        family = registry.get(name)
        models = sample_models(family, per_family, 0, "gate-bench")
        solutions = {s.model_id: s for s in solve_models(family, models)}
        outputs, assignment = synthesize(family, models, builtin_passages())
        candidates = make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs}, assignment,
                                     ("I", "A"))
        for output in outputs:
            mine = [c for c in candidates if c.setter_output is output]
            if mine:
                batches.append((family, output, mine))
    return batches


def throughput(batches: list[tuple], workers: int) -> tuple[float, int, int]:
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        verdicts = [v for vs in pool.map(lambda b: check_batch(*b), batches) for v in vs]
    seconds = time.perf_counter() - start
    return seconds, len(verdicts), sum(v.admitted for v in verdicts)


def breakdown(batches: list[tuple]) -> dict[str, float]:
    """Seconds per environment, summed over the batches, one sandbox child at a time."""
    total = {"spawn": 0.0, "replay": 0.0, "fuzz": 0.0, "reference": 0.0}
    envs = 0
    for family, output, candidates in batches:
        start = time.perf_counter()
        refs = [references(family, c) for c in candidates]
        sequences = [call_sequences(family, c, r) for c, r in zip(candidates, refs)]
        expected = reference_runs(family, candidates, sequences)
        total["reference"] += time.perf_counter() - start
        job = _job(family, output, candidates, refs, sequences, expected)
        plain = {**job, "episodes": [{**e, "fuzz": None} for e in job["episodes"]]}
        spawn = run_job({**job, "episodes": []}).seconds
        replay = run_job(plain).seconds
        full = run_job(job).seconds
        total["spawn"] += spawn
        total["replay"] += max(0.0, replay - spawn)
        total["fuzz"] += max(0.0, full - replay)
        envs += len(candidates)
    return {key: value / envs for key, value in total.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="inventory_dp,knapsack,rostering,lp")
    parser.add_argument("--per-family", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--paths", default="pool,spawn", help="launch paths to compare: pool, spawn or both")
    args = parser.parse_args()
    paths = args.paths.split(",")
    if not paths or any(path not in ("pool", "spawn") for path in paths):
        raise SystemExit(f"bench: --paths {args.paths!r}: expected pool, spawn or pool,spawn")
    if "pool" in paths and not pools.enabled():
        raise SystemExit("bench: the warm pool is not available here (no PID namespace, or VHD_SANDBOX_POOL=0)")
    batches = build(args.families.split(","), args.per_family)
    runs: dict[str, list[dict]] = {path: [] for path in paths}
    for _ in range(args.repeats):
        for path in paths:
            os.environ[pools.ENV_SWITCH] = "1" if path == "pool" else "0"
            pools.shutdown_default()  # every repeat starts its zygotes afresh
            seconds, checked, admitted = throughput(batches, args.workers)
            runs[path].append({"wall_seconds": seconds, "environments": checked, "admitted": admitted,
                               "environments_per_second": checked / seconds,
                               **{f"{k}_seconds_per_env": v for k, v in breakdown(batches).items()}})
    median = {path: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for path, rs in runs.items()}
    print(json.dumps({"families": args.families.split(","), "modules": len(batches), "workers": args.workers,
                      "repeats": args.repeats, "median": median, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
