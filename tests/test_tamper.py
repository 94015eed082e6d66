"""Tampering with any stored field is caught (issue 18): one case per field of every table a trainer
or grader depends on. Each change is flagged by `vhd verify` and by the publish gate, naming the
environment and the field, blocks the next corpus version, and reaches no export.

One small warehouse is built once (`vhd refresh` over two families, F, I and A); each case edits
one field of a copy of its DuckDB file with plain SQL, as an attacker or a stray script would.
"""

import hashlib
import json
import re
import shutil
import zlib

import duckdb
import pytest
from typer.testing import CliRunner

from conftest import run_vhd
from vhd.cli import app
from vhd.schemas.errors import IntegrityError
from vhd.schemas.records import CheckRecord, EnvironmentRecord, ModelRecord, SetterOutputRecord, SolutionRecord
from vhd.warehouse import Warehouse

runner = CliRunner()
TIP = " Tip: selecting every lot is always optimal."
KEYS = {"models": "model_id", "solutions": "solution_id", "setter_outputs": "setter_output_id", "checks": "check_id",
        "environments": "env_id", "passages": "passage_id", "corpus_versions": "version"}


def vhd(*args):
    return runner.invoke(app, [str(a) for a in args])


def _copy(src, dst):
    """A copy of the warehouse with its seal file beside it (`<db>.seals.jsonl`, which the refresh
    that built it wrote): the tampering meets the anchored seal, as on a user's machine (issue 31)."""
    from vhd.warehouse.seals import seals_path

    shutil.copy(src, dst)
    assert seals_path(src).exists()
    shutil.copy(seals_path(src), seals_path(dst))


@pytest.fixture(scope="module")
def built(prefect_server, tmp_path_factory):
    """The warehouse, the ids of one admitted I environment's chain, and its clean export."""
    root = tmp_path_factory.mktemp("tamper")
    db = root / "vhd.duckdb"
    result = run_vhd(prefect_server, "refresh", "--families", "inventory_dp,knapsack", "--per-family", "1",
                     "--presentations", "F,I,A", "--seed", "5", "--batch", "tamper", "--db", db, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["corpus_version"] == "v1"
    con = duckdb.connect(str(db), read_only=True)
    env = dict(zip(("env_id", "model_id", "solution_id", "setter_output_id"), con.execute(
        "SELECT env_id, model_id, solution_id, setter_output_id FROM environments "
        "WHERE admitted AND presentation = 'I' AND family = 'knapsack'").fetchall()[0]))
    env["passage_id"] = con.execute("SELECT passage_id FROM setter_outputs WHERE setter_output_id = ?",
                                    [env["setter_output_id"]]).fetchall()[0][0]
    env["check_id"] = con.execute("SELECT check_id FROM checks WHERE env_id = ? AND gate = 'determinism'",
                                  [env["env_id"]]).fetchall()[0][0]
    env["F"] = con.execute("SELECT env_id FROM environments WHERE admitted AND presentation = 'F' "
                           "AND family = 'knapsack'").fetchall()[0][0]
    con.close()
    clean = root / "clean"
    assert vhd("export", "--out", clean, "--db", db).exit_code == 0
    return db, env, _export_text(clean)


def _export_text(out):
    """The JSONL export's data files, every split, as one text (their names carry their digests)."""
    return "".join(f.read_text() for f in sorted((out / "data").glob("*.jsonl")))


def _columns(db, table):
    con = duckdb.connect(str(db), read_only=True)
    names = [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                                       "ORDER BY ordinal_position", [table]).fetchall()]
    con.close()
    return names


def _bumped(value):
    """The first number in a JSON value moved by one (else the first string changed, else an element added)."""
    if isinstance(value, bool):
        return not value, True
    if isinstance(value, (int, float)):
        return value + 1, True
    if isinstance(value, str):
        return value + "x", True
    items = sorted(value.items()) if isinstance(value, dict) else list(enumerate(value))
    for pass_ in ("number", "any"):
        for key, item in items:
            if pass_ == "number" and not isinstance(item, (int, float, dict, list)):
                continue
            new, done = _bumped(item)
            if done:
                value = dict(value) if isinstance(value, dict) else list(value)
                value[key] = new
                return value, True
    return (value | {"tampered": 1}, True) if isinstance(value, dict) else (value + ["tampered"], True)


def tampered(column, value):
    """The value an attacker writes instead: a plausible change of the stored type."""
    if column == "instruction":
        return value + TIP
    if column == "module":
        return value.replace("def ", "def  ", 1)  # the same program, other bytes
    if column == "field_digests":
        digests = json.loads(value)
        first = sorted(digests)[0]
        return json.dumps({**digests, first: "0" * 16}, sort_keys=True)
    if column == "version":
        return "v9"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 29.0
    if isinstance(value, (bytes, bytearray)):
        return zlib.compress(zlib.decompress(value) + b"\0")
    if re.fullmatch(r"[0-9a-f]{64}", value):
        return hashlib.sha256(f"tampered {value}".encode()).hexdigest()
    try:
        parsed = json.loads(value)
    except ValueError:
        return value + " tampered"
    if isinstance(parsed, (dict, list)):
        return json.dumps(_bumped(parsed)[0], sort_keys=True, separators=(",", ":"))
    return value + " tampered"


# (table, column, which row); every column of every table a trainer or grader depends on, on the
# chain of one admitted I environment; the manifest also field by field, an F environment's
# instruction (re-rendered by the audit) and lineage edges of every relation
ROWS = ("models", "solutions", "setter_outputs", "checks", "environments", "passages", "corpus_versions")
MANIFEST = ("env_ids", "env_digests", "counts", "digest", "format")
EDGES = [("instance_of", "child_id"), ("graded_by", "parent_id"), ("rendered_by", "relation"),
         ("checks", "parent_id"), ("solves", "child_id"), ("skinned_by", "relation")]


