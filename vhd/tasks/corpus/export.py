"""Export rows: what a trainer loads, split into the player's view and the grader's.

    >>> row = export_row(env, model, setter_output, family, solution)
    >>> sorted(row)
    ['difficulty', 'env_id', 'family', 'grader', 'module', 'player', 'presentation', 'split']
    >>> sorted(row["grader"])
    ['config', 'expected', 'family', 'interface', 'reference_trajectory', 'u_default', 'u_idle', 'u_star']

The grader view carries what scoring any episode of the environment needs: θ (its config), the
episode's own references (`u_star`, `u_default`, `u_idle` on the stored episode seed: the outcome
reward), the model's expected values (`expected`: the decision reward, for any seed), the family
and the module's tool names with their canonical names (`interface`).

`write` stores the rows as an export directory that `datasets` (and the Hugging Face Hub) loads
by split: one file per corpus split, `data/<split>-<digest>.jsonl` or `.parquet`, and a dataset
card, README.md, whose YAML header declares them (`configs`), the features, the licence and the
task and size categories: `datasets.load_dataset(DIR, split="heldout")`. Both formats hold the
same records: `player` and `grader` are structs with one schema for every family, the free-form
objects (θ, JSON Schemas, call arguments) JSON texts inside them (`JSON_TEXT_FIELDS`: exact,
which `datasets.Json` is not yet) and `interface` a list of {name, canonical}; `row_of_record`
turns a record back into the row, and `read_export(DIR)` gives every split's rows.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from vhd.mechanisms import Family, registry
from vhd.schemas.errors import VhdError
from vhd.schemas.records import EnvironmentRecord, ModelRecord, SetterOutputRecord, SolutionRecord
from vhd.tasks.setters.skin import UNKNOWN, Interface, skin_of, with_skin

COLUMNS = ("env_id", "family", "presentation", "split", "module", "player", "grader", "digest", "corpus_version",
           "corpus_digest", "difficulty")
# the `difficulty` column (vhd/tasks/stages/difficulty.py, docs/EVAL.md "Difficulty"): the stored measure, flat
DIFFICULTY_FIELDS = (("score", "f"), ("knob_position", "f"), ("size", "i"), ("horizon", "i"), ("state_space", "i"),
                     ("span", "f"), ("prober_I", "f"), ("prober_A", "f"), ("greedy_I", "f"), ("greedy_A", "f"),
                     ("random", "f"), ("hidden_price", "f"))


def difficulty_row(measured: dict[str, Any]) -> dict[str, Any] | None:
    """The export's `difficulty` struct of an environment's stored measure; None when not measured.

    >>> difficulty_row({})
    >>> difficulty_row({"score": 0.25, "knob_position": 0.5, "size": 3, "horizon": None, "state_space": 40,
    ...                 "span": 2.0, "agents": {"prober": {"I": 1.0, "A": 0.5}, "greedy": {"I": 0.75, "A": 0.25},
    ...                 "random": 0.1}, "hidden_price": 0.5})
    {'score': 0.25, 'knob_position': 0.5, 'size': 3, 'horizon': None, 'state_space': 40, 'span': 2.0, 'prober_I': 1.0, 'prober_A': 0.5, 'greedy_I': 0.75, 'greedy_A': 0.25, 'random': 0.1, 'hidden_price': 0.5}
    """
    if not measured:
        return None
    agents = measured.get("agents") or {}
    prober, greedy = agents.get("prober") or {}, agents.get("greedy") or {}
    flat = {**measured, "prober_I": prober.get("I"), "prober_A": prober.get("A"), "greedy_I": greedy.get("I"),
            "greedy_A": greedy.get("A"), "random": agents.get("random")}
    return {name: flat.get(name) for name, _ in DIFFICULTY_FIELDS}


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
        "difficulty": difficulty_row(env.difficulty),
        "player": {"instruction": env.instruction, "tools": env.tools, "config": player_config(env, model.theta, family)},
        "grader": {"u_star": env.u_star, "u_default": env.u_default, "u_idle": env.u_idle,
                   "expected": {"u_star": solution.u_star, "u_default": solution.u_default, "u_idle": solution.u_idle},
                   "family": family.code_version,
                   "interface": {binding.name: binding.canonical for binding in output.interface},
                   "reference_trajectory": env.reference_trajectory,
                   "config": env.config(model.theta)},
    }


TOOL_NAMES = ("skinned", "canonical")


def with_canonical_tool_names(row: dict[str, Any]) -> dict[str, Any]:
    """The row with the family's canonical interface in place of the passage's: its tool names
    (`place_order`, `end_day`… for `order_loaves`…), argument names (`item` for `parcel`) and ids
    (0, 1, 2… for P-01, P-02…), so one family has one tool set for training; descriptions and the
    rest of the instruction keep the passage's words. The module is the admitted one with only its
    SKIN's names and id styles changed (its World, which the gates judged, is the same code; the
    skin is data `Env` reads), and the instruction is the one it writes with them; the reference
    trajectory is the same calls as the canonical interface takes them; the row's `digest` still
    pins the admitted environment. F rows (no tools to call) come back as they are.

        >>> canonical = with_canonical_tool_names(row)
        >>> sorted(t["name"] for t in canonical["player"]["tools"]) == sorted(row["grader"]["interface"].values())
        True
    """
    if row["presentation"] == "F":
        return row
    names = row["grader"]["interface"]
    skin = skin_of(row["module"])
    if skin is None:
        raise ValueError(f"environment {row['env_id'][:12]}'s module has no readable SKIN; expected a template module")
    interface = Interface.of_row(registry.get(row["family"]), names, row["module"])
    skin = dict(skin, tools=[dict(tool, name=tool["canonical"]) for tool in skin["tools"]], ids={}, renamed={})
    module = with_skin(row["module"], skin)
    namespace: dict[str, Any] = {}
    exec(compile(module, "<canonical module>", "exec"), namespace)  # the admitted module's own code
    env = namespace["create"](row["grader"]["config"])
    player = {**row["player"], "instruction": env.instruction, "tools": env.tools}
    grader = {**row["grader"], "interface": {c: c for c in names.values()},
              "reference_trajectory": [_canonical_call(interface, call) for call in row["grader"]["reference_trajectory"]]}
    return {**row, "module": module, "player": player, "grader": grader}


def _canonical_call(interface: Interface, call: dict[str, Any]) -> dict[str, Any]:
    """A reference call in canonical names and ids (a tool outside the interface stays as it is)."""
    canonical = interface.canonical(call)
    return canonical if canonical["tool"] != UNKNOWN else call


def rows_of(wh: Any, envs: list[EnvironmentRecord], extra: Any = None) -> list[dict[str, Any]]:
    """The export rows of `envs`, their model, module and solution rows verified (`wh`: an open
    Warehouse); `extra(env)` adds columns to each row."""
    models = wh.verified(ModelRecord, [e.model_id for e in envs], complete=True)
    modules = wh.verified(SetterOutputRecord, [e.setter_output_id for e in envs], complete=True)
    solutions = wh.verified(SolutionRecord, [e.solution_id for e in envs], complete=True)
    return [{**export_row(e, models[e.model_id], modules[e.setter_output_id], registry.get(e.family),
                          solutions[e.solution_id]), **(extra(e) if extra else {})} for e in envs]


# The stored layout, the same in both formats: struct columns whose fixed fields are real fields;
# the objects whose keys differ between families (or tools) are JSON texts, named here so both
# directions agree. Not `datasets.Json`: in datasets 5.2 its decoding parses floats inexactly
# (0.3 comes back 0.30000000000000004: θ or π*'s arguments of lp and qp environments change, and
# qp's replayed utility with them), and declaring one makes its JSON reader rewrite every float
# of a JSONL line to 10 decimals (tests/test_export_dataset.py keeps a canary of both).
JSON_TEXT_FIELDS = ("player.tools[].input_schema", "player.config.params", "grader.config.params",
                    "grader.reference_trajectory[].arguments")
OPTIONAL_COLUMNS = ("digest", "corpus_version", "corpus_digest",  # null for rows of no published version
                    "difficulty")  # null for an environment annotated before difficulty was measured
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+")  # a file name and a `datasets` split name


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
    difficulty = pa.struct([(name, f if kind == "f" else i) for name, kind in DIFFICULTY_FIELDS])
    fields = [(k, player if k == "player" else grader if k == "grader" else difficulty if k == "difficulty" else s)
              for k in COLUMNS]
    return pa.schema(fields, metadata={"vhd.json_text_fields": json.dumps(JSON_TEXT_FIELDS)})


def features_yaml() -> list[dict[str, Any]]:
    """The stored layout as a dataset card declares it (`dataset_info.features`: the YAML form of
    `datasets.Features`), from the Arrow schema, so that both formats load with one schema."""
    import pyarrow as pa

    def entry(t: Any) -> dict[str, Any]:
        if pa.types.is_struct(t):
            return {"struct": [{"name": field.name, **entry(field.type)} for field in t]}
        if pa.types.is_list(t):
            inner = entry(t.value_type)
            return {"list": inner.get("struct", inner.get("dtype"))}
        return {"dtype": {pa.string(): "string", pa.int64(): "int64", pa.float64(): "float64"}[t]}

    return [{"name": field.name, **entry(field.type)} for field in _arrow_schema()]


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _keys(value: dict[str, Any], keys: set[str], where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) != keys:
        found = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise VhdError(f"{where} has the keys {found}; expected {sorted(keys)} (the export's schema)")
    return value


def _nested(row: dict[str, Any]) -> dict[str, Any]:
    """One row in the stored layout (`_arrow_schema`): every column (the optional ones null when
    absent), every dict checked against the schema, the JSON-text fields as texts."""
    where = f"environment {row.get('env_id')}"
    if not set(COLUMNS) - set(OPTIONAL_COLUMNS) <= set(row) <= set(COLUMNS):
        _keys(row, set(COLUMNS), where)
    if not (isinstance(row["split"], str) and _SPLIT_NAME.fullmatch(row["split"])):
        raise VhdError(f"{where}: split {row['split']!r} is not a split name; expected letters, digits and _")
    player, grader = row["player"], row["grader"]
    _keys(player, {"instruction", "tools", "config"}, f"{where}: player")
    tools = [_keys(t, {"name", "description", "input_schema"}, f"{where}: a player tool") for t in player["tools"]]
    pc = _keys(player["config"], {"params", "presentation", "turn_budget"}, f"{where}: player.config")
    gc = _keys(grader["config"], {"params", "presentation", "episode_seed", "turn_budget"}, f"{where}: grader.config")
    _keys(grader, {"u_star", "u_default", "u_idle", "expected", "family", "interface", "reference_trajectory",
                   "config"}, f"{where}: grader")
    _keys(grader["expected"], {"u_star", "u_default", "u_idle"}, f"{where}: grader.expected")
    calls = [_keys({"arguments": {}, **c}, {"tool", "arguments"}, f"{where}: a reference call")
             for c in grader["reference_trajectory"]]
    if row.get("difficulty") is not None:
        _keys(row["difficulty"], {name for name, _ in DIFFICULTY_FIELDS}, f"{where}: difficulty")
    return {**{k: row.get(k) for k in COLUMNS},
            "player": {"instruction": player["instruction"],
                       "tools": [{**t, "input_schema": _text(t["input_schema"])} for t in tools],
                       "config": {**pc, "params": _text(pc["params"])}},
            "grader": {**grader, "interface": [{"name": k, "canonical": v} for k, v in grader["interface"].items()],
                       "reference_trajectory": [{"tool": c["tool"], "arguments": _text(c["arguments"])} for c in calls],
                       "config": {**gc, "params": _text(gc["params"])}}}


def row_of_record(record: dict[str, Any]) -> dict[str, Any]:
    """The export row (as `export_row` gives it) of a stored record: a row of
    `datasets.load_dataset(DIR, split=...)`, of `pyarrow.parquet.read_table(...).to_pylist()` or a
    line of a JSONL data file (a row that is already one is returned as it is; records of exports
    written before the struct columns, `player` and `grader` as JSON texts, are read too).

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
    if isinstance(player["config"]["params"], dict):  # already a row (export_row, an earlier JSONL export)
        return record
    return {**record,
            "player": {"instruction": player["instruction"],
                       "tools": [{**t, "input_schema": json.loads(t["input_schema"])} for t in player["tools"]],
                       "config": {**player["config"], "params": json.loads(player["config"]["params"])}},
            "grader": {**grader, "interface": {b["name"]: b["canonical"] for b in grader["interface"]},
                       "reference_trajectory": [{"tool": c["tool"], "arguments": json.loads(c["arguments"])}
                                                for c in grader["reference_trajectory"]],
                       "config": {**grader["config"], "params": json.loads(grader["config"]["params"])}}}


