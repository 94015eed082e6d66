"""Export rows: what a trainer loads, split into the player's view and the grader's.

    >>> row = export_row(env, model, setter_output, family, solution)
    >>> sorted(row)
    ['env_id', 'family', 'grader', 'module', 'player', 'presentation', 'split']
    >>> sorted(row["grader"])
    ['config', 'expected', 'family', 'interface', 'reference_trajectory', 'u_default', 'u_idle', 'u_star']

The grader view carries what scoring any episode of the environment needs: θ (its config), the
episode's own references (`u_star`, `u_default`, `u_idle` on the stored episode seed: the outcome
reward), the model's expected values (`expected`: the decision reward, for any seed), the family
and the module's tool names with their canonical names (`interface`).

`write` stores the rows as JSONL or as Parquet with `player` and `grader` as struct columns (one
schema for every family: the free-form objects, θ, JSON Schemas and call arguments, are JSON
texts inside the structs, and `interface` a list of {name, canonical}); `row_of_record` turns a
Parquet record back into the row. Either way a dataset card, README.md, is written beside it.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from pathlib import Path
from typing import Any

from vhd.mechanisms import Family, registry
from vhd.schemas.errors import VhdError
from vhd.schemas.records import EnvironmentRecord, ModelRecord, SetterOutputRecord, SolutionRecord

COLUMNS = ("env_id", "family", "presentation", "split", "module", "player", "grader", "digest", "corpus_version",
           "corpus_digest")


def visible_params(presentation: str, theta: dict[str, Any], family: Family) -> dict[str, Any]:
    """θ as the player may see it: whole in F and I, without the hidden fields in A."""
    return theta if presentation in ("F", "I") else {k: v for k, v in theta.items() if k not in family.hidden}


def player_config(env: EnvironmentRecord, theta: dict[str, Any], family: Family) -> dict[str, Any]:
    """What an agent may see of the config: θ without the hidden fields in presentation A."""
    return {"params": visible_params(env.presentation, theta, family), "presentation": env.presentation,
            "turn_budget": env.turn_budget}


def export_row(env: EnvironmentRecord, model: ModelRecord, output: SetterOutputRecord, family: Family,
               solution: SolutionRecord) -> dict[str, Any]:
    return {
        "env_id": env.env_id,
        "family": env.family,
        "presentation": env.presentation,
        "split": env.split,
        "module": output.module,
        "player": {"instruction": env.instruction, "tools": env.tools, "config": player_config(env, model.theta, family)},
        "grader": {"u_star": env.u_star, "u_default": env.u_default, "u_idle": env.u_idle,
                   "expected": {"u_star": solution.u_star, "u_default": solution.u_default, "u_idle": solution.u_idle},
                   "family": family.code_version,
                   "interface": {binding.name: binding.canonical for binding in output.interface},
                   "reference_trajectory": env.reference_trajectory,
                   "config": env.config(model.theta)},
    }


TOOL_NAMES = ("skinned", "canonical")
_SKIN_LINE = "\nSKIN = json.loads("


def with_canonical_tool_names(row: dict[str, Any]) -> dict[str, Any]:
    """The row with the family's canonical tool names (`place_order`, `end_day`…) in place of the
    passage's (`order_loaves`…), so one family has one tool set for training; descriptions and the
    rest of the instruction keep the passage's words. The module is the admitted one with only the
    names in its SKIN changed (its World, which the gates judged, is the same code; a name is
    only what `Env.call` dispatches on), and the instruction is the one it writes with them; the
    row's `digest` still pins the admitted environment. F rows (no tools to call) come back as they are.

        >>> canonical = with_canonical_tool_names(row)
        >>> sorted(t["name"] for t in canonical["player"]["tools"]) == sorted(row["grader"]["interface"].values())
        True
    """
    if row["presentation"] == "F":
        return row
    names = row["grader"]["interface"]
    head, _, tail = row["module"].rpartition(_SKIN_LINE)
    skin = json.loads(ast.literal_eval(tail.strip()[:-1]))  # SKIN = json.loads('<repr of the JSON>')
    skin["tools"] = [dict(tool, name=tool["canonical"]) for tool in skin["tools"]]
    module = head + _SKIN_LINE + repr(json.dumps(skin, sort_keys=True)) + ")\n"
    namespace: dict[str, Any] = {}
    exec(compile(module, "<canonical module>", "exec"), namespace)  # the admitted module's own code
    instruction = namespace["create"](row["grader"]["config"]).instruction
    player = {**row["player"], "instruction": instruction,
              "tools": [dict(tool, name=names[tool["name"]]) for tool in row["player"]["tools"]]}
    grader = {**row["grader"], "interface": {c: c for c in names.values()},
              "reference_trajectory": [dict(call, tool=names.get(call["tool"], call["tool"]))
                                       for call in row["grader"]["reference_trajectory"]]}
    return {**row, "module": module, "player": player, "grader": grader}


def rows_of(wh: Any, envs: list[EnvironmentRecord], extra: Any = None) -> list[dict[str, Any]]:
    """The export rows of `envs`, their model, module and solution rows verified (`wh`: an open
    Warehouse); `extra(env)` adds columns to each row."""
    models = wh.verified(ModelRecord, [e.model_id for e in envs], complete=True)
    modules = wh.verified(SetterOutputRecord, [e.setter_output_id for e in envs], complete=True)
    solutions = wh.verified(SolutionRecord, [e.solution_id for e in envs], complete=True)
    return [{**export_row(e, models[e.model_id], modules[e.setter_output_id], registry.get(e.family),
                          solutions[e.solution_id]), **(extra(e) if extra else {})} for e in envs]


# The Parquet layout: struct columns whose fixed fields are real fields; objects whose keys
# differ between families (or tools) are JSON texts, named here so both directions agree.
JSON_TEXT_FIELDS = ("player.tools[].input_schema", "player.config.params", "grader.config.params",
                    "grader.reference_trajectory[].arguments")


def _arrow_schema():
    import pyarrow as pa

    s, f, i = pa.string(), pa.float64(), pa.int64()
    expected = pa.struct([("u_star", f), ("u_default", f), ("u_idle", f)])
    player = pa.struct([
        ("instruction", s),
        ("tools", pa.list_(pa.struct([("name", s), ("description", s), ("input_schema", s)]))),
        ("config", pa.struct([("params", s), ("presentation", s), ("turn_budget", i)]))])
    grader = pa.struct([
        ("u_star", f), ("u_default", f), ("u_idle", f), ("expected", expected), ("family", s),
        ("interface", pa.list_(pa.struct([("name", s), ("canonical", s)]))),
        ("reference_trajectory", pa.list_(pa.struct([("tool", s), ("arguments", s)]))),
        ("config", pa.struct([("params", s), ("presentation", s), ("episode_seed", i), ("turn_budget", i)]))])
    fields = [(k, player if k == "player" else grader if k == "grader" else s) for k in COLUMNS]
    return pa.schema(fields, metadata={"vhd.json_text_fields": json.dumps(JSON_TEXT_FIELDS)})


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _keys(value: dict[str, Any], keys: set[str], where: str) -> dict[str, Any]:
    if set(value) != keys:
        raise VhdError(f"{where} has the keys {sorted(value)}; expected {sorted(keys)} (the Parquet export's schema)")
    return value


def _nested(row: dict[str, Any]) -> dict[str, Any]:
    """One row in the Parquet layout (`_arrow_schema`)."""
    player, grader = row["player"], row["grader"]
    where = f"environment {row['env_id']}"
    tools = [_keys(t, {"name", "description", "input_schema"}, f"{where}: a player tool") for t in player["tools"]]
    pc = _keys(player["config"], {"params", "presentation", "turn_budget"}, f"{where}: player.config")
    gc = _keys(grader["config"], {"params", "presentation", "episode_seed", "turn_budget"}, f"{where}: grader.config")
    _keys(grader, {"u_star", "u_default", "u_idle", "expected", "family", "interface", "reference_trajectory",
                   "config"}, f"{where}: grader")
    calls = [_keys({"arguments": {}, **c}, {"tool", "arguments"}, f"{where}: a reference call")
             for c in grader["reference_trajectory"]]
    return {**{k: row.get(k) for k in COLUMNS},
            "player": {"instruction": player["instruction"],
                       "tools": [{**t, "input_schema": _text(t["input_schema"])} for t in tools],
                       "config": {**pc, "params": _text(pc["params"])}},
            "grader": {**grader, "interface": [{"name": k, "canonical": v} for k, v in grader["interface"].items()],
                       "reference_trajectory": [{"tool": c["tool"], "arguments": _text(c["arguments"])} for c in calls],
                       "config": {**gc, "params": _text(gc["params"])}}}


def row_of_record(record: dict[str, Any]) -> dict[str, Any]:
    """The export row (as `export_row` and the JSONL export give it) of a Parquet record: a row of
    `pyarrow.parquet.read_table(...).to_pylist()` or of `datasets.load_dataset("parquet", ...)`
    (a row that is already one, from the JSONL export, is returned as it is).

        >>> import pyarrow.parquet as pq
        >>> record = pq.read_table(write([row], scratch / "export", "parquet")).to_pylist()[0]
        >>> record["grader"]["config"]["turn_budget"] == row["grader"]["config"]["turn_budget"]
        True
        >>> (row_of_record(record)["player"], row_of_record(record)["grader"]) == (row["player"], row["grader"])
        True
    """
    player, grader = record["player"], record["grader"]
    if isinstance(player, str):  # an export written before the struct columns: JSON texts
        return {**record, "player": json.loads(player), "grader": json.loads(grader)}
    if isinstance(player["config"]["params"], dict):  # already a row (the JSONL export, export_row)
        return record
    return {**record,
            "player": {"instruction": player["instruction"],
                       "tools": [{**t, "input_schema": json.loads(t["input_schema"])} for t in player["tools"]],
                       "config": {**player["config"], "params": json.loads(player["config"]["params"])}},
            "grader": {**grader, "interface": {b["name"]: b["canonical"] for b in grader["interface"]},
                       "reference_trajectory": [{"tool": c["tool"], "arguments": json.loads(c["arguments"])}
                                                for c in grader["reference_trajectory"]],
                       "config": {**grader["config"], "params": json.loads(grader["config"]["params"])}}}


def _write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([_nested(r) for r in rows], schema=_arrow_schema()), path)


def dataset_card(rows: list[dict[str, Any]], format: str) -> str:
    """README.md for an export directory: what the rows are, their schema, the corpus version and
    digest, counts per family, presentation and split, and where the passages come from."""
    from vhd.tasks.passages import builtin_passages

    versions = sorted({(r.get("corpus_version") or "", r.get("corpus_digest") or "") for r in rows})
    pinned = "\n".join(f"- corpus version `{v}`, corpus digest `{d}`" if v else
                        "- rows not held by a published corpus version (no corpus digest)" for v, d in versions)
    counts = Counter((r["family"], r["presentation"], r["split"]) for r in rows)
    table = "\n".join(f"| {f} | {p} | {s} | {n} |" for (f, p, s), n in sorted(counts.items()))
    splits = Counter(r["split"] for r in rows)
    sources = sorted({p.source for p in builtin_passages()})
    data = f"environments.{format}"
    split_counts = ", ".join(f"`{s}` {n}" for s, n in sorted(splits.items()))
    json_fields = ", ".join(f"`{f}`" for f in JSON_TEXT_FIELDS)
    source_list = ", ".join(f"“{s}”" for s in sources)
    return f"""---
