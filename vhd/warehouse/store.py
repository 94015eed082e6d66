"""The warehouse: one DuckDB file, one writer, any number of read-only readers.

    >>> path = scratch / "store.duckdb"
    >>> with Warehouse.open(path) as writer, writer.transaction():   # created and migrated on first open
    ...     writer.insert([model])
    ...     writer.insert([model])                 # already there: a no-op
    >>> with Warehouse.open(path, read_only=True) as reader:
    ...     reader.get(ModelRecord, model.model_id) == model
    True
    >>> changed = model.model_copy(update={"seed": model.seed + 1})   # the same id, other content
    >>> with Warehouse.open(path) as writer, writer.transaction():
    ...     writer.insert([changed])
    Traceback (most recent call last):
    vhd.schemas.errors.IntegrityError: models ...: the stored row's seed differs from the row being written with the same id; ...

Records go in as batches (one Arrow table per kind and call: `executemany` is ~400× slower
here) with `INSERT OR IGNORE` (its rule as an anti-join for the tables without a primary key,
`UNKEYED`), so writing a row that is already there is a no-op: ids are
content hashes, and equal ids mean equal content. A stored row met again with different content
(it was changed after it was written) is an `IntegrityError`, never reused. Every row of a
`SEALED` table is written with its per-field digests (`field_digests`, migration 006), which the
audit recomputes to name the field of a row that changed.
"""

from __future__ import annotations

import json
import os
import typing
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import duckdb
import pyarrow as pa
from pydantic import ValidationError

from vhd.schemas.errors import IntegrityError, UnknownEnvironment, WarehouseError
from vhd.schemas.hashing import canonical_json, digest_problems, field_digests
from vhd.schemas.records import (
    CheckRecord, CorpusVersionRecord, EnvironmentRecord, EpisodeRecord, LineageEdge, ModelRecord, PassageRecord, RunRecord,
    SetterAttemptRecord, SetterOutputRecord,
    SolutionRecord,
)
import vhd.warehouse.files as files
from vhd.warehouse.migrate import available, migrate


TABLES: dict[type, tuple[str, str]] = {
    RunRecord: ("runs", "run_id"),
    PassageRecord: ("passages", "passage_id"),
    ModelRecord: ("models", "model_id"),
    SolutionRecord: ("solutions", "solution_id"),
    SetterOutputRecord: ("setter_outputs", "setter_output_id"),
    CheckRecord: ("checks", "check_id"),
    EnvironmentRecord: ("environments", "env_id"),
    LineageEdge: ("lineage_edges", ""),
    CorpusVersionRecord: ("corpus_versions", "version"),
    SetterAttemptRecord: ("setter_attempts", "attempt_id"),
    EpisodeRecord: ("episodes", "episode_id"),
}


# tables whose rows carry per-field digests (migration 006): what a trainer or grader depends on
SEALED = frozenset({"passages", "models", "solutions", "setter_outputs", "checks", "environments", "corpus_versions"})
# columns that may differ when a stored row is met again: who wrote it first, how long it took
METADATA = frozenset({"run_id", "seconds", "gate_seconds", "created_at", "field_digests"})
DIGESTS = "field_digests"
# tables without a primary key (migration 008), by the columns that identify a row: a key's index is
# held in memory from the first insert on and grew with the corpus (~13 checks and ~17 edges an
# environment); a row is written where no stored row has its key (`insert`), and a row stored
# twice, which only an edit of the file makes, is what `stored_twice` finds
UNKEYED = {"checks": (TABLES[CheckRecord][1],), "lineage_edges": tuple(LineageEdge.model_fields)}
TRIMMED = "4MB"  # the memory limit `Warehouse.trim` sets for a moment: DuckDB evicts its cache down to it


def default_path() -> Path:
    return Path(os.environ.get("VHD_DB", "data/vhd.duckdb"))


def _json_fields(cls: type) -> frozenset[str]:
    return frozenset(
        name for name, field in cls.model_fields.items() if typing.get_origin(field.annotation) in (dict, list, tuple)
    )


_JSON = {cls: _json_fields(cls) for cls in TABLES}


def _row(record: Any) -> dict[str, Any]:
    cls = type(record)
    row = record.model_dump(mode="python")
    if _JSON[cls]:
        as_json = record.model_dump(mode="json", include=set(_JSON[cls]))
        row.update({name: canonical_json(value) for name, value in as_json.items()})
    if TABLES[cls][0] in SEALED:
        row[DIGESTS] = canonical_json(field_digests(row))
    return row


def _record(cls: type, row: dict[str, Any]) -> Any:
    return cls(**{k: (json.loads(v) if k in _JSON[cls] else v) for k, v in row.items() if k != DIGESTS})


