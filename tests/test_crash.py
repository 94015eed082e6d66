"""A refresh killed with SIGKILL at any point loses no committed row, duplicates none and leaves no
environment without lineage; the rerun ends with exactly the rows of an uninterrupted run.

The kill points are states of the run, observed from outside, never fractions of a clock: the
warehouse appearing (its temporary `.NAME.PID.creating` file while it is migrated, or the file
itself), the first sandbox process of the checks, and the
first, second and third commit after the checks began (DuckDB appends each committed transaction to
the write-ahead log `DB.wal`: its size grows once per commit, and the kill lands while that commit
is being written or just after)."""

import os
import signal
import subprocess
import sys
import time

import duckdb
import pytest

# three families: three family commits to kill at; one θ each (two environments, I and A, per commit)
# is the smallest run that has them, and each of the eleven refreshes below pays for no more
ARGS = ("refresh", "--families", "inventory_dp,knapsack,lp", "--per-family", "1", "--seed", "5", "--batch", "crash")
KEYS = {"models": "model_id", "solutions": "solution_id", "setter_outputs": "setter_output_id",
        "environments": "env_id", "checks": "check_id",
        "lineage_edges": "child_id || ':' || parent_id || ':' || relation",
        "corpus_versions": "version"}
TABLES = tuple(KEYS)


def _start(api_url, db, log=None):
    env = {**os.environ, "PREFECT_API_URL": api_url}
    with open(log or os.devnull, "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "vhd.cli", *ARGS, "--db", str(db)], env=env,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)


def _finished(process, log):
    """Whether the run ended with 0; else its stderr's tail, for the assertion message."""
    code = process.wait(timeout=600)
    return code == 0, f"exit {code}: " + log.read_text(errors="replace")[-3000:]


def _rows(db):
    """Every table's keys, and the environments without lineage or checks. A table that does not
    exist yet (a run killed during its migrations, each one a transaction) holds no row."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        present = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        rows = {t: con.execute(f"SELECT {key} FROM {t}").fetchall() if t in present else [] for t, key in KEYS.items()}
        orphans = con.execute("""SELECT count(*) FROM environments e WHERE NOT EXISTS
                                 (SELECT 1 FROM lineage_edges x
                                  WHERE x.child_id = e.env_id AND x.relation = 'graded_by')
                                 OR NOT EXISTS (SELECT 1 FROM checks c WHERE c.env_id = e.env_id)""").fetchall()[0][0] \
            if {"environments", "lineage_edges", "checks"} <= present else 0
    finally:
        con.close()
    return {t: [r[0] for r in v] for t, v in rows.items()}, orphans


@pytest.fixture(scope="module")
def reference(prefect_server, tmp_path_factory):
    db = tmp_path_factory.mktemp("crash") / "whole.duckdb"
    log = db.with_suffix(".log")
    ok, why = _finished(_start(prefect_server, db, log), log)
    assert ok, why
    return _rows(db)[0]


def _checking(pid):
    """Whether a sandbox process (a zygote or a runner) runs below `pid`."""
    from vhd.tasks.sandbox import descendants

    for child in descendants(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as handle:
                if any(part.endswith((b"/zygote.py", b"/runner.py")) for part in handle.read().split(b"\0")):
                    return True
        except OSError:
            pass
    return False


def _wait_for(point, db, process):
    """Poll the run until it reaches `point` ("opened", "checking" or ("commit", k)); it must not
    end first. Only states are compared: how long each takes does not matter."""
    wal = db.with_name(db.name + ".wal")
    checking, size, commits = False, 0, 0
    while True:
        assert process.poll() is None, f"refresh ended before it reached {point}"
        if point == "opened" and (db.exists() or any(db.parent.glob(f".{db.name}.*.creating*"))):
            return  # the warehouse is being created and migrated under a temporary name, or is there
        checking = checking or _checking(process.pid)
        if point == "checking" and checking:
            return
        try:
            now = wal.stat().st_size
        except FileNotFoundError:
            now = 0
        if checking and now > size:
            commits += 1
        size = now
        if point == ("commit", commits):
            return
        time.sleep(0.002)


@pytest.mark.parametrize("point", ["opened", "checking", ("commit", 1), ("commit", 2), ("commit", 3)],
                         ids=["migrating", "checking", "one-family", "two-families", "three-families"])
def test_sigkill_then_rerun_loses_and_duplicates_nothing(prefect_server, reference, tmp_path, point):
    whole = reference
    db = tmp_path / "killed.duckdb"
    process = _start(prefect_server, db)
    _wait_for(point, db, process)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    if db.exists():
        before, orphans = _rows(db)
        assert orphans == 0, "an environment was committed without its lineage or checks"
        assert all(len(set(v)) == len(v) for v in before.values())
    else:
        before = {t: [] for t in TABLES}
    log = tmp_path / "rerun.log"
    ok, why = _finished(_start(prefect_server, db, log), log)
    assert ok, why
    after, orphans = _rows(db)
    assert orphans == 0
    for table in TABLES:
        assert len(set(after[table])) == len(after[table]), f"duplicates in {table}"
        assert set(before[table]) <= set(after[table]), f"a committed row of {table} was lost"
        if table != "corpus_versions":
            assert set(after[table]) == set(whole[table]), f"{table} differs from an uninterrupted run"
