"""`vhd backfill FAMILY` on the real Prefect engine: one family gains environments, no other changes."""

import json
import shutil

from conftest import run_vhd

from vhd.warehouse import Warehouse

PER_FAMILY = ("models", "solutions", "setter_outputs", "environments")


def _by_family(db):
    with Warehouse.open(db, read_only=True) as wh:
        rows = {t: dict(wh.con.execute(f"SELECT family, count(*) FROM {t} GROUP BY family").fetchall())
                for t in PER_FAMILY}
        rows["superseded"] = len(wh.superseded())
        rows["versions"] = len(wh.versions())
        return rows, wh.counts()


def test_backfill_fills_one_family_and_a_rerun_does_nothing(refreshed, prefect_server, tmp_path):
    db, _ = refreshed
    copy = tmp_path / "backfill.duckdb"
    shutil.copy(db, copy)
    before, _ = _by_family(copy)
    assert set(before["environments"]) == {"inventory_dp"}
    args = ("backfill", "knapsack", "--per-family", "2", "--seed", "5", "--db", copy, "--json")
    result = run_vhd(prefect_server, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["flow"] == "backfill" and summary["batch"] == "backfill"
    assert list(summary["families"]) == ["knapsack"] and summary["computed"]["sample"] == 2
    after, totals = _by_family(copy)
    for table in PER_FAMILY:  # the other family's rows are exactly what they were
        assert after[table]["inventory_dp"] == before[table]["inventory_dp"]
    assert after["environments"]["knapsack"] == 4 and after["models"]["knapsack"] == 2
    assert after["superseded"] == before["superseded"]
    assert summary["published"] and after["versions"] == before["versions"] + 1
    with Warehouse.open(copy, read_only=True) as wh:
        assert [r.flow for r in wh.runs()].count("backfill") == 1

    again = run_vhd(prefect_server, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    second = json.loads(again.stdout)
    assert second["nothing_to_do"] and set(second["computed"].values()) == {0} and not second["published"]
    assert second["reused"] == 4
    rerun, rerun_totals = _by_family(copy)
    assert rerun == after and rerun_totals["environments"] == totals["environments"]


def test_backfill_of_an_unknown_family_fails_in_one_line(refreshed, prefect_server):
    db, _ = refreshed
    result = run_vhd(prefect_server, "backfill", "nope", "--db", db)
    assert result.returncode == 1 and "unknown family 'nope'" in result.stderr and len(result.stderr.splitlines()) == 1
