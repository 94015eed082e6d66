"""The refresh and backfill flows bound how many checks run at once (docs/BENCHMARKS.md "Memory")."""

from prefect.settings import PREFECT_TASKS_RUNNER_THREAD_POOL_MAX_WORKERS, temporary_settings
from prefect.task_runners import ThreadPoolTaskRunner

from vhd.flows.backfill import backfill
from vhd.flows.refresh import check_threads, refresh


def test_flows_run_on_a_bounded_thread_pool():
    for flow_ in (refresh, backfill):
        assert isinstance(flow_.task_runner, ThreadPoolTaskRunner)
        assert flow_.task_runner._max_workers == check_threads() >= 2


def test_prefects_own_setting_overrides_the_bound():
    with temporary_settings({PREFECT_TASKS_RUNNER_THREAD_POOL_MAX_WORKERS: 3}):
        assert check_threads() == 3
