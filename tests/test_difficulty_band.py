"""`vhd refresh --difficulty LO:HI` (issue 30, item 2): every slot is filled from the band with the
same determinism, lineage and gates as any refresh; the summary says what the band cost, or why a
slot is short after a bounded number of tries; bad input is one line and stores nothing."""

import json

import duckdb
import pytest
from typer.testing import CliRunner

from conftest import run_vhd
from vhd.cli import app

runner = CliRunner()
ARGS = ("--families", "knapsack", "--per-family", "2", "--seed", "7", "--batch", "band",
        "--difficulty", "0.4:0.7", "--json")


@pytest.fixture(scope="module")
def banded(prefect_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("band")
    out = {}
    for name in ("one", "two"):
        db = root / f"{name}.duckdb"
        result = run_vhd(prefect_server, "refresh", *ARGS, "--db", db)
        assert result.returncode == 0, result.stderr[-3000:]
        out[name] = (db, json.loads(result.stdout))
    return out


def _envs(db):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT env_id, family, presentation, admitted, difficulty FROM environments "
                           "ORDER BY env_id").fetchall()
    finally:
        con.close()


def test_every_slot_is_filled_from_the_band_and_the_summary_says_what_it_cost(banded):
    db, summary = banded["one"]
    assert summary["difficulty"]["band"] == [0.4, 0.7] and summary["difficulty"]["short"] == {}
    assert summary["difficulty"]["tried"] > summary["difficulty"]["outside"] > 0  # the band turned candidates away
    for name in ("knapsack",):
        row = summary["families"][name]
        assert row["target"] == 4 and row["filled"] == 4 and row["short"] == 0
        assert row["select"]["tried"] >= row["select"]["outside"] + row["filled"]
    rows = _envs(db)
    admitted = [r for r in rows if r[3]]
    assert len(admitted) == 4 and {(f, p) for _, f, p, _, _ in admitted} == {("knapsack", "I"), ("knapsack", "A")}
    for _, _, presentation, _, text in admitted:
        difficulty = json.loads(text)
        assert 0.4 <= difficulty["score"] <= 0.7 and difficulty["presentation"] == presentation
    assert summary["corpus_version"] == "v1" and summary["audit"]["verified"]


def test_same_seed_same_corpus(banded):
    (db1, s1), (db2, s2) = banded["one"], banded["two"]
    assert _envs(db1) == _envs(db2)
    assert s1["difficulty"] == s2["difficulty"]


def test_a_band_no_theta_reaches_stops_with_a_reason(prefect_server, tmp_path):
    db = tmp_path / "short.duckdb"
    result = run_vhd(prefect_server, "refresh", "--families", "scheduling", "--presentations", "I", "--per-family", "2",
                     "--seed", "7", "--batch", "short", "--difficulty", "0.9:1", "--db", db, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    row = summary["families"]["scheduling"]
    assert row["short"] == 2 and row["filled"] == 0 and row["admitted"] == 0
    why = summary["difficulty"]["short"]["scheduling"]
    assert "2 of 2 short" in why and "0 in difficulty 0.9–1" in why and "candidates tried" in why
    assert row["select"]["tried"] == row["select"]["outside"] > 0  # bounded: it stopped after a few rounds


@pytest.mark.parametrize("band, problem", [
    ("0.7:0.4", "the low end is above the high end"),
    ("abc", "is not a band"),
    ("0.2", "is not a band"),
    ("-0.1:0.5", "must lie in [0, 1]"),
    ("0.5:nan", "must lie in [0, 1]"),
])
@pytest.mark.registry
def test_a_bad_band_is_one_line_and_nothing_is_stored(tmp_path, band, problem):
    db = tmp_path / "none.duckdb"
    result = runner.invoke(app, ["refresh", "--difficulty", band, "--db", str(db)])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0] and "expected LO:HI" in lines[0], result.stderr
    assert not db.exists()


@pytest.mark.registry
def test_a_preset_band_keeps_each_slot_on_its_own_seed_stream():
    """`--preset P --difficulty LO:HI`: each slot's batch gets the band's suffix before its own
    (`+heldout`, a cell's `+cell:`), so held-out draws stay held out and a cell keeps its knobs."""
    from vhd.mechanisms import registry
    from vhd.tasks.stages.difficulty import Band
    from vhd.tasks.corpus.presets import HELDOUT_SUFFIX, preset
    from vhd.tasks.stages.sample import cell_knobs

    band = Band((0.4, 0.7))
    for name in ("paper", "scaling"):
        for slot in preset(name, registry.all(), 0.01).slots:
            plain, banded = slot.batch("2026-12-05"), slot.batch("2026-12-05" + band.key())
            assert banded != plain and banded.startswith("2026-12-05~d0.4-0.7")
            assert banded.endswith(HELDOUT_SUFFIX) == plain.endswith(HELDOUT_SUFFIX)
            assert cell_knobs(banded) == cell_knobs(plain)