license: other
pretty_name: VHD-Play environments
tags: [reinforcement-learning, tool-use, agents]
---

# VHD-Play environments

{len(rows)} environments exported by `vhd export` (`{data}`): solved mechanisms rendered as
stateful tool environments. Each row holds the generated module (`module`), what the agent may
see (`player`) and what grading needs (`grader`); give the agent only `player`. Rewards:
`vhd.adapters.grade(row["grader"], calls, row["module"])`; docs/TRAINING.md of vhd-play explains
every field and surface.

## Corpus

{pinned}

Grading needs the vhd version whose families match `grader.family` (`family@version`).

## Splits

The corpus split is the `split` column ({split_counts}).
`datasets.load_dataset("parquet", data_files="{data}")` (or `"json"` for JSONL) gives one
dataset split, `train`, holding every row; select a corpus split with
`ds.filter(lambda r: r["split"] == "heldout")`.

| family | presentation | split | environments |
|---|---|---|---|
{table}

## Schema

Top-level string columns: `env_id`, `family`, `presentation` (F, I or A), `split`, `module`,
`digest`, `corpus_version`, `corpus_digest`. In Parquet, `player` and `grader` are struct columns
with one schema for every family; the objects whose keys differ between families or tools are
JSON texts inside them ({json_fields}), and `grader.interface`
is a list of `{{name, canonical}}`. `vhd.tasks.export.row_of_record(record)` turns a record back
into the row the JSONL export holds (`json.loads` of those fields).