def splits_of(rows: list[dict[str, Any]]) -> list[str]:
    """The corpus splits of `rows`, train first (`train` alone for no rows)."""
    return sorted({r["split"] for r in rows} or {"train"}, key=lambda s: (s != "train", s))


def _write_split(records: list[dict[str, Any]], path: Path, format: str) -> None:
    """One split's records (`_nested`) as JSON Lines (keys sorted) or Parquet (`_arrow_schema`)."""
    if format == "jsonl":
        path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), encoding="utf-8")
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pa.Table.from_pylist(records, schema=_arrow_schema())
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise VhdError(f"a row the Parquet schema cannot hold: {str(exc).splitlines()[0]}") from None
    pq.write_table(table, path)


def export_files(path: str | Path) -> list[Path]:
    """The data files of an export: `path` is the export directory (its `data/*.jsonl` or
    `data/*.parquet`, or the single `environments.jsonl`/`.parquet` of an export written before
    issue 27) or one data file; VhdError of one line when there is none."""
    path = Path(path)
    if path.is_dir():
        files = sorted((path / "data").glob("*.jsonl")) + sorted((path / "data").glob("*.parquet"))
        files = files or [p for p in (path / "environments.jsonl", path / "environments.parquet") if p.is_file()]
        if not files:
            raise VhdError(f"{path} holds no export (no data/*.jsonl or data/*.parquet); run `vhd export --out {path}`")
        return files
    if not path.is_file():
        raise VhdError(f"no export at {path}; expected the directory `vhd export --out` wrote, or one of its files")
    if path.suffix not in (".jsonl", ".parquet"):
        raise VhdError(f"{path} is not an export file; expected .jsonl or .parquet")
    return [path]


