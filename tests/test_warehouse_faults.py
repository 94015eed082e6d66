"""Faults of the warehouse file itself (issue 31, "Faults that still print tracebacks";
docs/RELIABILITY.md "Files, inputs, locks and load"): a corrupted block (of a table's rows or of
its index), a dropped table or column, a read-only file system. Each case runs the real `vhd` in a
fresh process on a copy of one small warehouse and checks: a non-zero exit, exactly one `error:`
line on stderr naming the file and the problem (no traceback), and every file of the folder
unchanged (size, mtime and SHA-256; nothing added). A refresh must refuse before Prefect starts.
`--families ,` (no family) is an error too."""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from conftest import run_vhd

HEADER = 3 * 4096  # DuckDB's main header and two database headers, before block 0
SMALL_REFRESH = ("refresh", "--families", "inventory_dp", "--per-family", "1", "--presentations", "I")
TRAJECTORY = '[{"tool": "nothing", "arguments": {}}]\n'


@pytest.fixture(scope="module")
def base(prefect_server, tmp_path_factory):
    """A small real warehouse: one inventory_dp θ in presentation I, published as v1; its env id."""
    db = tmp_path_factory.mktemp("base") / "vhd.duckdb"
    result = run_vhd(prefect_server, *SMALL_REFRESH, "--db", db, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    con = duckdb.connect(str(db), read_only=True)
    env_id = con.execute("SELECT env_id FROM environments WHERE admitted LIMIT 1").fetchall()[0][0]
    con.close()
    return db, env_id


@pytest.fixture
def folder(tmp_path, base):
    """A folder holding a copy of the base warehouse as `vhd.duckdb` and a trajectory file."""
    shutil.copy2(base[0], tmp_path / "vhd.duckdb")
    (tmp_path / "t.jsonl").write_text(TRAJECTORY)
    return tmp_path


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns,
                                         hashlib.sha256(p.read_bytes()).hexdigest()) if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def command(name: str, folder: Path, env_id: str) -> list:
    db = folder / "vhd.duckdb"
    return {"verify": ["verify", "--db", db],
            "envs": ["envs", "--db", db],
            "export": ["export", "--out", folder / "out", "--db", db],
            "score": ["score", env_id, "--trajectories", folder / "t.jsonl", "--db", db],
            "refresh": [*SMALL_REFRESH, "--batch", "again", "--db", db],
            "passages add": ["passages", "add", Path(__file__).parents[1] / "vhd" / "tasks" / "setters" / "data"
                             / "passages.jsonl", "--db", db]}[name]


