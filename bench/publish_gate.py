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
- **gate_noop**: the full gate again over the same chains: what a no-op publish costs when no
  matching anchored seal lets it trust anything (everything replayed; `--anchored` below measures
  the incremental path);
- **manifest**: `publish.build_manifest` with the audit's grading digests;
- **resolve**: what `vhd verify` adds: every θ re-solved (timed once, on the first repeat).

A warm-up pass runs first and is not counted (imports, each family's reference World compiled
once per process). Prints the median of the repeats as JSON, with seconds per 1,000 environments.

With `--anchored` (issue 31: the incremental gate), instead: the copy's published versions are
anchored in a seal file beside it from their recomputed seals (what a publish that passed the gate
writes; here without the gate, so that a synthetic warehouse can be measured too), then per repeat

- **seal_check**: `seals.sealed_chain` — every version's seal recomputed from the stored rows and
  every field digest on their chains recomputed from its value, in SQL;
- **publish_noop**: `flows.refresh.publish` on the copy with nothing new (superseded marks
  checked, keys, versions, the seal check, the plan, the manifest from the anchored one): the
  whole publish step of a no-op refresh under a matching anchor, and how many it replayed.

    python bench/publish_gate.py --db /tmp/paper.duckdb --repeats 3 --anchored
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
from vhd.schemas.records import CorpusVersionRecord, EnvironmentRecord
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


