"""`vhd refresh --workers 2` (check stage on a local Dask cluster) builds exactly what the default runner builds."""

import json

from conftest import run_vhd

from vhd.warehouse import Warehouse


def _envs(db):
    with Warehouse.open(db, read_only=True) as wh:
        return {e.env_id: e.admitted for e in wh.environments(admitted=None)}


def test_two_dask_workers_give_the_same_environments_as_the_default_runner(refreshed, prefect_server, tmp_path):
    db, default = refreshed  # --families inventory_dp --per-family 10 --seed 3 --batch t1, default runner
    dask_db = tmp_path / "dask.duckdb"
    result = run_vhd(prefect_server, "refresh", "--families", "inventory_dp", "--per-family", "10", "--seed", "3",
                     "--batch", "t1", "--db", dask_db, "--workers", "2", "--json", "--verbose")  # logs on stderr
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["computed"] == default["computed"] and summary["admitted"] == default["admitted"]
    assert _envs(dask_db) == _envs(db)
    assert "distributed.scheduler" in result.stderr  # the run really went through a Dask cluster