def vhd(api_url, args, prefix=()):
    """The real `vhd` in a fresh process (`prefix`: e.g. a read-only mount around it); the
    session's Prefect server, so a refresh that wrongly reaches its flow does not start another."""
    env = {**os.environ, "PREFECT_API_URL": api_url}
    return subprocess.run([*prefix, sys.executable, "-m", "vhd.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=600)


def refused(api_url, folder, args, *expected, prefix=(), names_warehouse=True):
    """The contract: rc != 0, one `error:` line naming the warehouse and `expected`, nothing changed,
    and a refresh refused before Prefect started (no progress line)."""
    before = snapshot(folder)
    result = vhd(api_url, args, prefix)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    assert not names_warehouse or str(folder / "vhd.duckdb") in lines[0], lines[0]
    for text in expected:
        assert text in lines[0], lines[0]
    assert "Prefect" not in result.stdout, "the refresh started its flow before refusing the warehouse"
    assert snapshot(folder) == before, "a refused command changed, added or removed a file"
    return lines[0]


# -- corrupted blocks ------------------------------------------------------------------------------

def _write_garbage(db: Path, at: int) -> None:
    with open(db, "r+b") as f:
        f.seek(at)
        f.write(b"\xde\xad\xbe\xef" * 16)


def _data_block(db: Path, table: str) -> int:
    """The file offset of the first stored segment of `table` (past its block's 8-byte checksum)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        size = con.execute("SELECT block_size FROM pragma_database_size()").fetchall()[0][0]
        block, offset = con.execute(f"SELECT block_id, min(block_offset) FROM pragma_storage_info('{table}') "
                                    "WHERE block_id >= 0 GROUP BY block_id ORDER BY block_id LIMIT 1").fetchall()[0]
    finally:
        con.close()
    return HEADER + block * size + 8 + offset


def _probe(db: Path) -> str | None:
    """DuckDB's own error on consulting every primary key's index of `db` (each table with a key inserted
    into itself, rolled back), or None."""
    con = duckdb.connect(str(db))
    try:
        for (table,) in con.execute("SELECT DISTINCT table_name FROM duckdb_constraints() "  # keyed tables:
                                    "WHERE constraint_type = 'PRIMARY KEY' ORDER BY 1").fetchall():  # an index
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(f'INSERT OR IGNORE INTO "{table}" SELECT * FROM "{table}"')
            except duckdb.Error as exc:
                return str(exc)
            finally:
                try:
                    con.execute("ROLLBACK")
                except duckdb.Error:
                    pass
        return None
    finally:
        con.close()


@pytest.fixture(scope="module")
def index_block(base, tmp_path_factory):
    """(a copy of the base warehouse with an index too big for the catalog's blocks, the offset of a
    block holding no table's rows and no catalog, whose corruption DuckDB meets only when a write
    consults a primary key's index); offset None when this DuckDB keeps none such. The copy holds
    5,000 more runs: the base's keyed tables hold a row or two, whose indexes fit in the catalog's
    blocks (the keys of its checks and edges did not, before migration 008 took them away)."""
    db = tmp_path_factory.mktemp("indexed") / "vhd.duckdb"
    shutil.copy(base[0], db)
    con = duckdb.connect(str(db))
    con.execute("INSERT INTO runs SELECT md5(i::VARCHAR) || md5((i + 1)::VARCHAR), 'refresh', '2026-01-01', "
                "'2026-01-01', 'done', '{}', 'c', '{}' FROM range(5000) r(i)")
    con.execute("CHECKPOINT")
    con.close()
    con = duckdb.connect(str(db), read_only=True)
    try:
        total, size = con.execute("SELECT total_blocks, block_size FROM pragma_database_size()").fetchall()[0]
        used = {0}
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall():
            for block, extra in con.execute("SELECT block_id, additional_block_ids FROM "
                                            f"pragma_storage_info('{table}') WHERE block_id >= 0").fetchall():
                used.update([block, *(extra or [])])
    finally:
        con.close()
    scratch = tmp_path_factory.mktemp("index") / "probe.duckdb"
    for block in sorted(set(range(total)) - used):
        shutil.copy(db, scratch)
        _write_garbage(scratch, HEADER + block * size + 8)
        try:
            con = duckdb.connect(str(scratch), read_only=True)
            rows = [con.execute(f'SELECT count(*) FROM "{t}"').fetchall() for (t,) in
                    con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
            con.close()
        except duckdb.Error:
            continue  # a catalog block: every command refuses it at open
        if rows and (_probe(scratch) or "").startswith("Corrupt"):
            return db, HEADER + block * size + 8
    return db, None


@pytest.mark.parametrize("name", ["verify", "envs", "export", "score", "refresh"])
def test_a_corrupted_block_of_environments_is_one_line(prefect_server, base, folder, name):
    """verify: 62 lines of traceback before, refresh 185 (and it wrote a run row first)."""
    db = folder / "vhd.duckdb"
    _write_garbage(db, _data_block(db, "environments"))
    refused(prefect_server, folder, command(name, folder, base[1]), "corrupted", "restore it from a backup")


@pytest.mark.parametrize("name", ["verify", "refresh"])
def test_a_corrupted_block_of_checks_is_one_line_naming_the_table(prefect_server, base, folder, name):
    """A refresh reads the checks only mid-flow: it must find the damage before it starts."""
    db = folder / "vhd.duckdb"
    _write_garbage(db, _data_block(db, "checks"))
    refused(prefect_server, folder, command(name, folder, base[1]), "table checks", "corrupted")


def test_a_corrupted_index_block_stops_a_refresh_before_it_writes(prefect_server, base, folder, index_block):
    """Only a write consults an index: reads pass, so a refresh must probe before its first commit."""
    db, offset = index_block
    if offset is None:
        pytest.skip("this DuckDB keeps no separate index block in a warehouse this small")
    shutil.copy(db, folder / "vhd.duckdb")
    _write_garbage(folder / "vhd.duckdb", offset)
    refused(prefect_server, folder, command("refresh", folder, base[1]), "corrupted", "restore it from a backup")


# -- dropped tables and columns --------------------------------------------------------------------

@pytest.mark.parametrize("table, name", [
    ("environments", "verify"), ("environments", "score"), ("environments", "refresh"),
    ("checks", "envs"), ("checks", "export"), ("checks", "refresh"),
    ("superseded", "export"), ("superseded", "refresh"),
    ("corpus_versions", "envs"), ("corpus_versions", "refresh")])
def test_a_dropped_table_is_one_line_naming_it(prefect_server, base, folder, table, name):
    """verify: 65 lines before, refresh 188 (after its first commit); envs, export and score
    answered from what was left (rc 0) when they read no row of the table."""
    con = duckdb.connect(str(folder / "vhd.duckdb"))
    con.execute(f"DROP TABLE {table}")
    con.close()
    line = refused(prefect_server, folder, command(name, folder, base[1]), f"table {table} is missing",
                   "restore it from a backup")
    assert "expected" in line


@pytest.mark.parametrize("name", ["envs", "refresh"])
def test_a_dropped_column_is_one_line_naming_it(prefect_server, base, folder, name):
    con = duckdb.connect(str(folder / "vhd.duckdb"))
    con.execute("ALTER TABLE environments DROP COLUMN u_idle")
    con.close()
    refused(prefect_server, folder, command(name, folder, base[1]), "environments has no column u_idle")


# -- a read-only file system -----------------------------------------------------------------------

def _read_only(folder: Path) -> tuple:
    """A prefix that runs a command with `folder` bind-mounted read-only in a private mount namespace."""
    return ("unshare", "-m", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
            str(folder))


@pytest.fixture(scope="module")
def read_only_mounts(tmp_path_factory):
    probe = tmp_path_factory.mktemp("ro")
    result = subprocess.run([*_read_only(probe), "touch", str(probe / "x")], capture_output=True, text=True)
    if "Read-only file system" not in result.stderr:
        pytest.skip(f"cannot mount a read-only bind here: {result.stderr.strip()[:200]}")


@pytest.mark.parametrize("name", ["refresh", "passages add"])
def test_a_read_only_file_system_refuses_a_writer_at_once(prefect_server, base, folder, read_only_mounts, name):
    """refresh: a 165-line traceback after 63 s before."""
    refused(prefect_server, folder, command(name, folder, base[1]), "read-only", prefix=_read_only(folder))


@pytest.mark.parametrize("name", ["refresh", "passages add"])
def test_a_new_warehouse_on_a_read_only_file_system_is_one_line(prefect_server, base, folder, read_only_mounts, name):
    """Before: `passages add` printed an 83-line traceback (the clean-up's unlink failed too), and
    a refresh started Prefect first."""
    args = [folder / "new.duckdb" if str(a).endswith("vhd.duckdb") else a for a in command(name, folder, base[1])]
    line = refused(prefect_server, folder, args, "read-only", prefix=_read_only(folder), names_warehouse=False)
    assert "new.duckdb" in line


def test_a_read_only_file_system_still_serves_readers(prefect_server, base, folder, read_only_mounts, tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    before = snapshot(folder)
    for args in (command("envs", folder, base[1]), command("verify", folder, base[1]) + ["--no-resolve"],
                 ["export", "--out", out / "x", "--db", folder / "vhd.duckdb"]):
        result = vhd(prefect_server, args, _read_only(folder))
        assert result.returncode == 0, result.stderr[-3000:]
    assert snapshot(folder) == before


def test_an_export_onto_a_read_only_file_system_is_one_line(prefect_server, base, folder, read_only_mounts):
    """export: 75 lines before."""
    line = refused(prefect_server, folder, ["export", "--out", folder / "out", "--db", folder / "vhd.duckdb"],
                   "Read-only file system", prefix=_read_only(folder), names_warehouse=False)
    assert "nothing was exported" in line


# -- --families with no family ---------------------------------------------------------------------

@pytest.mark.parametrize("value", [",", " , "])
def test_families_naming_no_family_is_an_error(prefect_server, folder, value):
    result = vhd(prefect_server, ["refresh", "--families", value, "--per-family", "1", "--db", folder / "vhd.duckdb"])
    assert result.returncode != 0 and result.stderr.count("\n") == 1 and "names no family" in result.stderr
    assert "Prefect" not in result.stdout
