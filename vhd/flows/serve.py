"""The deployments `vhd serve` runs: the nightly `refresh` and the weekly `verify --full`, and the
long-running process that serves them.

    >>> deployment = nightly(cron="0 3 * * *", db_path="/srv/vhd/vhd.duckdb")
    >>> deployment.name, deployment.entrypoint, deployment.parameters["db_path"]
    ('nightly', 'vhd.flows.refresh.refresh', '/srv/vhd/vhd.duckdb')
    >>> weekly_verify(db_path="/srv/vhd/vhd.duckdb").entrypoint
    'vhd.flows.verify.verify'

and then (it blocks, so not a doctest):

    serve(deployment, weekly_verify(db_path=...))   # polls the Prefect API and runs each scheduled run

`nightly` and `weekly_verify` only build deployment objects (no API call); `serve` registers them
with the Prefect server named by `PREFECT_API_URL` and runs their scheduled flow runs in
subprocesses. The entrypoints are module paths (`vhd.flows.refresh:refresh`), so they do not
depend on the directory the server was started from. `prefect.yaml` at the repository root
declares the same deployments for `prefect deploy` with a worker.
"""

from __future__ import annotations

import prefect
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.schedules import Cron

from vhd.flows.refresh import refresh
from vhd.flows.verify import verify

DEPLOYMENT = "nightly"
DEFAULT_CRON = "0 3 * * *"
VERIFY_DEPLOYMENT = "weekly-verify"
DEFAULT_VERIFY_CRON = "0 4 * * 0"  # Sundays, after that night's refresh


def nightly(cron: str = DEFAULT_CRON, db_path: str = "data/vhd.duckdb", per_family: int = 20,
            timezone: str = "UTC", families: list[str] | None = None, follow: str | None = None,
            follow_band: tuple[float, float] | None = None) -> RunnerDeployment:
    """The nightly refresh deployment: every family registered when each run starts (or
    `families`), today's date as the batch (the flow's default), `per_family` θ per family. With
    `follow` (a learner's results file, rewritten by its trainer between runs), each run makes the
    families it played where its predicted reward lies in `follow_band` (`refresh --follow`). A bad
    cron raises ValueError.

    >>> nightly(follow="/srv/learner/results.jsonl").parameters["follow"]
    '/srv/learner/results.jsonl'
    """
    extra = {"follow": follow, **({"follow_band": list(follow_band)} if follow_band else {})} if follow else {}
    return refresh.to_deployment(
        name=DEPLOYMENT,
        schedules=[Cron(cron, timezone=timezone)],
        parameters={**({"families": families} if families else {}), "per_family": per_family, "db_path": db_path,
                    **extra},
        description="Nightly corpus refresh: a new batch per family, stale work recomputed, quality gate, "
                    "a new corpus version.",
        tags=["vhd", "refresh"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )


def weekly_verify(cron: str = DEFAULT_VERIFY_CRON, db_path: str = "data/vhd.duckdb",
                  timezone: str = "UTC") -> RunnerDeployment:
    """The weekly full audit (`vhd verify --full`): every environment replayed and re-solved,
    whatever the seal file says, so what the nightly publish gate trusts is recomputed from first
    principles once a week; a problem fails the run. A bad cron raises ValueError."""
    return verify.to_deployment(
        name=VERIFY_DEPLOYMENT,
        schedules=[Cron(cron, timezone=timezone)],
        parameters={"db_path": db_path, "full": True},
        description="Weekly full audit: every environment replayed and re-solved against the seal file.",
        tags=["vhd", "verify"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )


def serve(*deployments: RunnerDeployment) -> None:  # pragma: no cover - blocks until interrupted
    prefect.serve(*deployments, pause_on_shutdown=False)
