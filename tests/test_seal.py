"""Seals of published versions, anchored in a seal file outside the warehouse (issue 31, item 2):
the publish gate trusts what an anchored, matching version holds and replays only what is new;
without an anchor, or when the stored rows no longer give the anchored seal, it recomputes
everything, and says so. No wall-clock assertion: the replayed counts come from the gate's report."""

import json
import shutil

import duckdb
import pytest
from typer.testing import CliRunner

from vhd.cli import app
from vhd.schemas.errors import WarehouseError
from vhd.warehouse import Warehouse
from vhd.warehouse import seals as seal_store

runner = CliRunner()
FAMILIES = ["knapsack", "stopping"]


def vhd(*args):
    return runner.invoke(app, [str(a) for a in args])


def _copy(src, dst):
    """The warehouse and its seal file, side by side, as a user copies them."""
    shutil.copy(src, dst)
    seals = seal_store.seals_path(src)
    if seals.exists():
        shutil.copy(seals, seal_store.seals_path(dst))
    return dst


@pytest.fixture(scope="module")
def sealed(prefect_server, tmp_path_factory):
    """A warehouse with v1 published by the refresh flow in this process (so the seal line names
    this process's code) and anchored in `<db>.seals.jsonl`."""
    from vhd.flows.refresh import refresh

    db = tmp_path_factory.mktemp("seal") / "vhd.duckdb"
    summary = refresh(families=FAMILIES, per_family=1, seed=5, batch="seal", db_path=str(db),
                      presentations=("F", "I", "A"))
    assert summary["corpus_version"] == "v1" and summary["published"], summary.get("audit")
    assert summary["audit"]["seal"]["incremental"] is False  # the first publish: nothing anchored yet
    return db


def _publish(db, **kwargs):
    from vhd.flows.refresh import publish

    with Warehouse.open(db) as wh:
        return publish(wh, "seal-test", **kwargs)


def test_the_seal_follows_the_stored_digests_of_the_versions_rows(sealed, tmp_path):
    """The seal hashes the version row's and every listed environment's stored field digests and
    the marks made before the version: a digest rewritten (what a re-hashing forger must do), a
    listed environment deleted, or an earlier mark inserted changes it; a value edited without its
    digest does not (readers and `vhd verify` check values against digests)."""
    db = _copy(sealed, tmp_path / "seal.duckdb")

    def seal():
        with Warehouse.open(db, read_only=True) as wh:
            return seal_store.sealed_chain(wh)[-1]["seal"]

    anchored = json.loads(seal_store.seals_path(db).read_text().splitlines()[-1])["seal"]
    assert seal() == anchored
    con = duckdb.connect(str(db))
    env_id = con.execute("SELECT env_id FROM environments WHERE admitted ORDER BY env_id LIMIT 1").fetchall()[0][0]
    con.execute("UPDATE environments SET u_star = u_star + 1 WHERE env_id = ?", [env_id])
    con.close()
    assert seal() == anchored  # the value alone: the digests, and so the seal, as they were
    for statement in ("UPDATE environments SET field_digests = replace(field_digests, '\"u_star\":\"', "
                      "'\"u_star\":\"0') WHERE env_id = $id",
                      "DELETE FROM environments WHERE env_id = $id",
                      "INSERT INTO superseded VALUES ($id, 'environment', 'a', 'b', 'forger', '2000-01-01')",
                      "UPDATE corpus_versions SET field_digests = replace(field_digests, '\"admitted\":\"', "
                      "'\"admitted\":\"0')"):
        copy = _copy(sealed, tmp_path / "edited.duckdb")
        con = duckdb.connect(str(copy))
        con.execute(statement, {"id": env_id} if "$id" in statement else {})
        con.close()
        with Warehouse.open(copy, read_only=True) as wh:
            assert seal_store.sealed_chain(wh)[-1]["seal"] != anchored, statement


