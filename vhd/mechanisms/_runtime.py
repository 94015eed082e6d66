"""The standard-library half of every family: the rules of play (`Env`) and what every `World` shares.

    >>> from vhd.tasks.grading.oracle import reference_module   # this file + inventory_dp's World + a SKIN
    >>> module, _ = reference_module(registry.get("inventory_dp"))
    >>> env = module.create({"params": theta, "presentation": "I", "episode_seed": 3, "turn_budget": 40})
    >>> env.call("view_stock", {})       # the skin's names (a bakery): the family's words, its unit in order_loaves
    {'on_hand': 5, 'in_transit': 0, 'ordered_today': 0, 'capacity': 14, 'ok': True, 'turns_left': 39}
    >>> env.call("place_order", {"quantity": 2})["error"]   # the canonical name of order_loaves: malformed, free
    "unknown tool 'place_order'; expected one of ['cancel_order', 'end_day', ...]"
    >>> env.call("order_loaves", {"quantity": 2})
    {'ordered_today': 2, 'ok': True, 'turns_left': 38}
    >>> env.call("order_loaves", {"quantity": 14})   # over the shelf: the world refuses it, and the turn is used
    {'ok': False, 'error': 'order_loaves: ...', 'turns_left': 37}

The template setter pastes this file's source (without this docstring), then a family's `World`
class (a `BaseWorld`), then a `SKIN` dict into one module, so the module runs with no part of this
project installed; in-process, the families' Worlds subclass the same `BaseWorld` and raise the
same `AgentError`. `Env` implements the contract of DESIGN §5: argument validation against each
tool's JSON Schema, turn accounting, and all-or-nothing calls (every tool runs inside a SQLite
savepoint; an `AgentError` rolls the world back and is reported as {"ok": False, "error": ...}).
A `World` keeps all of its mutable state in the SQLite database, so that rollback is total.

A refusal by the world uses the call's turns, as an accepted call would: what a refused decision
tells about hidden θ (a cap exceeded, a stop out of reach) is then paid for like a probe, never a
free oracle. A malformed call (an unknown tool, arguments outside the tool's schema, which in
presentation A is fitted only to what the instruction tells) and a call that needs more turns than
are left carry nothing hidden and stay free; the call limit bounds them.
"""

import hashlib
import json  # noqa: F401  (SKIN = json.loads(...) and World use it)
import math
import random  # noqa: F401  (for World)
import sqlite3
import threading

ENV_API = 3  # what a module offers its callers (CHANGELOG.md: 3 made a refusal by the world use its turn)
PRESENTATIONS = ("I", "A")


def call_limit(turn_budget):
    """Tool calls an episode accepts in all, refused ones included: twice the turn budget plus 50."""
    return 2 * turn_budget + 50


class AgentError(Exception):
    """A mistake by the player: reported, never raised out of `Env.call`."""


