"""The refresh and backfill flows bound how many checks run at once (docs/BENCHMARKS.md "Memory")."""

import os

from prefect.settings import PREFECT_TASKS_RUNNER_THREAD_POOL_MAX_WORKERS, temporary_settings
from prefect.task_runners import ThreadPoolTaskRunner

from vhd.flows.backfill import backfill
from vhd.flows.refresh import check_threads, refresh


def test_flows_run_on_a_bounded_thread_pool():
    for flow_ in (refresh, backfill):
        assert isinstance(flow_.task_runner, ThreadPoolTaskRunner)
        assert flow_.task_runner._max_workers == check_threads() >= 2


def test_the_bound_is_one_check_per_core_the_flow_may_use():
    """The checks hold the GIL for most of their work: more threads than cores add zygotes and
    memory, not speed (docs/BENCHMARKS.md, "Memory that does not grow with the corpus")."""
    with temporary_settings(restore_defaults={PREFECT_TASKS_RUNNER_THREAD_POOL_MAX_WORKERS}):
        assert check_threads() == max(2, len(os.sched_getaffinity(0)))


def test_prefects_own_setting_overrides_the_bound():
    with temporary_settings({PREFECT_TASKS_RUNNER_THREAD_POOL_MAX_WORKERS: 3}):
        assert check_threads() == 3


def test_the_refresh_shuts_its_warm_zygotes_down_before_it_publishes(prefect_server, tmp_path, monkeypatch):
    """The warm pool's zygotes serve the checks; publishing plays nothing in the sandbox, so the flow
    shuts them down first and they are not in the tree at the publish stage's peak (docs/BENCHMARKS.md)."""
    from vhd.flows import refresh as refresh_flow
    from vhd.tasks.sandbox import pool as pools

    calls = []
    shutdown, publish = pools.shutdown_default, refresh_flow.publish

    def spied_shutdown():
        calls.append(("shutdown", pools._default is not None))  # a pool the checks started, still warm
        shutdown()

    def spied_publish(*args, **kwargs):
        calls.append(("publish", pools._default is None))
        return publish(*args, **kwargs)

    monkeypatch.setattr(pools, "shutdown_default", spied_shutdown)
    monkeypatch.setattr(refresh_flow, "publish", spied_publish)
    summary = refresh(families=["knapsack"], per_family=1, seed=3, batch="zygotes", db_path=str(tmp_path / "w.duckdb"),
                      presentations=("I",))
    assert summary["families"]["knapsack"]["computed"]["check"] == 1
    assert calls == [("shutdown", pools.enabled()), ("publish", True)]


def test_trim_drops_what_duckdb_cached_and_puts_its_memory_limit_back(tmp_path):
    """DuckDB caches every block it reads or writes up to its memory limit (80 % of RAM): a refresh
    trims the cache between rounds and an audit between batches (`Warehouse.trim`), so the flow's
    memory does not grow with the file (docs/BENCHMARKS.md, "Memory that does not grow")."""
    from vhd.warehouse import Warehouse

    def cached(wh):
        return wh.raw.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchall()[0][0]

    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.raw.execute("CREATE TABLE scratch AS SELECT i, md5(i::VARCHAR) || md5((i + 1)::VARCHAR) || md5((i + 2)::VARCHAR) AS s "
                       "FROM range(400000) r(i)")
        wh.raw.execute("CHECKPOINT")
        limit = wh.raw.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
        assert wh.raw.execute("SELECT count(DISTINCT s) FROM scratch").fetchall()[0][0] == 400000
        assert cached(wh) > 8 << 20
        wh.trim()
        assert cached(wh) <= 4 << 20
        assert wh.raw.execute("SELECT current_setting('memory_limit')").fetchall()[0][0] == limit
        assert wh.raw.execute("SELECT count(DISTINCT s) FROM scratch").fetchall()[0][0] == 400000  # read again


def test_an_audit_batch_drops_each_tables_cached_blocks_before_reading_the_next(refreshed):
    """A few rows of a table are read by scanning all of it, and DuckDB caches every block the scan
    read: a batch of chains that held every table's blocks at once was the publish stage's peak,
    growing with the corpus (docs/BENCHMARKS.md, "Writes and audit batches that read what they
    need"). `load_chains` trims after each table's read, so no two tables' scans are cached at once."""
    from vhd.warehouse import Warehouse
    from vhd.warehouse.lineage import load_chains

    db, _ = refreshed
    events = []
    with Warehouse.open(db, read_only=True) as wh:
        ids = [k["env_id"] for k in wh.environment_keys()]
        reads, trim = wh.stored_rows, wh.trim
        wh.stored_rows = lambda *args, **kwargs: (events.append("read"), reads(*args, **kwargs))[1]
        wh.trim = lambda: (events.append("trim"), trim())[1]
        chains = load_chains(wh, ids)
    assert len(chains) == len(ids) > 0 and all(c.checks for c in chains.values())
    assert events.count("read") >= 7  # environments, models, solutions, modules, passages, edges, checks
    assert "read read" not in " ".join(events), events


