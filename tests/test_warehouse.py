import subprocess
import sys
import textwrap

import pytest

from vhd.mechanisms import registry
from vhd.schemas.errors import WarehouseBusy, WarehouseError, WarehouseMissing
from vhd.schemas.records import LineageEdge, ModelRecord
from vhd.tasks.stages.sample import sample_models
from vhd.warehouse import Warehouse
from vhd.warehouse.migrate import available, migrate


def test_migrations_apply_once(tmp_path):
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        assert migrate(wh.con) == []  # already applied by open()
        versions = wh.con.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()
    assert versions == [(1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,)] == [(v,) for v, _, _ in available()]


def test_a_reader_refuses_a_warehouse_that_needs_a_migration(tmp_path):
    path = tmp_path / "old.duckdb"
    with Warehouse.open(path) as wh:  # make it look like a warehouse written before migration 002
        wh.con.execute("DROP TABLE superseded")
        wh.con.execute("DROP TABLE setter_attempts")
        wh.con.execute("DROP TABLE episodes")
        wh.con.execute("ALTER TABLE environments DROP COLUMN u_idle")  # 005
        for table in ("passages", "models", "solutions", "setter_outputs", "checks", "environments",
                      "corpus_versions"):  # 006
            wh.con.execute(f"ALTER TABLE {table} DROP COLUMN field_digests")
        wh.con.execute("ALTER TABLE environments DROP COLUMN difficulty")  # 007
        wh.con.execute("DELETE FROM schema_migrations WHERE version >= 2")
    with pytest.raises(WarehouseError, match="needs migration 002; open it once for writing"):
        Warehouse.open(path, read_only=True)
    with Warehouse.open(path) as wh:  # a writer upgrades it
        assert wh.environments() == []


def test_insert_is_idempotent_and_round_trips(tmp_path):
    models = sample_models(registry.get("inventory_dp"), 3, seed=2, batch="b")
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        with wh.transaction():
            wh.insert(models)
        with wh.transaction():
            wh.insert(models)
            wh.insert([LineageEdge(child_id="c", parent_id="p", relation="r")] * 2)
        assert wh.counts()["models"] == 3 and wh.counts()["lineage_edges"] == 1
    with Warehouse.open(tmp_path / "w.duckdb", read_only=True) as wh:
        assert wh.get(ModelRecord, models[1].model_id) == models[1]
        assert wh.present(ModelRecord, [models[0].model_id, "nope"]) == {models[0].model_id}


def test_a_failed_transaction_leaves_nothing(tmp_path):
    models = sample_models(registry.get("inventory_dp"), 2, seed=2, batch="b")
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        with pytest.raises(RuntimeError):
            with wh.transaction():
                wh.insert(models)
                raise RuntimeError("crash mid-batch")
        assert wh.counts()["models"] == 0


def test_missing_warehouse_for_readers(tmp_path):
    with pytest.raises(WarehouseMissing, match="no warehouse at"):
        Warehouse.open(tmp_path / "absent.duckdb", read_only=True)
    assert not (tmp_path / "absent.duckdb").exists()


def test_a_second_writer_is_told_who_holds_the_file(tmp_path):
    path = tmp_path / "w.duckdb"
    Warehouse.open(path).close()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time, duckdb
        con = duckdb.connect({str(path)!r})
        print("locked", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(WarehouseBusy, match=f"in use by PID {holder.pid}"):
            Warehouse.open(path)
    finally:
        holder.kill()
        holder.wait()
