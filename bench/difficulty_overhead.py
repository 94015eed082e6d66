"""What measuring difficulty at annotation adds to a refresh (issue 30: at most 10 % more build time).

    PYTHONPATH=. python bench/difficulty_overhead.py --base /tmp/base --repeats 3 -- --per-family 4 --seed 7

`--base` is a copy of the code before the change (e.g. `git archive <commit> | tar -x -C /tmp/base`).
Each repeat runs `vhd refresh ARGS --json` on a fresh warehouse with the base code and with this
checkout's, alternately (so a change in the machine's load falls on both), and reads the flow's own
seconds (`seconds`: inside the flow, Prefect's server start left out) and its stage seconds. Prints
the medians and the overhead, and a JSON line with every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def run(tree: Path, args: list[str], scratch: Path) -> dict:
    db = scratch / f"{tree.name}-{len(list(scratch.iterdir()))}.duckdb"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-m", "vhd.cli", "refresh", *args, "--db", str(db), "--json"],
                         cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"{tree}: refresh failed: {out.stderr.strip().splitlines()[-1:]}")
    summary = json.loads(out.stdout)
    return {"seconds": summary["seconds"], "stages": summary["stage_seconds"], "admitted": summary["admitted"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="a copy of the code before the change")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("args", nargs="*", help="vhd refresh arguments (after --)")
    opts = parser.parse_args()
    runs: dict[str, list[dict]] = {"base": [], "current": []}
    with tempfile.TemporaryDirectory(prefix="vhd-difficulty-bench-") as scratch:
        for _ in range(opts.repeats):
            for name, tree in (("base", opts.base.resolve()), ("current", HERE)):
                runs[name].append(run(tree, opts.args, Path(scratch)))
                print(name, json.dumps(runs[name][-1]), flush=True)
    medians = {name: statistics.median(r["seconds"] for r in rs) for name, rs in runs.items()}
    annotate = {name: statistics.median(r["stages"]["annotate"] for r in rs) for name, rs in runs.items()}
    print(f"flow seconds, median of {opts.repeats}: base {medians['base']:.1f}, current {medians['current']:.1f} "
          f"({(medians['current'] / medians['base'] - 1) * 100:+.1f} %); annotate stage: base {annotate['base']:.2f} s, "
          f"current {annotate['current']:.2f} s")
    print(json.dumps(runs))


if __name__ == "__main__":
    main()
