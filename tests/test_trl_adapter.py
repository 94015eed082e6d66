"""TRL `environment_factory` (issue 17 item 2, issue 27 items 2 and 7): vhd.adapters.trl.

TRL 1.16's `GRPOTrainer` appends what `reset` returns to the prompt's last user message, reads
`get_reward` as a reward source of its own, renders a class's tools once from its methods, and
calls a tool with the parsed arguments as keywords (tests/test_trl_grpo.py runs it; these tests
need no torch and stay in CI). Checked here: the prompt holds the instruction once (a dataset
row's prompt holds it and `reset` returns None; a bare export row gets it from `reset`); an
explicit null argument reaches the module, which refuses it without using a turn, as on every
other surface; the reward through the tool methods equals `vhd.adapters.reward` (what `vhd
score` computes) on π*, the empty, refused-only and null-argument trajectories; every method
renders through `transformers.utils.get_json_schema` (the renderer TRL's tool calling uses) to
the tool's names, types and required arguments; and a canonical export of every family, rows of
two passages and two θ each (descriptions and bounds differ), gives one class per family.
Rows are made in process by the pipeline's own stages (tests/test_surfaces.py).
"""

from __future__ import annotations

import json
import re
import sys

import pytest
from family_kit import PASSAGES, admitted_environments, first_module
from transformers.utils import get_json_schema

from vhd.adapters import grade, reward
from vhd.adapters.trl import NEUTRAL_WORDS, dataset_rows, environment_class, environment_factory, environment_key
from vhd.mechanisms import registry
from vhd.mechanisms._runtime import call_limit
from vhd.schemas.errors import SetterError, TrajectoryFormatError
from vhd.tasks.corpus.export import with_canonical_tool_names
from vhd.tasks.setters.template import fill, render_module, singular

FAMILIES = ("knapsack", "qp", "stopping")  # integer, number and string arguments between them
JSON_TYPES = {"integer": "integer", "number": "number", "string": "string"}


@pytest.fixture(scope="module", params=FAMILIES)
def rows(request):
    return [row for _, row, *_ in admitted_environments(registry.get(request.param))]


def _class_of(row):
    return environment_class(row["player"]["tools"], row["family"], row["grader"]["interface"])


def _play(row, calls):
    """The reward of `calls` made through the row's class's tool methods, and the trajectory recorded."""
    env = _class_of(row)()
    env.reset(**row)
    for call in calls:
        json.loads(getattr(env, call["tool"])(**call["arguments"]))
    return env.get_reward(), env.trajectory


def _optional(row):
    """(a tool, one of its arguments, whether it is optional) of the row: an optional argument (a
    log's `limit`) if a tool has one, else a required one."""
    found = []
    for tool in row["player"]["tools"]:
        schema = tool["input_schema"]
        for argument in schema.get("properties", {}):
            found.append((tool["name"], argument, argument not in schema.get("required", [])))
    assert found, f"{row['family']}: no tool takes an argument"
    return max(found, key=lambda f: f[2])


def _schema_refused(row):
    """A call of a real tool whose argument is outside its schema: malformed (no turn used)."""
    tool = next(t for t in row["player"]["tools"] if t["input_schema"].get("required"))
    argument = tool["input_schema"]["required"][0]
    bad = "not a number" if tool["input_schema"]["properties"][argument]["type"] != "string" else "x" * 10**5
    return {"tool": tool["name"], "arguments": {argument: bad}}


def test_every_method_renders_to_the_tools_names_types_and_required_arguments(rows):
    """Without a family a method says what the row's tool says; with it, the family's description
    in neutral words and the family's bounds (the passage's words and θ's bounds are the
    instruction's) where the tool takes the family's arguments (a world that renames them or
    writes ids as codes keeps its own), and always the row's names, argument names, types and
    required arguments."""
    words = {**NEUTRAL_WORDS, "unit_one": singular(NEUTRAL_WORDS["unit"])}
    for row in rows:
        family = registry.get(row["family"])
        for Environment, own in ((environment_class(row["player"]["tools"]), True), (_class_of(row), False)):
            env = Environment()
            for tool in row["player"]["tools"]:
                rendered = get_json_schema(getattr(env, tool["name"]))["function"]
                schema = tool["input_schema"]
                spec = family.tool(row["grader"]["interface"][tool["name"]])
                assert rendered["name"] == tool["name"]
                theirs = spec.input_schema.get("properties", {})
                family_arguments = set(schema["properties"]) == set(theirs) and all(
                    schema["properties"][a].get("type") == theirs[a].get("type") for a in theirs)
                said = tool["description"] if own or not family_arguments else fill(spec.description, words)
                assert rendered["description"] == " ".join(said.split())
                assert "{" not in rendered["description"]
                parameters = rendered["parameters"]
                assert list(parameters["properties"]) == list(schema["properties"])
                assert sorted(parameters.get("required", [])) == sorted(schema.get("required", []))
                for name, argument in schema["properties"].items():
                    mine = parameters["properties"][name]
                    assert mine["type"] == JSON_TYPES[argument["type"]], (tool["name"], name, mine)
                    assert "nullable" not in mine  # null is not an argument the module takes
                    source = argument if own or not family_arguments else spec.input_schema["properties"][name]
                    assert mine["description"].startswith(" ".join(fill(source["description"], words).split()))
                    for bound in ("minimum", "maximum", "maxLength"):  # bounds (and units) in the text
                        if bound in source:
                            assert re.search(rf"\b{re.escape(str(source[bound]))}\b", mine["description"]), (name, mine)


