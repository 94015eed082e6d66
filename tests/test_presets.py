"""Presets and splits: the paper's mix and the F/I/A diagnostic, filled to their targets."""

import json

import duckdb
import pytest

from conftest import run_vhd
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.tasks.corpus import presets


def _by_split(plan):
    totals = {}
    for slot in plan.slots:
        totals[slot.split] = totals.get(slot.split, 0) + slot.target
    return totals


@pytest.mark.registry
def test_the_paper_preset_has_the_papers_counts():
    plan = presets.preset("paper", registry.all())
    assert _by_split(plan) == {"train": 2200, "heldout": 300, "ood": 800}
    train = {s.family for s in plan.slots if s.split in ("train", "heldout")}
    ood = {s.family for s in plan.slots if s.split == "ood"}
    assert train == {f.name for f in registry.all() if f.group == "train"} and train
    assert ood == {f.name for f in registry.all() if f.group in ("near_ood", "far_ood", "probe_budgeted")}
    assert ood and not ood & train
    assert plan.presentations == ("A",)


@pytest.mark.registry
def test_held_out_draws_come_from_their_own_seed_stream():
    plan = presets.preset("paper", registry.all())
    heldout = next(s for s in plan.slots if s.split == "heldout")
    train = next(s for s in plan.slots if s.split == "train" and s.family == heldout.family)
    assert heldout.batch("2026-12-02") != train.batch("2026-12-02") == "2026-12-02"


@pytest.mark.registry
def test_scaled_presets_and_bad_names():
    small = presets.preset("paper", registry.all(), scale=0.01)
    assert _by_split(small) == {"train": 22, "heldout": 3, "ood": 8}
    diagnostic = presets.preset("diagnostic", registry.all(), scale=0.02)
    assert [s.family for s in diagnostic.slots] == list(presets.DIAGNOSTIC_FAMILIES)
    assert diagnostic.presentations == ("F", "I", "A") and {s.target for s in diagnostic.slots} == {3}
    with pytest.raises(InvalidParams, match="unknown preset 'papr'"):
        presets.preset("papr", registry.all())
    with pytest.raises(InvalidParams, match="scale"):
        presets.preset("paper", registry.all(), scale=0)


def test_walk_stops_at_the_target_and_at_the_first_unchecked_candidate():
    from vhd.flows.refresh import _walk

    class C:
        def __init__(self, env_id):
            self.env_id = env_id

    cs = [C(k) for k in "abcde"]
    verdicts = {"a": False, "b": True, "c": True, "d": True}
    assert [c.env_id for c in _walk(cs, verdicts, 2)[0]] == ["a", "b", "c"] and _walk(cs, verdicts, 2)[1]
    assert [c.env_id for c in _walk(cs, {"a": True, "c": True}, 2)[0]] == ["a"]  # b unchecked
    assert _walk(cs, verdicts, 9) == (cs[:4], False)