def parse_row(cls: type, row: dict[str, Any], validate: bool = True) -> tuple[Any, dict[str, str]]:
    """A stored row as a record, leniently: (record, {field: why its value is invalid}). A row that
    fails validation (it was edited after it was written) comes back unvalidated, so the audit can
    still name every field that is wrong instead of stopping at the first. `validate=False` skips
    pydantic for a kind of flat rows read in bulk (checks), whose field digests the audit checks."""
    values, invalid = {}, {}
    for name, value in row.items():
        if name == DIGESTS:
            continue
        if name in _JSON[cls] and isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                invalid[name] = "not JSON"
        values[name] = value
    if not validate:
        return cls.model_construct(**values), invalid
    try:
        return cls(**values), invalid
    except ValidationError as exc:
        for error in exc.errors():
            invalid.setdefault(str(error["loc"][0]) if error["loc"] else "row", error["msg"])
        return cls.model_construct(**values), invalid


class _Connection:
    """The warehouse's DuckDB connection, as `Warehouse.con`: DuckDB's error for a damaged file met by
    a statement (a block failing its checksum, a database DuckDB invalidated) is a `WarehouseError`
    naming the file and what to do (`files.database_error`); everything else is the connection's own."""

    __slots__ = ("_con", "_path")

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path):
        self._con, self._path = con, path

    def execute(self, *args: Any, **kwargs: Any) -> "_Connection":
        try:
            self._con.execute(*args, **kwargs)
        except duckdb.Error as exc:
            if not files.is_damage(exc):
                raise
            raise WarehouseError(files.database_error(exc, self._path)) from None
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


