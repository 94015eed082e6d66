"""The pipeline stages: sample, solve, synthesize, check, annotate (plain functions: no Prefect, no DuckDB)."""


def release_build_memory() -> None:
    """Drop what only served the build before a flow publishes: the per-θ caches of the check and
    annotate stages (decision values: up to tens of MB a θ; turn reserves; budget verdicts;
    difficulty measures), the sandbox's warm zygotes (the next check starts a pool again), and the
    C heap's free pages (glibc `malloc_trim`, where there is one). Verdicts do not depend on any of it."""
    import ctypes
    import gc

    from vhd.tasks.grading import step_advantages
    from vhd.tasks.sandbox import pool
    from vhd.tasks.stages import difficulty
    from vhd.tasks.stages.check import budget, planning

    for cache, lock in ((step_advantages._VALUES, step_advantages._VALUES_LOCK), (budget._RESERVED, budget._RESERVED_LOCK),
                        (difficulty._CACHE, difficulty._LOCK)):
        with lock:
            cache.clear()
    planning._BINDS.clear()
    pool.shutdown_default()
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its free pages stay mapped
        pass