def _cases():
    from vhd.warehouse.migrate import available  # the columns, as the migrations make them

    columns: dict[str, list[str]] = {}
    con = duckdb.connect()
    for _, _, sql in available():
        con.execute(sql)
    for table in ROWS:
        columns[table] = [r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [table]).fetchall()]
    con.close()
    cases = [(table, column, "") for table in ROWS for column in columns[table]]
    cases += [("corpus_versions", "manifest", key) for key in MANIFEST]
    cases += [("environments", "instruction", "F")]
    cases += [("lineage_edges", field, relation) for relation, field in EDGES]
    return cases


CASES = _cases()


def _apply(db, env, table, column, which):
    """Edit one field of a copy in place; returns (row id, the field the audit must name)."""
    con = duckdb.connect(str(db))
    try:
        if table == "lineage_edges":
            child = {"instance_of": env["env_id"], "graded_by": env["env_id"], "rendered_by": env["env_id"],
                     "checks": env["check_id"], "solves": env["solution_id"], "skinned_by": env["setter_output_id"]}[which]
            value = con.execute(f"SELECT {column} FROM lineage_edges WHERE child_id = ? AND relation = ?",
                                [child, which]).fetchall()[0][0]
            con.execute(f"UPDATE lineage_edges SET {column} = ? WHERE child_id = ? AND relation = ?",
                        [tampered(column, value), child, which])
            return child, which
        key = KEYS[table]
        row_id = {"environments": env["F"] if which == "F" else env["env_id"], "corpus_versions": "v1"}.get(
            table, env.get(key))
        value = con.execute(f'SELECT "{column}" FROM {table} WHERE "{key}" = ?', [row_id]).fetchall()[0][0]
        if table == "corpus_versions" and column == "manifest" and which:
            manifest = json.loads(value)
            manifest[which] = (_bumped(manifest[which])[0] if which != "env_ids" else manifest[which][1:])
            new = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
        else:
            new = tampered(column, value)
        assert new != value
        con.execute(f'UPDATE {table} SET "{column}" = ? WHERE "{key}" = ?', [new, row_id])
        named = sorted(json.loads(value))[0] if column == "field_digests" else column
        return row_id, named
    finally:
        con.close()


def _names(findings, env_id, table, field):
    return [f for f in findings if f["table"] == table and f["field"] == field and f["env_id"] in (env_id, "")]


@pytest.mark.parametrize("table, column, which", CASES,
                         ids=[f"{t}.{c}" + (f"[{w}]" if w else "") for t, c, w in CASES])
def test_a_changed_field_is_flagged_blocks_publishing_and_reaches_no_export(built, tmp_path, table, column, which):
    from vhd.flows.refresh import publish

    clean_db, env, clean_export = built
    db = tmp_path / "tampered.duckdb"
    shutil.copy(clean_db, db)  # the warehouse alone: the publish gate recomputes everything
    row_id, field = _apply(db, env, table, column, which)
    concerned = env["F"] if which == "F" else env["env_id"]
    if table == "lineage_edges":  # a changed edge is a missing one on its environment's chain
        table_named, field_named = "lineage_edges", which
    else:
        table_named, field_named = table, field

    resolve = "--resolve" if table == "solutions" else "--no-resolve"  # re-solving only speaks to solution rows
    result = vhd("verify", "--db", db, "--json", resolve)
    assert result.exit_code == 1, result.output[-2000:]
    report = json.loads(result.stdout)
    named = _names(report["findings"], concerned, table_named, field_named)
    if table == "lineage_edges":  # `vhd verify` also names the edge's own column
        assert _names(report["findings"], concerned, "lineage_edges", column), report["lines"]
    assert named, report["lines"]
    if table != "corpus_versions":  # the environment is named too (a version's own fields concern none)
        assert any(f["env_id"] == concerned for f in named + report["findings"]), report["lines"]

    with Warehouse.open(db) as wh:
        before = wh.version_names()
        _, published, _, audit = publish(wh, "tamper-test")
        assert not published and not audit["verified"] and wh.version_names() == before
    assert _names(audit["findings"], concerned, table_named, field_named), audit["lines"]
    assert not audit["seal"]["incremental"] and audit["seal"]["why"] == "no seal file: nothing is anchored yet"
    assert not audit["hint"], "a tampered row is not a family whose code changed without a version bump"
    if table != "corpus_versions":
        assert any(f["env_id"] == concerned for f in audit["findings"]), audit["lines"]

    out = tmp_path / "export"
    exported = vhd("export", "--out", out, "--db", db)
    if exported.exit_code == 0:  # the tampered row is not exported: the export is the clean one
        assert _export_text(out) == clean_export
    else:
        assert exported.exit_code == 1 and len(exported.stderr.strip().splitlines()) == 1, exported.stderr


@pytest.mark.parametrize("table, column, which", CASES,
                         ids=[f"{t}.{c}" + (f"[{w}]" if w else "") for t, c, w in CASES])
