"""The warehouse file itself: which paths may be opened or created, how long to wait for a lock,
and which DuckDB files are refused. Every refusal is one `WarehouseError` line naming the file.

    >>> check_path(scratch / "new.duckdb", read_only=False)       # None: a writer may create it
    >>> check_path(scratch / "new.duckdb", read_only=True)        # or one WarehouseError line
    Traceback (most recent call last):
    vhd.schemas.errors.WarehouseMissing: no warehouse at .../new.duckdb; run `vhd refresh` first or pass --db PATH
    >>> check_path(scratch, read_only=False)
    Traceback (most recent call last):
    vhd.schemas.errors.WarehouseError: ... is a directory; --db takes a warehouse file, e.g. .../vhd.duckdb
    >>> con = connect(db, read_only=True)      # waits a bounded time for a writer
    >>> con.close()

- A new warehouse is created whole or not at all (`create`): it is built and migrated under a
  temporary name beside the target and linked into place, so a full disk leaves no 0-byte file
  (and the temporary files of a creation whose process was killed are removed by the next one).
- Locks: DuckDB lets one writer or any number of readers hold a file. A writer that finds
  readers, and a reader that finds a writer, wait up to `VHD_LOCK_WAIT_SECONDS` (default 60),
  saying so once on stderr; a second writer is refused at once (`WarehouseBusy`).
- A file that is not a whole vhd warehouse is refused, never adopted: a DuckDB file too short for
  the blocks its header has in use (`check_complete`), another application's DuckDB file, or one
  written by a newer vhd (`pending_migrations`).
"""

from __future__ import annotations

import functools
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable

import duckdb

from vhd.schemas.errors import WarehouseBusy, WarehouseError, WarehouseMissing
from vhd.warehouse.migrate import available, migrate

DEFAULT = Path("data/vhd.duckdb")   # the one path whose directory is created on first use
WAIT_ENV = "VHD_LOCK_WAIT_SECONDS"
DEFAULT_WAIT = 60.0
HEADER_BYTES = 3 * 4096             # DuckDB's main header and two database headers, before block 0
_HOLDER = re.compile(r"PID (\d+)")
_SHORT_READ = "Could not read enough bytes"   # DuckDB's IOException for a read past the end of the file


def lock_wait() -> float:
    """Seconds to wait for a conflicting lock: $VHD_LOCK_WAIT_SECONDS, else 60."""
    raw = os.environ.get(WAIT_ENV, "")
    try:
        return max(0.0, float(raw)) if raw.strip() else DEFAULT_WAIT
    except ValueError:
        raise WarehouseError(f"{WAIT_ENV}={raw!r}: expected a number of seconds") from None


def check_path(path: Path, read_only: bool) -> None:
    """Refuse a path before DuckDB touches it: a directory, a path under a regular file, a
    missing directory (only the default `data/` is created), a 0-byte file, a missing file
    for a reader."""
    if path.is_dir():
        raise WarehouseError(f"{path} is a directory; --db takes a warehouse file, e.g. {path / 'vhd.duckdb'}")
    for parent in path.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise WarehouseError(f"{parent} is a file, not a directory: no warehouse can be at {path}")
            break
    if not path.exists():
        if read_only:
            raise WarehouseMissing(f"no warehouse at {path}; run `vhd refresh` first or pass --db PATH")
        if not path.parent.is_dir() and path != DEFAULT:
            raise WarehouseError(f"directory {path.parent} does not exist; create it first (vhd creates no "
                                 f"directory but the default {DEFAULT.parent}/)")
        folder = path.parent if path.parent.is_dir() else path.parent.parent
        if folder.is_dir() and os.statvfs(folder).f_flag & os.ST_RDONLY:
            raise WarehouseError(f"cannot create warehouse {path}: the file system of {folder} is read-only; pass a "
                                 "--db on a writable disk")
        if folder.is_dir() and not os.access(folder, os.W_OK):
            raise WarehouseError(f"cannot create warehouse {path}: this user may not write in {folder}; pass a --db "
                                 "on a writable disk")
        return
    if path.stat().st_size == 0:
        raise WarehouseError(f"{path} is an empty file (0 bytes), not a warehouse; remove it or pass another --db")