- `player`: `instruction` (str), `tools` (list of `{{name, description, input_schema}}`),
  `config` (`{{params, presentation, turn_budget}}`; `params` is θ without the hidden fields in A)
- `grader`: `u_star`, `u_default`, `u_idle` (float; `u_idle` may be null), `expected`
  (`{{u_star, u_default, u_idle}}`), `family` (str), `interface`, `reference_trajectory`
  (list of `{{tool, arguments}}`: π*'s calls), `config` (`{{params, presentation, episode_seed,
  turn_budget}}`: all of θ)

## Passages and licence

Every environment is skinned with one of the passages shipped with vhd-play
(`vhd/tasks/data/passages.jsonl`; `vhd refresh` skins only with them), whose sources are:
{source_list}. Passages written for the project are distributed under
the project's licence; the package declares none yet, hence `license: other` above.
"""


def write(rows: list[dict[str, Any]], out: Path, format: str, card: bool = True) -> Path:
    """`out/environments.{jsonl,parquet}` and, with `card`, its dataset card `out/README.md`,
    written whole or not at all (partial files are removed, and `out` too when this call created
    it and it stayed empty); VhdError of one line on failure."""
    if format not in ("jsonl", "parquet"):
        raise VhdError(f"--format must be jsonl or parquet, got {format!r}")
    target, readme = out / f"environments.{format}", out / "README.md"
    partials = [p.with_suffix(p.suffix + ".partial") for p in (target, readme)]
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        if format == "jsonl":
            partials[0].write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
        else:
            _write_parquet(rows, partials[0])
        if card:
            partials[1].write_text(dataset_card(rows, format), encoding="utf-8")
        partials[0].replace(target)  # never a half-written export
        if card:
            partials[1].replace(readme)
    except (OSError, VhdError) as exc:  # a full disk, a read-only directory, a row the schema cannot hold
        for partial in partials:
            partial.unlink(missing_ok=True)
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        if isinstance(exc, VhdError):
            raise
        raise VhdError(f"cannot write {target}: {exc.strerror or exc}; nothing was exported") from None
    return target
