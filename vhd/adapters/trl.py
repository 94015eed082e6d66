"""TRL `environment_factory` classes over exported environments: one class per family's interface.

    >>> Environment = environment_class(row["player"]["tools"], family=row["family"])
    >>> env = Environment()
    >>> env.reset(**row) == row["player"]["instruction"]   # an export row: no `prompt` column
    True
    >>> for call in row["grader"]["reference_trajectory"]:   # π*, played through the typed tool methods
    ...     _ = getattr(env, call["tool"])(**call["arguments"])
    >>> env.get_reward()
    1.0

Written against TRL 1.16's `GRPOTrainer(environment_factory=...)` (read in its source and run by
tests/test_trl_grpo.py): the trainer builds one instance per rollout (no arguments), calls
`reset(**record)` with the dataset record's columns and appends a returned string to the prompt's
last user message, offers every public method but `reset` and `get_reward` as a tool (rendered by
`transformers.utils.get_json_schema`), calls the one the model names with the parsed arguments
as keywords, and calls `get_reward()` once per finished rollout as a reward source of its own
(weight 1, logged under the class's name) — so pass no `reward_funcs` for the decision reward.

Tools. A class's public methods other than `reset` and `get_reward` are the environment's tools,
one typed method per tool, named as the module names it. Their docstrings are the family's own
tool descriptions in neutral words (`NEUTRAL_WORDS`: "goods", "the supplier"…) with the family's
bounds, not the passage's words and θ's bounds — those are in the instruction ("numbered 0 to
10"), and the module enforces θ's bounds — so that the rows of one family share one class: TRL
renders a class's tools once, from its methods, for every row of it. A tool the family does not
declare (a row of another version of vhd) keeps the row's own description.
`transformers.utils.get_json_schema(method)` renders each method to the tool's argument names,
types and required arguments. A call returns the tool's result as JSON text. The arguments the
model sends go to the module as sent — an explicit `null` included, an argument left out stays
out — so bad ones are refused there (malformed: no turn used), as on every other surface.

`reset(**row)` starts the row's own episode (its stored seed) and returns the instruction, or
None when the record's `prompt` already holds it (the rows of `dataset_rows`), so that the prompt
holds it once. `get_reward()` ends the episode by the module's `Env.finish()` if it is still
running and returns its decision reward — `vhd.adapters.gym.TextToolEnv` plays underneath, so the
rewards are those of `vhd score` for the calls that reached the environment (`env.trajectory`;
docs/TRAINING.md, "One episode, one reward").

`environment_factory(rows)` gives one class when every row has the same interface, else a dict of
classes keyed by `environment_key(tools, family)`, the value of the `environment` column
`dataset_rows(rows)` adds to each row: one class per family for a canonical export (`vhd export
--tool-names canonical`), one per family and naming for a skinned one. The generated module runs
in this process (docs/TRAINING.md, "Trust model").
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import keyword
import threading
import types
from typing import Any, ClassVar

from vhd.schemas.errors import TrajectoryFormatError
from vhd.tasks.corpus.export import row_of_record

RESERVED = frozenset({"reset", "get_reward"})  # the methods that are not tools
PYTHON_TYPES = {"integer": int, "number": float, "string": str, "boolean": bool, "array": list, "object": dict}
# The passage's words in a family's tool descriptions, said neutrally (the instruction has the passage's own).
NEUTRAL_WORDS = {"site": "business", "item": "goods", "sku": "goods code", "unit": "units",
                 "supplier": "supplier", "currency": "currency units"}


class _Omitted:
    """The default of an optional argument: the model left it out (None is an argument it sent)."""

    def __repr__(self) -> str:
        return "<omitted>"


OMITTED = _Omitted()


def bounds(schema: dict[str, Any]) -> str:
    """The bounds of one argument's JSON Schema in words ('' when it has none).

        >>> bounds({"type": "integer", "minimum": 0, "maximum": 29})
        'integer from 0 to 29'
    """
    parts = [schema.get("type", "value")]
    if "minimum" in schema and "maximum" in schema:
        parts.append(f"from {schema['minimum']} to {schema['maximum']}")
    elif "minimum" in schema:
        parts.append(f"at least {schema['minimum']}")
    elif "maximum" in schema:
        parts.append(f"at most {schema['maximum']}")
    if "maxLength" in schema:
        parts.append(f"of at most {schema['maxLength']} characters")
    if "enum" in schema:
        parts.append("one of " + ", ".join(json.dumps(v) for v in schema["enum"]))
    return " ".join(str(p) for p in parts) if len(parts) > 1 else ""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _family_name(family: str | None) -> str | None:
    return None if not family else str(family).split("@")[0]


def described(tool: dict[str, Any], family: str | None = None, canonical: str | None = None) -> dict[str, Any]:
    """The tool as its method describes it: the family's description of its canonical tool
    (`canonical`, default the tool's own name) in `NEUTRAL_WORDS`, with each argument's family
    description and bounds, when the family declares that tool with the same arguments; else the
    tool as it is. Names, argument names, types and required arguments are always the tool's."""
    from vhd.mechanisms import registry
    from vhd.tasks.setters.template import fill, singular

    name = _family_name(family)
    if name is None or name not in registry.names():
        return tool
    try:
        spec = registry.get(name).tool(canonical or tool["name"])
    except KeyError:
        return tool
    mine = tool.get("input_schema", {}).get("properties", {})
    theirs = spec.input_schema.get("properties", {})
    if set(mine) != set(theirs) or any(mine[a].get("type") != theirs[a].get("type") for a in mine):
        return tool
    words = {**NEUTRAL_WORDS, "unit_one": singular(NEUTRAL_WORDS["unit"])}
    properties = {}
    for argument in mine:  # in the row's order
        schema = theirs[argument]
        properties[argument] = {k: v for k, v in schema.items() if k != "description"}
        if "description" in schema:
            properties[argument]["description"] = fill(schema["description"], words)
    return {"name": tool["name"], "description": fill(spec.description, words),
            "input_schema": {**tool.get("input_schema", {}), "properties": properties}}


def docstring(tool: dict[str, Any]) -> str:
    """A tool's Google-style docstring: its description, then `Args:` with each argument's
    description (its units) and bounds, as `get_json_schema` reads it."""
    properties = tool.get("input_schema", {}).get("properties", {})
    lines = [tool.get("description", "").strip() or tool["name"]]
    if properties:
        lines += ["", "Args:"]
        for name, schema in properties.items():
            said_of = _one_line(schema.get("description", name))
            said = bounds(schema)
            lines.append(f"    {name}: {said_of} ({said})" if said else f"    {name}: {said_of}")
    lines += ["", "Returns:", "    The tool's result as JSON text."]
    return "\n".join(lines)


def _check_name(name: Any, what: str) -> str:
    if not (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_")):
        raise TrajectoryFormatError(f"{what} {name!r} is not a Python identifier; expected a name a method or an "
                                    "argument can have")
    return name


def _tool_method(tool: dict[str, Any]) -> types.FunctionType:
    name = _check_name(tool["name"], "tool name")
    if name in RESERVED:
        raise TrajectoryFormatError(f"tool name {name!r} clashes with the environment's own {name}(); expected "
                                    f"a tool named other than {sorted(RESERVED)}")
    schema = tool.get("input_schema", {})
    properties, required = schema.get("properties", {}), set(schema.get("required", []))
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    for argument, argument_schema in properties.items():
        # an optional argument's default is OMITTED, not None: an explicit null is the model's
        # argument and goes to the module (which refuses it), as on every other surface
        annotations[_check_name(argument, f"argument of {name}")] = PYTHON_TYPES.get(argument_schema.get("type"), Any)
        parameters.append(inspect.Parameter(argument, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            default=inspect.Parameter.empty if argument in required else OMITTED,
                                            annotation=annotations[argument]))
    order = list(properties)

    def call(self, *args: Any, **kwargs: Any) -> str:
        arguments = dict(zip(order, args))
        arguments.update(kwargs)
        return self._call(name, {k: v for k, v in arguments.items() if v is not OMITTED})

    call.__name__ = call.__qualname__ = name
    call.__doc__ = docstring(tool)
    call.__annotations__ = annotations
    call.__signature__ = inspect.Signature(parameters, return_annotation=str)
    return call


def _interface(tools: list[dict[str, Any]], family: str | None,
               canonical: dict[str, str] | None) -> list[dict[str, Any]]:
    """The tools as the class's methods render them (what the model is shown)."""
    out = []
    for tool in tools:
        seen = described(tool, family, (canonical or {}).get(tool["name"]))
        schema = tool.get("input_schema", {})
        out.append({"name": tool["name"], "description": seen.get("description", ""),
                    "input_schema": {"properties": seen.get("input_schema", {}).get("properties", {}),
                                     "required": sorted(schema.get("required", []))}})
    return out


def environment_key(tools: list[dict[str, Any]], family: str | None = None,
                    canonical: dict[str, str] | None = None) -> str:
    """The name of a tool set's class (the `environment` column): `vhd_<family>_<digest>` of what
    its methods show the model — names, argument names, types and required arguments, and the
    family's descriptions and bounds (`described`), so not the passage's words or θ's bounds."""
    shown = _interface(_decoded(tools), family, canonical)
    digest = hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()[:12]
    name = _family_name(family)
    return f"vhd_{name}_{digest}" if name else f"vhd_{digest}"


@functools.lru_cache(maxsize=64)
def _module(source: str) -> types.ModuleType:
    from vhd.adapters.gym import load_module

    return load_module(source)


def _decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value  # the Parquet export keeps JSON texts


def _holds(prompt: Any, text: str) -> bool:
    """Whether a prompt (a text, or chat messages whose content is a text or text parts) holds `text`."""
    if isinstance(prompt, str):
        return text in prompt
    if not isinstance(prompt, list):
        return False
    for message in prompt:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str) and text in content:
            return True
        if isinstance(content, list) and any(isinstance(part, dict) and isinstance(part.get("text"), str)
                                             and text in part["text"] for part in content):
            return True
    return False


class _Environment:
    """The methods every environment class shares: reset, get_reward and the call every tool makes."""

    tools: ClassVar[list[dict[str, Any]]] = []  # each class's own, set by environment_class

    def __init__(self) -> None:
        self._env = None
        self.reward: float | None = None

    def reset(self, **row: Any) -> str | None:
        """Start the episode of an exported row (its columns as keywords; others are ignored).
        Returns the instruction the agent reads, or None when the record's `prompt` already holds
        it (TRL appends what reset returns to the prompt's last user message)."""
        from vhd.adapters.gym import TextToolEnv

        whole = row_of_record(row)  # any form of an export row: JSONL, Parquet structs, JSON texts
        player, grader = whole["player"], whole["grader"]
        if [t["name"] for t in player["tools"]] != [t["name"] for t in self.tools]:
            raise TrajectoryFormatError(f"{type(self).__name__} serves tools {[t['name'] for t in self.tools]}, the row "
                                        f"{row.get('env_id')!r} has {[t['name'] for t in player['tools']]}; expected a "
                                        "row of its environment key (environment_factory)")
        full = {"env_id": row.get("env_id"), "player": player, "grader": grader, "module": row["module"]}
        self._env = TextToolEnv(full, module=_module(row["module"]))
        self._env.reset()
        self.reward = None
        return None if _holds(row.get("prompt"), player["instruction"]) else player["instruction"]

    def _call(self, tool: str, arguments: dict[str, Any]) -> str:
        if self._env is None:
            raise RuntimeError("call reset(**row) before a tool")
        if self._env.finished:
            return json.dumps({"ok": False, "error": "the episode is over"})
        observation, _, _, _, _ = self._env.step({"tool": tool, "arguments": arguments})
        return observation

    def get_reward(self) -> float:
        """The episode's decision reward in [0, 1], finishing it first by the module's
        `Env.finish()` if it is still running (the same number on every call)."""
        if self._env is None:
            raise RuntimeError("call reset(**row) before get_reward()")
        self.reward, _ = self._env.finish()
        return self.reward

    @property
    def trajectory(self) -> list[dict[str, Any]]:
        """The calls made this episode, as `vhd score` and `vhd.adapters.reward` take them."""
        return [] if self._env is None else list(self._env.trajectory)


_classes: dict[str, type] = {}  # one class per key: the rows of a family whose θ bounds differ share it
_classes_lock = threading.Lock()


def environment_class(tools: list[dict[str, Any]], family: str | None = None,
                      canonical: dict[str, str] | None = None) -> type:
    """The environment class of one tool set (a row's `player.tools`) of a family (the row's
    `family`, or None: the tools' own descriptions); `canonical`: the module's names → the
    family's (a row's `grader.interface`; default the names themselves). The same class for the
    same key (`environment_key`)."""
    tools = _decoded(tools)
    key = environment_key(tools, family, canonical)
    with _classes_lock:
        if key not in _classes:
            methods = {tool["name"]: _tool_method(described(tool, family, (canonical or {}).get(tool["name"])))
                       for tool in tools}
            _classes[key] = type(key, (_Environment,), {
                **methods, "tools": tools, "__module__": __name__,
                "__doc__": f"A vhd environment with tools {sorted(methods)}."})
        return _classes[key]


def _of_row(row: dict[str, Any]) -> tuple[list[dict[str, Any]], str, dict[str, str]]:
    grader = row["grader"]
    return row["player"]["tools"], row.get("family") or grader.get("family"), grader.get("interface") or {}


def environment_factory(rows: list[dict[str, Any]]) -> type | dict[str, type]:
    """The `environment_factory` of an export (F rows left out: they have no tools to call): one
    class when every row has the same interface, else a dict of classes keyed by the
    `environment` column of `dataset_rows(rows)` (one per family for a canonical export)."""
    classes = {}
    for row in map(row_of_record, rows):
        if row["player"]["config"].get("presentation") != "F":
            tools, family, canonical = _of_row(row)
            classes[environment_key(tools, family, canonical)] = environment_class(tools, family, canonical)
    if not classes:
        raise TrajectoryFormatError("no rows of presentation I or A; expected the rows of an export")
    return next(iter(classes.values())) if len(classes) == 1 else classes


def dataset_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as a trainer's dataset takes them: a chat `prompt` (the instruction as the
    user's message; `reset` then returns None, so the prompt holds it once), the `environment`
    column naming their class in `environment_factory(rows)`, and `player` and `grader` as JSON
    texts (as in the Parquet export), so that rows of different families share one Arrow schema;
    `reset(**row)` decodes them. F rows are left out."""
    out = []
    for row in map(row_of_record, rows):
        player = row["player"]
        if player["config"].get("presentation") == "F":
            continue
        out.append({**row, "player": json.dumps(player, sort_keys=True),
                    "grader": json.dumps(row["grader"], sort_keys=True),
                    "prompt": [{"role": "user", "content": player["instruction"]}],
                    "environment": environment_key(*_of_row(row))})
    return out
