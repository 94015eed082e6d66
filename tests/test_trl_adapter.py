"""TRL `environment_factory` (issue 17, item 2): vhd.adapters.trl.

Every tool method renders, through `transformers.utils.get_json_schema` (the renderer TRL's tool
calling uses), to the tool's own JSON Schema: name, description, argument names, types and
required arguments, each argument's description, with its bounds in the text. π* played through
the class's methods scores 1.0 and the empty episode 0.0, as on every other surface. Torch is not
imported. Rows are made in process by the pipeline's own stages (tests/test_surfaces.py).
"""

from __future__ import annotations

import json
import re
import sys

import pytest
from transformers.utils import get_json_schema

from family_kit import admitted_environments
from vhd.adapters import grade
from vhd.adapters.trl import dataset_rows, environment_class, environment_factory, environment_key, reward_function
from vhd.mechanisms import registry
from vhd.schemas.errors import TrajectoryFormatError

FAMILIES = ("knapsack", "qp", "stopping")  # integer, number and string arguments between them
JSON_TYPES = {"integer": "integer", "number": "number", "string": "string"}


@pytest.fixture(scope="module", params=FAMILIES)
def rows(request):
    return [row for _, row, *_ in admitted_environments(registry.get(request.param))]


def test_every_method_renders_to_the_tools_json_schema(rows):
    for row in rows:
        env = environment_class(row["player"]["tools"])()
        for tool in row["player"]["tools"]:
            rendered = get_json_schema(getattr(env, tool["name"]))["function"]
            schema = tool["input_schema"]
            assert rendered["name"] == tool["name"]
            assert rendered["description"] == " ".join(tool["description"].split())
            parameters = rendered["parameters"]
            assert list(parameters["properties"]) == list(schema["properties"])
            assert sorted(parameters.get("required", [])) == sorted(schema.get("required", []))
            for name, argument in schema["properties"].items():
                mine = parameters["properties"][name]
                assert mine["type"] == JSON_TYPES[argument["type"]], (tool["name"], name, mine)
                assert mine["description"].startswith(" ".join(argument["description"].split()))
                for bound in ("minimum", "maximum", "maxLength"):  # bounds (and units) in the text
                    if bound in argument:
                        assert re.search(rf"\b{re.escape(str(argument[bound]))}\b", mine["description"]), (name, mine)


def test_pi_star_scores_one_and_nothing_zero(rows):
    for row in rows:
        env = environment_class(row["player"]["tools"])()
        assert env.reset(**row) == row["player"]["instruction"]
        for call in row["grader"]["reference_trajectory"]:
            json.loads(getattr(env, call["tool"])(**call["arguments"]))
        assert env.get_reward() == 1.0 == reward_function([env])[0]
        assert json.loads(getattr(env, row["player"]["tools"][0]["name"])(0))["ok"] is False  # over: refused
        assert env.reset(**row) and env.get_reward() == 0.0
    assert "torch" not in sys.modules


def test_positional_keyword_and_bad_arguments_are_the_modules_to_judge(rows):
    row = rows[0]
    env = environment_class(row["player"]["tools"])()
    env.reset(**row)
    tool = next(t for t in row["player"]["tools"] if t["input_schema"]["properties"])
    name = next(iter(tool["input_schema"]["properties"]))
    refused = json.loads(getattr(env, tool["name"])(**{name: "not a number" if tool["input_schema"]["properties"][name]["type"] != "string" else 10**9}))
    assert refused["ok"] is False
    assert json.loads(getattr(env, tool["name"])(bogus=1))["ok"] is False
    # the trajectory recorded replays to the same reward through the sandboxed grader
    assert env.get_reward() == grade(row["grader"], env.trajectory, row["module"])["reward"]


def test_one_class_per_tool_set_and_a_dict_factory_otherwise(rows):
    assert environment_factory(rows) is environment_class(rows[0]["player"]["tools"])  # I and A: one tool set
    other = json.loads(json.dumps(rows[0]))
    other["player"]["tools"][0]["name"] = "renamed_tool"
    factory = environment_factory([rows[0], other])
    assert isinstance(factory, dict) and len(factory) == 2
    keyed = dataset_rows([rows[0], other])
    assert [factory[r["environment"]] for r in keyed] == [environment_class(json.loads(r["player"])["tools"]) for r in keyed]
    assert keyed[0]["prompt"] == [{"role": "user", "content": rows[0]["player"]["instruction"]}]
    with pytest.raises(TrajectoryFormatError, match="serves tools"):
        factory[environment_key(other["player"]["tools"])]().reset(**rows[0])


def test_parquet_rows_with_json_text_columns_play_alike(rows):
    row = rows[0]
    text_row = {**row, "player": json.dumps(row["player"]), "grader": json.dumps(row["grader"])}
    env = environment_factory([text_row])()
    env.reset(**text_row)
    for call in row["grader"]["reference_trajectory"]:
        getattr(env, call["tool"])(**call["arguments"])
    assert env.get_reward() == 1.0


def test_records_of_the_parquet_export_play_alike(rows, tmp_path):
    """The Parquet export's struct records (θ, schemas and arguments as JSON texts inside) go
    straight into the factory and reset(**record): π* 1.0."""
    import pyarrow.parquet as pq

    from vhd.tasks.export import write

    record = pq.read_table(write([rows[0]], tmp_path / "export", "parquet")).to_pylist()[0]
    assert isinstance(record["player"], dict) and isinstance(record["player"]["config"]["params"], str)
    env = environment_factory([record])()
    env.reset(**record)
    for call in rows[0]["grader"]["reference_trajectory"]:
        getattr(env, call["tool"])(**call["arguments"])
    assert env.get_reward() == 1.0


@pytest.mark.parametrize("name", ["reset", "get_reward", "not-a-name", "class", "_private"])
def test_tool_names_that_cannot_be_methods_are_refused(name):
    with pytest.raises(TrajectoryFormatError, match=repr(name)):
        environment_class([{"name": name, "description": "x", "input_schema": {"type": "object", "properties": {}}}])


def test_training_md_trl_example_runs(rows):
    """The TRL example in docs/TRAINING.md, run as written: π* 1.0 and nothing 0.0 on every record
    of a `datasets.Dataset` made from the rows (one tool set: a class; two: a dict factory)."""
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "TRAINING.md").read_text(encoding="utf-8")
    section = text[text.index("## TRL"):]
    code = section[section.index("```python") + len("```python"):]
    code = code[:code.index("```")]
    namespace: dict = {}
    exec(compile(code, "TRAINING.md", "exec"), namespace)
    renamed = json.loads(json.dumps(rows[0]))
    for tool in renamed["player"]["tools"]:
        tool["name"] = f"the_{tool['name']}"  # as another passage of the family might name them
    for call in renamed["grader"]["reference_trajectory"]:
        call["tool"] = f"the_{call['tool']}"
    renamed["module"] = renamed["module"].replace('"name": "', '"name": "the_')
    renamed["grader"]["interface"] = {f"the_{name}": canonical for name, canonical in renamed["grader"]["interface"].items()}
    for mixed in (rows, rows + [renamed]):
        dataset, factory, reward = namespace["trl_inputs"](mixed)
        assert isinstance(factory, dict) == (mixed is not rows) and reward is reward_function
        best = namespace["play"](dataset, factory, lambda record: json.loads(record["grader"])["reference_trajectory"])
        assert best == [1.0] * len(mixed)
        assert namespace["play"](dataset, factory, lambda record: []) == [0.0] * len(mixed)