def anchored(path: Path, repeats: int) -> dict[str, Any]:
    """The incremental gate's cost on `path` (a scratch copy): see the module's docstring."""
    import os

    from vhd.flows.refresh import publish
    from vhd.tasks.corpus.publish import code_digest
    from vhd.warehouse import seals

    seal_file = seals.seals_path(path)
    with Warehouse.open(path) as wh:  # migrated once; versions anchored as a passing publish would
        for row in seals.sealed_chain(wh):
            seals.append_anchor(seal_file, {"version": row["version"], "seal": row["seal"], "previous": row["previous"],
                                            "anchored_by": "bench", "admitted": row["envs"], "code": code_digest()})
    out: dict[str, Any] = {"seal_check": [], "publish_noop": [], "replayed": [], "incremental": []}
    import contextlib
    import io

    with Warehouse.open(path) as wh, contextlib.redirect_stdout(io.StringIO()):  # the gate's log line
        publish(wh, "bench-warmup")  # imports, Prefect's client: not counted
        for _ in range(repeats):
            t0 = time.perf_counter()
            chain = seals.sealed_chain(wh)
            out["seal_check"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _, published, _, audit = publish(wh, "bench")
            out["publish_noop"].append(time.perf_counter() - t0)
            out["replayed"].append(audit["replayed"])
            out["incremental"].append(audit["seal"]["incremental"])
            assert not published
        envs = sum(row["envs"] for row in chain[-1:])
    report = {"db": str(path), "envs_in_latest_version": envs, "repeats": repeats, "load": os.getloadavg(),
              "replayed": out["replayed"], "incremental": out["incremental"]}
    for phase in ("seal_check", "publish_noop"):
        median = statistics.median(out[phase])
        report[phase] = {"median_s": round(median, 3), "runs": [round(x, 3) for x in out[phase]],
                         "ms_per_1000_envs": round(1e6 * median / max(1, envs), 1)}
    return report


def multiply(src: Path, dst: Path, k: int) -> dict[str, Any]:
    """A synthetic warehouse for the incremental gate's cost at more environments than a build here
    affords: `src` copied to `dst` with the latest version's environments repeated `k` times (each
    copy's env rows, check rows and lineage edges under new ids derived from the old, their field
    digests written as `Warehouse.insert` would), the latest version's manifest rebuilt over all of
    them, and the versions anchored in `<dst>.seals.jsonl` under today's code. The copies' ids are
    not content hashes (a full recompute flags them): only for measuring the path that trusts them."""
    from vhd.schemas.hashing import canonical_json, field_digests
    from vhd.tasks.corpus.publish import code_digest, manifest_of_keys
    from vhd.warehouse import seals

    shutil.copy(src, dst)
    seals.seals_path(dst).unlink(missing_ok=True)
    with Warehouse.open(dst) as wh:
        con = wh.con
        latest = wh.version_names()[-1]
        manifest = json.loads(con.execute("SELECT manifest FROM corpus_versions WHERE version = ?",
                                          [latest]).fetchall()[0][0])
        con.execute("CREATE TEMP TABLE base AS SELECT unnest(?::VARCHAR[]) AS env_id", [manifest["env_ids"]])
        with wh.transaction():
            for j in range(1, k):
                con.execute(f"INSERT INTO environments SELECT * REPLACE (sha256(env_id || '#{j}') AS env_id) "
                            "FROM environments WHERE env_id IN (SELECT env_id FROM base)")
                con.execute(f"INSERT INTO checks SELECT * REPLACE (sha256(check_id || '#{j}') AS check_id, "
                            f"sha256(env_id || '#{j}') AS env_id) FROM checks "
                            "WHERE env_id IN (SELECT env_id FROM base)")
                con.execute(f"INSERT INTO lineage_edges SELECT sha256(child_id || '#{j}'), parent_id, relation "
                            "FROM lineage_edges WHERE child_id IN (SELECT env_id FROM base)")
                con.execute(f"INSERT INTO lineage_edges SELECT sha256(e.child_id || '#{j}'), sha256(e.parent_id || "
                            f"'#{j}'), e.relation FROM lineage_edges e JOIN checks c ON c.check_id = e.child_id "
                            "WHERE c.env_id IN (SELECT env_id FROM base)")
            for table, key in (("environments", "env_id"), ("checks", "check_id")):
                cursor = con.execute(f"SELECT * FROM {table} WHERE {key} NOT IN (SELECT {key} FROM {table} "
                                     f"WHERE {'env_id' if table == 'checks' else key} IN (SELECT env_id FROM base))")
                columns = [d[0] for d in cursor.description]
                fixed = []
                for values in cursor.fetchall():
                    row = dict(zip(columns, values))
                    row.pop("field_digests")
                    fixed.append((canonical_json(field_digests(row)), row[key]))
                con.executemany(f"UPDATE {table} SET field_digests = ? WHERE {key} = ?", fixed)
            keys = wh.environment_keys()
            from vhd.tasks.corpus.publish import grading_digest_of_row

            rows = {r["env_id"]: r for r in wh.stored_rows(EnvironmentRecord, "env_id", [x["env_id"] for x in keys])}
            rebuilt = manifest_of_keys(keys, {i: grading_digest_of_row(r) for i, r in rows.items()})
            manifest.update(rebuilt)
            con.execute("UPDATE corpus_versions SET manifest = ?, admitted = ? WHERE version = ?",
                        [canonical_json(manifest), len(keys), latest])
            row = wh.stored_rows(CorpusVersionRecord, "version", [latest])[0]
            row.pop("field_digests")
            con.execute("UPDATE corpus_versions SET field_digests = ? WHERE version = ?",
                        [canonical_json(field_digests(row)), latest])
        for sealed in seals.sealed_chain(wh):
            seals.append_anchor(seals.seals_path(dst), {
                "version": sealed["version"], "seal": sealed["seal"], "previous": sealed["previous"],
                "anchored_by": "bench-synthetic", "admitted": sealed["envs"], "code": code_digest()})
        return {"db": str(dst), "envs": len(keys), "seals": str(seals.seals_path(dst))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--anchored", action="store_true",
                        help="measure the incremental gate (seal check, no-op publish under a matching anchor)")
    parser.add_argument("--multiply", nargs=2, metavar=("K", "OUT"), default=None,
                        help="write a synthetic warehouse OUT with the latest version's environments repeated K "
                             "times, anchored (see `multiply`), and stop")
    parser.add_argument("--all", action="store_true", help="audit every stored environment, not only the admitted")
    parser.add_argument("--any-version", action="store_true",
                        help="recompute rows made by an older family, annotator or checker version (their findings "
                             "are expected and ignored: only the seconds count; a warehouse built by older code)")
    args = parser.parse_args()
    if args.multiply:
        print(json.dumps(multiply(args.db, Path(args.multiply[1]), int(args.multiply[0])), indent=2))
        return
    if args.any_version:
        audit.Auditor._family = lambda self, model: registry.get(model.family)
        audit.Auditor._current = lambda self, env: True
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "gate.duckdb"
        shutil.copy(args.db, copy)
        if args.anchored:
            print(json.dumps(anchored(copy, args.repeats), indent=2))
            return
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
