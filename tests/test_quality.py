"""The data-quality gate (Great Expectations over pandas) blocks a corpus version and names the rows."""

import json
import shutil

import duckdb
import pytest

from conftest import run_vhd
from vhd.mechanisms import registry
from vhd.tasks.corpus.quality import validate
from vhd.warehouse import Warehouse


@pytest.fixture(scope="module")
def frame(refreshed):
    db, _ = refreshed
    with Warehouse.open(db, read_only=True) as wh:
        return wh.quality_frame()


@pytest.fixture(scope="module")
def texts(refreshed):
    db, _ = refreshed
    with Warehouse.open(db, read_only=True) as wh:
        return list(wh.quality_texts(batch=2))  # several batches


def _failed(report):
    return {e["column"]: e["rows"] for e in report["expectations"] if not e["passed"]}


def test_a_refreshed_corpus_passes(frame, texts):
    report = validate(frame, registry, {"train": len(frame)}, texts)
    assert report["passed"] and report["rows"] == len(frame) > 0, _failed(report)
    assert "theta" not in frame and "instruction" not in frame  # the texts are streamed, not held
    assert sorted(t[0] for t in texts) == sorted(frame.loc[frame["presentation"] == "A", "env_id"]) != []


def test_an_a_row_without_its_texts_does_not_count_as_hiding_theta(frame, texts):
    report = validate(frame, registry, {"train": len(frame)}, texts[1:])
    assert _failed(report) == {"hides_theta": [texts[0][0]]}


def test_each_expectation_fails_on_the_row_that_breaks_it(frame, texts):
    bad = frame.copy()
    first, second, third = bad["env_id"].iloc[0], bad["env_id"].iloc[1], bad["env_id"].iloc[2]
    bad.loc[0, "lineage_complete"] = False
    bad.loc[1, "u_default"] = bad.loc[1, "u_star"]            # no reward span: the reference cannot score 1
    bad.loc[2, "solution_u_default"] = bad.loc[2, "solution_u_star"] + 5
    leaked, family, theta_text, instruction = texts[0]
    theta = json.loads(theta_text)
    told = [(leaked, family, theta_text, instruction + " demand weights: " + json.dumps(theta["demand_weights"]))]
    failed = _failed(validate(bad, registry, {"train": len(bad) + 1}, told + texts[1:]))
    assert failed["lineage_complete"] == [first]
    assert failed["reference_reward"] == [second] and "default_reward" not in failed  # r(u0) is 0 anyway
    assert failed["solution_gap"] == [third]
    assert failed["hides_theta"] == [leaked]
    assert failed["admitted ≥ configured"] == ["train"]


def test_refresh_does_not_publish_when_the_gate_fails(prefect_server, refreshed, tmp_path):
    """A broken lineage chain blocks the next version; the audit, which runs before the suite on
    every publish attempt, is the gate that names it (issue 18)."""
    db, _ = refreshed
    copy = tmp_path / "broken.duckdb"
    shutil.copy(db, copy)
    con = duckdb.connect(str(copy))
    victim = con.execute("SELECT env_id FROM environments WHERE admitted ORDER BY env_id LIMIT 1").fetchall()[0][0]
    con.execute("DELETE FROM lineage_edges WHERE child_id = ? AND relation = 'graded_by'", [victim])
    versions = con.execute("SELECT count(*) FROM corpus_versions").fetchall()[0][0]
    con.close()
    result = run_vhd(prefect_server, "refresh", "--families", "inventory_dp", "--per-family", "3", "--seed", "3",
                     "--batch", "t-quality", "--db", copy)
    assert result.returncode == 1
    assert "the audit found" in result.stderr and "graded_by" in result.stderr and victim in result.stderr
    con = duckdb.connect(str(copy), read_only=True)
    assert con.execute("SELECT count(*) FROM corpus_versions").fetchall()[0][0] == versions
    assert con.execute("SELECT count(*) FROM models WHERE batch = 't-quality'").fetchall()[0][0] == 3  # work kept


def test_a_failed_suite_blocks_publishing_when_the_audit_passes(prefect_server, refreshed, tmp_path):
    """The suite is the second gate: an audited warehouse whose splits fall short of what a
    preset configures publishes nothing, and the report names the split."""
    from vhd.flows.refresh import publish

    db, _ = refreshed
    copy = tmp_path / "short.duckdb"
    shutil.copy(db, copy)
    con = duckdb.connect(str(copy))
    con.execute("DELETE FROM corpus_versions")  # so that there is something to publish
    con.close()
    with Warehouse.open(copy) as wh:
        version, published, quality, audit = publish(wh, "quality-test", {"train": 10_000})
        assert audit["verified"] and not published and version is None and wh.version_names() == []
    assert not quality["passed"] and _failed(quality) == {"admitted ≥ configured": ["train"]}
