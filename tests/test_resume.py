"""A finished batch is recognised from the warehouse's counts (no task), and nothing else is."""

import shutil

import pytest

from vhd.mechanisms import registry
from vhd.flows.refresh import STAGES, TIMED
from vhd.tasks.stages import resume
from vhd.tasks.stages.annotate import CODE_VERSION
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.setters import template
from vhd.warehouse import Warehouse

FAMILY = registry.get("inventory_dp")


@pytest.fixture
def wh(refreshed, tmp_path):
    db, _ = refreshed
    shutil.copy(db, tmp_path / "copy.duckdb")
    with Warehouse.open(tmp_path / "copy.duckdb") as opened:
        yield opened


def _row(wh, passages=None, batch="t1", env_version=CODE_VERSION, **slot):
    passages = builtin_passages() if passages is None else passages
    state = wh.slot_state(FAMILY.name, FAMILY.version, batch, [p.passage_id for p in passages])
    slot = {"per_family": 10, "target": None, "presentations": ("I", "A"), "split": FAMILY.split, **slot}
    return resume.stored_slot(FAMILY, state, env_version=env_version, passages=passages, stages=STAGES,
                              timed=TIMED, **slot)


def test_a_finished_batch_reports_what_the_full_pass_computed_as_found(wh, refreshed):
    _, first = refreshed
    row = _row(wh)
    assert row is not None
    assert set(row["computed"].values()) == {0}
    assert row["found"] == first["computed"]  # every row the first run computed, and nothing else
    assert row["reused"] == first["computed"]["check"] == 20


@pytest.mark.parametrize("change", [
    {"per_family": 9}, {"per_family": 11}, {"presentations": ("I",)}, {"presentations": ("F", "I", "A")},
    {"split": "heldout"}, {"batch": "t2"}, {"env_version": CODE_VERSION + "x"},
])
def test_any_other_request_takes_the_full_pass(wh, change):
    assert _row(wh, **change) is None


def test_a_changed_passage_set_takes_the_full_pass(wh):
    assert _row(wh, passages=builtin_passages()[1:]) is None


def test_a_world_edited_without_a_version_bump_takes_the_full_pass(wh, monkeypatch):
    source = template.world_source(FAMILY)
    monkeypatch.setitem(template._WORLD_SOURCE, FAMILY.code_version, source + "\n# edited\n")
    assert _row(wh) is None


def test_a_preset_slot_is_done_only_at_exactly_its_target(wh):
    admitted = sum(1 for e in wh.environments(FAMILY.name))
    row = _row(wh, per_family=None, target=admitted)
    assert row is not None and row["filled"] == admitted and row["short"] == 0
    assert _row(wh, per_family=None, target=admitted - 1) is None
    assert _row(wh, per_family=None, target=admitted + 1) is None
