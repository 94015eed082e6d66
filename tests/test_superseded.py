"""Rows made by an older version of their code are kept, marked superseded, and skipped by readers."""

import shutil

import pytest

from vhd.mechanisms import registry
from vhd.tasks.stages.annotate import CODE_VERSION
from vhd.warehouse import Warehouse
from vhd.warehouse.lineage import load_chain

CURRENT = registry.get("inventory_dp").version  # the version the refreshed rows were made by
BUMPED = CURRENT + "-next"


@pytest.fixture
def copy(refreshed, tmp_path):
    db, _ = refreshed
    path = tmp_path / "copy.duckdb"
    shutil.copy(db, path)
    return path


def test_current_code_supersedes_nothing(copy):
    with Warehouse.open(copy) as wh:
        before = len(wh.environments())
        assert wh.mark_superseded({"inventory_dp": CURRENT}, CODE_VERSION, "r", "now") == {
            "model": 0, "solution": 0, "setter_output": 0, "environment": 0}
        assert len(wh.environments()) == before > 0


def test_a_version_bump_marks_exactly_that_familys_rows_and_keeps_them(copy):
    with Warehouse.open(copy) as wh:
        counts = wh.counts()
        envs = wh.environments(admitted=None)
        marked = wh.mark_superseded({"inventory_dp": BUMPED, "knapsack": registry.get("knapsack").version}, CODE_VERSION, "r",
                                   "now")
        assert marked["model"] == counts["models"] and marked["environment"] == len(envs)
        assert marked["solution"] == counts["solutions"] and marked["setter_output"] == counts["setter_outputs"]
        assert wh.environments() == [] and len(wh.environments(include_superseded=True)) == len([e for e in envs
                                                                                                 if e.admitted])
        assert wh.counts() == counts  # nothing deleted
        again = wh.mark_superseded({"inventory_dp": BUMPED}, CODE_VERSION, "r2", "later")
        assert set(again.values()) == {0}
        chain = load_chain(wh, envs[0].env_id)  # the lineage of a superseded row is still whole
        assert chain.model is not None and chain.solution is not None
        assert wh.superseded()[envs[0].env_id]["current_version"] == "annotator@" + CODE_VERSION


def test_a_new_checker_version_supersedes_the_environments_only(copy):
    with Warehouse.open(copy) as wh:
        marked = wh.mark_superseded({"inventory_dp": CURRENT}, CODE_VERSION + "-next", "r", "now")
        assert marked["model"] == 0 and marked["environment"] == len(wh.environments(admitted=None,
                                                                                    include_superseded=True))


def test_a_new_template_setter_version_supersedes_its_modules_and_their_environments_only(copy):
    from vhd.tasks.setters.template import SETTER, SETTER_VERSION

    with Warehouse.open(copy) as wh:
        assert set(wh.mark_superseded({"inventory_dp": CURRENT}, CODE_VERSION, "r", "now",
                                      setters={SETTER: SETTER_VERSION}).values()) == {0}
        counts, envs = wh.counts(), wh.environments(admitted=None)
        marked = wh.mark_superseded({"inventory_dp": CURRENT}, CODE_VERSION, "r", "now",
                                    setters={SETTER: SETTER_VERSION + "-next", "anthropic": "9"})
        assert marked == {"model": 0, "solution": 0, "setter_output": counts["setter_outputs"],
                          "environment": len(envs)}
        assert wh.environments() == [] and wh.counts() == counts
        assert wh.superseded()[envs[0].setter_output_id]["current_version"] == f"{SETTER}@{SETTER_VERSION}-next"
