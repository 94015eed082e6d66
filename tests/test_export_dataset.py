"""The export as Hugging Face `datasets` and the Hub load it (issues 17 and 27): one data file per
corpus split, a dataset card whose YAML header declares them (`configs`), the features, the
licence and the task and size categories; `datasets.load_dataset(DIR, split=...)` reads each
split, for Parquet and JSONL alike, `player` and `grader` as structs with one schema for a
mixed-family export (θ, JSON Schemas and call arguments as JSON texts inside them: exact, which
`datasets.Json` is not yet, see the canaries), a row rebuilt from a record (`row_of_record`) is
the exported row to the last bit and still grades π* to 1.0 and the empty trajectory to 0.0, and
the card's own loading snippet runs as written. Rows come from the pipeline's own stages (sample,
solve, render, check, annotate, export_row) for three families in F, I and A, with the three
corpus splits."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

import datasets
import pyarrow.parquet as pq
import pytest
import yaml

from family_kit import admitted_environments, first_module
from vhd.adapters import grade
from vhd.mechanisms import registry
from vhd.schemas.errors import VhdError
from vhd.tasks.stages.annotate import annotate, make_candidates
from vhd.tasks.stages.check import check_batch, in_band
from vhd.tasks.corpus.export import JSON_TEXT_FIELDS, read_export, row_of_record, write
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.stages.solve import solve_models

PINNED = {"digest": "d" * 64, "corpus_version": "v-test", "corpus_digest": "c" * 64}


def admitted_rows(name, models_wanted=3):
    """Export rows of every admitted candidate of a few models of `name`, in F, I and A."""
    family = registry.get(name)
    output = first_module(family)
    models = sample_models(family, models_wanted, seed=5, batch="export-dataset")
    solutions = {s.model_id: s for s in solve_models(family, models)}
    candidates = make_candidates(family, models, solutions, {output.setter_output_id: output},
                                 {m.model_id: output.setter_output_id for m in models}, ("F", "I", "A"))
    from vhd.tasks.corpus.export import export_row

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
    made = [row for name in ("inventory_dp", "qp") for _, row, *_ in admitted_environments(registry.get(name))]
    made += admitted_rows("knapsack") + admitted_rows("stopping")  # qp: floats datasets.Json would not give back
    assert {r["family"] for r in made} == {"inventory_dp", "qp", "knapsack", "stopping"}
    assert {r["presentation"] for r in made} == {"F", "I", "A"}
    # every corpus split: the pipeline's rows are train; give some of them the other two
    splits = ("train", "heldout", "ood")
    return [{**r, **PINNED, "split": splits[k % 3]} for k, r in enumerate(made)]


@pytest.fixture(scope="module", params=("parquet", "jsonl"))
def exported(request, rows, tmp_path_factory):
    """An export directory of `rows` in each format, as `vhd export --format F` writes it."""
    out = tmp_path_factory.mktemp(f"export-{request.param}") / "corpus"
    assert write(rows, out, request.param) == out / "data"
    return out, request.param


def card_of(out):
    """(the YAML header, the body) of the dataset card README.md."""
    text = (out / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    header, body = text[len("---\n"):].split("\n---\n", 1)
    return yaml.safe_load(header), body


def by_id(rows):
    return {r["env_id"]: r for r in rows}


def files_of(out):
    """{split: data file} as the card's `configs` name them."""
    (config,) = card_of(out)[0]["configs"]
    return {f["split"]: out / f["path"] for f in config["data_files"]}


def test_one_file_per_split_and_the_card_configs_name_them(rows, exported):
    out, format = exported
    header, _ = card_of(out)
    splits = sorted({r["split"] for r in rows})
    assert splits == ["heldout", "ood", "train"]
    (config,) = header["configs"]
    assert config["config_name"] == "default"
    assert [f["split"] for f in config["data_files"]] == ["train", "heldout", "ood"]
    for entry in config["data_files"]:  # data/<split>-<the first 16 hex digits of its SHA-256>.<format>
        digest = re.fullmatch(rf"data/{entry['split']}-([0-9a-f]{{16}})\.{format}", entry["path"]).group(1)
        assert hashlib.sha256((out / entry["path"]).read_bytes()).hexdigest()[:16] == digest
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == \
        sorted(["README.md"] + [f["path"] for f in config["data_files"]])
    assert header["license"] == "other" and header["task_categories"] == ["reinforcement-learning", "text-generation"]
    assert header["size_categories"] == ["n<1K"]
    # the declared features are the files' own (datasets' reading of the Parquet schema)
    declared = datasets.Features._from_yaml_list(header["dataset_info"]["features"])
    if format == "parquet":
        for file in files_of(out).values():
            assert datasets.Features.from_arrow_schema(pq.read_schema(file)) == declared
    for field in JSON_TEXT_FIELDS:  # each JSON-text field is a string feature
        feature = declared
        for part in field.split("."):
            feature = feature[part.removesuffix("[]")]
            feature = feature.feature if isinstance(feature, datasets.List) else feature
        assert feature == datasets.Value("string"), field