def test_a_changed_field_under_the_anchored_seal_is_reported_and_never_vouched_for(built, tmp_path, table, column,
                                                                                   which):
    """The same 88 edits with v1's seal file beside the copy (issue 31). A change of a stored digest
    (the version row, an environment row, a rewritten id) no longer gives v1's anchored seal: the
    gate warns, recomputes everything and names it as above. A value edited without its digest, or
    a parent row edited with its id left, leaves the seal as it was: the no-op gate trusts v1 and
    replays nothing — and publishes nothing — while plain `vhd verify` names it, and the readers
    refuse it (the test above: export) since it no longer matches its digest or its id."""
    from vhd.flows.refresh import publish

    clean_db, env, _ = built
    db = tmp_path / "tampered.duckdb"
    _copy(clean_db, db)
    row_id, field = _apply(db, env, table, column, which)
    concerned = env["F"] if which == "F" else env["env_id"]
    table_named, field_named = ("lineage_edges", column) if table == "lineage_edges" else (table, field)

    result = vhd("verify", "--db", db, "--json", "--resolve" if table == "solutions" else "--no-resolve")
    assert result.exit_code == 1, result.output[-2000:]
    report = json.loads(result.stdout)
    assert _names(report["findings"], concerned, table_named, field_named), report["lines"]

    with Warehouse.open(db) as wh:
        before = wh.version_names()
        _, published, _, audit = publish(wh, "tamper-test")
        assert not published and wh.version_names() == before
    gate_named = ("lineage_edges", which) if table == "lineage_edges" else (table, field)
    if audit["seal"]["incremental"] and audit["verified"]:  # the seal holds: v1 trusted whole, nothing replayed
        assert audit["replayed"] == 0, audit["seal"]
    else:  # recomputed in full (the seal changed), or the environment left the corpus without a mark
        assert not audit["verified"] and _names(audit["findings"], concerned, *gate_named), audit["lines"]


def test_rows_the_current_code_no_longer_derives_say_to_bump_the_version(built, tmp_path, monkeypatch, capsys):
    """Issue 28 item 6: a family's code changed (here its knob ranges) without a bump of its
    `version`. Its stored rows are intact, but the audit re-draws other knobs from their seeds: the
    publish gate blocks the version as before (the findings unchanged), and its one line now ends
    with what to do, naming that family only."""
    import dataclasses

    from typer import Exit

    from vhd.cli import _report
    from vhd.flows.refresh import publish
    from vhd.mechanisms import registry
    from vhd.tasks.corpus.publish_audit import brief

    db, env, _ = built
    copy = tmp_path / "unbumped.duckdb"
    shutil.copy(db, copy)
    knapsack = registry.get("knapsack")
    with Warehouse.open(copy, read_only=True) as wh:
        stored = wh.get(ModelRecord, env["model_id"]).knobs
    with Warehouse.open(copy) as wh:
        assert publish(wh, "clean")[3]["hint"] == ""  # the current code: nothing to bump
    low, high = knapsack.knob_ranges["size"]
    size = stored["size"] + 1 if stored["size"] < high else stored["size"] - 1
    monkeypatch.setitem(registry._families, "knapsack", dataclasses.replace(
        knapsack, knob_ranges={**knapsack.knob_ranges, "size": (size, size)}))
    # the edit of knapsack.py changes the digest of the code's sources, which v1's seal line names
    # (the publish that ran above anchored v1 under the unedited code): the gate recomputes everything
    from vhd.tasks.corpus import publish as publish_stage

    monkeypatch.setitem(publish_stage._CODE, "digest", "knapsack.py edited")
    with Warehouse.open(copy) as wh:
        before = wh.version_names()
        _, published, _, audit = publish(wh, "unbumped")
        assert not published and not audit["verified"] and wh.version_names() == before
    knobs = [f for f in audit["findings"] if (f["table"], f["field"]) == ("models", "knobs")]
    assert knobs and knobs[0]["problem"].startswith("differ from the knobs drawn from seed"), audit["lines"]
    assert audit["hint"].startswith("knapsack: ") and "bump `version` in vhd/mechanisms/knapsack.py" in audit["hint"]
    capsys.readouterr()  # the flow's own log lines so far
    with pytest.raises(Exit):
        _report({"audit": brief(audit)}, copy, False)
    message = capsys.readouterr().err.strip()
    assert message.splitlines() == [message] and message.startswith(f"error: the audit found {len(audit['findings'])} "
                                                                     "problems, so no corpus version was published: ")
    assert audit["lines"][0] in message and message.endswith(audit["hint"])


def test_the_untampered_warehouse_verifies(built):
    db, _, _ = built
    report = json.loads(vhd("verify", "--db", db, "--json", "--full").stdout)
    assert report["verified"] and report["envs"] == 6 and report["versions"] == 1, report["lines"]
    report = json.loads(vhd("verify", "--db", db, "--json").stdout)  # v1's anchored seal covers its 6
    assert report["verified"] and report["versions"] == 1, report["lines"]
    assert [v["status"] for v in report["seals"]["versions"]] == ["match"]
    assert report["seals"]["covered_envs"] == 6 or report["seals"]["why_full"].startswith("the code changed")


@pytest.mark.parametrize("table, column", [("models", "theta"), ("solutions", "u_star"), ("checks", "passed"),
                                           ("environments", "u_star"), ("setter_outputs", "module")])
def test_an_audit_in_batches_finds_what_one_audit_finds(built, tmp_path, table, column):
    """The publish gate audits a batch of chains at a time and forgets the rows only that batch held
    (issue 31: memory that does not grow with the corpus): a tampered row the I environment shares
    with its A twin (θ, π*) or with other modules' chains is found again in every batch it is met in."""
    from vhd.tasks.corpus.publish_audit import gate
    from vhd.warehouse.lineage import chain_batches, load_chains

    db, env, _ = built
    copy = tmp_path / "w.duckdb"
    _copy(db, copy)
    row_id, field = _apply(copy, env, table, column, "")
    with Warehouse.open(copy, read_only=True) as wh:
        ids = {k["env_id"] for k in wh.environment_keys()}
        runs = {r.run_id for r in wh.runs()}
        whole = gate(load_chains(wh, ids), [], runs)
        batched = gate(chain_batches(wh, ids, size=1), [], runs)
    assert any(f["id"] == row_id and f["field"] == field for f in whole["findings"]), whole["lines"]
    assert sorted(batched["lines"]) == sorted(whole["lines"])
    assert batched["digests"] == whole["digests"] and batched["envs"] == whole["envs"] == len(ids)