def test_pi_star_scores_one_and_nothing_zero(rows):
    for row in rows:
        env = _class_of(row)()
        assert env.reset(**row) == row["player"]["instruction"]  # an export row: no prompt holds it yet
        for call in row["grader"]["reference_trajectory"]:
            json.loads(getattr(env, call["tool"])(**call["arguments"]))
        assert env.get_reward() == 1.0 == env.get_reward()
        assert json.loads(getattr(env, row["player"]["tools"][0]["name"])(0))["ok"] is False  # over: refused
        env.reset(**row)
        assert env.get_reward() == 0.0
    assert "torch" not in sys.modules


def test_the_prompt_holds_the_instruction_once(rows):
    """TRL appends a string `reset` returns to the prompt's last user message: a dataset row's
    prompt holds the instruction, so reset returns None; a row without one (TRL's placeholder
    prompt is an empty user message) or whose prompt lacks it gets it from reset."""
    for row, record in zip(rows, dataset_rows(rows)):
        instruction = row["player"]["instruction"]
        env = environment_factory(rows)
        env = (env[record["environment"]] if isinstance(env, dict) else env)()
        for prompt in (record["prompt"], [{"role": "user", "content": ""}],
                       [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "Begin."}],
                       [{"role": "user", "content": [{"type": "text", "text": instruction}]}]):
            returned = env.reset(**{**record, "prompt": prompt})
            text = json.dumps(prompt) + json.dumps(returned or "")
            assert text.count(json.dumps(instruction)[1:-1]) == 1, (prompt, returned)
            assert returned is None or returned == instruction
        assert env.reset(**record) is None


def test_an_explicit_null_argument_reaches_the_module(rows):
    """`view_log(limit=None)` is the model's argument: refused by the module's schema, no turn
    used, recorded as sent; left out, the argument stays out and the call is accepted. (stopping
    has no optional argument: a null for a required one is refused alike.)"""
    for row in rows:
        tool, argument, optional = _optional(row)
        env = _class_of(row)()
        env.reset(**row)
        refused = json.loads(getattr(env, tool)(**{argument: None}))
        assert refused["ok"] is False and "turns_left" not in refused, refused
        assert env._env._env.outcome()["turns_used"] == 0
        assert env.trajectory == [{"tool": tool, "arguments": {argument: None}}]
        rendered = get_json_schema(getattr(env, tool))["function"]["parameters"]
        assert "nullable" not in rendered["properties"][argument]
        assert (argument not in rendered.get("required", [])) == optional
        if optional:
            assert json.loads(getattr(env, tool)())["ok"] is True
            assert env.trajectory[1:] == [{"tool": tool, "arguments": {}}]


def test_rewards_equal_vhd_score_on_pi_star_empty_refused_and_null_trajectories(rows):
    """The reward through the tool methods is `vhd.adapters.reward` (the sandboxed replay of
    `vhd score`) of the same calls: π* 1, nothing 0, refusals only (past the call limit), and
    17 null-argument calls then π* — 1, since each is refused without using a turn (issue 27:
    dropping the null made them accepted calls that used π*'s turns, 0 through TRL)."""
    for row in rows:
        best = row["grader"]["reference_trajectory"]
        tool, argument, _ = _optional(row)
        null = [{"tool": tool, "arguments": {argument: None}}] * 17
        refusals = [_schema_refused(row)] * (call_limit(row["grader"]["config"]["turn_budget"]) + 3)
        trajectories = {"optimal": best, "empty": [], "refused_only": refusals, "null_then_optimal": null + best}
        for name, calls in trajectories.items():
            played, trajectory = _play(row, calls)
            expected = reward(row["grader"], calls, row["module"])
            assert played == expected, (row["env_id"], name, played, expected)
            assert trajectory == [{"tool": c["tool"], "arguments": c["arguments"]} for c in calls][:len(trajectory)]
        assert _play(row, null + best)[0] == 1.0 == _play(row, best)[0]
        assert _play(row, [])[0] == 0.0