def read_export(path: str | Path) -> list[dict[str, Any]]:
    """The rows of an export, every split (`export_files`), as `export_row` made them
    (`row_of_record`); needs no `datasets`."""
    files = export_files(path)
    rows = []
    for file in files:
        if file.suffix == ".parquet":
            import pyarrow.parquet as pq

            rows += [row_of_record(r) for r in pq.read_table(file).to_pylist()]
        else:
            for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
                try:
                    rows += [row_of_record(json.loads(line))] if line.strip() else []
                except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
                    raise VhdError(f"{file} line {number}: not an export row ({type(exc).__name__}: {exc}); "
                                   "expected one JSON object a line, as `vhd export` writes") from None
    return rows


def size_category(n: int) -> str:
    """The Hub's `size_categories` value for n rows (n<1K, 1K<n<10K, …, n>1T)."""
    bounds = ("1K", "10K", "100K", "1M", "10M", "100M", "1B", "10B", "100B", "1T")
    for k, bound in enumerate(bounds):
        if n < 1000 * 10 ** k:
            return f"n<{bound}" if k == 0 else f"{bounds[k - 1]}<n<{bound}"
    return "n>1T"


def card_header(rows: list[dict[str, Any]], files: dict[str, str]) -> dict[str, Any]:
    """The dataset card's YAML header: licence, task and size categories, one `default` config
    whose `data_files` name each split's file, and the features (`dataset_info`), so that
    `datasets.load_dataset(DIR, split=...)` (and the Hub) read every split with the Json fields decoded."""
    return {
        "license": "other",
        "pretty_name": "VHD-Play environments",
        "task_categories": ["reinforcement-learning", "text-generation"],
        "size_categories": [size_category(len(rows))],
        "tags": ["reinforcement-learning", "tool-use", "agents", "environments"],
        "configs": [{"config_name": "default", "default": True,
                     "data_files": [{"split": s, "path": p} for s, p in files.items()]}],
        "dataset_info": {"features": features_yaml()},
    }