def test_an_auditor_forgets_the_rows_of_a_batch_and_keeps_the_shared_ones(built):
    from vhd.tasks.corpus.audit import Auditor
    from vhd.warehouse.lineage import load_chains

    db, env, _ = built
    with Warehouse.open(db, read_only=True) as wh:
        chains = load_chains(wh, [env["env_id"]])
    auditor = Auditor(resolve=False, measure=False)
    assert auditor.chains(chains) == []
    auditor.forget(chains)
    assert not auditor._models and not auditor._solutions
    assert set(auditor._rows) == {env["setter_output_id"], env["passage_id"]}


# -- an insert never reuses a row that no longer matches its id (issue 18, item 3) ----------------

@pytest.mark.parametrize("cls, column", [(ModelRecord, "theta"), (SolutionRecord, "u_star"),
                                         (SetterOutputRecord, "module"), (CheckRecord, "passed"),
                                         (EnvironmentRecord, "u_star")])
def test_an_insert_that_meets_a_changed_row_is_an_integrity_error(built, tmp_path, cls, column):
    db, env, _ = built
    copy = tmp_path / "w.duckdb"
    shutil.copy(db, copy)
    table, key = {ModelRecord: ("models", "model_id"), SolutionRecord: ("solutions", "solution_id"),
                  SetterOutputRecord: ("setter_outputs", "setter_output_id"), CheckRecord: ("checks", "check_id"),
                  EnvironmentRecord: ("environments", "env_id")}[cls]
    with Warehouse.open(copy) as wh:
        original = wh.get(cls, env[key])
        with wh.transaction():  # the same row written again by another run is a no-op: the first write stays
            wh.insert([original.model_copy(update={"run_id": "another"})])
        assert wh.get(cls, env[key]) == original
        value = wh.con.execute(f"SELECT {column} FROM {table} WHERE {key} = ?", [env[key]]).fetchall()[0][0]
        wh.con.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", [tampered(column, value), env[key]])
        with pytest.raises(IntegrityError) as caught:
            with wh.transaction():
                wh.insert([original])
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and table in message and env[key] in message and column in message


def test_a_refresh_that_renders_a_changed_module_again_stops_with_one_line(built, prefect_server, tmp_path):
    """The issue's case: a stored module's source was changed; a new batch renders the same module
    (same id): the refresh stops with an integrity error naming it, and writes nothing of the round."""
    db, env, _ = built
    copy = tmp_path / "module.duckdb"
    shutil.copy(db, copy)
    con = duckdb.connect(str(copy))
    con.execute("UPDATE setter_outputs SET module = module || '\n# tampered' WHERE setter_output_id = ?",
                [env["setter_output_id"]])
    envs = con.execute("SELECT count(*) FROM environments").fetchall()[0][0]
    con.close()
    result = run_vhd(prefect_server, "refresh", "--families", "knapsack", "--per-family", "3", "--presentations", "I",
                     "--seed", "5", "--batch", "tamper", "--db", copy)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "setter_outputs" in last and env["setter_output_id"] in last and "module" in last
    con = duckdb.connect(str(copy), read_only=True)
    assert con.execute("SELECT count(*) FROM environments").fetchall()[0][0] == envs
    con.close()


def test_rerunning_a_batch_after_an_edge_was_deleted_fails_the_gate(built, prefect_server, tmp_path):
    """The issue's case: nothing to do, yet the gate runs and names the environment and the edge."""
    db, env, _ = built
    copy = tmp_path / "edge.duckdb"
    shutil.copy(db, copy)
    con = duckdb.connect(str(copy))
    con.execute("DELETE FROM lineage_edges WHERE child_id = ? AND relation = 'graded_by'", [env["env_id"]])
    con.close()
    result = run_vhd(prefect_server, "refresh", "--families", "inventory_dp,knapsack", "--per-family", "1",
                     "--presentations", "F,I,A", "--seed", "5", "--batch", "tamper", "--db", copy)
    assert result.returncode == 1
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "graded_by" in lines[0] and env["env_id"][:12] in lines[0], result.stderr[-2000:]


@pytest.mark.parametrize("command", [("export", "--out", "OUT"), ("eval", "--agent", "oracle", "--corpus-version", "v1"),
                                     ("score", "ENV", "--trajectories", "TRAJ")])
def test_a_deleted_environment_of_a_version_is_one_line_for_every_reader(built, tmp_path, command):
    """The issue's case: an environment deleted from a published version made `export` crash and
    `eval --corpus-version` evaluate without it. Every reader verifies the version first."""
    db, env, _ = built
    copy = tmp_path / "deleted.duckdb"
    shutil.copy(db, copy)
    con = duckdb.connect(str(copy))
    con.execute("DELETE FROM environments WHERE env_id = ?", [env["F"]])
    con.close()
    (tmp_path / "t.jsonl").write_text("[]\n")
    args = [{"OUT": tmp_path / "out", "ENV": env["env_id"], "TRAJ": tmp_path / "t.jsonl"}.get(a, a) for a in command]
    result = vhd(*args, "--db", copy)
    assert result.exit_code == 1, result.output[-2000:]
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and "corpus version v1" in result.stderr
    assert env["F"][:12] in result.stderr and not (tmp_path / "out").exists()


