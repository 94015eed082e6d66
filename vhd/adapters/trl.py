"""TRL `environment_factory` classes over exported environments: one class per tool set.

    >>> Environment = environment_class(row["player"]["tools"])
    >>> env = Environment()
    >>> instruction = env.reset(**row)              # a row of `vhd export` (or a dataset row of it)
    >>> for call in row["grader"]["reference_trajectory"]:   # π*, played through the typed tool methods
    ...     _ = getattr(env, call["tool"])(**call["arguments"])
    >>> env.get_reward()
    1.0

A class's public methods other than `reset` and `get_reward` are the environment's tools, one
typed method per tool, named as the module names it, whose Google-style docstring is the tool's
description with an `Args:` section giving each argument's description (its units) and bounds,
so that `transformers.utils.get_json_schema(method)` renders the tool's JSON Schema. A call
returns the tool's result as JSON text; whatever arguments the model sends go to the module
unchanged, so bad ones are refused calls there (malformed: no turn used), as on every other surface.

`reset(**row)` starts the row's own episode (its stored seed) and returns the instruction;
`get_reward()` ends the episode by the module's `Env.finish()` if it is still running and
returns its decision reward — `vhd.adapters.gym.TextToolEnv` plays underneath, so the rewards
are those of `vhd score` and every other surface (docs/TRAINING.md, "One episode, one reward").

Environments of one family can name their tools differently (the passage's vocabulary), and a
class's methods are fixed: `environment_factory(rows)` gives one class when every row has the
same tool set, else a dict of classes keyed by `environment_key(tools)`, the value of the
`environment` column `dataset_rows(rows)` adds to each row. The generated module runs in this
process (docs/TRAINING.md, "Trust model").
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import keyword
import types
from typing import Any

from vhd.schemas.errors import TrajectoryFormatError
from vhd.tasks.export import row_of_record

RESERVED = frozenset({"reset", "get_reward"})  # the methods that are not tools
PYTHON_TYPES = {"integer": int, "number": float, "string": str, "boolean": bool, "array": list, "object": dict}


def environment_key(tools: list[dict[str, Any]]) -> str:
    """The name of a tool set (the `environment` column): a digest of its names, descriptions and schemas."""
    digest = hashlib.sha256(json.dumps(tools, sort_keys=True).encode()).hexdigest()[:12]
    return f"vhd_{digest}"


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


def docstring(tool: dict[str, Any]) -> str:
    """A tool's Google-style docstring: its description, then `Args:` with each argument's
    description (its units) and bounds, as `get_json_schema` reads it."""
    properties = tool.get("input_schema", {}).get("properties", {})
    lines = [tool.get("description", "").strip() or tool["name"]]
    if properties:
        lines += ["", "Args:"]
        for name, schema in properties.items():
            described = _one_line(schema.get("description", name))
            said = bounds(schema)
            lines.append(f"    {name}: {described} ({said})" if said else f"    {name}: {described}")
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
        kind = PYTHON_TYPES.get(argument_schema.get("type"), Any)
        optional = argument not in required
        annotations[_check_name(argument, f"argument of {name}")] = kind | None if optional and kind is not Any else kind
        parameters.append(inspect.Parameter(argument, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            default=None if optional else inspect.Parameter.empty,
                                            annotation=annotations[argument]))
    order = list(properties)

    def call(self, *args: Any, **kwargs: Any) -> str:
        arguments = dict(zip(order, args))
        arguments.update(kwargs)
        # arguments left out stay out, and any the model sends go to the module, which refuses bad ones
        return self._call(name, {k: v for k, v in arguments.items() if not (v is None and k not in required)})

    call.__name__ = call.__qualname__ = name
    call.__doc__ = docstring(tool)
    call.__annotations__ = annotations
    call.__signature__ = inspect.Signature(parameters, return_annotation=str)
    return call


@functools.lru_cache(maxsize=64)
def _module(source: str) -> types.ModuleType:
    from vhd.adapters.gym import load_module

    return load_module(source)


def _decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value  # the Parquet export keeps JSON texts


class _Environment:
    """The methods every environment class shares: reset, get_reward and the call every tool makes."""

    tools: list[dict[str, Any]] = []

    def __init__(self) -> None:
        self._env = None
        self.reward: float | None = None

    def reset(self, **row: Any) -> str:
        """Start the episode of an exported row (its columns as keywords; others are ignored)
        and return the instruction the agent reads."""
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
        return player["instruction"]

    def _call(self, tool: str, arguments: dict[str, Any]) -> str:
        if self._env is None:
            raise RuntimeError("call reset(**row) before a tool")
        if self._env.finished:
            return json.dumps({"ok": False, "error": "the episode is over"})
        observation, _, _, _, _ = self._env.step({"tool": tool, "arguments": arguments})
        return observation

    def get_reward(self) -> float:
        """The episode's decision reward in [0, 1], finishing it first by the module's
        `Env.finish()` if it is still running."""
        if self._env is None:
            raise RuntimeError("call reset(**row) before get_reward()")
        self.reward, _ = self._env.finish()
        return self.reward

    @property
    def trajectory(self) -> list[dict[str, Any]]:
        """The calls made this episode, as `vhd score` and `vhd.adapters.reward` take them."""
        return [] if self._env is None else list(self._env.trajectory)


@functools.lru_cache(maxsize=256)
def _class(tools_json: str) -> type:
    tools = json.loads(tools_json)
    methods = {tool["name"]: _tool_method(tool) for tool in tools}
    key = environment_key(tools)
    return type(key, (_Environment,), {**methods, "tools": tools, "__module__": __name__,
                                       "__doc__": f"A vhd environment with tools {sorted(methods)}."})


def environment_class(tools: list[dict[str, Any]]) -> type:
    """The environment class of one tool set (a row's `player.tools`); the same class for the same set."""
    return _class(json.dumps(_decoded(tools), sort_keys=True))


def environment_factory(rows: list[dict[str, Any]]) -> type | dict[str, type]:
    """The `environment_factory` of an export: one class when every row has the same tool set,
    else a dict of classes keyed by the `environment` column of `dataset_rows(rows)`."""
    tool_sets = [row_of_record(r)["player"]["tools"] for r in rows]
    classes = {environment_key(tools): environment_class(tools) for tools in tool_sets}
    if not classes:
        raise TrajectoryFormatError("no rows; expected the rows of an export")
    return next(iter(classes.values())) if len(classes) == 1 else classes


def dataset_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as a trainer's dataset takes them: a chat `prompt` (the instruction as the
    user's message), the `environment` column naming their class in `environment_factory(rows)`,
    and `player` and `grader` as JSON texts (as in the Parquet export), so that rows of different
    families share one Arrow schema; `reset(**row)` decodes them. F rows are left out."""
    out = []
    for row in map(row_of_record, rows):
        player = row["player"]
        if player["config"].get("presentation") == "F":
            continue
        out.append({**row, "player": json.dumps(player, sort_keys=True),
                    "grader": json.dumps(row["grader"], sort_keys=True),
                    "prompt": [{"role": "user", "content": player["instruction"]}],
                    "environment": environment_key(player["tools"])})
    return out


def reward_function(environments: list[Any], **kwargs: Any) -> list[float]:
    """A reward function over the trainer's environments: each episode's decision reward."""
    return [env.get_reward() for env in environments]
