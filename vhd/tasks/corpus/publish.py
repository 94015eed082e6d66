"""Stage 6, publish: the manifest of a corpus version, and its verification before any use.

    >>> manifest = build_manifest([env])                # admitted, current EnvironmentRecords
    >>> manifest["env_ids"] == [env.env_id], manifest["counts"]
    (True, {'family': {'inventory_dp': 1}, 'split': {'train': 1}, 'presentation': {'I': 1}})
    >>> rewritten = env.model_copy(update={"run_id": "later"})      # metadata only: the same digest
    >>> build_manifest([rewritten])["digest"] == manifest["digest"]   # nothing changed: publish nothing
    True
    >>> version = CorpusVersionRecord(version="v1", created_at="2026-01-01T00:00:00+00:00", run_id="doctest",
    ...                               admitted=1, manifest=manifest)
    >>> check_version(version, {env.env_id: env})        # [] when every row still matches the manifest
    []
    >>> edited = env.model_copy(update={"u_star": env.u_star + 1})
    >>> [f["problem"] for f in check_version(version, {env.env_id: edited})]
    ["environment ...'s grading fields changed since it was published (its grading digest differs)"]

The corpus digest covers every environment's grading digest, and a grading digest covers every
field of the environment row but its run id and timings — its identity (model, solution and module
ids, which are content hashes), u*, u₀, u_idle, trajectories, instruction, tools, split, verdict.
So a trainer that pins a corpus digest pins everything it and its grader read.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, get_origin

from vhd.schemas.errors import IntegrityError, UnknownCorpusVersion
from vhd.schemas.hashing import canonical_json, content_id
from vhd.schemas.records import CorpusVersionRecord, EnvironmentRecord

FORMAT = "manifest@2"
NOT_GRADED = ("run_id", "gate_seconds")  # metadata: who wrote the row first, how long its gates took


def finding(env_id: str, table: str, record_id: str, field: str, problem: str) -> dict[str, str]:
    """One problem the audit reports: the environment it concerns, the table, the row, the field."""
    return {"env_id": env_id, "table": table, "id": record_id, "field": field, "problem": problem}


# the environment fields stored as canonical JSON text (as the warehouse writes them)
JSON_FIELDS = frozenset(name for name, f in EnvironmentRecord.model_fields.items()
                        if get_origin(f.annotation) in (dict, list, tuple))


def grading_digest(env: EnvironmentRecord) -> str:
    """The digest of everything a trainer or grader reads of an environment row: every field but
    NOT_GRADED, with its dict and list fields as the canonical JSON text the warehouse stores."""
    as_json = env.model_dump(mode="json", include=set(JSON_FIELDS))
    return grading_digest_of_row({k: canonical_json(as_json[k]) if k in JSON_FIELDS else v
                                  for k, v in env.model_dump(mode="python").items()})


def grading_digest_of_row(row: dict[str, Any]) -> str:
    """`grading_digest` of a stored environment row (JSON columns as their text), without parsing
    it: what the audit computes for every environment on every publish attempt."""
    fields = {k: v for k, v in row.items() if k not in NOT_GRADED and k != "field_digests"}
    if fields.get("difficulty") == "{}":  # not measured (migration 007): the digest rows had before it
        del fields["difficulty"]
    return content_id("environment-grading", "grading@1", fields)


def corpus_digest(ids: list[str], digests: list[str]) -> str:
    return content_id("corpus", FORMAT, [[i, d] for i, d in zip(ids, digests)])


def build_manifest(envs: list[EnvironmentRecord], known: dict[str, str] | None = None) -> dict[str, Any]:
    """Sorted env ids, their grading digests, counts per family, split and presentation, and the
    corpus digest over (id, grading digest) pairs; `known`: grading digests already computed (the
    audit's), by env_id."""
    envs = sorted(envs, key=lambda e: e.env_id)
    ids = [e.env_id for e in envs]
    digests = [(known or {}).get(e.env_id) or grading_digest(e) for e in envs]
    return {
        "format": FORMAT,
        "env_ids": ids,
        "env_digests": digests,
        "counts": _counts(envs),
        "digest": corpus_digest(ids, digests),
    }


def manifest_of_keys(keys: list[dict[str, str]], digests: dict[str, str],
                     envs: dict[str, EnvironmentRecord] | None = None) -> dict[str, Any]:
    """`build_manifest` from the environments' keys (`Warehouse.environment_keys`: env_id, family,
    split, presentation) and their grading digests by env_id, without loading whole rows: what an
    incremental publish builds (the digests of environments an anchored version holds come from its
    manifest, the others from the audit, else computed from `envs`). The same manifest, digest
    included, as `build_manifest`."""
    keys = sorted(keys, key=lambda k: k["env_id"])
    ids = [k["env_id"] for k in keys]
    listed = [digests.get(i) or grading_digest((envs or {})[i]) for i in ids]
    return {"format": FORMAT, "env_ids": ids, "env_digests": listed, "counts": _counts(keys),
            "digest": corpus_digest(ids, listed)}


def _counts(envs: list[Any]) -> dict[str, dict[str, int]]:
    def of(e: Any, key: str) -> str:
        return e[key] if isinstance(e, dict) else getattr(e, key)

    return {
        "family": dict(sorted(Counter(of(e, "family") for e in envs).items())),
        "split": dict(sorted(Counter(of(e, "split") for e in envs).items())),
        "presentation": dict(sorted(Counter(of(e, "presentation") for e in envs).items())),
    }


def next_version(existing: list[str]) -> str:
    numbers = [int(v[1:]) for v in existing if v.startswith("v") and v[1:].isdigit()]
    return f"v{max(numbers, default=0) + 1}"


def check_version(version: CorpusVersionRecord, envs: dict[str, EnvironmentRecord | None],
                  runs: set[str] | None = None, digests: dict[str, str] | None = None) -> list[dict[str, str]]:
    """Findings (as the audit writes them) when a published version no longer matches the stored
    environments: a missing or rejected environment, a changed grading field, a count, the digest.
    `envs` maps every id of the manifest to its stored row (None when it is gone); `digests`, the
    grading digests already computed (env_id -> digest), is filled in as they are computed."""
    digests = {} if digests is None else digests
    def bad(field: str, problem: str, env_id: str = "") -> None:
        found.append(finding(env_id, "corpus_versions", str(version.version), field, problem))

    found: list[dict[str, str]] = []
    manifest = version.manifest if isinstance(version.manifest, dict) else {}
    ids = manifest.get("env_ids")
    if not isinstance(ids, list) or ids != sorted(set(map(str, ids))):
        bad("manifest", "env_ids is not a sorted list of distinct ids")
        return found
    if version.admitted != len(ids):
        bad("admitted", f"{version.admitted!r} but the manifest lists {len(ids)} environments")
    if runs is not None and version.run_id not in runs:
        bad("run_id", f"names run {version.run_id}, which is not recorded")
    present = [envs.get(i) for i in ids]
    for env_id, env in zip(ids, present):
        if env is None:
            bad("manifest", f"names environment {env_id[:12]}…, which is not stored", env_id)
        elif not env.admitted:
            bad("manifest", f"lists environment {env_id[:12]}…, which is stored as rejected", env_id)
    stored = [e for e in present if e is not None]
    if len(stored) == len(ids) and manifest.get("counts") != _counts(stored):
        bad("manifest", "its counts per family, split or presentation are not those of its environments")
    if manifest.get("format") == FORMAT:
        listed = manifest.get("env_digests")
        if not isinstance(listed, list) or len(listed) != len(ids):
            bad("manifest", "env_digests does not give one digest per environment")
            return found
        for env_id, env, digest in zip(ids, present, listed):
            if env is not None and env_id not in digests:
                try:
                    digests[env_id] = grading_digest(env)
                except (TypeError, ValueError):
                    digests[env_id] = ""
            if env is not None and digests[env_id] != digest:
                bad("manifest", f"environment {env_id[:12]}…'s grading fields changed since it was published "
                                "(its grading digest differs)", env_id)
        if manifest.get("digest") != corpus_digest(ids, listed):
            bad("manifest", "its corpus digest is not the digest of its environments and their grading digests")
    elif manifest.get("digest") != content_id("corpus", "manifest@1", ids):  # published before grading digests
        bad("manifest", "its corpus digest is not the digest of its environment ids")
    return found


def latest(names: list[str]) -> str | None:
    """The highest-numbered of the published versions' names."""
    numbered = [(int(v[1:]), v) for v in names if v.startswith("v") and v[1:].isdigit()]
    return max(numbered)[1] if numbered else (names[-1] if names else None)


def current_code() -> tuple[dict[str, str], str, dict[str, str]]:
    """What `flows.refresh.run_batch` marks superseded with: every registered family's version,
    the annotator/checker version, the template setter's version."""
    from vhd.mechanisms import registry
    from vhd.tasks.stages.annotate import CODE_VERSION
    from vhd.tasks.setters.template import SETTER, SETTER_VERSION

    return {f.name: f.version for f in registry.all()}, CODE_VERSION, {SETTER: SETTER_VERSION}


_CODE: dict[str, str] = {}


def code_digest() -> str:
    """SHA-256 over the source files of the code the publish gate's verdicts come from — the
    families (`vhd.mechanisms`), the stages, setters, checker, grading and audit (`vhd.tasks`) and
    the records and hashing (`vhd.schemas`): path and bytes of every file, in path order; once a
    process. A seal line records it: environments an anchored version holds are trusted only by the
    same code (a family changed without a bump of its `version` is recomputed once, then anchored
    again)."""
    if "digest" not in _CODE:
        import hashlib
        from pathlib import Path

        root = Path(__file__).resolve().parents[2]  # the vhd package (not imported here: vhd imports this module)
        h = hashlib.sha256()
        for package in ("mechanisms", "tasks", "schemas"):
            for path in sorted((root / package).rglob("*")):
                if path.is_file() and path.suffix in (".py", ".sql", ".json", ".jsonl", ".txt") \
                        and "__pycache__" not in path.parts:
                    h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
        _CODE["digest"] = h.hexdigest()
    return _CODE["digest"]


def mark_problems(wh: Any) -> list[tuple[str, str, str]]:
    """(id, what, problem) for every `superseded` row the current code does not derive (`what`:
    "forged", or "kind" when it derives another kind) and every row it supersedes that carries
    no mark ("unmarked"; the next `vhd refresh` marks it). The marks are not sealed: they are
    checked by being derived again from the rows' own sealed version columns
    (`Warehouse.derived_superseded`), so a mark is legitimate only if today's code makes it."""
    derived = wh.derived_superseded(*current_code())
    marks = wh.superseded()
    out = []
    for record_id, mark in sorted(marks.items()):
        kind = derived.get(record_id)
        if kind is None:
            out.append((record_id, "forged", f"marked superseded ({mark['kind']}), but the current code does not "
                                             "supersede it: no stored row of that id was made by another version"))
        elif kind != mark["kind"]:
            out.append((record_id, "kind", f"marked superseded as a {mark['kind']!r}, but it is a superseded {kind!r}"))
    for record_id, kind in sorted(derived.items()):
        if record_id not in marks:
            out.append((record_id, "unmarked", f"a {kind} the current code supersedes carries no superseded mark "
                                               "(`vhd refresh` marks it)"))
    return out


def refuse_tampered_marks(wh: Any) -> None:
    """An IntegrityError (one line) when the warehouse holds a superseded mark the current code does
    not make (`mark_problems`): the file was tampered with, and a version rewritten to match it
    would drop environments silently, so no reader uses it until `vhd verify` finds nothing."""
    forged = [p for p in mark_problems(wh) if p[1] != "unmarked"]
    if forged:
        record_id, _, problem = forged[0]
        raise IntegrityError(f"superseded {record_id} id: {problem}"
                             + (f" (and {len(forged) - 1} more marks)" if len(forged) > 1 else "")
                             + "; run `vhd verify` for every problem")


def stored_twice_findings(wh: Any) -> list[dict[str, str]]:
    """A finding per key stored in more than one row of checks or lineage_edges (migration 008: no
    primary key; `Warehouse.insert` never writes a second row of a key, so the file was edited)."""
    return [finding("", table, key, "row", "stored in more than one row (the warehouse file was edited)")
            for table, key in wh.stored_twice()]


def refuse_stored_twice(wh: Any) -> None:
    """An IntegrityError (one line) when a key of checks or lineage_edges is stored twice: every
    reader checks each row it reads (`Warehouse.verified`), so a second row that differs is refused
    where it is read, and one that does not would still count twice; a publish refuses both."""
    found = stored_twice_findings(wh)
    if found:
        first = found[0]
        raise IntegrityError(f"{first['table']} {first['id']}: {first['problem']}"
                             + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
                             + "; run `vhd verify` for every problem")


def recomputed(wh: Any, envs: list[EnvironmentRecord]) -> list[dict[str, str]]:
    """Findings on `envs` from what trusted code recomputes (`recompute.environment_problems`: θ
    from its seed, the grading fields replayed, the module against the template setter's
    render, the verdict's θ-dependent gates), their parents read through `wh.verified`."""
    from vhd.schemas.records import ModelRecord, PassageRecord, SetterOutputRecord, SolutionRecord
    from vhd.tasks.corpus.recompute import environment_problems

    models = wh.verified(ModelRecord, {e.model_id for e in envs}, complete=True)
    solutions = wh.verified(SolutionRecord, {e.solution_id for e in envs}, complete=True)
    outputs = wh.verified(SetterOutputRecord, {e.setter_output_id for e in envs}, complete=True)
    passages = wh.verified(PassageRecord, {o.passage_id for o in outputs.values()})
    found = []
    for env in envs:
        model, output = models[env.model_id], outputs[env.setter_output_id]
        found += [finding(env.env_id, *f) for f in environment_problems(
            env, model, solutions[env.solution_id], output, passages.get(output.passage_id))]
    return found


def admissible(wh: Any, env: EnvironmentRecord, where: str = "") -> EnvironmentRecord:
    """`env`, once `recomputed` finds nothing; else an IntegrityError of one line (`where`: the
    version it was read through, for the message)."""
    refuse_tampered_marks(wh)
    found = recomputed(wh, [env])
    if found:
        raise IntegrityError(_recomputed_line(found, where))
    return env


def _recomputed_line(found: list[dict[str, str]], where: str) -> str:
    first = found[0]
    more = f" (and {len(found) - 1} more problems)" if len(found) > 1 else ""
    return (f"{where + ': ' if where else ''}{first['table']} {first['id'][:12]} {first['field']}: {first['problem']} "
            f"(env {first['env_id'][:12]}…){more}; run `vhd verify` for every problem")


def open_version(wh: Any, name: str | None = None, recompute: list[str] | None = None
                 ) -> tuple[CorpusVersionRecord, list[EnvironmentRecord]]:
    """The published corpus version `name` (default: the latest) and its environments in manifest
    order, verified before any use: the version's row against its field digests, every
    environment's row against its digests and id, and the manifest against those rows (ids,
    counts, per-environment grading digests, the corpus digest); then what decides each
    environment's grade and verdict recomputed by trusted code (`recomputed`; `recompute`: only
    these env ids, e.g. the one a score reads), since a forger can rewrite a manifest and every
    digest with this code (issue 31). A difference is an IntegrityError of one line; `wh` is an
    open Warehouse."""
    names = wh.version_names()
    chosen = name if name is not None else latest(names)
    if chosen is None or chosen not in names:
        raise UnknownCorpusVersion(f"no corpus version {name!r}; published: {', '.join(names) or 'none yet'}"
                                   if name is not None else f"no corpus version is published in {wh.path} yet; "
                                   "`vhd refresh` publishes one when the audit and the quality suite pass")
    version = wh.verified(CorpusVersionRecord, [chosen])[chosen]
    ids = version.manifest.get("env_ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise IntegrityError(f"corpus version {chosen} manifest: env_ids is not a list of ids")
    envs = wh.verified(EnvironmentRecord, ids)
    found = check_version(version, {i: envs.get(i) for i in ids})
    if found:
        more = f" (and {len(found) - 1} more problems)" if len(found) > 1 else ""
        raise IntegrityError(f"corpus version {chosen} {found[0]['field']}: {found[0]['problem']}{more}; "
                             "run `vhd verify` for every problem")
    refuse_tampered_marks(wh)  # a version rewritten around a forged mark drops environments silently
    wanted = set(ids if recompute is None else recompute)
    found = recomputed(wh, [envs[i] for i in ids if i in wanted])
    if found:
        raise IntegrityError(_recomputed_line(found, f"corpus version {chosen}"))
    return version, [envs[i] for i in ids]


def holding_version(wh: Any, env_id: str, name: str | None = None
                    ) -> tuple[CorpusVersionRecord, EnvironmentRecord] | None:
    """(version, environment) for the published version `name` — by default the latest that lists
    `env_id` — verified first (`open_version`); None when no version lists it. With `name`, an
    environment that version does not list is an UnknownEnvironment."""
    from vhd.schemas.errors import UnknownEnvironment

    names = [name] if name is not None else sorted(wh.version_names(), key=lambda v: (len(v), v), reverse=True)
    for candidate in names:
        if name is None:
            listed = wh.verified(CorpusVersionRecord, [candidate]).get(candidate)
            if listed is None or env_id not in (listed.manifest.get("env_ids") or []):
                continue
        version, envs = open_version(wh, candidate, recompute=[env_id])
        for env in envs:
            if env.env_id == env_id:
                return version, env
        raise UnknownEnvironment(f"environment {env_id} is not in corpus version {candidate}")
    return None


def pinned(env: EnvironmentRecord, version: CorpusVersionRecord | None) -> dict[str, str]:
    """The export columns that pin a row: its grading digest and the version's corpus digest
    ("" for both when no published version holds the environment)."""
    return {"digest": grading_digest(env), "corpus_version": version.version if version is not None else "",
            "corpus_digest": version.manifest["digest"] if version is not None else ""}