# -- forgeries that pass every digest: re-hashed with the project's own code (issue 31) -----------

def _reseal(con, cls, ids):
    """What a forger does after editing rows: their field digests recomputed by the project's own
    `Warehouse.seal` (the digests are first emptied so that `seal` writes them again)."""
    from vhd.warehouse.store import TABLES

    table, key = TABLES[cls]
    con.execute(f"UPDATE {table} SET field_digests = '' WHERE list_contains(?, \"{key}\")", [list(ids)])


def _forge(db, edits, drop=None):
    """Edit environment rows (env_id -> {column: value}), then rewrite v1's manifest as the project
    would have built it over the stored rows (optionally without env `drop`), and re-seal every
    row touched: every digest holds afterwards."""
    from vhd.schemas.hashing import canonical_json
    from vhd.schemas.records import CorpusVersionRecord
    from vhd.tasks.corpus.publish import _counts, corpus_digest, grading_digest_of_row

    con = duckdb.connect(str(db))
    for env_id, values in edits.items():
        for column, value in values.items():
            con.execute(f'UPDATE environments SET "{column}" = ? WHERE env_id = ?', [value, env_id])
    _reseal(con, EnvironmentRecord, list(edits))
    con.close()
    with Warehouse.open(db) as wh:
        wh.seal(EnvironmentRecord, list(edits))
        manifest = json.loads(wh.con.execute("SELECT manifest FROM corpus_versions WHERE version = 'v1'")
                              .fetchall()[0][0])
        ids = [i for i in manifest["env_ids"] if i != drop]
        rows = {r["env_id"]: r for r in wh.stored_rows(EnvironmentRecord, "env_id", ids)}
        digests = [grading_digest_of_row(rows[i]) for i in ids]
        manifest.update(env_ids=ids, env_digests=digests, digest=corpus_digest(ids, digests),
                        counts=_counts([wh.get(EnvironmentRecord, i) for i in ids]))
        wh.con.execute("UPDATE corpus_versions SET manifest = ?, admitted = ?, field_digests = '' "
                       "WHERE version = 'v1'", [canonical_json(manifest), len(ids)])
        wh.seal(CorpusVersionRecord, ["v1"])
        assert set(wh.verified(EnvironmentRecord, ids)) == set(ids)  # every digest holds again


def test_a_forged_superseded_mark_is_reported_and_blocks_publishing(built, prefect_server, tmp_path):
    """Issue 31, item 1: a row inserted into `superseded` (it carries no digest, so there is nothing
    to re-hash) drops an admitted, current environment from the next version. Before the fix `vhd
    verify` passed and the same refresh again published v2 without that environment (5 of 6).
    Now a mark is legitimate only when the current code derives it from the row's own sealed
    version columns: `vhd verify` names it, and the refresh stops with one line naming it."""
    from vhd.flows.refresh import publish
    from vhd.tasks.stages.annotate import CODE_VERSION

    db, env, _ = built
    copy = tmp_path / "mark.duckdb"
    shutil.copy(db, copy)
    con = duckdb.connect(str(copy))
    con.execute("INSERT INTO superseded VALUES (?, 'environment', ?, ?, 'forger', '2026-01-01T00:00:00+00:00')",
                [env["env_id"], f"annotator@{CODE_VERSION}", f"annotator@{CODE_VERSION}"])
    con.close()

    result = vhd("verify", "--db", copy, "--json", "--no-resolve")
    assert result.exit_code == 1, result.output[-2000:]
    report = json.loads(result.stdout)
    marks = [f for f in report["findings"] if f["table"] == "superseded"]
    assert [(f["id"], f["env_id"]) for f in marks] == [(env["env_id"], env["env_id"])], report["lines"]
    assert "the current code does not supersede it" in marks[0]["problem"]

    with Warehouse.open(copy) as wh:
        with pytest.raises(IntegrityError) as caught:
            publish(wh, "forged-mark")
        assert wh.version_names() == ["v1"]
    message = str(caught.value)
    assert message.splitlines() == [message] and message.startswith(f"superseded {env['env_id']} id: ")

    result = run_vhd(prefect_server, "refresh", "--families", "inventory_dp,knapsack", "--per-family", "1",
                     "--presentations", "F,I,A", "--seed", "5", "--batch", "tamper", "--db", copy)
    assert result.returncode == 1
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "superseded" in lines[0] and env["env_id"] in lines[0], result.stderr[-2000:]
    with Warehouse.open(copy, read_only=True) as wh:
        assert wh.version_names() == ["v1"]


@pytest.mark.parametrize("table, where", [("checks", "check_id = ?"), ("lineage_edges", "child_id = ? AND relation = 'checks'")])
def test_a_row_stored_twice_is_reported_and_blocks_publishing(built, tmp_path, table, where):
    """checks and lineage_edges have no primary key (migration 008: their indexes grew with the
    corpus), so plain SQL can store a row twice, which `Warehouse.insert` never does: a copy of a
    check would count its gate twice. `vhd verify` names the key and publishing refuses it."""
    from vhd.flows.refresh import publish

    db, env, _ = built
    copy = tmp_path / "twice.duckdb"
    _copy(db, copy)
    con = duckdb.connect(str(copy))
    con.execute(f"INSERT INTO {table} SELECT * FROM {table} WHERE {where} LIMIT 1", [env["check_id"]])
    con.close()

    result = vhd("verify", "--db", copy, "--json", "--no-resolve")
    assert result.exit_code == 1, result.output[-2000:]
    twice = [f for f in json.loads(result.stdout)["findings"] if f["table"] == table]
    assert len(twice) == 1 and env["check_id"] in twice[0]["id"] and "more than one row" in twice[0]["problem"]
    with Warehouse.open(copy) as wh:
        with pytest.raises(IntegrityError) as caught:
            publish(wh, "twice")
        assert wh.version_names() == ["v1"]
    message = str(caught.value)
    assert message.splitlines() == [message] and message.startswith(f"{table} ") and env["check_id"] in message