def test_load_dataset_by_split_gives_the_exported_rows(rows, exported):
    out, format = exported
    for split in ("train", "heldout", "ood"):
        loaded = datasets.load_dataset(str(out), split=split)
        assert loaded.num_rows == sum(r["split"] == split for r in rows) > 0
        assert loaded.features["player"]["config"]["turn_budget"] == datasets.Value("int64")
        assert loaded.features["grader"]["expected"]["u_star"] == datasets.Value("float64")
        assert loaded.features["grader"]["reference_trajectory"].feature["tool"] == datasets.Value("string")
        expected = by_id(r for r in rows if r["split"] == split)
        assert sorted(loaded["env_id"]) == sorted(expected)
        for record in loaded:  # every field, every family and presentation, every float to the last bit
            row = expected[record["env_id"]]
            assert record["grader"]["config"]["episode_seed"] == row["grader"]["config"]["episode_seed"]
            assert json.loads(record["grader"]["config"]["params"]) == row["grader"]["config"]["params"]
            assert row_of_record(record) == row
    everything = datasets.load_dataset(str(out))
    assert sorted(everything) == ["heldout", "ood", "train"]


def test_a_loaded_row_grades_pi_star_to_one(exported):
    out, _ = exported
    chosen = {}
    for split in ("train", "heldout", "ood"):
        for record in datasets.load_dataset(str(out), split=split):  # one I and one A environment of each family
            if record["presentation"] in ("I", "A"):
                chosen.setdefault((record["family"], record["presentation"]), record)
    assert len(chosen) == 8
    for row in map(row_of_record, chosen.values()):
        optimal = row["grader"]["reference_trajectory"]
        assert grade(row["grader"], optimal, row["module"])["reward"] == 1.0
        assert grade(row["grader"], [], row["module"])["reward"] == 0.0


def test_the_card_snippet_runs_as_written(rows, exported, monkeypatch):
    out, _ = exported
    _, body = card_of(out)
    code = body[body.index("```python") + len("```python"):]
    code = code[:code.index("```")]
    monkeypatch.chdir(out)  # the snippet loads the directory it runs in: the card's
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    heldout = namespace["heldout"]
    assert sorted(heldout["env_id"]) == sorted(r["env_id"] for r in rows if r["split"] == "heldout")
    assert namespace["row"] == by_id(rows)[namespace["row"]["env_id"]]


def test_the_card_counts_and_pins_the_export(rows, exported):
    out, format = exported
    _, body = card_of(out)
    assert f"corpus version `{PINNED['corpus_version']}`, corpus digest `{PINNED['corpus_digest']}`" in body
    assert f"{len(rows)} environments exported" in body
    for (family, presentation, split), n in Counter((r["family"], r["presentation"], r["split"]) for r in rows).items():
        assert f"| {family} | {presentation} | {split} | {n} |" in body
    for split, n in Counter(r["split"] for r in rows).items():
        assert f"- `{split}`: `{files_of(out)[split].relative_to(out).as_posix()}`, {n} rows" in body
    for field in JSON_TEXT_FIELDS:
        assert f"`{field}`" in body
    assert "written for this project" in body  # the passages' source, hence their licence


def test_read_export_and_row_of_record_without_datasets(rows, exported):
    out, format = exported
    assert sorted(read_export(out), key=lambda r: r["env_id"]) == sorted(rows, key=lambda r: r["env_id"])
    assert read_export(files_of(out)["ood"]) == [r for r in rows if r["split"] == "ood"]
    if format == "parquet":  # pyarrow's records, as datasets': JSON texts, parsed by row_of_record
        table = pq.read_table(files_of(out)["train"])
        assert json.loads(table.schema.metadata[b"vhd.json_text_fields"]) == list(JSON_TEXT_FIELDS)
        record = table.to_pylist()[0]
        assert isinstance(record["grader"]["config"]["params"], str)
        assert row_of_record(record) == by_id(rows)[record["env_id"]]
    else:  # one record a line, keys sorted, the same records as the Parquet files hold
        lines = files_of(out)["train"].read_text().splitlines()
        assert [row_of_record(json.loads(line)) for line in lines] == [r for r in rows if r["split"] == "train"]
        assert all(line == json.dumps(json.loads(line), sort_keys=True) for line in lines)


def test_row_of_record_reads_earlier_exports(rows):
    row = rows[0]
    assert row_of_record(row) is row  # a row (export_row, the JSONL export before issue 27)
    texts = {**row, "player": json.dumps(row["player"]), "grader": json.dumps(row["grader"])}
    assert row_of_record(texts) == row  # player and grader as JSON texts (before the struct columns)