@pytest.fixture(scope="module")
def paper_small(prefect_server, tmp_path_factory):
    db = tmp_path_factory.mktemp("paper") / "vhd.duckdb"
    result = run_vhd(prefect_server, "refresh", "--preset", "paper", "--scale", "0.01", "--batch", "p1", "--db", db,
                     "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return db, json.loads(result.stdout)


@pytest.mark.registry
def test_paper_preset_fills_every_slot_and_stores_rejections(paper_small):
    db, summary = paper_small
    assert summary["splits"] == {"train": 22, "heldout": 3, "ood": 8}
    assert all(row["filled"] == row["target"] and row["short"] == 0 for row in summary["families"].values())
    con = duckdb.connect(str(db), read_only=True)
    counts = dict(con.execute("SELECT split, count(*) FROM environments WHERE admitted GROUP BY split").fetchall())
    assert counts == {"train": 22, "heldout": 3, "ood": 8}
    assert con.execute("SELECT count(DISTINCT presentation) FROM environments").fetchall()[0][0] == 1
    rejected = con.execute("SELECT reason FROM environments WHERE NOT admitted").fetchall()
    assert len(rejected) == summary["rejected"] and all(reason for (reason,) in rejected)
    overlap = con.execute("""SELECT count(*) FROM environments h JOIN environments t ON h.model_id = t.model_id
                             WHERE h.split = 'heldout' AND t.split = 'train'""").fetchall()[0][0]
    assert overlap == 0
    batches = {b for (b,) in con.execute("SELECT DISTINCT m.batch FROM environments e JOIN models m USING (model_id) "
                                         "WHERE e.split = 'heldout'").fetchall()}
    assert batches == {"p1" + presets.HELDOUT_SUFFIX}


@pytest.mark.registry
def test_paper_preset_rerun_finds_every_slot_full(prefect_server, paper_small):
    db, _ = paper_small
    result = run_vhd(prefect_server, "refresh", "--preset", "paper", "--scale", "0.01", "--batch", "p1", "--db", db,
                     "--json")
    again = json.loads(result.stdout)
    assert again["nothing_to_do"] is True and again["published"] is False
    assert again["splits"] == {"train": 22, "heldout": 3, "ood": 8}


@pytest.mark.registry
def test_a_slot_fills_in_rounds_of_round_draws_with_the_same_environments(prefect_server, paper_small, tmp_path,
                                                                           monkeypatch):
    """A round holds at most `ROUND_DRAWS` θ draws, so the flow's memory is bounded by the round, not by
    the slot (issue 31): filled two draws a round, the paper preset stores exactly the environments,
    verdicts and reasons it stores when one round holds a whole slot. The planner's guess is made
    to fail too (every candidate guessed admitted: each round checks only as many as the slot still
    wants, and a rejection stops the walk mid-round), so the next round must start at the first
    model no check reached, or a drawn model is skipped and the slot ends elsewhere."""
    from vhd.flows.refresh import refresh
    from vhd.tasks.stages import sample
    from vhd.tasks.stages.check import planning

    db, summary = paper_small
    monkeypatch.setattr(sample, "ROUND_DRAWS", 2)
    monkeypatch.setattr(planning, "in_band", lambda family, candidate: True)
    small = tmp_path / "rounds.duckdb"
    again = refresh(families=[], preset="paper", scale=0.01, batch="p1", db_path=str(small))
    assert again["splits"] == summary["splits"] and again["rejected"] == summary["rejected"]
    assert sum(row["computed"]["sample"] for row in again["families"].values()) > 0

    def stored(path):
        con = duckdb.connect(str(path), read_only=True)
        rows = con.execute("SELECT env_id, admitted, reason FROM environments ORDER BY env_id").fetchall()
        con.close()
        return rows

    assert stored(small) == stored(db)


@pytest.mark.registry
def test_diagnostic_preset_builds_f_i_and_a_and_f_is_scored(prefect_server, tmp_path):
    db = tmp_path / "diag.duckdb"
    result = run_vhd(prefect_server, "refresh", "--preset", "diagnostic", "--scale", "0.02", "--db", db, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert set(summary["families"]) == set(presets.DIAGNOSTIC_FAMILIES)
    assert all(row["filled"] == 3 for row in summary["families"].values())
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT env_id, presentation, reference_trajectory, default_trajectory FROM environments "
                       "WHERE admitted AND presentation = 'F'").fetchall()
    con.close()
    assert rows, "the diagnostic preset admitted no written-out environment"
    env_id, _, reference, default = rows[0]
    bad = [{"tool": "submit_plan", "arguments": {"plan": [[["not a plan"]]]}}]
    lines = "\n".join(json.dumps(t) for t in (json.loads(reference), json.loads(default), bad))
    (tmp_path / "t.jsonl").write_text(lines + "\n")
    scored = run_vhd(prefect_server, "score", env_id, "--trajectories", tmp_path / "t.jsonl", "--db", db, "--json")
    assert scored.returncode == 0, scored.stderr
    rewards = [row["reward"] for row in json.loads(scored.stdout)]
    assert rewards == [1.0, 0.0, 0.0] and "invalid plan" in json.loads(scored.stdout)[2]["error"]


@pytest.mark.registry
def test_the_scaling_preset_holds_the_papers_knapsack_grid_and_goes_beyond():
    plan = presets.preset("scaling", registry.all())
    cells = {}
    for slot in plan.slots:
        knobs = dict(slot.knobs)
        cells.setdefault(slot.family, []).append((knobs["size"], knobs["horizon"]))
        registry.get(slot.family).params(knobs)  # every cell within the family's Params
    assert cells["knapsack"][:4] == [(6, 5), (8, 7), (9, 9), (11, 11)]  # the paper's lots × resources
    assert max(n * m for n, m in cells["knapsack"]) > 11 * 11 and max(n for n, _ in cells["knapsack"]) == 100
    assert max(n for n, _ in cells["routing"]) == 18 > 9  # past the old Held–Karp limit
    assert {s.target for s in plan.slots} == {presets.SCALING_PER_CELL} and plan.presentations == ("I", "A")
    assert len({s.batch("b") for s in plan.slots}) == len({s.key for s in plan.slots}) == len(plan.slots)
    small = presets.preset("scaling", registry.all(), scale=0.1)
    assert {s.target for s in small.slots} == {2} and len(small.slots) == len(plan.slots)


@pytest.mark.registry
def test_a_cell_pins_its_knobs_and_its_models_are_drawn_again_from_seed_and_batch():
    from vhd.tasks.stages.sample import cell_knobs, draw, sample_models

    slot = next(s for s in presets.preset("scaling", registry.all()).slots if dict(s.knobs) == {"size": 11,
                                                                                                "horizon": 11})
    batch = slot.batch("2026-12-04")
    assert batch == "2026-12-04+cell:horizon=11,size=11" and cell_knobs(batch) == {"horizon": 11, "size": 11}
    assert cell_knobs("2026-12-04") is None and cell_knobs("2026-12-04" + presets.HELDOUT_SUFFIX) is None
    heldout = presets.Slot(slot.family, "heldout", 1, slot.knobs).batch("b")
    assert heldout == "b+heldout+cell:horizon=11,size=11" and cell_knobs(heldout) == cell_knobs(batch)
    family = registry.get(slot.family)
    models = sample_models(family, 3, 7, batch)
    assert all(m.knobs == {"size": 11, "horizon": 11} and m.theta["n_items"] == m.theta["n_resources"] == 11
               for m in models)
    assert len({m.model_id for m in models}) == 3
    assert all(draw(family, m.seed, cell_knobs(m.batch)) == (m.knobs, m.theta) for m in models)
    ordinary = sample_models(family, 3, 7, "2026-12-04")  # an ordinary batch still draws from the knob ranges
    assert all(family.knob_ranges["size"][0] <= m.knobs["size"] <= family.knob_ranges["size"][1] for m in ordinary)


def test_a_malformed_cell_batch_key_is_one_line():
    from vhd.schemas.errors import InvalidParams
    from vhd.tasks.stages.sample import cell_knobs

    for batch in ("b+cell:size", "b+cell:size=x", "b+cell:=3", "b+cell:"):
        with pytest.raises(InvalidParams, match="knob=integer pairs"):
            cell_knobs(batch)