def test_a_forged_model_mark_is_reported_and_a_missing_mark_noted(built, tmp_path):
    """The marks both ways: a model marked by hand (its environments would follow at the next
    refresh) is a finding of `vhd verify`, before the fix `superseded` was not audited at all
    (this test could not even import `mark_findings`); a row the current code supersedes that
    carries no mark (a deleted mark, or a code upgrade not yet refreshed) is a note: the next
    refresh marks it before it publishes."""
    from vhd.tasks.corpus.marks import mark_findings

    db, env, _ = built
    copy = tmp_path / "marks.duckdb"
    shutil.copy(db, copy)
    with Warehouse.open(copy) as wh:
        assert mark_findings(wh) == ([], [])
        wh.con.execute("INSERT INTO superseded VALUES (?, 'model', 'knapsack@0', 'knapsack@1', 'forger', 'now')",
                       [env["model_id"]])
        found, notes = mark_findings(wh)
        assert [(f["table"], f["id"], f["field"]) for f in found] == [("superseded", env["model_id"], "id")] and not notes
        wh.con.execute("DELETE FROM superseded")
        wh.con.execute("UPDATE environments SET annotator_version = 'old' WHERE env_id = ?", [env["env_id"]])
        found, notes = mark_findings(wh)  # the edited row itself is the audit's to flag
        assert found == [] and notes == [f"1 environment rows the current code supersedes carry no superseded mark yet "
                                          f"(e.g. {env['env_id'][:12]}…): `vhd refresh` marks them before it publishes"]


LAUNDERED = [("u_star", lambda v: v + 29.0), ("u_default", lambda v: v - 7.0), ("u_idle", lambda v: (v or 0.0) + 3.0),
             ("reference_trajectory", lambda v: json.dumps(json.loads(v)[:-1], separators=(",", ":"))),
             ("split", lambda v: "test" if v != "test" else "train")]


@pytest.mark.parametrize("column, change", LAUNDERED, ids=[c for c, _ in LAUNDERED])
def test_a_rewritten_manifest_does_not_launder_a_forged_row_into_the_next_version(built, tmp_path, column, change):
    """Issue 31, item 2: a replayed field of an environment forged and every digest re-hashed (its
    field digests, v1's grading digest for it, v1's corpus digest and v1's own field digests),
    and v1 rewritten without another environment so that the next refresh has something to
    publish. Before the fix the gate took v1's (forged) grading digest as proof of a replay and
    skipped the environment, and `publish` wrote v2 listing it: the forgery laundered, though
    `vhd verify` flags it. Now a stored manifest is trusted only when nothing new can be
    published; otherwise every environment of the next version is replayed."""
    from vhd.flows.refresh import publish

    db, env, _ = built
    copy = tmp_path / "laundered.duckdb"
    _copy(db, copy)
    con = duckdb.connect(str(copy), read_only=True)
    value = con.execute(f'SELECT "{column}" FROM environments WHERE env_id = ?', [env["env_id"]]).fetchall()[0][0]
    con.close()
    _forge(copy, {env["env_id"]: {column: change(value)}}, drop=env["F"])

    result = vhd("verify", "--db", copy, "--json", "--no-resolve")
    assert result.exit_code == 1 and any(f["env_id"] == env["env_id"] and f["field"] == column
                                         for f in json.loads(result.stdout)["findings"]), result.output[-2000:]
    with Warehouse.open(copy) as wh:
        _, published, _, audit = publish(wh, "launder")
        assert not published and wh.version_names() == ["v1"]
    assert any(f["env_id"] == env["env_id"] and f["field"] == column for f in audit["findings"]), audit["lines"]


def test_a_laundering_refresh_stops_with_one_line(built, prefect_server, tmp_path):
    """The issue's case as a real `vhd refresh` (the same batch again, nothing to compute): u*
    forged and v1 rewritten and re-hashed to match. Before the fix the refresh exited 0 with
    v2 published; now it exits 1 with one line naming the environment and u_star."""
    db, env, _ = built
    copy = tmp_path / "launder-refresh.duckdb"
    shutil.copy(db, copy)
    con = duckdb.connect(str(copy), read_only=True)
    u_star = con.execute("SELECT u_star FROM environments WHERE env_id = ?", [env["env_id"]]).fetchall()[0][0]
    con.close()
    _forge(copy, {env["env_id"]: {"u_star": u_star + 29.0}}, drop=env["F"])
    result = run_vhd(prefect_server, "refresh", "--families", "inventory_dp,knapsack", "--per-family", "1",
                     "--presentations", "F,I,A", "--seed", "5", "--batch", "tamper", "--db", copy)
    assert result.returncode == 1, result.stdout[-2000:]
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "u_star" in lines[0] and env["env_id"][:12] in lines[0], result.stderr[-2000:]
    with Warehouse.open(copy, read_only=True) as wh:
        assert wh.version_names() == ["v1"]


# -- the whole-file forgery: every id, edge, mark, manifest and digest rebuilt with the project's own code