def test_canary_datasets_json_is_not_float_exact(tmp_path):
    """Why θ, schemas and arguments are JSON texts and not `datasets.Json`: in datasets 5.2 a Json
    field gives 0.3 back as 0.30000000000000004 (its decoder parses floats inexactly), and a JSONL
    file read with a Json feature declared has every float of the line rewritten to 10 decimals.
    When this fails, datasets reads both exactly: the export can declare Json fields."""
    ds = datasets.Dataset.from_dict({"params": [{"p": 0.3}]}, features=datasets.Features({"params": datasets.Json()}))
    ds.to_parquet(tmp_path / "json.parquet")
    loaded = datasets.load_dataset("parquet", data_files=str(tmp_path / "json.parquet"), split="train")
    assert loaded.features["params"] == datasets.Json()
    assert loaded[0]["params"]["p"] != 0.3
    (tmp_path / "rows.jsonl").write_text(json.dumps({"params": {"p": 1}, "u": 401.70166355205055}) + "\n")
    features = datasets.Features({"params": datasets.Json(), "u": datasets.Value("float64")})
    loaded = datasets.load_dataset("json", data_files=str(tmp_path / "rows.jsonl"), features=features, split="train")
    assert loaded[0]["params"] == {"p": 1} and loaded[0]["u"] == 401.7016635521 != 401.70166355205055


def test_a_new_export_replaces_the_data_files_of_an_earlier_one(rows, tmp_path):
    out = tmp_path / "corpus"
    write(rows, out, "parquet")
    train = [r for r in rows if r["split"] == "train"]
    write(train[:3], out, "jsonl")
    assert [p.name for p in (out / "data").iterdir()] == [files_of(out)["train"].name]
    loaded = datasets.load_dataset(str(out), split="train")
    assert sorted(loaded["env_id"]) == sorted(r["env_id"] for r in train[:3])
    with pytest.raises(ValueError, match="Unknown split"):
        datasets.load_dataset(str(out), split="heldout")


def test_load_dataset_reads_what_the_directory_holds_now(rows, tmp_path):
    """datasets 5.2 caches a directory by its name and its card's header, not by its files: the
    file names carry their digest, so a new export in the same directory, or another directory of
    the same name, is read afresh (the same names would give the first export's rows)."""
    train = [r for r in rows if r["split"] == "train"]
    for n, where in ((2, tmp_path / "a" / "corpus"), (4, tmp_path / "a" / "corpus"), (3, tmp_path / "b" / "corpus")):
        write(train[:n], where, "jsonl")
        loaded = datasets.load_dataset(str(where), split="train")
        assert sorted(loaded["env_id"]) == sorted(r["env_id"] for r in train[:n])


def test_a_row_the_schema_cannot_hold_is_one_line_and_nothing_is_written(rows, tmp_path):
    bad = json.loads(json.dumps(rows[0]))
    bad["player"]["tools"][0]["role"] = "read"
    out = tmp_path / "new"
    for format in ("parquet", "jsonl"):
        with pytest.raises(VhdError, match=r"a player tool has the keys .*'role'.*; expected"):
            write([rows[1], bad], out, format)
        assert not out.exists()
    with pytest.raises(VhdError, match=r"split 'held out' is not a split name"):
        write([{**rows[0], "split": "held out"}], out, "jsonl")
    with pytest.raises(VhdError, match=r"^environment \S+ has the keys .*'extra'.*; expected"):
        write([{**rows[0], "extra": 1}], out, "parquet")
    with pytest.raises(VhdError, match=r"^a row the Parquet schema cannot hold: "):
        write([{**rows[0], "player": {**rows[0]["player"], "instruction": 7}}], out, "parquet")
    assert not out.exists()
    with pytest.raises(VhdError, match=r"holds no export"):
        read_export(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"env_id": "x"}\nnot json\n')
    with pytest.raises(VhdError, match=r"train.jsonl line 1: not an export row"):
        read_export(tmp_path)


def test_training_md_export_example_runs(rows, exported):
    """The "Parquet, JSONL and `datasets`" example of docs/TRAINING.md, run as written on the export."""
    from importlib.metadata import version
    from pathlib import Path

    out, _ = exported
    text = (Path(__file__).resolve().parents[1] / "docs" / "TRAINING.md").read_text(encoding="utf-8")
    section = text[text.index("### Parquet, JSONL and `datasets`"):]
    section = section[:section.index("\n## ")]
    assert f"datasets {version('datasets')}" in section and f"pyarrow {version('pyarrow')}" in section
    code = section[section.index("```python") + len("```python"):]
    code = code[:code.index("```")]
    namespace: dict = {}
    exec(compile(code, "TRAINING.md", "exec"), namespace)
    for split in ("train", "heldout", "ood"):
        loaded = namespace["load_split"](str(out), split)
        assert sorted(loaded, key=lambda r: r["env_id"]) == sorted((r for r in rows if r["split"] == split),
                                                                   key=lambda r: r["env_id"])
    every = namespace["every_row"](str(out))
    assert sorted(every, key=lambda r: r["env_id"]) == sorted(rows, key=lambda r: r["env_id"])
