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