def test_a_noop_publish_under_a_matching_anchor_replays_nothing(sealed, tmp_path):
    db = _copy(sealed, tmp_path / "noop.duckdb")
    version, published, _, audit = _publish(db)
    assert audit["verified"] and not published and version == "v1"
    assert audit["seal"]["incremental"] and audit["seal"]["trusted"] == audit["seal"]["versions"][0]["envs"] > 0
    assert audit["replayed"] == 0 and audit["envs"] == 0, audit["seal"]
    assert audit["seal"]["versions"][0]["status"] == "match"


def test_a_publish_that_adds_environments_replays_only_the_new_ones(sealed, tmp_path):
    from vhd.flows.refresh import refresh

    db = _copy(sealed, tmp_path / "more.duckdb")
    with Warehouse.open(db, read_only=True) as wh:
        before = {e.env_id for e in wh.environments()}
    summary = refresh(families=FAMILIES, per_family=2, seed=5, batch="seal", db_path=str(db),
                      presentations=("F", "I", "A"))
    with Warehouse.open(db, read_only=True) as wh:
        new = {e.env_id for e in wh.environments()} - before
    audit = summary["audit"]
    assert summary["published"] and summary["corpus_version"] == "v2" and new
    assert audit["seal"]["incremental"] and audit["replayed"] == audit["envs"] == len(new), audit["seal"]
    lines = [json.loads(line) for line in seal_store.seals_path(db).read_text().splitlines()]
    assert [line["version"] for line in lines] == ["v1", "v2"] and lines[1]["previous"] == lines[0]["seal"]
    assert lines[1]["corpus_digest"] and lines[1]["code"]
    _, published, _, again = _publish(db)  # and the next no-op trusts v2 whole
    assert not published and again["seal"]["incremental"] and again["replayed"] == 0
    result = vhd("verify", "--db", db, "--no-resolve", "--json")
    assert result.exit_code == 0, result.output[-2000:]
    report = json.loads(result.stdout)
    assert [v["status"] for v in report["seals"]["versions"]] == ["match", "match"]
    assert report["seals"]["covered_envs"] == len(before | new)


def test_without_the_seal_file_the_gate_recomputes_everything_and_anchors_it(sealed, tmp_path):
    db = tmp_path / "bare.duckdb"
    shutil.copy(sealed, db)  # the warehouse alone
    _, published, _, audit = _publish(db)
    assert not published and audit["verified"] and not audit["seal"]["incremental"]
    assert audit["seal"]["why"] == "no seal file: nothing is anchored yet" and audit["replayed"] > 0
    assert "full recompute" in audit["seal"]["note"]
    assert [line["version"] for line in audit["seal"]["anchored"]] == ["v1"]  # trust on first use, after it passed
    _, _, _, again = _publish(db)
    assert again["seal"]["incremental"] and again["replayed"] == 0