FORGED_TABLES = {"models": ModelRecord, "solutions": SolutionRecord, "setter_outputs": SetterOutputRecord,
                 "environments": EnvironmentRecord, "checks": CheckRecord}


def _rehash(db, edit, marks=(), drop=(), add=()):
    """What a forger who may rewrite the whole file does (issue 31): `edit(records)` changes records
    (table -> {id: record}) in place; then every content id is recomputed bottom up (models,
    solutions, modules, environments, checks) by the records' own `expected_id`, the lineage edges,
    superseded marks and every version's manifest follow the new ids (`drop`/`add`: env ids left
    out of or added to the manifests, which `publish.build_manifest` rebuilds), and every table is
    rewritten through `Warehouse.insert`, which writes every field digest. `marks`: superseded rows
    (id, kind, code_version, current_version) to insert. Returns old id -> new id."""
    from vhd.schemas.records import CorpusVersionRecord, LineageEdge
    from vhd.tasks.corpus.publish import build_manifest

    with Warehouse.open(db) as wh:
        records = {table: {r.id: r for r in wh._select(cls)} for table, cls in FORGED_TABLES.items()}
        edges = [LineageEdge(**row) for row in wh.stored_rows(LineageEdge)]
        cursor = wh.con.execute("SELECT id, kind, code_version, current_version, run_id, marked_at FROM superseded")
        stored_marks = cursor.fetchall()
        versions = wh.versions()
        edit(records)
        new, out = {}, {}
        for table in FORGED_TABLES:  # parents first: each row's references follow its parents' new ids
            out[table] = []
            for old, record in records[table].items():
                record = record.model_copy(update={f: new.get(getattr(record, f), getattr(record, f))
                                                   for f in ("model_id", "solution_id", "setter_output_id", "env_id")
                                                   if f in type(record).model_fields and f != record.id_field})
                record = record.model_copy(update={record.id_field: record.expected_id()})
                if record.id != old:
                    new[old] = record.id
                out[table].append(record)
        envs = {e.env_id: e for e in out["environments"]}
        for table in (*FORGED_TABLES, "lineage_edges", "superseded", "corpus_versions"):
            wh.con.execute(f"DELETE FROM {table}")
        with wh.transaction():
            for records_ in out.values():
                wh.insert(records_)
            wh.insert([e.model_copy(update={"child_id": new.get(e.child_id, e.child_id),
                                            "parent_id": new.get(e.parent_id, e.parent_id)}) for e in edges])
            for mark in [*stored_marks, *((*m, "forger", "2026-01-01T00:00:00+00:00") for m in marks)]:
                wh.con.execute("INSERT INTO superseded VALUES (?, ?, ?, ?, ?, ?)", [new.get(mark[0], mark[0]), *mark[1:]])
            for version in versions:
                ids = [new.get(i, i) for i in version.manifest["env_ids"] if i not in drop]
                ids += [new.get(i, i) for i in add if new.get(i, i) not in ids]
                manifest = {**version.manifest, **build_manifest([envs[i] for i in ids])}
                wh.insert([version.model_copy(update={"manifest": manifest, "admitted": len(ids)})])
        assert set(wh.verified(EnvironmentRecord, envs)) == set(envs)  # every id and digest holds again
        assert wh.verified(CorpusVersionRecord, [v.version for v in versions])
    return new


def _first_number_bumped(value):
    return _bumped(value)[0]


def _module_constant(records, ids):
    """The issue's case (`vhd check` rejects it on four gates): the holding cost doubled in a module."""
    output = records["setter_outputs"][ids["inventory_output"]]
    module = output.module.replace('-p["holding_cost"] * closing', '-2 * p["holding_cost"] * closing')
    assert module != output.module
    records["setter_outputs"][output.id] = output.model_copy(update={"module": module})


def _relabelled_module(records, ids):
    """A module relabelled as an LLM setter's (which no trusted code renders), with one more unit
    of every sale booked (test_end_to_end's broken module; the doubled holding cost changes nothing
    on a θ whose holding cost is 0): its gates must be run again, and they reject it."""
    output = records["setter_outputs"][ids["inventory_output"]]
    module = output.module.replace('("sales", p["price"] * sold)', '("sales", p["price"] * sold + 1)')
    assert module != output.module
    records["setter_outputs"][output.id] = output.model_copy(update={"module": module, "setter": "anthropic",
                                                                     "setter_version": "1"})


def _swapped_modules(records, ids):
    a, b = records["setter_outputs"][ids["inventory_output"]], records["setter_outputs"][ids["setter_output_id"]]
    records["setter_outputs"][a.id] = a.model_copy(update={"module": b.module})
    records["setter_outputs"][b.id] = b.model_copy(update={"module": a.module})


def _environment(field, change):
    def edit(records, ids):
        env = records["environments"][ids["env_id"]]
        records["environments"][env.id] = env.model_copy(update={field: change(getattr(env, field))})
    return edit


def _theta(records, ids):
    model = records["models"][ids["model_id"]]
    records["models"][model.id] = model.model_copy(update={"theta": _first_number_bumped(model.theta)})


def _forged_verdict(records, ids):
    """A rejected environment admitted: its failed checks passed, u_idle and difficulty computed
    as annotate would have for an admitted one, so the row is whole."""
    from vhd.mechanisms import registry
    from vhd.tasks.corpus.regrade import reference_idle
    from vhd.tasks.stages.difficulty import measure

    env = records["environments"][ids["env_id"]]
    model, solution = records["models"][env.model_id], records["solutions"][env.solution_id]
    family = registry.get(env.family)
    records["environments"][env.id] = env.model_copy(update={
        "admitted": True, "reason": "", "u_idle": reference_idle(family, env.config(model.theta)),
        "difficulty": measure(family, model, solution, env.presentation)})
    for check in list(records["checks"].values()):
        if check.env_id == env.id and not check.passed:
            records["checks"][check.id] = check.model_copy(update={"passed": True, "message": "passed"})