class Warehouse:
    """A connection to the warehouse file, migrated to the current schema when writable."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, read_only: bool):
        self.raw, self.path, self.read_only = con, path, read_only
        self.con = _Connection(con, path)

    @classmethod
    def open(cls, path: str | Path | None = None, *, read_only: bool = False,
             check_blocks: bool = False) -> "Warehouse":
        """Open (a writer: create and migrate) the warehouse at `path`. Refused in one
        `WarehouseError` line, before anything is written: a path or file that is not a whole vhd
        warehouse (`files`), and one that lacks a table or column its migrations made. With
        `check_blocks`, every block in use is read first (`files.check_blocks`): a corrupted one is
        refused here, not met mid-command."""
        path = Path(path) if path is not None else default_path()
        files.check_path(path, read_only)  # missing, a directory, under a file, no such directory, 0 bytes
        if not read_only and not path.exists():
            files.create(path, migrate)  # whole or not at all: a full disk leaves no file behind
        con = files.connect(path, read_only)  # waits a bounded time for readers (or, reading, for a writer)
        try:
            files.check_complete(con, path)
            pending = files.pending_migrations(con, path)  # refuses another application's or a newer file
            applied = [version for version, _, _ in available() if version not in pending]
            if applied:  # a table dropped or altered outside vhd: refused before a migration touches it
                files.check_schema(con, path, max(applied))
            if read_only and not con.execute(
                    "SELECT count(*) FROM information_schema.tables WHERE table_name = 'environments'").fetchall()[0][0]:
                raise WarehouseError(f"{path} is not a vhd warehouse (no environments table)")
            if read_only and pending:
                raise WarehouseError(f"{path} needs migration {pending[0]:03d}; open it once for writing "
                                     "(e.g. `vhd refresh`) to upgrade it")
            if check_blocks:
                files.check_blocks(con, path, write=not read_only)
            if not read_only and pending:
                migrate(con)
        except BaseException as exc:
            if not read_only:
                files.drop_empty_wal(path)  # a migration that failed on a full disk
            con.close()
            if isinstance(exc, duckdb.Error):
                raise WarehouseError(f"cannot open warehouse {path}: {str(exc).strip().splitlines()[0]}") from None
            raise
        return cls(con, path, read_only)

    @classmethod
    def preflight(cls, path: str | Path) -> None:
        """Fail now, not after Prefect has started, where `open(path)` would: an existing file is
        opened for writing once (busy, truncated, foreign, newer, a table dropped, a read-only file
        system, every block read: corrupted; then migrated); for a new one only the path is checked,
        so a command that fails later leaves no file behind."""
        path = Path(path)
        if path.exists() or path.is_dir():
            cls.open(path, check_blocks=True).close()  # a corrupted block too, before the run's first commit
        else:
            files.check_path(path, read_only=False)

    def close(self) -> None:
        if not self.read_only:
            files.drop_empty_wal(self.path)  # a failed commit's empty WAL; we alone hold the file
        try:
            self.con.close()
        except duckdb.Error as exc:
            raise WarehouseError(f"cannot close warehouse {self.path}: {str(exc).strip().splitlines()[0]}") from None

    def __enter__(self) -> "Warehouse":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.raw.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException as exc:
            files.rollback(self.raw)  # quietly when DuckDB aborted it already: the error to show is `exc`
            if isinstance(exc, duckdb.IOException):  # e.g. a full disk while writing the WAL
                raise WarehouseError(f"cannot write warehouse {self.path}: {str(exc).strip().splitlines()[0]}; "
                                     "nothing of this transaction was stored") from None
            raise
        try:
            self.raw.execute("COMMIT")
        except duckdb.Error as exc:  # a full disk at commit: DuckDB rolls the transaction back
            raise WarehouseError(f"cannot commit to warehouse {self.path}: {str(exc).strip().splitlines()[0]}; "
                                 "nothing of this transaction was stored") from None

    def trim(self) -> None:
        """Drop the blocks DuckDB keeps cached. DuckDB caches every block it reads or writes, up
        to its memory limit (80 % of the machine's RAM): a refresh would hold about as much of the
        file as it wrote or audited, and its memory would grow with the corpus (issue 31). Lowering
        the limit evicts the unpinned blocks at once; the limit is then reset to DuckDB's default, so no
        query runs under a smaller one. Called where a read or write of many blocks ends: after a
        refresh's round is written (`checkpoint`), after each table an audit batch reads, after the quality reads."""
        try:
            self.raw.execute(f"SET memory_limit = '{TRIMMED}'")
        except duckdb.Error:  # a limit DuckDB cannot reach: what can be evicted was, and the rest stays
            pass  # (primary-key indexes changed since the last checkpoint; blocks a pending result pins)
        finally:
            self.raw.execute("RESET memory_limit")

    def checkpoint(self) -> None:
        """Write what the write-ahead log holds into the file (DuckDB's CHECKPOINT), then `trim`. An
        insert loads its table's primary-key index (DuckDB's ART), and an index changed since the last
        checkpoint cannot be evicted: kept, the flow held the keys of every table it wrote from its
        first write to its end (75 MB at scale 3, 28 at scale 1, before migration 008 took the keys of
        checks and edges away; docs/BENCHMARKS.md). Once written out, an index is evicted like any
        block and read back by the next insert that needs it. Called after a refresh's round is
        written: a few tenths of a second, which DuckDB's own checkpoints (when the log passes 16 MB)
        would otherwise spend later."""
        try:
            self.raw.execute("CHECKPOINT")
        except duckdb.Error as exc:  # e.g. a full disk: what was committed is in the log, and stays there
            raise WarehouseError(f"cannot checkpoint warehouse {self.path}: {str(exc).strip().splitlines()[0]}; "
                                 "what was committed is kept in its write-ahead log") from None
        self.trim()

    @contextmanager
    def _registered(self, name: str, table: pa.Table) -> Iterator[None]:
        """`table` visible to SQL as `name` for the block. When the block fails, DuckDB may have
        aborted the transaction and refuse even the unregister: the block's error is the one raised."""
        self.raw.register(name, table)
        try:
            yield
        except BaseException:
            try:
                self.raw.unregister(name)
            except duckdb.Error:
                pass
            raise
        self.raw.unregister(name)

    # -- writing ----------------------------------------------------------------------------
    def insert(self, records: Sequence[Any]) -> None:
        """Insert a batch of records of one kind; a row whose key exists is left as it is when its
        content is the same, and is an IntegrityError when it is not (nothing of the batch is written)."""
        if not records:
            return
        table, key = TABLES[type(records[0])]
        rows = [_row(r) for r in records]
        with self._registered("_vhd_batch", pa.Table.from_pylist(rows)):
            if key:
                self._refuse_changed(table, key, [c for c in rows[0] if c != key and c not in METADATA])
            if table in UNKEYED:  # the first row of each key, where no stored row has it: INSERT OR IGNORE's rule
                ids = ", ".join(f'b."{c}"' for c in UNKEYED[table])
                stored = " AND ".join(f't."{c}" = b."{c}"' for c in UNKEYED[table])
                self.con.execute(f"INSERT INTO {table} BY NAME SELECT DISTINCT ON ({ids}) b.* FROM _vhd_batch b "
                                 f"WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE {stored})")
            else:
                self.con.execute(f"INSERT OR IGNORE INTO {table} BY NAME SELECT * FROM _vhd_batch")

    def _refuse_changed(self, table: str, key: str, columns: list[str]) -> None:
        """Raise IntegrityError when a row of `_vhd_batch` meets a stored row with the same key and
        a different value in one of `columns` (run ids and timings may differ: the first write stays)."""
        if not columns:
            return
        # the batch's keys met in the table first: that join reads the key column alone, while the
        # comparison reads every column of every stored row (at scale 3, +58 MB of DuckDB's cache
        # for an environments batch against +31 MB at scale 1); a refresh writes mostly new rows
        if not self.con.execute(f'SELECT 1 FROM _vhd_batch b SEMI JOIN {table} t ON t."{key}" = b."{key}" '
                                f'LIMIT 1').fetchall():
            return
        differs = [f'b."{c}" IS DISTINCT FROM t."{c}"' for c in columns]
        found = self.con.execute(
            f"SELECT b.\"{key}\", [{', '.join(f'CASE WHEN {d} THEN {c!r} END' for d, c in zip(differs, columns))}] "
            f'FROM _vhd_batch b JOIN {table} t ON t."{key}" = b."{key}" WHERE {" OR ".join(differs)} LIMIT 1').fetchall()
        if found:
            record_id, fields = found[0]
            changed = ", ".join(f for f in fields if f is not None)
            raise IntegrityError(f"{table} {record_id}: the stored row's {changed} differs from the row being "
                                 f"written with the same id; a row that no longer matches its id is never reused "
                                 f"(`vhd verify` names what changed)")

    def store(self, records: Sequence[Any]) -> set[str]:
        """Insert `records` (of one kind) in one transaction; returns the ids among them that were
        stored before (those rows are kept as they are)."""
        if not records:
            return set()
        cls = type(records[0])
        _, key = TABLES[cls]
        known = self.present(cls, [getattr(r, key) for r in records])
        with self.transaction():
            self.insert(records)
        return known

    def mark_interrupted(self, run_id: str, at: str) -> list[str]:
        """Mark every run still `running` but `run_id` as `interrupted` (finished at `at`) and return
        their ids: called by a writer, which holds the only lock, so their processes are gone."""
        rows = self.con.execute("UPDATE runs SET status = 'interrupted', finished_at = ? "
                                "WHERE status = 'running' AND run_id <> ? RETURNING run_id", [at, run_id]).fetchall()
        return sorted(row[0] for row in rows)

    def upsert_run(self, run: RunRecord) -> None:
        self.con.execute("DELETE FROM runs WHERE run_id = ?", [run.run_id])
        self.insert([run])

    # -- reading ----------------------------------------------------------------------------
    def _select(self, cls: type, where: str = "", params: Sequence[Any] = (), order: str = "") -> list[Any]:
        table, _ = TABLES[cls]
        cursor = self.con.execute(f"SELECT * FROM {table} {where} {order}", list(params))
        columns = [d[0] for d in cursor.description]
        return [_record(cls, dict(zip(columns, row))) for row in cursor.fetchall()]

    def get(self, cls: type, record_id: str) -> Any | None:
        _, key = TABLES[cls]
        found = self._select(cls, f"WHERE {key} = ?", [record_id])
        return found[0] if found else None

    def stored_rows(self, cls: type, column: str | None = None, values: Iterable[Any] = ()) -> list[dict[str, Any]]:
        """The rows of `cls`'s table whose `column` is one of `values` (every row without a column),
        exactly as stored (JSON columns as text, `field_digests` included): what the audit re-hashes.
        Parse them with `parse_row`."""
        table, _ = TABLES[cls]
        if column is None:
            cursor = self.con.execute(f"SELECT * FROM {table}")
        else:
            values = list(values)
            if not values:
                return []
            cursor = self.con.execute(f'SELECT * FROM {table} WHERE "{column}" IN (SELECT unnest(?))', [values])
        columns = [d[0] for d in cursor.description]
        return [dict(zip(columns, row)) for row in cursor.fetchall()]

    def verified(self, cls: type, ids: Iterable[str], *, complete: bool = False) -> dict[str, Any]:
        """id -> record for the stored ones among `ids` (`complete`: all of them, or an IntegrityError),
        each checked first: a row that is not a valid record, whose field digests no longer match,
        or whose content does not hash to its id is an IntegrityError naming table, id and field —
        a changed row is never read as if it held."""
        table, key = TABLES[cls]
        ids = list(ids)
        found = {}
        for row in self.stored_rows(cls, key, ids):
            record, invalid = parse_row(cls, row)
            problems = [(field, f"invalid value ({why})") for field, why in invalid.items()]
            problems += digest_problems(row) if table in SEALED else []
            if not problems and hasattr(record, "expected_id") and record.expected_id() != row[key]:
                problems.append((key, "does not hash to its id"))
            if problems:
                field, why = problems[0]
                raise IntegrityError(f"{table} {row[key]} {field}: {why}"
                                     + (f" (and {len(problems) - 1} more fields)" if len(problems) > 1 else "")
                                     + "; run `vhd verify` for every problem")
            found[row[key]] = record
        missing = [i for i in ids if i not in found] if complete else []
        if missing:
            raise IntegrityError(f"{table} {missing[0]} {key}: not stored, though a stored row names it"
                                 + (f" (and {len(set(missing)) - 1} more)" if len(set(missing)) > 1 else "")
                                 + "; run `vhd verify` for every problem")
        return found

    def version_names(self) -> list[str]:
        """The published corpus versions' names, oldest first, read without parsing their rows."""
        return [row[0] for row in self.con.execute("SELECT version FROM corpus_versions ORDER BY created_at, version")
                .fetchall()]

    def seal(self, cls: type, ids: Iterable[str]) -> int:
        """Write the field digests of stored rows that have none (rows written before migration
        006), as they are now: only for rows the audit has just verified (`vhd verify --seal`)."""
        table, key = TABLES[cls]
        sealed = 0
        for row in self.stored_rows(cls, key, ids):
            if not row.get(DIGESTS):
                digests = canonical_json(field_digests({k: v for k, v in row.items() if k != DIGESTS}))
                self.con.execute(f"UPDATE {table} SET {DIGESTS} = ? WHERE \"{key}\" = ?", [digests, row[key]])
                sealed += 1
        return sealed

    def present(self, cls: type, ids: Iterable[str]) -> set[str]:
        ids = list(ids)
        if not ids:
            return set()
        table, key = TABLES[cls]
        rows = self.con.execute(f"SELECT {key} FROM {table} WHERE list_contains(?, {key})", [ids]).fetchall()
        return {row[0] for row in rows}

    def admission(self, env_ids: Iterable[str]) -> dict[str, bool]:
        """env_id → admitted, for the ids that are stored."""
        ids = list(env_ids)
        if not ids:
            return {}
        rows = self.con.execute("SELECT env_id, admitted FROM environments WHERE list_contains(?, env_id)",
                                [ids]).fetchall()
        return {env_id: bool(admitted) for env_id, admitted in rows}

    def model_count(self, family: str, family_version: str, batch: str) -> int:
        """How many models of a family's version a batch holds."""
        return self.con.execute("SELECT count(*) FROM models WHERE family = ? AND family_version = ? AND batch = ?",
                                [family, family_version, batch]).fetchall()[0][0]

    def solutions_for(self, model_ids: Iterable[str]) -> dict[str, SolutionRecord]:
        """model_id -> its stored solution, to reuse: verified first (`verified`), so a solution
        row changed after it was written is an IntegrityError, never reused."""
        ids = list(model_ids)
        found = self.con.execute("SELECT solution_id FROM solutions WHERE list_contains(?, model_id)",
                                 [ids]).fetchall() if ids else []
        return {s.model_id: s for s in self.verified(SolutionRecord, [r[0] for r in found]).values()}

    def mark_superseded(self, families: dict[str, str], env_version: str, run_id: str, at: str,
                        setters: dict[str, str] | None = None) -> dict[str, int]:
        """Mark every row made by another version of its code: models, solutions and modules of a
        family whose version is not `families[name]`, modules of a setter named in `setters` made by
        another of its versions, and environments whose model or module is superseded or whose
        annotator/checker version is not `env_version`. Rows stay; returns new marks per kind."""
        current = [{"family": name, "version": version} for name, version in families.items()]
        if not current:
            return {}
        marked = {}
        with self._registered("_vhd_current", pa.Table.from_pylist(current)):
            for kind, table, key in (("model", "models", "model_id"), ("solution", "solutions", "solution_id"),
                                     ("setter_output", "setter_outputs", "setter_output_id")):
                before = self._superseded_count()
                self.con.execute(f"""
                    INSERT OR IGNORE INTO superseded
                    SELECT t.{key}, ?, t.family || '@' || t.family_version, c.family || '@' || c.version, ?, ?
                    FROM {table} t JOIN _vhd_current c ON c.family = t.family
                    WHERE t.family_version <> c.version""", [kind, run_id, at])
                marked[kind] = self._superseded_count() - before
            before = self._superseded_count()
            for setter, version in (setters or {}).items():  # the same family version, an older setter
                self.con.execute("""
                    INSERT OR IGNORE INTO superseded
                    SELECT o.setter_output_id, 'setter_output', o.setter || '@' || o.setter_version, ?, ?, ?
                    FROM setter_outputs o JOIN _vhd_current c ON c.family = o.family
                    WHERE o.setter = ? AND o.setter_version <> ?""", [f"{setter}@{version}", run_id, at, setter, version])
            marked["setter_output"] += self._superseded_count() - before
            before = self._superseded_count()
            self.con.execute("""
                INSERT OR IGNORE INTO superseded
                SELECT e.env_id, 'environment', 'annotator@' || e.annotator_version,
                       'annotator@' || ?, ?, ?
                FROM environments e JOIN _vhd_current c ON c.family = e.family
                WHERE e.annotator_version <> ? OR e.model_id IN (SELECT id FROM superseded WHERE kind = 'model')
                   OR e.setter_output_id IN (SELECT id FROM superseded WHERE kind = 'setter_output')""",
                             [env_version, run_id, at, env_version])
            marked["environment"] = self._superseded_count() - before
        return marked

    def _superseded_count(self) -> int:
        return self.con.execute("SELECT count(*) FROM superseded").fetchall()[0][0]

    def superseded(self) -> dict[str, dict[str, str]]:
        rows = self.con.execute("SELECT id, kind, code_version, current_version FROM superseded").fetchall()
        return {i: {"kind": k, "code_version": c, "current_version": v} for i, k, c, v in rows}

    def environments(self, family: str | None = None, admitted: bool | None = True,
                     include_superseded: bool = False) -> list[EnvironmentRecord]:
        clauses, params = [], []
        if not include_superseded:
            clauses.append("env_id NOT IN (SELECT id FROM superseded)")
        if family is not None:
            clauses.append("family = ?")
            params.append(family)
        if admitted is not None:
            clauses.append("admitted = ?")
            params.append(admitted)
        where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
        return self._select(EnvironmentRecord, where, params, "ORDER BY family, env_id")

    def env_ids(self) -> list[str]:
        """Every stored env_id (admitted or not, superseded included), in id order."""
        return [row[0] for row in self.con.execute("SELECT env_id FROM environments ORDER BY env_id").fetchall()]

    def resolve_env_id(self, prefix: str) -> str:
        """The env_id that is `prefix` or the only one to start with it (ids as `vhd envs` prints
        them); UnknownEnvironment when none or several do."""
        matches = [row[0] for row in self.con.execute(
            "SELECT env_id FROM environments WHERE starts_with(env_id, ?) LIMIT 2", [prefix]).fetchall()] if prefix else []
        if len(matches) != 1:
            raise UnknownEnvironment(f"{'no' if not matches else 'more than one'} environment matches {prefix!r}; "
                                     "expected an env_id from `vhd envs`")
        return matches[0]

    def derived_superseded(self, families: dict[str, str], env_version: str,
                           setters: dict[str, str] | None = None) -> dict[str, str]:
        """id -> kind of every row `mark_superseded(families, env_version, setters=setters)` would
        mark on an empty `superseded` table: what the code supersedes, derived from the rows' own
        (sealed) version columns alone, so a mark can be checked against it (`tasks.marks.mark_problems`)."""
        current = [{"family": name, "version": version} for name, version in families.items()]
        if not current:
            return {}
        out: dict[str, str] = {}
        with self._registered("_vhd_derive", pa.Table.from_pylist(current)):
            for kind, table, key in (("model", "models", "model_id"), ("solution", "solutions", "solution_id"),
                                     ("setter_output", "setter_outputs", "setter_output_id")):
                out.update((row[0], kind) for row in self.con.execute(
                    f"SELECT t.{key} FROM {table} t JOIN _vhd_derive c ON c.family = t.family "
                    "WHERE t.family_version <> c.version").fetchall())
            for setter, version in (setters or {}).items():
                out.update((row[0], "setter_output") for row in self.con.execute(
                    "SELECT o.setter_output_id FROM setter_outputs o JOIN _vhd_derive c ON c.family = o.family "
                    "WHERE o.setter = ? AND o.setter_version <> ?", [setter, version]).fetchall())
            models = [i for i, k in out.items() if k == "model"]
            outputs = [i for i, k in out.items() if k == "setter_output"]
            out.update((row[0], "environment") for row in self.con.execute(
                "SELECT e.env_id FROM environments e JOIN _vhd_derive c ON c.family = e.family "
                "WHERE e.annotator_version <> ? OR list_contains(?, e.model_id) OR list_contains(?, e.setter_output_id)",
                [env_version, models, outputs]).fetchall())
        return out

    def environment_keys(self) -> list[dict[str, str]]:
        """env_id, family, split and presentation of the admitted, current environments, in id
        order: what a corpus manifest needs, without loading whole records (check the superseded
        marks first: `tasks.marks.refuse_forged`)."""
        rows = self.con.execute("""
            SELECT env_id, family, split, presentation FROM environments
            WHERE admitted AND env_id NOT IN (SELECT id FROM superseded) ORDER BY env_id""").fetchall()
        return [dict(zip(("env_id", "family", "split", "presentation"), row)) for row in rows]

    def slot_state(self, family: str, family_version: str, batch: str, passage_ids: list[str]) -> dict[str, Any]:
        """What one batch of a family holds: enough to tell, without a task, that rerunning it
        would compute nothing (see `vhd.tasks.stages.resume`).

        `models`: the batch's current models of `family_version`; `env_models`, `solutions`,
        `modules`: distinct ones among their environments; `envs`: {(split, presentation, annotator
        version, admitted): n}; `setters`: {(setter, setter_version): n modules}; `misassigned`:
        environments whose module does not skin the passage that `passage_for` picks from
        `passage_ids` (the model seed modulo their count, in id order); `sample`: one
        (passage_id, setter_output_id) of the batch, to re-render."""
        ordered = sorted(passage_ids)
        state: dict[str, Any] = {"models": 0, "env_models": 0, "solutions": 0, "modules": 0, "envs": {},
                                 "setters": {}, "misassigned": 0, "sample": None}
        state["models"] = self.con.execute(
            "SELECT count(*) FROM models WHERE family = ? AND family_version = ? AND batch = ? "
            "AND model_id NOT IN (SELECT id FROM superseded)", [family, family_version, batch]).fetchall()[0][0]
        if not state["models"] or not ordered:
            return state
        slot = """WITH slot AS (
            SELECT e.env_id, e.model_id, e.solution_id, e.setter_output_id, e.split, e.presentation,
                   e.annotator_version, e.admitted, o.setter, o.setter_version, o.passage_id,
                   list_extract($ordered, CAST(((m.seed % $n) + $n) % $n AS INTEGER) + 1) AS picked
            FROM models m JOIN environments e ON e.model_id = m.model_id
            JOIN setter_outputs o ON o.setter_output_id = e.setter_output_id
            WHERE m.family = $family AND m.family_version = $version AND m.batch = $batch
              AND m.model_id NOT IN (SELECT id FROM superseded)) """
        params = {"ordered": ordered, "n": len(ordered), "family": family, "version": family_version, "batch": batch}
        row = self.con.execute(slot + """
            SELECT count(DISTINCT model_id), count(DISTINCT solution_id), count(DISTINCT setter_output_id),
                   count(*) FILTER (WHERE passage_id IS DISTINCT FROM picked),
                   min(passage_id), arg_min(setter_output_id, passage_id)
            FROM slot""", params).fetchall()[0]
        state.update(env_models=row[0], solutions=row[1], modules=row[2], misassigned=row[3],
                     sample=(row[4], row[5]) if row[4] is not None else None)
        for split, presentation, version, admitted, n in self.con.execute(
                slot + "SELECT split, presentation, annotator_version, admitted, count(*) FROM slot GROUP BY ALL",
                params).fetchall():
            state["envs"][(split, presentation, version, bool(admitted))] = n
        for setter, version, n in self.con.execute(
                slot + "SELECT setter, setter_version, count(DISTINCT setter_output_id) FROM slot GROUP BY ALL",
                params).fetchall():
            state["setters"][(setter, version)] = n
        return state

    def checks_for(self, env_id: str) -> list[CheckRecord]:
        return self._select(CheckRecord, "WHERE env_id = ?", [env_id], "ORDER BY check_id")

    def parents(self, child_id: str) -> list[LineageEdge]:
        return self._select(LineageEdge, "WHERE child_id = ?", [child_id], "ORDER BY relation, parent_id")

    def passages(self) -> list[PassageRecord]:
        """The stored passages (built-in and user-added), ordered by domain, passage_id."""
        return self._select(PassageRecord, order="ORDER BY domain, passage_id")

    def worlds(self) -> dict[str, Any]:
        """The distinct (family, passage domain) worlds among the admitted, current environments:
        {"worlds": n, "domains": n, "families": {family: n domains}}."""
        rows = self.con.execute("""
            SELECT DISTINCT e.family, p.domain FROM environments e
            JOIN setter_outputs s ON s.setter_output_id = e.setter_output_id
            JOIN passages p ON p.passage_id = s.passage_id
            WHERE e.admitted AND e.env_id NOT IN (SELECT id FROM superseded)""").fetchall()
        families: dict[str, int] = {}
        for family, _ in rows:
            families[family] = families.get(family, 0) + 1
        return {"worlds": len(rows), "domains": len({domain for _, domain in rows}),
                "families": dict(sorted(families.items()))}

    def versions(self) -> list[CorpusVersionRecord]:
        return self._select(CorpusVersionRecord, order="ORDER BY created_at, version")

    def episodes(self, agent: str | None = None) -> list[EpisodeRecord]:
        """Stored agent episodes (migration 004), optionally of one agent."""
        where, params = ("WHERE agent = ?", [agent]) if agent is not None else ("", [])
        return self._select(EpisodeRecord, where, params, "ORDER BY family, presentation, env_id, episode_index")

    def eval_inputs(self, env_ids: list[str]) -> dict[str, tuple[Any, Any, Any]]:
        """env_id -> (model, solution, setter output) of the given environments."""
        envs = self.verified(EnvironmentRecord, env_ids)  # each row checked: a changed one is an IntegrityError
        models = self.verified(ModelRecord, [e.model_id for e in envs.values()], complete=True)
        solutions = self.verified(SolutionRecord, [e.solution_id for e in envs.values()], complete=True)
        outputs = self.verified(SetterOutputRecord, [e.setter_output_id for e in envs.values()], complete=True)
        return {i: (models[e.model_id], solutions[e.solution_id], outputs[e.setter_output_id]) for i, e in envs.items()}

    def runs(self) -> list[RunRecord]:
        return self._select(RunRecord, order="ORDER BY started_at")

    def quality_frame(self) -> Any:
        """One pandas row per admitted environment with what the data-quality suite checks: its
        ids, split and presentation, the solution's values, and whether each link of its
        lineage chain (model, solution, module, passage and the five edges) is stored; in env_id
        order.

        The texts the suite also reads (θ, the instruction) are not in it: `quality_texts` streams
        them. With them, this frame took a fresh process from 165 to 411 MB at scale 3 of the paper
        preset (23 MB of text); without them, to 235 MB (docs/BENCHMARKS.md)."""
        frame = self.con.execute("""
            SELECT e.env_id, e.family, e.split, e.presentation, e.u_star, e.u_default,
                   s.u_star AS solution_u_star, s.u_default AS solution_u_default,
                   (m.model_id IS NOT NULL AND s.solution_id IS NOT NULL AND o.setter_output_id IS NOT NULL
                    AND p.passage_id IS NOT NULL
                    AND EXISTS (SELECT 1 FROM lineage_edges x WHERE x.child_id = e.env_id AND x.parent_id = e.model_id
                                AND x.relation = 'instance_of')
                    AND EXISTS (SELECT 1 FROM lineage_edges x WHERE x.child_id = e.env_id
                                AND x.parent_id = e.solution_id AND x.relation = 'graded_by')
                    AND EXISTS (SELECT 1 FROM lineage_edges x WHERE x.child_id = e.env_id
                                AND x.parent_id = e.setter_output_id AND x.relation = 'rendered_by')
                    AND EXISTS (SELECT 1 FROM lineage_edges x WHERE x.child_id = s.solution_id
                                AND x.parent_id = m.model_id AND x.relation = 'solves')
                    AND EXISTS (SELECT 1 FROM lineage_edges x WHERE x.child_id = o.setter_output_id
                                AND x.parent_id = o.passage_id AND x.relation = 'skinned_by')) AS lineage_complete
            FROM environments e
            LEFT JOIN models m ON m.model_id = e.model_id
            LEFT JOIN solutions s ON s.solution_id = e.solution_id
            LEFT JOIN setter_outputs o ON o.setter_output_id = e.setter_output_id
            LEFT JOIN passages p ON p.passage_id = o.passage_id
            WHERE e.admitted AND e.env_id NOT IN (SELECT id FROM superseded) ORDER BY e.env_id""").df()
        self.trim()  # the blocks the joins read: the suite holds the frame, not DuckDB's cache of the file
        return frame

    def quality_texts(self, batch: int = 512) -> Iterator[tuple[str, str, str | None, str]]:
        """(env_id, family, θ as stored, instruction) of every admitted, current environment in
        presentation A, the one that hides θ: what the quality suite's `hides_theta` reads, in
        env_id order. The ids are read first; the texts (most of a row) `batch` ids a query,
        DuckDB's cache trimmed after each (`trim`): neither this process nor DuckDB holds more
        than a batch of them."""
        ids = [row[0] for row in self.con.execute(
            "SELECT env_id FROM environments WHERE admitted AND presentation = 'A' "
            "AND env_id NOT IN (SELECT id FROM superseded) ORDER BY env_id").fetchall()]
        for start in range(0, len(ids), batch):
            rows = self.con.execute("""
                SELECT e.env_id, e.family, m.theta, e.instruction FROM environments e
                LEFT JOIN models m ON m.model_id = e.model_id
                WHERE e.env_id IN (SELECT unnest(?)) ORDER BY e.env_id""", [ids[start:start + batch]]).fetchall()
            self.trim()
            yield from rows

    def exemplars(self, family: str, k: int = 3) -> list[SetterOutputRecord]:
        """Up to `k` modules of `family` behind admitted, current environments, in id order
        (deterministic: the same warehouse gives the same exemplars), each verified (`verified`): a
        module changed after it was written is never shown to the LLM setter as an example."""
        rows = self.con.execute(
            "SELECT DISTINCT e.setter_output_id FROM environments e WHERE e.family = ? AND e.admitted "
            "AND e.env_id NOT IN (SELECT id FROM superseded) ORDER BY 1 LIMIT ?", [family, k]).fetchall()
        found = self.verified(SetterOutputRecord, [r[0] for r in rows], complete=True)
        return [found[r[0]] for r in rows]

    def setter_yield(self) -> list[dict[str, Any]]:
        """Per (setter, LLM model): first-try rate, mean attempts, rewrite rate, cost per admitted env."""
        rows = self.con.execute("""
            SELECT a.setter, a.llm_model, count(*), avg(a.first_try::INT), avg(a.attempts), avg(a.rewritten::INT),
                   sum(a.cost_usd), count(DISTINCT a.run_id),
                   (SELECT count(*) FROM environments e WHERE e.admitted AND e.setter_output_id IN
                        (SELECT b.setter_output_id FROM setter_attempts b
                         WHERE b.setter = a.setter AND b.llm_model = a.llm_model))
            FROM setter_attempts a GROUP BY a.setter, a.llm_model ORDER BY 1, 2""").fetchall()
        return [{"setter": s, "model": m, "outputs": n, "runs": runs, "admitted": adm,
                 "first_try_rate": round(ft, 4), "mean_attempts": round(att, 4), "rewrite_rate": round(rw, 4),
                 "cost_usd": round(cost, 6), "cost_per_admitted_usd": round(cost / adm, 6) if adm else None}
                for s, m, n, ft, att, rw, cost, runs, adm in rows]

    def stored_twice(self) -> list[tuple[str, str]]:
        """(table, key) of every key stored in more than one row of a table without a primary key
        (`UNKEYED`): `insert` never writes one, so the file was edited. The keys are grouped by their
        64-bit hashes first, and only the rows of a hash met twice by the keys themselves: grouping
        the keys took +92 MB at scale 3 (245,642 edges), the hashes +37 (+15 at scale 1), 40–70 ms."""
        found = []
        for table, columns in UNKEYED.items():
            named = ", ".join(columns)
            rows = self.con.execute(f"""
                WITH twice AS (SELECT hash({named}) AS h FROM {table} GROUP BY h HAVING count(*) > 1)
                SELECT {named} FROM {table} WHERE hash({named}) IN (SELECT h FROM twice)
                GROUP BY {named} HAVING count(*) > 1 ORDER BY {named}""").fetchall()
            found += [(table, " ".join(row)) for row in rows]
            self.trim()  # the blocks of this table's keys, before the next table's are read
        return found

    def counts(self) -> dict[str, int]:
        return {table: self.con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] for table, _ in TABLES.values()}