def test_an_altered_seal_file_forces_the_full_path_with_a_warning_naming_the_version(sealed, tmp_path):
    db = _copy(sealed, tmp_path / "altered.duckdb")
    path = seal_store.seals_path(db)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[-1]["seal"] = "0" * 64
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    _, published, _, audit = _publish(db)
    assert not published and audit["verified"] and not audit["seal"]["incremental"] and audit["replayed"] > 0
    assert audit["seal"]["warnings"] and audit["seal"]["warnings"][0].startswith("seal of v1 does not match")
    assert path.read_text().count("\n") == len(lines)  # a mismatching version is never anchored again
    result = vhd("verify", "--db", db, "--no-resolve", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert [(f["table"], f["id"], f["field"]) for f in report["findings"]] == [("corpus_versions", "v1", "seal")]


@pytest.mark.parametrize("content", ["not json\n", '{"version": "v1"}\n', "\x00\xff"])
def test_a_malformed_seal_file_is_one_line_and_writes_nothing(sealed, tmp_path, prefect_server, content):
    from conftest import run_vhd

    db = _copy(sealed, tmp_path / "bad.duckdb")
    path = seal_store.seals_path(db)
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(WarehouseError):
        _publish(db)
    for args in (("verify", "--no-resolve"), ("export", "--out", tmp_path / "out")):
        result = vhd(*args, "--db", db)
        assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1, result.output[-2000:]
        assert "seal file" in result.stderr and not (tmp_path / "out").exists()
    before = db.read_bytes()
    result = run_vhd(prefect_server, "refresh", "--families", "knapsack", "--per-family", "3", "--seed", "5",
                     "--batch", "seal", "--db", db)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and last.startswith("error: ") and "seal file" in last, result.stderr[-2000:]
    assert db.read_bytes() == before and path.read_bytes() == content.encode("latin-1")


def test_a_value_edited_without_its_digest_is_never_vouched_for(sealed, tmp_path):
    """A stray UPDATE leaves the stored digests — and so the seal — as they were: the no-op gate
    trusts the anchored version and replays nothing (it publishes nothing either), but the row no
    longer matches its digest, so plain `vhd verify` names it and every reader refuses it."""
    db = _copy(sealed, tmp_path / "stray.duckdb")
    con = duckdb.connect(str(db))
    env_id = con.execute("SELECT env_id FROM environments WHERE admitted AND presentation = 'I' "
                         "ORDER BY env_id LIMIT 1").fetchall()[0][0]
    con.execute("UPDATE environments SET u_star = u_star + 29 WHERE env_id = ?", [env_id])
    con.close()
    _, published, _, audit = _publish(db)
    assert not published and audit["seal"]["incremental"] and audit["replayed"] == 0
    result = vhd("verify", "--db", db, "--no-resolve", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert any(f["env_id"] == env_id and f["field"] == "u_star" for f in report["findings"]), report["lines"]
    assert report["seals"]["why_full"] == "the rows the seals cover hold problems"
    exported = vhd("export", "--db", db, "--out", tmp_path / "out")
    assert exported.exit_code == 1 and len(exported.stderr.strip().splitlines()) == 1 and "u_star" in exported.stderr


def test_the_export_carries_the_seal(sealed, tmp_path):
    db = _copy(sealed, tmp_path / "export.duckdb")
    result = vhd("export", "--db", db, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output[-2000:]
    seal = json.loads((tmp_path / "out" / "SEAL").read_text())
    anchored = json.loads(seal_store.seals_path(db).read_text().splitlines()[-1])
    assert seal["version"] == "v1" and seal["anchored"] and seal["seal"] == anchored["seal"]


def test_a_forgery_with_a_rewritten_seal_file_is_the_documented_limit(sealed, tmp_path):
    """The threat model: the forger rewrites the warehouse file, not the seal file. A forger who
    rewrites both (u* forged, every id, digest and manifest rebuilt with the project's own code,
    then the seal file recomputed to match) passes the incremental gate: it has nothing to
    replay. It is still caught by `vhd verify --full` and by every reader (export recomputes the
    version it reads). With the seal file left alone the same forgery mismatches the anchor, the
    gate recomputes everything and refuses."""
    from test_tamper import _rehash

    from vhd.schemas.records import EnvironmentRecord

    db = _copy(sealed, tmp_path / "forged.duckdb")
    with Warehouse.open(db, read_only=True) as wh:
        env = next(e for e in wh.environments() if e.presentation == "I")

    def edit(records):
        forged = records["environments"][env.env_id]
        records["environments"][env.env_id] = forged.model_copy(update={"u_star": forged.u_star + 29.0})

    new = _rehash(db, edit)
    forged_id = new.get(env.env_id, env.env_id)
    _, published, _, audit = _publish(db)  # the anchor left alone: caught
    assert not published and not audit["verified"] and not audit["seal"]["incremental"]
    assert audit["seal"]["warnings"][0].startswith("seal of v1 does not match")
    assert any(f["env_id"] == forged_id and f["field"] == "u_star" for f in audit["findings"]), audit["lines"]

    with Warehouse.open(db, read_only=True) as wh:  # the forger rewrites the seal file too
        chain = seal_store.sealed_chain(wh)
    path = seal_store.seals_path(db)
    code = json.loads(path.read_text().splitlines()[-1])["code"]
    path.write_text("".join(json.dumps({"format": seal_store.FORMAT, "version": r["version"], "seal": r["seal"],
                                        "previous": r["previous"], "code": code}) + "\n" for r in chain))
    _, published, _, audit = _publish(db)
    assert audit["verified"] and audit["seal"]["incremental"] and audit["replayed"] == 0  # the documented limit
    result = vhd("verify", "--db", db, "--no-resolve", "--full", "--json")
    assert result.exit_code == 1 and any(f["env_id"] == forged_id and f["field"] == "u_star"
                                         for f in json.loads(result.stdout)["findings"])
    exported = vhd("export", "--db", db, "--out", tmp_path / "out")
    assert exported.exit_code == 1 and len(exported.stderr.strip().splitlines()) == 1
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.get(EnvironmentRecord, forged_id) is not None


def test_an_anchored_environment_that_leaves_the_corpus_without_a_mark_is_audited(sealed, tmp_path):
    """`admitted` flipped by a stray UPDATE (its digest left as it was, so the seal holds) would drop
    the environment from the next version silently: the incremental gate audits every environment
    of the anchored version that left the corpus without a superseded mark, and blocks."""
    db = _copy(sealed, tmp_path / "dropped.duckdb")
    con = duckdb.connect(str(db))
    env_id = con.execute("SELECT env_id FROM environments WHERE admitted ORDER BY env_id LIMIT 1").fetchall()[0][0]
    con.execute("UPDATE environments SET admitted = false WHERE env_id = ?", [env_id])
    con.close()
    _, published, _, audit = _publish(db)
    assert audit["seal"]["incremental"] and not published and not audit["verified"]
    assert any(f["env_id"] == env_id and f["field"] == "admitted" for f in audit["findings"]), audit["lines"]


def test_the_weekly_verify_flow_replays_everything_and_fails_on_a_problem(sealed, tmp_path):
    """`vhd serve`'s weekly deployment runs the `verify` flow: `vhd verify --full` through Prefect's
    engine. On an intact copy it replays every environment (the seals match, and cover nothing:
    full) and returns verified; after an edit it fails the run, naming the problem."""
    from vhd.flows.verify import verify
    from vhd.schemas.errors import IntegrityError

    db = _copy(sealed, tmp_path / "w.duckdb")
    summary = verify(db_path=str(db), resolve=False)
    assert summary["verified"] and summary["seals"]["full"] and summary["seals"]["covered_envs"] == 0
    assert [row["status"] for row in summary["seals"]["versions"]] == ["match"]
    con = duckdb.connect(str(db))
    env_id = con.execute("SELECT env_id FROM environments WHERE admitted ORDER BY env_id LIMIT 1").fetchall()[0][0]
    con.execute("UPDATE environments SET u_star = u_star + 1 WHERE env_id = ?", [env_id])
    con.close()
    with pytest.raises(IntegrityError, match=r"problems; first: environments .*u_star"):
        verify(db_path=str(db), resolve=False)


def test_vhd_verify_runs_no_flow_and_imports_no_prefect(sealed, tmp_path):
    """`vhd verify` is the same audit as the weekly flow (`flows/verification.py`), without Prefect:
    a command that runs no flow neither starts nor imports it."""
    import subprocess
    import sys

    db = _copy(sealed, tmp_path / "w.duckdb")
    code = ("import sys\nfrom vhd.cli import app\n"
            "try:\n    app(['verify', '--no-resolve', '--json', '--db', sys.argv[1]], standalone_mode=False)\n"
            "except SystemExit as exc:\n    print('EXIT', exc.code)\n"
            "print('PREFECT' if any(m == 'prefect' or m.startswith('prefect.') for m in sys.modules) else 'CLEAN')\n")
    result = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"verified": true' in result.stdout and result.stdout.strip().splitlines()[-1] == "CLEAN"
