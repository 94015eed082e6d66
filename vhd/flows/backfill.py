"""The `backfill` flow: one family gets its environments, no other family is touched.

For example (a Prefect flow run, not a doctest):

    summary = backfill(family="knapsack", per_family=20, db_path="data/vhd.duckdb")

It is the refresh machinery (`vhd.flows.refresh.run_batch`) restricted to one family: the same
stages, content-hash reuse, single writer and quality gate. Other families' rows are neither
written nor marked superseded; a new corpus version is published when the admitted set grew.
The default batch key is `backfill` (not today's date), so a rerun finds everything done.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from vhd.flows.refresh import DEFAULT_BACKFILL_BATCH, bounded_runner, refresh_run_name, run_batch
from vhd.mechanisms import registry

DEFAULT_BATCH = DEFAULT_BACKFILL_BATCH


@flow(name="backfill", log_prints=True, task_runner=bounded_runner(), flow_run_name=refresh_run_name)
def backfill(
    family: str,
    per_family: int = 20,
    seed: int = 0,
    batch: str | None = None,
    db_path: str = "data/vhd.duckdb",
    presentations: tuple[str, ...] = ("I", "A"),
) -> dict[str, Any]:
    """Give `family` `per_family` θ draws (one environment per presentation each) in batch `batch`."""
    registry.get(family)  # UnknownFamily before anything is opened
    return run_batch("backfill", [family], per_family, seed, batch or DEFAULT_BATCH, db_path, presentations,
                     only=[family])
