"""The Parquet export as Hugging Face `datasets` loads it (issue 17): `player` and `grader` are
struct columns with one schema for a mixed-family export (θ, JSON Schemas and call arguments as
JSON texts inside them), `datasets.load_dataset("parquet", ...)` reads them as nested fields, a
row rebuilt from a record (`row_of_record`) is the exported row and still grades π* to 1.0 and
the empty trajectory to 0.0, and a dataset card README.md is written beside the data. Rows come
from the pipeline's own stages (sample, solve, render, check, annotate, export_row) for three
families in F, I and A."""

from __future__ import annotations

import json
from collections import Counter

import datasets
import pyarrow.parquet as pq
import pytest

from family_kit import admitted_environments, first_module
from vhd.adapters import grade
from vhd.mechanisms import registry
from vhd.schemas.errors import VhdError
from vhd.tasks.annotate import annotate, make_candidates
from vhd.tasks.check import check_batch, in_band
from vhd.tasks.export import JSON_TEXT_FIELDS, row_of_record, write
from vhd.tasks.sample import sample_models
from vhd.tasks.solve import solve_models

PINNED = {"digest": "d" * 64, "corpus_version": "v-test", "corpus_digest": "c" * 64}


def admitted_rows(name, models_wanted=3):
    """Export rows of every admitted candidate of a few models of `name`, in F, I and A."""
    family = registry.get(name)
    output = first_module(family)
    models = sample_models(family, models_wanted, seed=5, batch="export-dataset")
    solutions = {s.model_id: s for s in solve_models(family, models)}
    candidates = make_candidates(family, models, solutions, {output.setter_output_id: output},
                                 {m.model_id: output.setter_output_id for m in models}, ("F", "I", "A"))
    from vhd.tasks.export import export_row

    rows = []
    for candidate in candidates:
        if in_band(family, candidate):
            verdict = check_batch(family, output, [candidate])[0]
            if verdict.admitted:
                env = annotate(family, verdict)[0]
                rows.append(export_row(env, candidate.model, output, family, solutions[candidate.model.model_id]))
    return rows


@pytest.fixture(scope="module")
def rows():
    made = [row for _, row, *_ in admitted_environments(registry.get("inventory_dp"))]
    made += admitted_rows("knapsack") + admitted_rows("stopping")
    assert {r["family"] for r in made} == {"inventory_dp", "knapsack", "stopping"}
    assert {r["presentation"] for r in made} == {"F", "I", "A"}
    return [{**r, **PINNED} for r in made]