class BaseWorld:
    """What every family's `World` shares: θ, the skin's names, a key-value state table, a log.

    A World is one episode of a family's decision process kept in the SQLite database `db`, all
    of its mutable state included (so a refused call rolls back completely). A subclass names the
    θ keys it reads in `PARAMS` and the state table's keys with their first values in `STATE`,
    calls this `__init__` first and then creates its own tables (their skinned names are in
    `self.t`), and defines:

    - `over()`: whether the episode has ended; `utility()`: what it has realised so far;
    - `run_out()`: end the episode as the instruction says it ends when the turns run out (the
      answer of the call that used the last turn then passes through `after_run_out`);
    - `instruction(presentation, turn_budget)`: what the player reads ("I": θ given, "A": probed);
    - optionally `limits(presentation)`: the bounds of this θ's tool arguments (an id below the
      number of lots, an amount below the capacity), which `Env` writes into the tool schemas it
      shows and checks: θ's own in I, and in A only what the instruction tells (never a hidden number);
    - one `tool_<canonical name>` method per tool, declared with `vhd.mechanisms.tool` (the
      declarations are the family's tool table; the template setter leaves them out of modules,
      whose skin carries the tools). A player's mistake raises `AgentError`.

    Shared helpers: `pick`/`draw_index` (integer weighted draws), `_count` (a count with its noun
    in agreement), `_idle_to_end` (the `run_out` of a World played period by period) and
    `_not_given` (presentation A's sentence on the θ not given).
    """

    PARAMS = ()
    STATE = ()
    presentation = "I"  # set by `Env`: in "A" an answer shows no hidden number the player has not read

    def __init__(self, db, params, episode_seed, skin):
        missing = [key for key in self.PARAMS if key not in params]
        if missing:
            raise ValueError("params lack %s" % ", ".join(missing))
        self.db, self.p, self.skin, self.episode_seed = db, params, skin, episode_seed
        self.t, self.v = skin["tables"], skin["vocab"]
        self.name = {tool["canonical"]: tool["name"] for tool in skin["tools"]}
        db.execute("CREATE TABLE %s (key TEXT PRIMARY KEY, value INTEGER)" % self.t["state"])
        db.executemany("INSERT INTO %s VALUES (?, ?)" % self.t["state"], list(self.STATE))

    def _get(self, key):
        """A value of the state table."""
        return self.db.execute("SELECT value FROM %s WHERE key = ?" % self.t["state"], (key,)).fetchone()[0]

    def _set(self, key, value):
        self.db.execute("UPDATE %s SET value = ? WHERE key = ?" % self.t["state"], (value, key))

    def _mark_read(self, probe, entry):
        """Record in the state table that the player has read `entry` with `probe` (presentation A's
        answers show what the player has read, and nothing else hidden)."""
        self.db.execute("INSERT OR IGNORE INTO %s VALUES (?, 1)" % self.t["state"], ("read %s %s" % (probe, entry),))

    def _was_read(self, probe, entry):
        return self.db.execute("SELECT 1 FROM %s WHERE key = ?" % self.t["state"],
                               ("read %s %s" % (probe, entry),)).fetchone() is not None

    def _log(self, action, **columns):
        """Append one entry to the log table: its `action` and the named columns."""
        names = ["action"] + list(columns)
        self.db.execute("INSERT INTO %s (%s) VALUES (%s)" % (self.t["log"], ", ".join(names), ", ".join("?" * len(names))),
                        [action] + list(columns.values()))

    @staticmethod
    def pick(weights, position):
        """The index k whose share of the integer `weights` holds `position` (0 ≤ position <
        sum(weights)): the least k with position < weights[0] + … + weights[k].

            >>> [BaseWorld.pick([2, 0, 3], position) for position in range(5)]
            [0, 0, 2, 2, 2]
        """
        k = 0
        while position >= weights[k]:
            position -= weights[k]
            k += 1
        return k

    @staticmethod
    def draw_index(rng, weights):
        """An index drawn with probability proportional to the integer `weights`: one
        `rng.randrange(sum(weights))` ticket, picked (an integer inverse-CDF draw)."""
        return BaseWorld.pick(weights, rng.randrange(sum(weights)))

    def _idle_to_end(self, close, **dropped):
        """`run_out` of a World played period by period: this period's undecided state is reset
        (`dropped`: state keys and the values that mean "nothing decided"), then `close` (the
        clock tool) runs until the episode is over, every remaining period passing with nothing done."""
        for key, value in dropped.items():
            self._set(key, value)
        while not self.over():
            close()

    def _not_given(self, what, probes):
        """Presentation A's sentence on the θ not given and the probes (canonical names, a turn
        each) that reveal it: "<what> are not given: <A>, <B> and <C> reveal them, each at the cost
        of a turn from the same budget." """
        names = [self.name[probe] for probe in probes]
        listed = names[0] if len(names) == 1 else "%s and %s" % (", ".join(names[:-1]), names[-1])
        return ("%s are not given: %s reveal%s them, each at the cost of a turn from the same budget."
                % (what, listed, "s" if len(names) == 1 else ""))

    def _count(self, n, plural=None, one=None):
        """"n noun" with the noun agreeing with n: the passage's unit by default (the skin's `unit`,
        its singular `unit_one`), else `plural`, singular `one` ("1 unit", "2 units")."""
        if plural is None:
            plural, one = self.v["unit"], self.v.get("unit_one", self.v["unit"])
        return "%s %s" % (n, one if n == 1 else plural)

    def after_run_out(self, answer):
        """The answer of the call that used the last turn, once `run_out` has ended the episode:
        it says so (`episode_over`); a World whose answers report the episode's status restates it."""
        answer["episode_over"] = "the turns ran out; the rest of the episode was played as the instruction says"
        return answer

    def over(self):
        raise NotImplementedError

    def utility(self):
        raise NotImplementedError

    def run_out(self):
        raise NotImplementedError

    def instruction(self, presentation, turn_budget):
        raise NotImplementedError

    def limits(self, presentation):
        """{canonical tool: {argument: (low, high)}}: the instance's bounds of tool arguments, which
        narrow the family's schema (never widen it). In presentation A a bound may only use what the
        instruction tells: a leak check compares the A tool list of worlds that differ in hidden θ."""
        return {}


def fitted(schema, bounds):
    """`schema` with each argument's minimum and maximum narrowed to `bounds` {argument: (low, high)}
    (a copy; arguments not named keep the family's bounds)."""
    if not bounds:
        return schema
    properties = dict(schema["properties"])
    for name, (low, high) in bounds.items():
        spec = dict(properties[name])
        spec["minimum"] = max(spec.get("minimum", low), low)
        spec["maximum"] = max(spec["minimum"], min(spec.get("maximum", high), high))
        properties[name] = spec
    return dict(schema, properties=properties)


_JSON_TYPES = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
}


