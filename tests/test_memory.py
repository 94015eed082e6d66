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


def test_the_build_releases_its_caches_and_warm_zygotes_before_it_publishes():
    """`release_build_memory` (called by the refresh flow before it publishes) empties the check and
    annotate stages' per-θ caches and shuts the warm pool's zygotes down; a check after it starts
    a pool again and gives the same verdicts."""
    from vhd.mechanisms import registry
    from vhd.tasks.grading import step_advantages
    from vhd.tasks.sandbox import pool as pools
    from vhd.tasks.setters.passages import builtin_passages
    from vhd.tasks.stages import annotate, difficulty, release_build_memory, sample, solve, synthesize
    from vhd.tasks.stages.check import budget, check_batch

    family = registry.get("stopping")
    models = sample.sample_models(family, 1, 3, "release")
    solutions = {s.model_id: s for s in solve.solve_models(family, models)}
    outputs, assignment = synthesize.synthesize(family, models, builtin_passages())
    [candidate] = annotate.make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs},
                                           assignment, ("A",))

    def verdict():
        [v] = check_batch(family, outputs[0], [candidate])
        annotate.annotate(family, v)
        return [(g.name, g.passed, g.message) for g in v.gates]

    first = verdict()
    assert step_advantages._VALUES and budget._RESERVED and difficulty._CACHE
    zygotes = pools._default.zygotes() if pools.enabled() else []
    assert zygotes or not pools.enabled()  # the check left its warm zygotes idle in the pool
    release_build_memory()
    assert not step_advantages._VALUES and not budget._RESERVED and not difficulty._CACHE
    assert pools._default is None and not any(z.alive() for z in zygotes)
    assert verdict() == first