@pytest.fixture(scope="module")
def exported(rows, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "corpus"
    target = write(rows, out, "parquet")  # as `vhd export --format parquet` calls it
    assert target == out / "environments.parquet"
    return out


def test_player_and_grader_are_struct_columns_with_json_text_for_free_form_objects(exported):
    table = pq.read_table(exported / "environments.parquet")
    player, grader = table.schema.field("player").type, table.schema.field("grader").type
    assert [player.field(k).name for k in range(player.num_fields)] == ["instruction", "tools", "config"]
    assert str(grader.field("config").type) == ("struct<params: string, presentation: string, "
                                                "episode_seed: int64, turn_budget: int64>")
    interface = grader.field("interface").type
    assert str(interface.value_type) == "struct<name: string, canonical: string>"
    assert json.loads(table.schema.metadata[b"vhd.json_text_fields"]) == list(JSON_TEXT_FIELDS)


def test_load_dataset_reads_nested_fields(rows, exported):
    loaded = datasets.load_dataset("parquet", data_files=str(exported / "environments.parquet"))["train"]
    assert loaded.num_rows == len(rows)
    features = loaded.features
    assert features["player"]["config"]["turn_budget"] == datasets.Value("int64")
    assert features["grader"]["expected"]["u_star"] == datasets.Value("float64")
    assert features["grader"]["reference_trajectory"].feature["tool"] == datasets.Value("string")
    by_id = {r["env_id"]: r for r in rows}
    for record in loaded:
        row = by_id[record["env_id"]]
        assert record["grader"]["config"]["episode_seed"] == row["grader"]["config"]["episode_seed"]
        assert [t["name"] for t in record["player"]["tools"]] == [t["name"] for t in row["player"]["tools"]]
        assert json.loads(record["grader"]["config"]["params"]) == row["grader"]["config"]["params"]
        assert row_of_record(record) == row  # every field, every family and presentation


def test_a_row_rebuilt_from_the_dataset_grades_pi_star_to_one(rows, exported):
    loaded = datasets.load_dataset("parquet", data_files=str(exported / "environments.parquet"))["train"]
    chosen = {}
    for record in loaded:  # one I and one A environment of each family
        if record["presentation"] in ("I", "A"):
            chosen.setdefault((record["family"], record["presentation"]), record)
    assert len(chosen) == 6
    for record in chosen.values():
        row = row_of_record(record)
        optimal = row["grader"]["reference_trajectory"]
        assert grade(row["grader"], optimal, row["module"])["reward"] == 1.0
        assert grade(row["grader"], [], row["module"])["reward"] == 0.0


def test_the_dataset_card_counts_and_pins_the_export(rows, exported):
    card = (exported / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\nlicense: other\n")
    assert f"corpus version `{PINNED['corpus_version']}`, corpus digest `{PINNED['corpus_digest']}`" in card
    assert f"{len(rows)} environments exported" in card
    for (family, presentation, split), n in Counter((r["family"], r["presentation"], r["split"]) for r in rows).items():
        assert f"| {family} | {presentation} | {split} | {n} |" in card
    for field in JSON_TEXT_FIELDS:
        assert f"`{field}`" in card
    assert "written for this project" in card  # the passages' source, hence their licence
    assert sorted(p.name for p in exported.iterdir()) == ["README.md", "environments.parquet"]


def test_jsonl_export_gets_a_card_and_row_of_record_reads_json_text_exports(rows, tmp_path):
    target = write(rows[:3], tmp_path / "j", "jsonl")
    assert [json.loads(line) for line in target.read_text().splitlines()] == rows[:3]
    assert "data_files=\"environments.jsonl\"" in (tmp_path / "j" / "README.md").read_text()
    old = {**rows[0], "player": json.dumps(rows[0]["player"]), "grader": json.dumps(rows[0]["grader"])}
    assert row_of_record(old) == rows[0]


def test_a_row_the_schema_cannot_hold_is_one_line_and_nothing_is_written(rows, tmp_path):
    bad = json.loads(json.dumps(rows[0]))
    bad["player"]["tools"][0]["role"] = "read"
    out = tmp_path / "new"
    with pytest.raises(VhdError, match=r"a player tool has the keys .*'role'.*; expected"):
        write([rows[1], bad], out, "parquet")
    assert not out.exists()


def test_training_md_export_example_runs(rows, exported):
    """The "Parquet and `datasets`" example of docs/TRAINING.md, run as written on the export."""
    from importlib.metadata import version
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "TRAINING.md").read_text(encoding="utf-8")
    section = text[text.index("### Parquet and `datasets`"):]
    section = section[:section.index("\n## ")]
    assert f"datasets {version('datasets')}" in section and f"pyarrow {version('pyarrow')}" in section
    code = section[section.index("```python") + len("```python"):]
    code = code[:code.index("```")]
    namespace: dict = {}
    exec(compile(code, "TRAINING.md", "exec"), namespace)
    ds, loaded = namespace["load_export"](str(exported))
    assert sorted(loaded, key=lambda r: r["env_id"]) == sorted(rows, key=lambda r: r["env_id"])
    for split in {r["split"] for r in rows}:
        chosen = namespace["corpus_split"](ds, split)
        assert chosen.num_rows == sum(r["split"] == split for r in rows) and set(chosen["split"]) == {split}