def create(path: Path, setup: Callable[[duckdb.DuckDBPyConnection], object]) -> None:
    """Create a warehouse at `path` whole or not at all: built and `setup` (migrated) under a
    temporary name in the same directory, checkpointed, then linked into place. On any failure
    (a full disk) the temporary files are removed and nothing is at `path`. Another process that
    created `path` first wins; its file is kept."""
    path.parent.mkdir(exist_ok=True)  # only reached for the default data/ (check_path refuses the rest)
    _remove_abandoned(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.creating")
    try:
        con = duckdb.connect(str(partial))
        try:
            setup(con)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        try:
            os.link(partial, path)
        except FileExistsError:
            pass
    except (duckdb.Error, OSError) as exc:
        raise WarehouseError(f"cannot create warehouse {path}: {_first_line(exc)}; nothing was left behind") from None
    finally:
        for leftover in (partial, partial.with_name(partial.name + ".wal")):
            try:
                leftover.unlink(missing_ok=True)
            except OSError:  # a read-only file system refuses even to unlink what it never held
                if leftover.exists():
                    raise WarehouseError(f"cannot create warehouse {path}: could not remove {leftover}; "
                                         "remove it by hand") from None


def _remove_abandoned(path: Path) -> None:
    """Remove the temporary files of creations of `path` whose process is gone (killed mid-way)."""
    for leftover in path.parent.glob(f".{path.name}.*.creating*"):
        pid = leftover.name[len(path.name) + 2:].split(".")[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            leftover.unlink(missing_ok=True)
        except PermissionError:
            pass  # alive, another user's


def connect(path: Path, read_only: bool, wait: float | None = None) -> duckdb.DuckDBPyConnection:
    """`duckdb.connect`, waiting up to `wait` seconds (default `lock_wait()`) while the file is
    held by readers (for a writer) or by a writer (for a reader); a second writer is refused."""
    wait = lock_wait() if wait is None else wait
    deadline, told, pause = time.monotonic() + wait, False, 0.05
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:
            text = str(exc)
            holder = _HOLDER.search(text)
            if not holder and _SHORT_READ in text:  # the catalog's own blocks are past the end
                raise WarehouseError(f"{path} is truncated: DuckDB cannot read its catalog ({_first_line(exc)}) "
                                     "(a partial copy?); restore it from a whole copy") from None
            if not holder:
                raise _cannot_open(path, exc, read_only) from None
            pid, readers_hold = holder.group(1), "read-only mode" in text
            if not read_only and not readers_hold:
                raise WarehouseBusy(f"warehouse {path} is in use by PID {pid}; wait for it to finish") from None
            holding = "reading" if readers_hold else "writing"
            if time.monotonic() >= deadline:
                raise WarehouseBusy(f"warehouse {path} is in use by PID {pid} ({holding}) after waiting {wait:g} s "
                                    f"({WAIT_ENV}); try again when it is done") from None
            if not told:
                print(f"warehouse {path} is open for {holding} by PID {pid}; waiting up to {wait:g} s ({WAIT_ENV})",
                      file=sys.stderr, flush=True)
                told = True
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.5)
        except duckdb.Error as exc:
            raise _cannot_open(path, exc, read_only) from None


def _cannot_open(path: Path, exc: BaseException, read_only: bool) -> WarehouseError:
    """DuckDB's refusal to open `path` as one line: a writer on a read-only file system (or on a
    file it may not write) is told so, and where to run instead."""
    text = str(exc)
    if not read_only and ("Read-only file system" in text or "Permission denied" in text):
        why = "its file system is read-only" if "Read-only" in text else "this user may not write it"
        return WarehouseError(f"cannot open warehouse {path} for writing: {why} ({_first_line(exc)}); this command "
                              "writes the warehouse: run it where the file can be written (or copy the warehouse to "
                              "a writable disk and pass --db); nothing was changed")
    return WarehouseError(f"cannot open warehouse {path}: {_first_line(exc)}")


def check_complete(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Refuse a file too short to hold the blocks in use (a truncated copy, a torn download):
    DuckDB reads blocks lazily, so such a file opens and fails, or answers short, later.

    The rule is `size >= header + (total_blocks - free_blocks) * block_size`, not `total_blocks`
    alone: the header's block count includes free blocks, and a checkpoint cuts trailing free
    blocks off the file without lowering that count (a healthy file had 211 blocks, 79 free, and
    was 2 blocks shorter than the count). The blocks in use have distinct ids below the count, so
    a whole file holds at least that many; a shorter file has lost a block in use, and a file that
    passes was never cut inside a block DuckDB needs unless free blocks sit before the cut. The
    exact bound (the highest id in use) needs DuckDB's free list, which only its own metadata
    format holds; a file cut below its metadata fails to open at all (see `connect`)."""
    total, free, block_size = con.execute(
        "SELECT total_blocks, free_blocks, block_size FROM pragma_database_size()").fetchall()[0]
    used = total - free
    needed, size = HEADER_BYTES + used * block_size, path.stat().st_size
    if size < needed:
        raise WarehouseError(f"{path} is truncated: {size:,} bytes where its {used:,} blocks in use need {needed:,} "
                             "(a partial copy?); restore it from a whole copy")


def pending_migrations(con: duckdb.DuckDBPyConnection, path: Path) -> list[int]:
    """The migrations this vhd would apply to the file, in order; refuses a DuckDB file that holds
    tables but is not a vhd warehouse, and one that records migrations this vhd does not know."""
    tables = sorted(r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall())
    known = {version: name for version, name, _ in available()}
    if not tables:
        return sorted(known)
    try:
        applied = dict(con.execute("SELECT version, name FROM schema_migrations").fetchall())
    except duckdb.Error:
        shown = ", ".join(tables[:5]) + (", …" if len(tables) > 5 else "")
        raise WarehouseError(f"{path} is a DuckDB file of another application (tables {shown}), not a vhd "
                             "warehouse; refusing to adopt it: pass another --db") from None
    newer = sorted(v for v in applied if v not in known)
    if newer:
        raise WarehouseError(f"{path} was written by a newer vhd (migration {newer[0]:03d} {applied[newer[0]]!r} is "
                             f"unknown here, the last known is {max(known):03d}); upgrade vhd to open it")
    foreign = [v for v in applied if applied[v] != known[v]]
    if foreign:
        v = foreign[0]
        raise WarehouseError(f"{path} is not a vhd warehouse: its migration {v:03d} is {applied[v]!r} where vhd's is "
                             f"{known[v]!r}; refusing to adopt it: pass another --db")
    return sorted(v for v in known if v not in applied)


def schema_of(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, str]]:
    """{table: {column: type}} of the file's tables (schema main), columns in their order."""
    found: dict[str, dict[str, str]] = {}
    for table, column, kind in con.execute(
            "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c "
            "JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
            "WHERE c.table_schema = 'main' AND t.table_type = 'BASE TABLE' "
            "ORDER BY c.table_name, c.ordinal_position").fetchall():
        found.setdefault(table, {})[column] = kind
    return found


@functools.lru_cache(maxsize=1)
def _schemas() -> dict[int, dict[str, dict[str, str]]]:
    """migration -> the schema a warehouse migrated up to it has: vhd's migrations run once per
    process on an in-memory database (~45 ms)."""
    con = duckdb.connect()
    try:
        schemas = {}
        for version, _, _ in available():
            migrate(con, upto=version)
            schemas[version] = schema_of(con)
        return schemas
    finally:
        con.close()


def check_schema(con: duckdb.DuckDBPyConnection, path: Path, version: int) -> None:
    """Refuse a warehouse that lacks a table or column vhd's migrations up to `version` (the last
    one it records) made, or holds one of another type: a table dropped or altered outside vhd.
    Tables and columns of its own are allowed. Checked at every open, so no command meets DuckDB's
    catalog error mid-way (after a refresh has committed its first rows)."""
    expected = _schemas().get(version)
    if expected is None:
        return
    actual = schema_of(con)
    problems = []
    for table, columns in expected.items():
        if table not in actual:
            problems.append(f"table {table} is missing")
            continue
        for column, kind in columns.items():
            have = actual[table].get(column)
            if have is None:
                problems.append(f"table {table} has no column {column}")
            elif have != kind:
                problems.append(f"column {table}.{column} is {have} where vhd made it {kind}")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        name = dict((v, n) for v, n, _ in available()).get(version, "")
        raise WarehouseError(f"warehouse {path}: {problems[0]}{more}; expected every table and column of a vhd "
                             f"warehouse at migration {version:03d} ({name}): it was changed outside vhd, so "
                             "restore it from a backup (nothing was changed)")


CHECK_ROWS = 50_000   # rows per rolled-back probe transaction: below a row group, so nothing is written ahead


def check_blocks(con: duckdb.DuckDBPyConnection, path: Path, write: bool) -> None:
    """Read every block the file has in use, naming the table of the first that fails its checksum.

    DuckDB reads blocks lazily and checks a block's checksum only when it reads it, so a corrupted
    block otherwise surfaces mid-command: for a refresh, after it has committed its run row. Readers
    (`write=False`) read every column of every row. A writer also needs the index blocks, which only
    a write consults: it inserts each table with a key into itself (`INSERT OR IGNORE`, every key a conflict)
    in transactions of at most `CHECK_ROWS` rows, each rolled back, so nothing reaches the file (a
    transaction smaller than a row group is not written ahead; the paper preset's warehouse kept its
    SHA-256). About 0.1–0.15 s (reading) and 0.3–0.4 s (writing) on that 85 MB warehouse;
    `Warehouse.preflight` calls it before a refresh."""
    tables = [row[0] for row in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND NOT internal ORDER BY 1").fetchall()]
    keyed = {row[0] for row in con.execute(
        "SELECT table_name FROM duckdb_constraints() WHERE schema_name = 'main' "
        "AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')").fetchall()}  # not checks, lineage_edges (008)
    for table in tables:
        try:
            if not write or table not in keyed:
                con.execute(f'SELECT bit_xor(hash(COLUMNS(*))) FROM "{table}"').fetchall()
                continue
            last = con.execute(f'SELECT max(rowid) FROM "{table}"').fetchall()[0][0]  # None: no rows
            for start in range(0, -1 if last is None else last + 1, CHECK_ROWS):
                con.execute("BEGIN TRANSACTION")
                try:
                    con.execute(f'INSERT OR IGNORE INTO "{table}" SELECT * FROM "{table}" '
                                "WHERE rowid >= ? AND rowid < ?", [start, start + CHECK_ROWS])
                finally:
                    rollback(con)
        except duckdb.Error as exc:
            raise WarehouseError(database_error(exc, path, table)) from None


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """ROLLBACK, quietly when DuckDB has aborted the transaction already (its error is the one to show)."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


def drop_empty_wal(path: Path) -> None:
    """Remove the 0-byte WAL that DuckDB leaves after a commit that failed (a full disk). Called
    by the writer before it closes, while it alone holds the file: such a WAL holds nothing."""
    wal = path.with_name(path.name + ".wal")
    try:
        if wal.stat().st_size == 0:
            wal.unlink()
    except FileNotFoundError:
        pass


def is_damage(exc: BaseException) -> bool:
    """A DuckDB error that says the file is damaged (a block failing its checksum, a database DuckDB
    invalidated after a fatal error, an internal error reading it), not that a statement was wrong."""
    text = str(exc).lower()
    return isinstance(exc, duckdb.Error) and (
        "corrupt" in text or "checksum" in text or "invalidated" in text
        or isinstance(exc, (duckdb.FatalException, duckdb.InternalException)))


def database_error(exc: BaseException, path: Path | str | None = None, table: str | None = None) -> str | None:
    """One line for an error DuckDB raised while a command used an open warehouse (a block corrupted or
    a table dropped outside vhd, a file that can no longer be read or written), naming the file (and
    `table`, when known) and what to do; None for any other error. DuckDB refused the statement, so
    the warehouse is left as it was."""
    if not isinstance(exc, duckdb.Error):
        return None
    file = f"warehouse {path}" if path is not None else "the warehouse"
    subject = f"{file}: table {table}" if table else file
    text, first = str(exc).lower(), _first_line(exc)
    if is_damage(exc):
        what = "has a corrupted block" if ("corrupt" in text or "checksum" in text) else "cannot be read by DuckDB"
        hint = "" if table else " (`vhd verify` names the table)"
        return (f"{subject} {what} ({first}); it was changed outside vhd or its disk failed: restore it from a "
                f"backup{hint}")
    if isinstance(exc, duckdb.CatalogException):
        return (f"{file}: a table or column vhd needs is missing ({first}); expected a whole vhd warehouse: it was "
                "changed outside vhd, so restore it from a backup")
    if "read-only file system" in text:
        return (f"{subject} cannot be written: its file system is read-only ({first}); run this command where the "
                "warehouse can be written; nothing was stored")
    if isinstance(exc, duckdb.IOException):
        return (f"{subject} cannot be read or written ({first}); its disk failed or is full: free space or restore "
                "it from a backup")
    return f"{subject} gave a database error ({first}); if it was changed outside vhd, restore it from a backup"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