def test_positional_keyword_and_bad_arguments_are_the_modules_to_judge(rows):
    row = rows[0]
    env = _class_of(row)()
    env.reset(**row)
    tool = next(t for t in row["player"]["tools"] if t["input_schema"]["properties"])
    name = next(iter(tool["input_schema"]["properties"]))
    refused = json.loads(getattr(env, tool["name"])(**{name: "not a number" if tool["input_schema"]["properties"][name]["type"] != "string" else 10**9}))
    assert refused["ok"] is False
    assert json.loads(getattr(env, tool["name"])(bogus=1))["ok"] is False
    # the trajectory recorded replays to the same reward through the sandboxed grader
    assert env.get_reward() == grade(row["grader"], env.trajectory, row["module"])["reward"]


def test_one_class_per_interface_and_a_dict_factory_otherwise(rows):
    assert environment_factory(rows) is _class_of(rows[0])  # I and A: one interface
    other = json.loads(json.dumps(rows[0]))
    other["player"]["tools"][0]["name"] = "renamed_tool"
    factory = environment_factory([rows[0], other])
    assert isinstance(factory, dict) and len(factory) == 2
    keyed = dataset_rows([rows[0], other])
    assert [factory[r["environment"]] for r in keyed] == [_class_of({**r, "player": json.loads(r["player"]),
                                                                     "grader": json.loads(r["grader"])}) for r in keyed]
    assert keyed[0]["prompt"] == [{"role": "user", "content": rows[0]["player"]["instruction"]}]
    with pytest.raises(TrajectoryFormatError, match="serves tools"):
        factory[keyed[1]["environment"]]().reset(**rows[0])


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

    from vhd.tasks.corpus.export import write

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


def _admitted(family, output, batch):
    """The export rows (I and A) of the first sampled model admitted in both with `output`, the
    template setter's module in one passage (family_kit's `admitted_environments`)."""
    return [row for _, row, *_ in admitted_environments(family, batch=batch, output=output)]


def _second_module(family):
    first = first_module(family).setter_output_id
    for passage in PASSAGES:
        try:
            output = render_module(family, passage)
        except SetterError:
            continue
        if output.setter_output_id != first:
            return output
    raise AssertionError(f"no second built-in passage can skin {family.name}")


@pytest.fixture(scope="module")
def canonical_export():
    """A canonical export of every family: I and A rows of two passages, each on its own θ."""
    rows = []
    for name in registry.names():
        family = registry.get(name)
        for output, batch in ((first_module(family), "surfaces"), (_second_module(family), "trl-second")):
            rows += [with_canonical_tool_names(row) for row in _admitted(family, output, batch)]
    return rows


@pytest.mark.registry
def test_a_canonical_export_of_every_family_gives_one_class_per_family(canonical_export):
    """Issue 27 item 2 (3): keyed on the passage's descriptions, 58 rows of 16 families made 31
    classes, each a reward column of its own in TRL. Keyed on the interface the methods show —
    names, argument names, types, required, the family's own descriptions — a family is one class
    though its rows' descriptions and bounds differ; every row plays π* to 1 through its class."""
    rows = canonical_export
    by_family: dict[str, list] = {}
    for row in rows:
        by_family.setdefault(row["family"], []).append(row)
    assert sorted(by_family) == sorted(registry.names())
    differ = [name for name, mine in by_family.items()
              if len({json.dumps(r["player"]["tools"], sort_keys=True) for r in mine}) > 1]
    assert len(differ) == len(by_family), "each family's rows show different tool texts (passages, θ)"
    assert len({environment_key(r["player"]["tools"]) for r in rows}) > len(by_family)  # the rows' own texts: more
    factory = environment_factory(rows)
    assert isinstance(factory, dict) and len(factory) == len(by_family)
    records = dataset_rows(rows)
    assert len(records) == len(rows)
    for name in by_family:
        keys = {record["environment"] for record in records if record["family"] == name}
        assert len(keys) == 1 and keys.pop().startswith(f"vhd_{name}_")
    for record, row in zip(records, rows):
        Environment = factory[record["environment"]]
        assert Environment.__name__ == record["environment"]  # TRL logs its reward under the class's name
        env = Environment()
        assert env.reset(**record) is None
        for call in row["grader"]["reference_trajectory"]:
            getattr(env, call["tool"])(**call["arguments"])
        assert env.get_reward() == 1.0, (row["env_id"], row["family"])


def test_training_md_trl_example_runs(rows):
    """The TRL example in docs/TRAINING.md (its first block; the second, GRPOTrainer itself, is
    run by tests/test_trl_grpo.py), run as written: π* 1.0 and nothing 0.0 on every record of a
    `datasets.Dataset` made from the rows (one interface: a class; two: a dict factory)."""
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
        dataset, factory = namespace["trl_inputs"](mixed)
        assert isinstance(factory, dict) == (mixed is not rows)
        best = namespace["play"](dataset, factory, lambda record: json.loads(record["grader"])["reference_trajectory"])
        assert best == [1.0] * len(mixed)
        assert namespace["play"](dataset, factory, lambda record: []) == [0.0] * len(mixed)
