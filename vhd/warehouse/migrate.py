"""Numbered SQL migrations, applied in order inside one transaction each, and recorded.

    >>> import duckdb
    >>> connection = duckdb.connect()          # an in-memory database
    >>> applied = migrate(connection)          # every migration, in order
    >>> applied[:3], applied == [version for version, _, _ in available()]
    ([1, 2, 3], True)
    >>> migrate(connection)                    # [] when the warehouse is already current
    []
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from importlib import resources

import duckdb

_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


def available() -> list[tuple[int, str, str]]:
    folder = resources.files("vhd.schemas").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    return sorted(found)


def migrate(con: duckdb.DuckDBPyConnection, upto: int | None = None) -> list[int]:
    """Apply the migrations not yet recorded (with `upto`, only those numbered up to it); their numbers."""
    con.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR, applied_at VARCHAR)")
    done = {row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()}
    applied = []
    for version, name, sql in available():
        if version in done or (upto is not None and version > upto):
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(sql)
            con.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)",
                        [version, name, datetime.now(timezone.utc).isoformat()])
            con.execute("COMMIT")
        except Exception:
            try:
                con.execute("ROLLBACK")
            except duckdb.Error:
                pass  # DuckDB aborted it already: keep the error that did
            raise
        applied.append(version)
    return applied
