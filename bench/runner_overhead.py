"""The sandbox runner's own cost: this tree's runner against another revision's, on the same jobs.

    python bench/runner_overhead.py --family inventory_dp --models 8 --base HEAD~1 --repeats 7

Builds the check stage's first-run jobs (trajectories, call sequences, fuzz, A twins) for
`--models` θ of one family, and plays each job in this process with both runners' `_describe`,
`_play` and `_fuzz` (no sandbox child: what is measured is the runner and the module, not the
launch). Both compute every answer's number digest (the job's "numbers": false, which spares
the determinism replay and the A twins that work, is the launch's to pass; so the ratio here
understates the saving). The two runners take turns, `--repeats` times; their reports must be
identical (else the script exits 1). Prints the median seconds of each and their ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from vhd.mechanisms import registry
from vhd.tasks.stages.check.batch import _job
from vhd.tasks.stages.check.candidates import references
from vhd.tasks.stages.check.sequences import call_sequences
from vhd.tasks.stages.in_process import builtin_passages, by_module, make_candidates, sample_models, solve_models, synthesize
from vhd.tasks.sandbox import runner

RUNNER = "vhd/tasks/sandbox/runner.py"


def jobs_for(family_name: str, models: int, seed: int) -> list[dict]:
    family = registry.get(family_name)
    drawn = sample_models(family, models, seed, "bench")
    solutions = {s.model_id: s for s in solve_models(family, drawn)}
    passages = builtin_passages()
    outputs, assignment = synthesize(family, drawn, passages)
    candidates = make_candidates(family, drawn, solutions, {o.setter_output_id: o for o in outputs}, assignment,
                                 ("I", "A"), {p.passage_id: p for p in passages})
    jobs = []
    for output, group in by_module(outputs, candidates):
        played = [c for c in group if c.presentation != "F"]
        refs = [references(family, c) for c in played]
        jobs.append(_job(family, output, played, refs, [call_sequences(family, c, r) for c, r in zip(played, refs)]))
    return jobs


def play(module_runner, jobs: list[dict]) -> list:
    reports = []
    for job in jobs:
        module = types.ModuleType("vhd_env")
        exec(compile(job["module"], "vhd_env.py", "exec"), module.__dict__)
        for episode in job["episodes"]:
            config = episode["config"]
            reports.append(module_runner._describe(module, config))
            reports += [module_runner._play(module, config, t, episode.get("finish") is True)
                        for t in episode["trajectories"]]
            fuzz = episode.get("fuzz")
            if fuzz:
                reports.append(module_runner._fuzz(module, config, fuzz["prefix"], fuzz["calls"], fuzz["rest"]))
    return reports


def runner_at(revision: str):
    source = subprocess.run(["git", "show", f"{revision}:{RUNNER}"], capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp(prefix="vhd-runner-")) / "runner_base.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("runner_base", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="inventory_dp")
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--base", default="HEAD~1", help="the git revision whose runner is compared")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    jobs = jobs_for(args.family, args.models, args.seed)
    base = runner_at(args.base)
    calls = sum(len(t["calls"]) if isinstance(t, dict) else len(t)
                for job in jobs for episode in job["episodes"] for t in episode["trajectories"])
    if play(base, jobs) != play(runner, jobs):
        print("the two runners' reports differ", file=sys.stderr)
        return 1
    seconds = {"base": [], "this tree": []}
    for _ in range(args.repeats):
        for name, module_runner in (("base", base), ("this tree", runner)):
            started = time.perf_counter()
            play(module_runner, jobs)
            seconds[name].append(time.perf_counter() - started)
    base_s, this_s = statistics.median(seconds["base"]), statistics.median(seconds["this tree"])
    print(f"{args.family}, {args.models} θ in I and A: {sum(len(j['episodes']) for j in jobs)} episodes, "
          f"{calls} listed calls; identical reports")
    print(f"runner at {args.base}: {base_s:.2f} s   this tree: {this_s:.2f} s   ratio {this_s / base_s:.3f} "
          f"(median of {args.repeats})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