def _shown(value):
    """A short, safe description of an argument's value for a refusal (no deep or long repr)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return "an integer of %d bits" % value.bit_length()
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)[:40]
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    return "a JSON %s" % ("array" if isinstance(value, (list, tuple)) else "object" if isinstance(value, dict)
                           else type(value).__name__)


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
            return "unknown argument %r; expected only %s" % (name[:64], sorted(properties) or "no arguments")
        kind = spec.get("type")
        if kind in _JSON_TYPES and not _JSON_TYPES[kind](value):
            return "argument %r must be of type %s, got %s" % (name, kind, _shown(value))
        if kind not in _JSON_TYPES and not isinstance(value, (bool, int, float, str)):
            return "argument %r must be a single value, got %s" % (name, _shown(value))
        if "minimum" in spec and value < spec["minimum"]:
            return "argument %r must be >= %s, got %s" % (name, spec["minimum"], _shown(value))
        if "maximum" in spec and value > spec["maximum"]:
            return "argument %r must be <= %s, got %s" % (name, spec["maximum"], _shown(value))
        if "maxLength" in spec and len(value) > spec["maxLength"]:
            return "argument %r must be at most %d characters, got %d" % (name, spec["maxLength"], len(value))
        if "enum" in spec and value not in spec["enum"]:
            return "argument %r must be one of %s, got %s" % (name, spec["enum"], _shown(value))
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
        self._limit = call_limit(self._budget)
        self._turns = 0
        self._calls = 0
        self._finished = False
        self._lock = threading.RLock()
        self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._world = World(self._db, config["params"], config["episode_seed"], SKIN)  # noqa: F821  (both follow)
        self._world.presentation = self._presentation
        limits = self._world.limits(self._presentation)
        self._specs = {tool["name"]: dict(tool, input_schema=fitted(tool["input_schema"], limits.get(tool["canonical"])))
                       for tool in SKIN["tools"]}  # noqa: F821
        self.tools = [{"name": t["name"], "description": t["description"], "input_schema": t["input_schema"]}
                      for t in self._specs.values()]
        self.instruction = "%s\n\n%s" % (self._world.instruction(self._presentation, self._budget), self.rules())

    def rules(self):
        """The rules of play every environment shares (the end of the instruction)."""
        return ("Rules of play: a call the world refuses (its answer has \"ok\": false) changes nothing but uses "
                "its turns, as an accepted call would; a malformed call (an unknown tool, or arguments outside "
                "the tool's schema) is refused without using a turn. The episode also ends after %d tool calls "
                "in all, refused ones included; an episode that ends early, or that you stop, is finished as "
                "when the turns run out." % self._limit)

    @property
    def done(self):
        with self._lock:
            return self._finished or self._world.over() or self._turns >= self._budget

    def call(self, name, arguments):
        with self._lock:
            if self.done:
                return {"ok": False, "error": "the episode is over; no more tool calls are accepted"}
            self._calls += 1
            answer = self._call(name, arguments)
            if self._calls >= self._limit and not self.done:
                self.finish()
                answer["episode_over"] = "the episode ended: %d tool calls in all is the limit" % self._limit
            return answer

    def _call(self, name, arguments):
        spec = self._specs.get(name) if isinstance(name, str) else None
        if spec is None:
            shown = repr(name[:64]) if isinstance(name, str) else _shown(name)
            return {"ok": False, "error": "unknown tool %s; expected one of %s" % (shown, sorted(self._specs))}
        problem = schema_problem(spec["input_schema"], arguments)
        if problem:
            return {"ok": False, "error": "%s: %s" % (name, problem)}
        cost = spec.get("turn_cost", 1)
        if self._turns + cost > self._budget:
            return {"ok": False, "error": "%s needs %d turns, %d left" % (name, cost, self._budget - self._turns)}
        self._db.execute("SAVEPOINT tool_call")
        try:
            result, ok = dict(getattr(self._world, "tool_" + spec["canonical"])(**arguments)), True
        except AgentError as exc:
            self._db.execute("ROLLBACK TO tool_call")
            result, ok = {"ok": False, "error": "%s: %s" % (name, exc)}, False
        self._db.execute("RELEASE tool_call")
        self._turns += cost  # refused or not: a refusal by the world is paid for like a probe
        if self._turns >= self._budget and not self._world.over():
            self._world.run_out()
            result = self._world.after_run_out(result)
        result["ok"] = ok
        result["turns_left"] = self._budget - self._turns
        return result

    def finish(self):
        """End the episode now, by the instruction's rule for running out of turns (the World's
        `run_out`): what every surface does with an episode the player stopped or left unfinished.
        Idempotent; returns outcome()."""
        with self._lock:
            if not self.done:
                self._world.run_out()
            self._finished = True
            return self.outcome()

    def outcome(self):
        with self._lock:
            return {"utility": float(self._world.utility()), "terminal": self.done, "turns_used": self._turns,
                    "calls_used": self._calls}

    def state_digest(self):
        """SHA-256 of the whole world state, the turns used apart (for the gates' rollback checks: a
        refusal changes nothing in the world, whether or not it used its turn)."""
        with self._lock:
            return hashlib.sha256("\n".join(self._db.iterdump()).encode("utf-8")).hexdigest()


def create(config):
    return Env(config)
