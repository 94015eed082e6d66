"""Publish gate cost: what the audit adds to every publish attempt, per phase and per environment.

    python bench/publish_gate.py --db /tmp/paper.duckdb --repeats 3

On a copy of the warehouse (opened for writing once, so it is migrated, and sealed when its rows
were written before migration 006), per repeat and in this process (no Prefect):

- **load**: `lineage.load_chains` over every admitted, current environment and every environment a
  published version names, plus `load_versions` (one query per table);
- **rows**: re-hash every row on those chains and recompute its field digests, lineage edges,
  verdicts against the check rows, the version manifests (`Auditor(replay=False, resolve=False)`);
- **replay**: θ re-drawn from its seed, u*, u₀, u_idle and both trajectories replayed from the
  stored π* for every environment (a first publish: `gate_first` = rows + replay);
- **gate_noop**: the gate when every environment is already in a published version with the same
  grading digest (a rerun with nothing new: nothing is replayed);
- **manifest**: `publish.build_manifest` with the audit's grading digests;
- **resolve**: what `vhd verify` adds: every θ re-solved (timed once, on the first repeat).

A warm-up pass runs first and is not counted (imports, each family's reference World compiled
once per process). Prints the median of the repeats as JSON, with seconds per 1,000 environments.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from collections import Counter

from vhd.mechanisms import registry
from vhd.schemas.records import EnvironmentRecord
from vhd.tasks.corpus import audit, publish_audit as gate
from vhd.tasks.corpus.publish import build_manifest, grading_digest
from vhd.warehouse import Warehouse
from vhd.warehouse.lineage import load_chains, load_versions


def _seal(path: Path) -> int:
    """Seal rows written before migration 006 (the benchmark's copy only)."""
    from vhd.schemas.records import (CheckRecord, CorpusVersionRecord, EnvironmentRecord, ModelRecord, PassageRecord,
                                     SetterOutputRecord, SolutionRecord)

    sealed = 0
    with Warehouse.open(path) as wh, wh.transaction():
        for cls in (PassageRecord, ModelRecord, SolutionRecord, SetterOutputRecord, CheckRecord, EnvironmentRecord,
                    CorpusVersionRecord):
            key = {CorpusVersionRecord: "version"}.get(cls) or cls.id_field
            sealed += wh.seal(cls, [row[key] for row in wh.stored_rows(cls)])
    return sealed


def once(path: Path, resolve: bool, every: bool) -> dict[str, Any]:
    timings: dict[str, Any] = {}
    clock = time.perf_counter
    with Warehouse.open(path, read_only=True) as wh:
        t0 = clock()
        keys = wh.environment_keys()
        versions = load_versions(wh)
        named = {i for v, _, _ in versions for i in v.manifest.get("env_ids", [])}
        if every:  # every stored environment, admitted or not: the gate's work per environment, at more of them
            named |= {row["env_id"] for row in wh.stored_rows(EnvironmentRecord)}
        chains = load_chains(wh, {k["env_id"] for k in keys} | named)
        runs = {r.run_id for r in wh.runs()}
        timings["load"] = clock() - t0
    envs = {i: c.environment for i, c in chains.items()}
    t0 = clock()
    rows = audit.Auditor(replay=False, resolve=False)  # hashes, digests, lineage, verdicts, versions
    found = rows.chains(chains) + gate.audit_versions(versions, envs, runs, rows.digests)
    timings["rows"] = clock() - t0
    t0 = clock()
    digests = {i: grading_digest(e) for i, e in envs.items()}
    timings["digests"] = clock() - t0
    t0 = clock()
    every_env = audit.Auditor(resolve=False, measure=False)  # the gate: every environment replayed
    found += every_env.chains(chains)
    timings["gate_first"] = clock() - t0
    timings["replay"] = timings["gate_first"] - timings["rows"]
    t0 = clock()
    noop = audit.Auditor(resolve=False, measure=False)  # a no-op publish replays everything too (issue 31)
    found += noop.chains(chains) + gate.audit_versions(versions, envs, runs, noop.digests)
    timings["gate_noop"] = clock() - t0
    t0 = clock()
    build_manifest([chains[k["env_id"]].environment for k in keys], noop.digests)
    timings["manifest"] = clock() - t0
    if resolve:
        t0 = clock()
        audit.Auditor(resolve=True).chains(chains)
        timings["resolve"] = clock() - t0 - timings["gate_first"]
    timings["envs"] = len(chains)
    timings["replayed"] = every_env.replayed
    timings["verified"] = not found
    timings["families"] = dict(Counter(c.environment.family for c in chains.values()))
    timings["notes"] = sorted(set(every_env.notes))
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--all", action="store_true", help="audit every stored environment, not only the admitted")
    parser.add_argument("--any-version", action="store_true",
                        help="recompute rows made by an older family, annotator or checker version (their findings "
                             "are expected and ignored: only the seconds count; a warehouse built by older code)")
    args = parser.parse_args()
    if args.any_version:
        audit.Auditor._family = lambda self, model: registry.get(model.family)
        audit.Auditor._current = lambda self, env: True
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "gate.duckdb"
        shutil.copy(args.db, copy)
        sealed = _seal(copy)
        once(copy, resolve=False, every=args.all)  # warm-up, not counted: imports, the reference Worlds' compile
        runs = [once(copy, resolve=(k == 0), every=args.all) for k in range(args.repeats)]
    envs = runs[0]["envs"]
    out = {"db": str(args.db), "envs": envs, "replayed": runs[0]["replayed"], "families": runs[0]["families"],
           "sealed_before_timing": sealed, "verified": all(r["verified"] for r in runs), "notes": runs[0]["notes"],
           "repeats": args.repeats}
    for phase in ("load", "rows", "replay", "digests", "manifest", "gate_first", "gate_noop"):
        median = statistics.median(r[phase] for r in runs)
        out[phase] = {"median_s": round(median, 3), "runs": [round(r[phase], 3) for r in runs],
                      "s_per_1000_envs": round(1000 * median / max(1, envs), 3)}
    out["resolve"] = {"s": round(runs[0]["resolve"], 3),
                      "s_per_1000_envs": round(1000 * runs[0]["resolve"] / max(1, envs), 3)}
    first = out["load"]["median_s"] + out["gate_first"]["median_s"] + out["manifest"]["median_s"]
    noop = out["load"]["median_s"] + out["gate_noop"]["median_s"] + out["manifest"]["median_s"]
    out["publish_gate_first_s"], out["publish_gate_noop_s"] = round(first, 3), round(noop, 3)
    out["at_3300_envs"] = {"first_s": round(first * 3300 / max(1, envs), 1), "noop_s": round(noop * 3300 / max(1, envs), 1)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
