"""Seals of published corpus versions (issue 31), computed in DuckDB SQL, and the seal file that
anchors them outside the warehouse.

    >>> version_contents(wh, ["v1"])     # wh: an open Warehouse; per stored version: content, envs, missing
    {}
    >>> first = seal_of("", "0" * 64)    # seal(v1) = seal_of("", content(v1)); then seal_of(seal(v1), content(v2))
    >>> len(first), first == seal_of("", "0" * 64), seal_of(first, "0" * 64) == first
    (64, True, False)

**What a seal covers.** `content(v)` is the SHA-256 of one text that lists, one line each: the
seal format; the version row's stored field digests (they cover its manifest — env ids, grading
digests, counts, corpus digest — `admitted`, `created_at`, `run_id`); for every environment the
manifest lists, in id order, its env id and its row's stored field digests (every column: the
grading fields, and the ids of its model, solution and module, which are content hashes of θ,
the solution and the module text — so a parent rewritten with its id recomputed changes them),
or `absent`; and every `superseded` mark made no later than the version (all its columns).
`seal(v_k) = sha256("vhd-seal@1" \\n seal(v_{k-1}) \\n content(v_k))`, `seal(v_0) = ""`: a seal pins
its version and every version before it.

**What it costs, and what it does not see.** It reads the stored digest columns only (~700 bytes
an environment), not the values, so it costs milliseconds per thousand environments and does not
depend on the DuckDB version (the digests are this project's `hashing.field_digest`). A value
edited without its digest (a stray `UPDATE`), or a parent row (model, solution, module, check,
passage, lineage edge) edited with its id left as it was, leaves the seal as it was: such a row
no longer matches its digest or its id, which every reader checks before use (`Warehouse.verified`
in `publish.open_version`: export, eval, score) and `vhd verify` reports; the manifest a publish
builds lists the anchored grading digests, so it never vouches for such a row.

**The anchor.** A seal proves nothing while it sits in the file a forger rewrites: each publish
appends one JSON line per version to a seal file beside the warehouse (`seals_path`: by default
`<db>.seals.jsonl`; `VHD_SEALS` or `--seals` elsewhere), which the user may keep under version
control or copy off the machine; `vhd export` writes the version's line beside the export
(`SEAL`) and the refresh flow publishes it as a Prefect artifact. Threat model: the forger
rewrites the warehouse file, not the seal file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from vhd.schemas.errors import WarehouseError

FORMAT = "vhd-seal@1"


class SealFileError(WarehouseError):
    """A seal file that cannot be read or is not one JSON line per sealed version."""


def seal_of(previous: str, content: str) -> str:
    """The seal of a version whose content digest is `content`, chained on the previous seal."""
    return hashlib.sha256(f"{FORMAT}\n{previous}\n{content}".encode()).hexdigest()


def version_contents(wh: Any, versions: list[str]) -> dict[str, dict[str, Any]]:
    """version -> {"content": its content digest (see the module's docstring), "envs": how many
    environments its manifest lists, "missing": how many of them are not stored} for the stored
    versions among `versions`, in one query over the stored digest columns (no value is read but
    the manifests' env ids and the marks)."""
    if not versions:
        return {}
    rows = wh.con.execute(f"""
    WITH v AS MATERIALIZED (
        SELECT version, created_at, field_digests AS s,
               CASE WHEN json_valid(manifest) THEN
                    CAST(json_extract_string(manifest, '$.env_ids[*]') AS VARCHAR[]) END AS ids
        FROM corpus_versions WHERE list_contains($versions, version)),
    ve AS MATERIALIZED (SELECT version, unnest(coalesce(ids, []::VARCHAR[])) AS env_id FROM v),
    per AS (
        SELECT ve.version, count(*) AS envs, count(*) FILTER (WHERE e.env_id IS NULL) AS missing,
               string_agg(ve.env_id || ' ' || coalesce(e.field_digests, 'absent'), chr(10) ORDER BY ve.env_id) AS agg
        FROM ve LEFT JOIN environments e ON e.env_id = ve.env_id GROUP BY ve.version)
    SELECT v.version,
           sha256(concat_ws(chr(10), '{FORMAT}', 'version ' || v.version || ' ' || coalesce(v.s, 'absent'),
                            coalesce(per.agg, ''),
                            coalesce((SELECT string_agg(concat_ws(' ', 'mark', id, kind, code_version, current_version,
                                                                  run_id, marked_at), chr(10)
                                                        ORDER BY id, kind, marked_at)
                                      FROM superseded WHERE marked_at <= v.created_at), ''))),
           coalesce(per.envs, 0), coalesce(per.missing, 0)
    FROM v LEFT JOIN per ON per.version = v.version""", {"versions": list(versions)}).fetchall()
    return {version: {"content": content, "envs": envs, "missing": missing}
            for version, content, envs, missing in rows}


def sealed_chain(wh: Any) -> list[dict[str, Any]]:
    """Every published version, oldest first, with its seal recomputed from the stored rows:
    [{"version", "seal", "previous", "content", "envs", "missing"}]."""
    names = wh.version_names()
    contents = version_contents(wh, names)
    out, previous = [], ""
    for name in names:
        found = contents[name]
        seal = seal_of(previous, found["content"])
        out.append({"version": name, "seal": seal, "previous": previous, **found})
        previous = seal
    return out


def covered_ids(wh: Any, versions: list[str]) -> set[str]:
    """The stored env ids the manifests of `versions` list: what their seals cover."""
    if not versions:
        return set()
    return {row[0] for row in wh.con.execute("""
        SELECT DISTINCT e.env_id FROM environments e JOIN (
            SELECT unnest(CAST(json_extract_string(manifest, '$.env_ids[*]') AS VARCHAR[])) AS env_id
            FROM corpus_versions WHERE list_contains($versions, version) AND json_valid(manifest)) m
        ON m.env_id = e.env_id""", {"versions": list(versions)}).fetchall()}


# -- the seal file (the anchor) --------------------------------------------------------------------
def seals_path(db: str | Path, seals: str | Path | None = None) -> Path:
    """The seal file of the warehouse at `db`: `seals` if given, else `VHD_SEALS`, else `<db>.seals.jsonl`."""
    if seals is not None and str(seals):
        return Path(seals)
    if os.environ.get("VHD_SEALS"):
        return Path(os.environ["VHD_SEALS"])
    db = Path(db)
    return db.with_name(db.name + ".seals.jsonl")


_REQUIRED = {"format": str, "version": str, "seal": str, "previous": str}


def read_anchors(path: str | Path) -> dict[str, dict[str, Any]] | None:
    """version -> its anchored line (the last line for a version wins; they must agree), or None
    when the file does not exist. A file that cannot be read, or a line that is not a JSON object
    with `format`, `version`, `seal` and `previous` (64 hex digits, or "" for the first), or two
    lines that anchor one version with different seals, is a SealFileError of one line."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SealFileError(f"cannot read seal file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    anchors: dict[str, dict[str, Any]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            raise SealFileError(f"seal file {path} line {number}: not JSON") from None
        if not isinstance(line, dict) or any(not isinstance(line.get(k), t) for k, t in _REQUIRED.items()):
            raise SealFileError(f"seal file {path} line {number}: not a seal line (a JSON object with format, "
                                "version, seal and previous)")
        if line["format"] != FORMAT:
            raise SealFileError(f"seal file {path} line {number}: format {line['format']!r}, expected {FORMAT!r}")
        if not _hex(line["seal"]) or not (line["previous"] == "" or _hex(line["previous"])):
            raise SealFileError(f"seal file {path} line {number}: seal and previous must be 64 hex digits")
        known = anchors.get(line["version"])
        if known is not None and (known["seal"], known["previous"]) != (line["seal"], line["previous"]):
            raise SealFileError(f"seal file {path} line {number}: anchors {line['version']} with another seal "
                                f"than an earlier line")
        anchors[line["version"]] = line
    return anchors


def _hex(text: str) -> bool:
    return len(text) == 64 and all(ch in "0123456789abcdef" for ch in text)


def append_anchor(path: str | Path, line: dict[str, Any]) -> None:
    """Append one seal line (flushed and fsynced). A WarehouseError of one line when it cannot be written."""
    path = Path(path)
    text = json.dumps({"format": FORMAT, **line}, sort_keys=True, separators=(",", ":")) + "\n"
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise SealFileError(f"cannot write seal file {path}: {exc.strerror or exc}") from None