def dataset_card(rows: list[dict[str, Any]], files: dict[str, str], format: str) -> str:
    """README.md for an export directory whose split files are `files` ({split: path relative to
    the directory}): its YAML header (`card_header`), what the rows are, the corpus version and
    digest, counts per family, presentation and split, how to load a split, and where the passages
    come from."""
    import yaml

    from vhd.tasks.setters.passages import builtin_passages

    versions = sorted({(r.get("corpus_version") or "", r.get("corpus_digest") or "") for r in rows})
    pinned = "\n".join(f"- corpus version `{v}`, corpus digest `{d}`" if v else
                        "- rows not held by a published corpus version (no corpus digest)" for v, d in versions)
    counts = Counter((r["family"], r["presentation"], r["split"]) for r in rows)
    scores: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        score = (r.get("difficulty") or {}).get("score")
        if score is not None:
            scores.setdefault((r["family"], r["presentation"], r["split"]), []).append(score)

    def spread(key: tuple[str, str, str]) -> str:
        got = scores.get(key)
        return f"{sum(got) / len(got):.2f} ({min(got):.2f}–{max(got):.2f})" if got else "–"

    table = "\n".join(f"| {f} | {p} | {s} | {n} | {spread((f, p, s))} |" for (f, p, s), n in sorted(counts.items()))
    splits = Counter(r["split"] for r in rows)
    split_list = "\n".join(f"- `{s}`: `{p}`, {splits[s]} rows" for s, p in files.items())
    example = "heldout" if "heldout" in files else next(iter(files))
    json_fields = ", ".join(f"`{f}`" for f in JSON_TEXT_FIELDS)
    source_list = ", ".join(f"“{s}”" for s in sorted({p.source for p in builtin_passages()}))
    header = yaml.safe_dump(card_header(rows, files), sort_keys=False, allow_unicode=True, width=1000)
    return f"""---
{header}---

# VHD-Play environments

{len(rows)} environments exported by `vhd export` ({"JSON Lines" if format == "jsonl" else "Parquet"}, one file per
split under `data/`): solved mechanisms rendered as stateful tool environments. Each row holds the
generated module (`module`), what the agent may see (`player`) and what grading needs
(`grader`); give the agent only `player`. Rewards:
`vhd.adapters.grade(row["grader"], calls, row["module"])`; docs/TRAINING.md of vhd-play explains
every field and surface.

## Corpus

{pinned}

Grading needs the vhd version whose families match `grader.family` (`family@version`).

## Splits

The header's `configs` map each corpus split (the `split` column) to its file:

{split_list}

```python
import os

import datasets
from vhd.tasks.corpus.export import row_of_record

directory = os.getcwd()  # run here; or this directory's path, or the Hub repository it is uploaded to
{example} = datasets.load_dataset(directory, split="{example}")
row = row_of_record({example}[0])  # the row as `vhd export` made it: the JSON texts parsed
```

| family | presentation | split | environments | difficulty: mean (min–max) |
|---|---|---|---|---|
{table}

Difficulty is read off the solved model (vhd-play docs/EVAL.md, "Difficulty"): `score` in [0, 1] is
½ × where the knobs (size, horizon) sit in the family's ranges + ½ × what the `prober` agent loses in
this presentation (0 in F and I, where θ is told); it is comparable within a family.

## Schema

Top-level string columns: `env_id`, `family`, `presentation` (F, I or A), `split`, `module`,
`digest`, `corpus_version`, `corpus_digest`. `player` and `grader` are structs with one schema for
every family, in both formats; the objects whose keys differ between families or tools are JSON
texts inside them ({json_fields}), and `grader.interface` is a list of
`{{name, canonical}}`. `vhd.tasks.corpus.export.row_of_record(record)` turns a record (from `datasets`,
pyarrow or a JSONL line) into the row (`json.loads` of those fields), and
`vhd.tasks.corpus.export.read_export(directory)` reads every split's rows without `datasets`. (Not
`datasets.Json`: in datasets 5.2 it does not give floats back exactly.)

- `player`: `instruction` (str), `tools` (list of `{{name, description, input_schema}}`),
  `config` (`{{params, presentation, turn_budget}}`; `params` is θ without the hidden fields in A)
- `grader`: `u_star`, `u_default`, `u_idle` (float; `u_idle` may be null), `expected`
  (`{{u_star, u_default, u_idle}}`), `family` (str), `interface` (`{{name, canonical}}`: each tool
  name and the family's), `reference_trajectory` (list of `{{tool, arguments}}`: π*'s calls), `config`
  (`{{params, presentation, episode_seed, turn_budget}}`: all of θ)
- `difficulty` (struct, null for an environment annotated before it was measured): `score`,
  `knob_position` (float in [0, 1]), `size`, `horizon`, `state_space` (int: the states the exact
  solver searched), `span` (E[u*] − E[u0]), `prober_I`, `prober_A`, `greedy_I`, `greedy_A` (null
  but for the five families with a heuristic), `random` (the scripted agents'
  expected decision rewards), `hidden_price` (`prober_I` − `prober_A`)

## Passages and licence

Every environment is skinned with one of the passages shipped with vhd-play
(`vhd/tasks/setters/data/passages.jsonl`; `vhd refresh` skins only with them), whose sources are:
{source_list}. Passages written for the project are distributed under
the project's licence; the package declares none yet, hence `license: other` above.
"""


