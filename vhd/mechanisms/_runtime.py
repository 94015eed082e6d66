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


# -- how a world writes ids and names arguments (issue 29: worlds that differ) ------------------
# A World counts its entities 0, 1, 2...; a world's skin may show them as those numbers
# ("number"), from 1 ("ordinal") or as codes such as P-07 ("code:P", the 7th), and may call an
# argument by its world's noun (`parcel` for knapsack's `item`). The translation is exact and
# strict both ways, so a call the module refuses as malformed is malformed for the World too.
ID_STYLES = ("number", "ordinal", "code")


def show_id(style, k):
    """The id `k` (0-based) as a world of `style` writes it.

        >>> [show_id(style, 6) for style in ("number", "ordinal", "code:P")]
        [6, 7, 'P-07']
    """
    if style == "ordinal":
        return k + 1
    if style.startswith("code:"):
        return "%s-%02d" % (style[5:], k + 1)
    return k


def read_id(style, value):
    """The 0-based id a world of `style` means by `value`; `value` itself when it is no id of
    that style (a malformed argument stays malformed).

        >>> read_id("code:P", "P-07"), read_id("code:P", "P-7"), read_id("ordinal", 7), read_id("ordinal", True)
        (6, 'P-7', 6, True)
    """
    if not isinstance(value, (int, str)) or isinstance(value, bool):
        return value
    if style == "ordinal":
        return value - 1 if isinstance(value, int) else value
    if style.startswith("code:"):
        digits = value.rpartition("-")[2] if isinstance(value, str) else ""
        if digits.isdigit() and digits.isascii() and show_id(style, int(digits) - 1) == value:
            return int(digits) - 1
        return value
    return value


def argument_maps(properties, ids, skin):
    """({canonical argument: its name in the world}, {canonical argument: its id style}) of one tool
    whose schema has `properties`, for a World with `IDS` = `ids` ({key: kind}) in `skin`."""
    renamed, styles = skin.get("renamed", {}), skin.get("ids", {})
    names = {key: renamed[key] for key in properties if key in renamed}
    shown = {key: styles.get(ids[key], "number") for key in properties if key in ids}
    return names, shown


def shown_arguments(maps, arguments):
    """A call's canonical arguments as the world's tool takes them (`maps`: `argument_maps`)."""
    names, styles = maps
    if not isinstance(arguments, dict):
        return arguments
    return {names.get(key, key): (show_id(styles[key], value) if key in styles and isinstance(value, int)
                                  and not isinstance(value, bool) else value)
            for key, value in arguments.items()}


def canonical_arguments(maps, arguments):
    """A call's arguments in the world's names and ids as the World takes them (the inverse of
    `shown_arguments`; an argument the world does not name keeps its name, and is then unknown)."""
    names, styles = maps
    if not isinstance(arguments, dict):
        return arguments
    back = {shown: key for key, shown in names.items()}
    out = {}
    for key, value in arguments.items():
        canonical = back.get(key, key if key not in names else "\x00" + key)  # a canonical name the world renamed: unknown
        out[canonical] = read_id(styles[canonical], value) if canonical in styles else value
    return out


def style_of(spec):
    """The id style ("number", "ordinal" or "code") an argument's shown schema says it takes, or
    None for an argument that is no id (the note `shown_schema` ends its description with)."""
    description = spec.get("description", "") if isinstance(spec, dict) else ""
    for style, note in (("code", "(a code, "), ("ordinal", "(a number, 1 for the first)"),
                        ("number", "(a number, 0 for the first)")):
        if note in description and (style != "code" or description.endswith("for the first)")):
            return style
    return None


def shown_schema(schema, maps):
    """A tool's (fitted) canonical input schema as the world shows it: its arguments renamed, and
    an id's bounds in the world's style (from 1; or the codes, listed)."""
    names, styles = maps
    if not names and not styles:
        return schema
    properties = {}
    for key, spec in schema.get("properties", {}).items():
        spec = dict(spec)
        style = styles.get(key)
        if style is not None:
            told = "%s (%s %s for the first)" % (spec.get("description", ""), "a code," if style.startswith("code:")
                                                else "a number,", show_id(style, 0))
            if style.startswith("code:"):
                codes = [show_id(style, k) for k in range(int(spec["minimum"]), int(spec["maximum"]) + 1)]
                spec = {"type": "string", "enum": codes}
            elif style == "ordinal":
                spec["minimum"], spec["maximum"] = spec["minimum"] + 1, spec["maximum"] + 1
            spec["description"] = told.strip()
        properties[names.get(key, key)] = spec
    out = dict(schema, properties=properties)
    if "required" in schema:
        out["required"] = [names.get(key, key) for key in schema["required"]]
    return out


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
    IDS = {}  # {argument or answer key: kind}: the keys whose values are 0-based ids of one kind of entity
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

    def ref(self, kind, k):
        """Entity `k` (0-based) of `kind` as this world writes ids (`show_id`): 6, 7 or "P-07"."""
        return show_id(self.skin.get("ids", {}).get(kind, "number"), k)

    def shown(self, answer, key=None):
        """An answer as this world writes it: every value under a key of `IDS` in the world's id
        style, keys renamed as its arguments are (as it is in a world that restyles nothing)."""
        if key is None and not self.IDS and not self.skin.get("renamed"):
            return answer
        if isinstance(answer, dict):
            renamed = self.skin.get("renamed", {})
            return {renamed.get(k, k): self.shown(v, k) for k, v in answer.items()}
        if isinstance(answer, (list, tuple)):
            return [self.shown(v, key) for v in answer]
        if key in self.IDS and isinstance(answer, int) and not isinstance(answer, bool):
            return self.ref(self.IDS[key], answer)
        return answer

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
        self._specs = {}
        for tool in SKIN["tools"]:  # noqa: F821
            maps = argument_maps(tool["input_schema"].get("properties", {}), World.IDS, SKIN)  # noqa: F821
            schema = shown_schema(fitted(tool["input_schema"], limits.get(tool["canonical"])), maps)
            self._specs[tool["name"]] = dict(tool, input_schema=schema, maps=maps)
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
            method = getattr(self._world, "tool_" + spec["canonical"])
            result, ok = self._world.shown(dict(method(**canonical_arguments(spec["maps"], arguments)))), True
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