# name -> (edit or None, the warehouse: "built" or "rejecting", the env the case is about)
FORGERIES = {
    "module-constant": (_module_constant, "built", "inventory"),
    "module-relabelled": (_relabelled_module, "built", "inventory"),
    "swapped-modules": (_swapped_modules, "built", "env_id"),
    "u_star": (_environment("u_star", lambda v: v + 29.0), "built", "env_id"),
    "reference-trajectory": (_environment("reference_trajectory", lambda v: v[:-1]), "built", "env_id"),
    "split": (_environment("split", lambda v: "test"), "built", "env_id"),
    "theta": (_theta, "built", "env_id"),
    "episode-seed": (_environment("episode_seed", lambda v: v + 1), "built", "env_id"),
    "superseded-row": (None, "built", "env_id"),
    "forged-verdict": (_forged_verdict, "rejecting", "env_id"),
}


@pytest.fixture(scope="module")
def rejecting(prefect_server, tmp_path_factory):
    """A warehouse whose refresh rejected some environments (stopping, seed 7: default_band), and
    the ids of one rejected I environment's chain."""
    db = tmp_path_factory.mktemp("rejecting") / "vhd.duckdb"
    result = run_vhd(prefect_server, "refresh", "--families", "stopping", "--per-family", "4", "--seed", "7",
                     "--batch", "st", "--db", db, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT env_id, model_id FROM environments WHERE NOT admitted AND presentation = 'I' "
                       "ORDER BY env_id LIMIT 1").fetchall()
    con.close()
    assert rows, "the refresh rejected nothing to forge"
    return db, {"env_id": rows[0][0], "model_id": rows[0][1]}


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_whole_file_forgery_is_neither_published_exported_nor_scored(built, rejecting, tmp_path, name):
    """Issue 31: the forger edits the file with SQL, then rebuilds every content id, lineage edge,
    superseded mark, manifest and field digest with the project's own code (`_rehash`), and lists
    the forged environment in v1 (the superseded case: v1 rewritten without the marked one), so
    that every id and digest holds. Before the fix the module constant, the relabelled module and
    the forged verdict passed `vhd verify`; those and the swapped modules, u*, the reference
    trajectory and the split passed the publish gate; and every one reached `vhd export` and `vhd
    score` (reward 1.0 for the reference calls): the gate skipped environments a stored manifest
    listed, readers trusted the manifest's digests, and nothing recomputed the module or the
    verdict. Now `vhd verify` finds each, `publish` publishes nothing, and export and score
    refuse in one line."""
    from vhd.flows.refresh import publish
    from vhd.tasks.stages.annotate import CODE_VERSION

    edit, base, which = FORGERIES[name]
    if base == "built":
        clean, env, _ = built
        con = duckdb.connect(str(clean), read_only=True)
        inventory, output = con.execute("SELECT env_id, setter_output_id FROM environments WHERE admitted AND "
                                        "presentation = 'I' AND family = 'inventory_dp'").fetchall()[0]
        con.close()
        ids = {**env, "inventory": inventory, "inventory_output": output}
    else:
        clean, ids = rejecting
    db = tmp_path / "forged.duckdb"
    _copy(clean, db)
    if edit is None:  # a mark the code does not make, and v1 rewritten without the marked environment
        mark = (ids[which], "environment", f"annotator@{CODE_VERSION}", f"annotator@{CODE_VERSION}")
        new = _rehash(db, lambda records: None, marks=[mark], drop=[ids[which]])
    else:
        new = _rehash(db, lambda records: edit(records, ids), add=[ids[which]] if base == "rejecting" else ())
    concerned = new.get(ids[which], ids[which])

    result = vhd("verify", "--db", db, "--json", "--no-resolve")
    assert result.exit_code == 1 and result.stdout, result.output[-2000:]
    assert any(f["env_id"] in (concerned, "") for f in json.loads(result.stdout)["findings"])

    with Warehouse.open(db) as wh:
        try:
            _, published, _, audit = publish(wh, "forged")
        except IntegrityError as exc:  # the superseded mark: refused before the manifest is built
            assert str(exc).splitlines() == [str(exc)] and concerned in str(exc)
        else:
            assert not published and not audit["verified"], audit["lines"]
            assert any(f["env_id"] == concerned for f in audit["findings"]), audit["lines"]
            # the rewrite no longer gives v1's anchored seal: reported, and everything recomputed
            assert not audit["seal"]["incremental"], audit["seal"]
            assert audit["seal"]["warnings"][0].startswith("seal of v1 does not match the seal file")
        assert wh.version_names() == ["v1"]

    exported = vhd("export", "--out", tmp_path / "out", "--db", db)
    assert exported.exit_code == 1 and len(exported.stderr.strip().splitlines()) == 1, exported.output[-2000:]
    assert not (tmp_path / "out" / "data").exists()

    con = duckdb.connect(str(db), read_only=True)
    reference = con.execute("SELECT reference_trajectory FROM environments WHERE env_id = ?",
                            [concerned]).fetchall()[0][0]
    con.close()
    (tmp_path / "t.jsonl").write_text(reference + "\n")
    scored = vhd("score", concerned, "--trajectories", tmp_path / "t.jsonl", "--db", db)
    assert scored.exit_code == 1 and len(scored.stderr.strip().splitlines()) == 1, scored.output[-2000:]