def write(rows: list[dict[str, Any]], out: Path, format: str, card: bool = True) -> Path:
    """The export directory `out`: one file per corpus split, `out/data/<split>-<digest>.<format>`
    (`<digest>`: the first 16 hex digits of the file's SHA-256), and with `card` the dataset card
    `out/README.md`, whose `configs` name them. Returns `out/data`. The digest in the name keeps
    `datasets` from serving an earlier export: datasets 5.2 caches a directory by its name and
    its card's header alone, not by its files' contents. Written whole or not at all (partial
    files are removed, and `out` too when this call created it and it stayed empty); data files
    of an earlier export in `out/data` that this one does not list are removed. VhdError of one
    line on failure."""
    import hashlib

    if format not in ("jsonl", "parquet"):
        raise VhdError(f"--format must be jsonl or parquet, got {format!r}")
    records = [_nested(r) for r in rows]  # before anything is written: a row the schema cannot hold
    data, readme = out / "data", out / "README.md"
    partials = {split: data / f"{split}.{format}.partial" for split in splits_of(records)}
    card_partial = readme.with_name("README.md.partial")
    created = not out.exists()
    try:
        data.mkdir(parents=True, exist_ok=True)
        files = {}
        for split, partial in partials.items():
            _write_split([r for r in records if r["split"] == split], partial, format)
            digest = hashlib.sha256(partial.read_bytes()).hexdigest()[:16]
            files[split] = f"data/{split}-{digest}.{format}"
        if card:
            card_partial.write_text(dataset_card(records, files, format), encoding="utf-8")
        for split, partial in partials.items():
            partial.replace(out / files[split])  # never a half-written export
        if card:
            card_partial.replace(readme)
        for stale in [*data.glob("*.jsonl"), *data.glob("*.parquet")]:
            if stale.relative_to(out).as_posix() not in files.values():
                stale.unlink()
    except (OSError, VhdError) as exc:  # a full disk, a read-only directory
        for partial in [*partials.values(), card_partial]:
            partial.unlink(missing_ok=True)
        if created and out.is_dir():
            for empty in (data, out):
                if empty.is_dir() and not any(empty.iterdir()):
                    empty.rmdir()
        if isinstance(exc, VhdError):
            raise
        raise VhdError(f"cannot write {out}: {exc.strerror or exc}; nothing was exported") from None
    return data


def write_seal(out: Path, seal: dict[str, Any]) -> Path:
    """OUT/SEAL: the exported version's seal as one JSON object (`publish_audit.version_seal`), the
    value a trainer pins and compares with the seal file the warehouse's owner keeps."""
    import json

    target = out / "SEAL"
    try:
        target.write_text(json.dumps(seal, sort_keys=True, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise VhdError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target
