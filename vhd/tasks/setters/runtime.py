"""The generic half of every template-rendered environment module (standard library only).

    >>> env = create({"params": theta, "presentation": "I", "episode_seed": 3, "turn_budget": 40})
    >>> env.call("view_stock", {})
    {'ok': True, 'on_hand': 4, ..., 'turns_left': 39}

The template setter pastes this file's source, then a family's `World` class, then a `SKIN`
dict into one module, so the module runs with no part of this project installed. `Env`
implements the contract of DESIGN §5: argument validation against each tool's JSON Schema,
turn accounting, and all-or-nothing calls (every tool runs inside a SQLite savepoint; an
`AgentError` rolls the world back and is reported as {"ok": False, "error": ...}).
A `World` keeps all of its mutable state in the SQLite database, so that rollback is total.
"""

import hashlib
import json  # noqa: F401  (SKIN = json.loads(...) and World use it)
import math
import random  # noqa: F401  (for World)
import sqlite3

ENV_API = 1
PRESENTATIONS = ("I", "A")


class AgentError(Exception):
    """A mistake by the player: reported, never raised out of `Env.call`."""


_JSON_TYPES = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
}


def schema_problem(schema, arguments):
    """The first way `arguments` break the (object, flat) `schema`, or None."""
    if not isinstance(arguments, dict):
        return "arguments must be a JSON object, got %s" % type(arguments).__name__
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in arguments:
            return "missing required argument %r" % name
    for name, value in arguments.items():
        spec = properties.get(name)
        if spec is None:
            return "unknown argument %r; expected only %s" % (name, sorted(properties) or "no arguments")
        kind = spec.get("type")
        if kind in _JSON_TYPES and not _JSON_TYPES[kind](value):
            return "argument %r must be of type %s, got %r" % (name, kind, value)
        if "minimum" in spec and value < spec["minimum"]:
            return "argument %r must be >= %s, got %r" % (name, spec["minimum"], value)
        if "maximum" in spec and value > spec["maximum"]:
            return "argument %r must be <= %s, got %r" % (name, spec["maximum"], value)
        if "enum" in spec and value not in spec["enum"]:
            return "argument %r must be one of %s, got %r" % (name, spec["enum"], value)
    return None


def _config_problem(config):
    if not isinstance(config, dict):
        return "config must be a dict"
    if not isinstance(config.get("params"), dict):
        return "config['params'] must be a dict of the model's parameters"
    if config.get("presentation") not in PRESENTATIONS:
        return "config['presentation'] must be one of %s, got %r" % (PRESENTATIONS, config.get("presentation"))
    for key in ("episode_seed", "turn_budget"):
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "episode_seed" else 1):
            return "config[%r] must be a %s integer, got %r" % (key, "non-negative" if key == "episode_seed" else "positive", value)
    return None


class Env:
    """One episode of the world, played through named tools."""

    def __init__(self, config):
        problem = _config_problem(config)
        if problem:
            raise ValueError(problem)
        self._presentation = config["presentation"]
        self._budget = config["turn_budget"]
        self._turns = 0
        self._db = sqlite3.connect(":memory:", isolation_level=None)
        self._world = World(self._db, config["params"], config["episode_seed"], SKIN)  # noqa: F821  (both follow)
        self._specs = {tool["name"]: tool for tool in SKIN["tools"]}  # noqa: F821
        self.tools = [
            {"name": t["name"], "description": t["description"], "input_schema": t["input_schema"]}
            for t in SKIN["tools"]  # noqa: F821
        ]
        self.instruction = self._world.instruction(self._presentation, self._budget)

    @property
    def done(self):
        return self._world.over() or self._turns >= self._budget

    def call(self, name, arguments):
        if self.done:
            return {"ok": False, "error": "the episode is over; no more tool calls are accepted"}
        spec = self._specs.get(name) if isinstance(name, str) else None
        if spec is None:
            return {"ok": False, "error": "unknown tool %r; expected one of %s" % (name, sorted(self._specs))}
        problem = schema_problem(spec["input_schema"], arguments)
        if problem:
            return {"ok": False, "error": "%s: %s" % (name, problem)}
        cost = spec.get("turn_cost", 1)
        if self._turns + cost > self._budget:
            return {"ok": False, "error": "%s needs %d turns, %d left" % (name, cost, self._budget - self._turns)}
        self._db.execute("SAVEPOINT tool_call")
        try:
            result = getattr(self._world, "tool_" + spec["canonical"])(**arguments)
        except AgentError as exc:
            self._db.execute("ROLLBACK TO tool_call")
            self._db.execute("RELEASE tool_call")
            return {"ok": False, "error": "%s: %s" % (name, exc)}
        self._db.execute("RELEASE tool_call")
        self._turns += cost
        if self._turns >= self._budget and not self._world.over():
            self._world.run_out()
        result = dict(result)
        result["ok"] = True
        result["turns_left"] = self._budget - self._turns
        return result

    def outcome(self):
        return {"utility": float(self._world.utility()), "terminal": self.done, "turns_used": self._turns}

    def state_digest(self):
        """SHA-256 of the whole world state (for the gates' rollback and determinism checks)."""
        dump = "\n".join(self._db.iterdump())
        return hashlib.sha256(("%s|%d" % (dump, self._turns)).encode("utf-8")).hexdigest()


def create(config):
    return Env(config)