def test_a_batch_of_new_rows_is_written_without_reading_the_stored_ones(tmp_path):
    """Writing a round compares a batch with the stored rows of the same ids only when there are
    some: the comparison reads every column of every stored row (the scans a round's write cached
    grew with the corpus), while a refresh writes mostly new rows. A changed row is still refused."""
    import pytest

    from vhd.schemas.errors import IntegrityError
    from vhd.schemas.records import ModelRecord
    from vhd.warehouse import Warehouse
    from vhd.mechanisms import registry
    from vhd.tasks.stages.sample import sample_models

    models = sample_models(registry.get("knapsack"), 3, 0, "writes")
    statements = []
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        with wh.transaction():
            wh.insert(models[:2])

        class Spied:  # the warehouse's connection, its statements recorded
            def __init__(self, con):
                self._con = con

            def execute(self, sql, *args):
                statements.append(sql)
                return self._con.execute(sql, *args)

            def __getattr__(self, name):
                return getattr(self._con, name)

        wh.con = Spied(wh.con)
        with wh.transaction():
            wh.insert(models[2:])  # new: the key column is read, no stored row is compared
        assert not any("IS DISTINCT FROM" in sql for sql in statements), statements
        with pytest.raises(IntegrityError, match="seed differs"), wh.transaction():
            wh.insert([models[2], models[0].model_copy(update={"seed": models[0].seed + 1})])
        assert any("IS DISTINCT FROM" in sql for sql in statements)
        assert wh.present(ModelRecord, [m.model_id for m in models]) == {m.model_id for m in models}


def test_a_round_forgets_prefects_links_from_its_results_to_their_states(prefect_server):
    """Prefect keeps a copy of the final state of every task result (and of every item of it) for the
    whole flow run; a round's results are written and dropped, so the refresh drops those links
    after each round (`_forget_results`), and the flow's memory does not grow by ~5 KB a task run."""
    from prefect import flow, task
    from prefect.context import FlowRunContext

    from vhd.flows.refresh import _forget_results

    @task
    def rows(k: int) -> tuple[list[str], float]:
        return [f"row {k}"], 0.5

    @flow
    def a_round() -> tuple[int, int]:
        results = [future.result() for future in [rows.submit(k) for k in range(3)]]
        linked = len(FlowRunContext.get().run_results)
        del results
        _forget_results()
        return linked, len(FlowRunContext.get().run_results)

    linked, kept = a_round()
    assert linked >= 3 and kept == 0


def _key_indexes(wh):
    """Bytes of primary-key indexes (DuckDB's ART) the warehouse's connection holds in memory."""
    return wh.raw.execute("SELECT memory_usage_bytes FROM duckdb_memory() WHERE tag = 'ART_INDEX'").fetchall()[0][0]


def test_checks_and_edges_keep_no_key_index_and_a_row_met_again_is_still_a_no_op(tmp_path):
    """DuckDB holds a primary key's index (ART) in memory from the first insert on: the keys of
    checks and lineage_edges (~30 rows an environment) were 70 MB of a refresh at scale 3 and 28 at
    scale 1 (docs/BENCHMARKS.md, "Checks and edges without a key index"). Migration 008 drops those
    keys; a row whose key is stored, or met twice in one batch, is still written once."""
    from vhd.schemas.records import LineageEdge
    from vhd.warehouse import Warehouse

    edges = [LineageEdge(child_id=f"{k:064x}", parent_id=f"{k + 1:064x}", relation="checks") for k in range(60000)]
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        with wh.transaction():
            wh.insert(edges)
        assert _key_indexes(wh) == 0
        with wh.transaction():
            wh.insert(edges[:10] + edges[:10] + [edges[0].model_copy(update={"relation": "solves"})])
        assert wh.raw.execute("SELECT count(*) FROM lineage_edges").fetchall()[0][0] == 60001
        assert wh.stored_twice() == []


def test_a_checkpoint_leaves_no_key_index_in_memory(tmp_path):
    """An insert loads its table's primary-key index, and a trim cannot evict an index changed since
    the last checkpoint; `Warehouse.checkpoint` (after each round's write) writes it out and trims."""
    from vhd.warehouse import Warehouse

    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        with wh.transaction():
            wh.raw.execute("INSERT INTO runs SELECT md5(i::VARCHAR) || md5((i + 1)::VARCHAR), 'f', 's', NULL, 'done', "
                           "'{}', 'c', '{}' FROM range(60000) r(i)")
        wh.trim()
        assert _key_indexes(wh) > 4 << 20  # what a trim alone leaves
        wh.checkpoint()
        assert _key_indexes(wh) == 0
        assert wh.raw.execute("SELECT count(*) FROM runs").fetchall()[0][0] == 60000
