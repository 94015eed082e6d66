"""A deployment of the `refresh` flow with a nightly cron, and the long-running process that serves it.

    >>> deployment = nightly(cron="0 3 * * *", db_path="/srv/vhd/vhd.duckdb")
    >>> deployment.name, deployment.entrypoint, deployment.parameters["db_path"]
    ('nightly', 'vhd.flows.refresh.refresh', '/srv/vhd/vhd.duckdb')

and then (it blocks, so not a doctest):

    serve(deployment)          # polls the Prefect API and runs each scheduled refresh

`nightly` only builds the deployment object (no API call); `serve` registers it with the
Prefect server named by `PREFECT_API_URL` and runs its scheduled flow runs in subprocesses.
The deployment's entrypoint is the module path `vhd.flows.refresh:refresh`, so it does not
depend on the directory the server was started from. `prefect.yaml` at the repository root
declares the same deployment for `prefect deploy` with a worker.
"""

from __future__ import annotations

import prefect
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.schedules import Cron

from vhd.flows.refresh import refresh

DEPLOYMENT = "nightly"
DEFAULT_CRON = "0 3 * * *"


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


def serve(deployment: RunnerDeployment) -> None:  # pragma: no cover - blocks until interrupted
    prefect.serve(deployment, pause_on_shutdown=False)
