"""Mutants of an admitted module for the checker self-test (`vhd/tasks/stages/check/selftest.py`): one
deliberate bug each.

    >>> made = mutants(family, setter_output, theta, 0.0, np.random.default_rng(0))   # an admitted module's
    >>> [(m.operator, m.where) for m in made][4:9]
    [('drop_check', 'tool_place_order'), ('drop_check', 'tool_cancel_order'), ('shift_horizon', '7 reads of horizon'),
     ('free_probe', 'get_cost_sheet'), ('leak_hidden', 'tool_view_stock returns unit_cost')]

A mutant is the module with one deliberate bug in its `World` class or in the `BaseWorld` it
extends (found with `ast`, so a mutation never lands in a comment or the rest of the runtime):

| operator | what it does |
|---|---|
| `flip_operator` | one `+`↔`-`, `*`→`+`, `<`↔`<=` or `>`↔`>=` in a method that moves the world (tools of role decision or clock, private helpers, `utility`, `run_out`), outside error messages and the observations a tool returns (its `return` and the dict it builds into the returned name) |
| `scale_cost` | one read of a numeric θ field in such a method, doubled |
| `drop_check` | one `raise AgentError(...)` in a decision or clock tool replaced by `pass` |
| `shift_horizon` | every read of θ's horizon-like field (`horizon`, `n_periods`…) plus one |
| `free_probe` | a probe's turn cost set to 0 in the module's tool table |
| `leak_hidden` | a no-argument observation tool also returns one hidden θ field |
| `side_channel` | the first decision tool's answer also echoes the last entry of one hidden θ list, which no probe was paid for (deterministic families: a stochastic family's answers report draws of hidden θ by design) |
| `constant_utility` | `utility()` returns π*'s utility on the first candidate's episode whatever happened |
| `stale_state` | the runtime's `BaseWorld._set` writes nothing (every World keeps its state table through it) |

Equivalent survivors (the change cannot alter any outcome) count as survivors all the same, but
for four kinds of site skipped before mutating, whose mutant is provably the module itself on a judged candidate:
a `scale_cost` site whose θ field is 0 in a judged θ (2·0 = 0), or that only bounds an id argument
whose field, in a judged θ, is past the largest id the fitted schemas accept (`0 <= id < n` and
`0 <= id < 2n` accept the same calls); a `drop_check` site whose `if` is directly followed by
another `raise AgentError` (refused anyway; only the message changes); and a `drop_check`,
`scale_cost` or `flip_operator` site in the guard of a tool's `if …: raise AgentError(…)` whose
test reads only θ and the tool's integer arguments, where the mutated guard refuses exactly the
calls the module's refuses among every call the schemas fitted to each judged θ accept
(`_same_refusals`: the runtime refuses every other call before the World sees it). They are
reported as `equivalent_skipped` (listed under `equivalent`), neither mutants nor survivors.
"""

from __future__ import annotations

import ast
import difflib
import itertools
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from vhd.mechanisms import Family
from vhd.schemas.records import SetterOutputRecord
from vhd.tasks.setters.skin import skin_of, with_skin
from vhd.tasks.grading.oracle import fitted_schemas

SITES_PER_OPERATOR = 2
HORIZON_FIELDS = ("horizon", "n_periods", "n_days", "days", "rounds")
_FLIPS: dict[type, type] = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.Lt: ast.LtE, ast.LtE: ast.Lt,
                            ast.Gt: ast.GtE, ast.GtE: ast.Gt}


@dataclass(frozen=True)
class Mutant:
    operator: str
    where: str
    module: str


def _world_span(module: str) -> tuple[int, int]:
    start = module.index("\nclass World")
    end = module.rindex("\nSKIN = json.loads(")
    return start + 1, end


def _outside_messages(method: ast.FunctionDef) -> Iterator[ast.AST]:
    """The nodes of a tool method outside `raise` and `return` statements and outside the dict
    literal a tool builds into the name it returns: an error message or an observation is not
    dynamics (helpers and `utility` keep their returns: those are values)."""
    kinds = (ast.Raise, ast.Return) if method.name.startswith("tool_") else (ast.Raise,)
    skip = {id(node) for r in ast.walk(method) if isinstance(r, kinds) for node in ast.walk(r)}
    if method.name.startswith("tool_"):  # `out = {...}; out.update({...}); return out`: an observation too
        returned = {r.value.id for r in ast.walk(method) if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)}
        built = [a.value for a in ast.walk(method) if isinstance(a, ast.Assign) and isinstance(a.value, ast.Dict)
                 and any(isinstance(t, ast.Name) and t.id in returned for t in a.targets)]
        built += [c for c in ast.walk(method) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                  and c.func.attr == "update" and isinstance(c.func.value, ast.Name) and c.func.value.id in returned]
        skip |= {id(node) for b in built for node in ast.walk(b)}
    return (node for node in ast.walk(method) if id(node) not in skip)


def _dynamics_methods(family: Family, world: ast.ClassDef) -> list[ast.FunctionDef]:
    moving = {"tool_" + t.name for t in family.tools if t.role in ("decision", "clock")}
    return [node for node in world.body if isinstance(node, ast.FunctionDef)
            and (node.name in moving or node.name in ("utility", "run_out")
                 or (node.name.startswith("_") and not node.name.startswith("__")))]


def _theta_reads(node: ast.AST, keys: set[str]) -> Iterator[ast.Subscript]:
    """`p["k"]`, `self.p["k"]`, `params["k"]` reads of θ keys (outside error messages)."""
    nodes = _outside_messages(node) if isinstance(node, ast.FunctionDef) else ast.walk(node)
    for sub in nodes:
        if (isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Load) and isinstance(sub.slice, ast.Constant)
                and sub.slice.value in keys):
            base = sub.value
            if (isinstance(base, ast.Name) and base.id in ("p", "params", "theta")) or (
                    isinstance(base, ast.Attribute) and base.attr in ("p", "params", "theta")):
                yield sub


_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _id_bounds(schemas: list[dict[str, Any]], method: ast.FunctionDef, sub: ast.Subscript) -> int | None:
    """The largest id the tool `schemas` (fitted to a θ) accept for the argument that θ read `sub`
    bounds, when `sub` only bounds an id: `n = p["k"]` (or `p["k"]` itself) is used only in order
    comparisons with one of the method's parameters, which is an integer argument (minimum ≥ 0,
    with a maximum) of the tools. None otherwise. (`0 <= town < n` or `product >= n`.)"""
    params = {a.arg for a in method.args.args[1:]}
    maxima: dict[str, list[int]] = {}
    for schema in schemas:
        for key, prop in schema.get("properties", {}).items():
            if key in params and prop.get("type") == "integer":
                if prop.get("minimum", -1) < 0 or "maximum" not in prop:
                    return None
                maxima.setdefault(key, []).append(prop["maximum"])
    if not maxima:
        return None
    parents = {id(child): node for node in ast.walk(method) for child in ast.iter_child_nodes(node)}
    raises = {id(n) for r in ast.walk(method) if isinstance(r, ast.Raise) for n in ast.walk(r)}

    def bounded(node: ast.AST) -> set[str] | None:  # the parameters a Compare holding `node` orders it against
        parent = parents.get(id(node))
        if not isinstance(parent, ast.Compare) or not all(type(op) in _ORDER for op in parent.ops):
            return None
        names = {x.id for x in [parent.left, *parent.comparators] if isinstance(x, ast.Name)} & set(maxima)
        return names or None

    parent = parents.get(id(sub))
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        name = parent.targets[0].id
        uses = [n for n in ast.walk(method) if isinstance(n, ast.Name) and n.id == name
                and isinstance(n.ctx, ast.Load) and id(n) not in raises]
        found = [bounded(n) for n in uses]
        if not uses or any(f is None for f in found):
            return None
        ids = set().union(*found)
    else:
        ids = bounded(sub)
        if ids is None:
            return None
    return max(m for key in ids for m in maxima[key])


def _agent_error(node: ast.AST) -> bool:
    return isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and getattr(node.exc.func, "id", "") == "AgentError"


def _refused_anyway(method: ast.FunctionDef, raise_: ast.Raise) -> bool:
    """`if c: raise AgentError(a)` directly followed by `raise AgentError(b)`: without the first
    raise the call is refused by the second, with only the message changed (and messages are the
    setter's wording, which no gate compares). Dropping it is an equivalent mutant."""
    for block in (getattr(node, "body", None) for node in ast.walk(method)):
        if not isinstance(block, list):
            continue
        for stmt, following in zip(block, block[1:]):
            if isinstance(stmt, ast.If) and not stmt.orelse and stmt.body and stmt.body[-1] is raise_ \
                    and _agent_error(following):
                return True
    return False


class _Unknown(Exception):
    """An expression `_value` cannot evaluate from θ and the tool's arguments alone."""


_ARITHMETIC = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b, ast.Div: lambda a, b: a / b}
_COMPARE = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
            ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}
_CALLS = {"len": len, "min": min, "max": max, "abs": abs}


def _value(node: ast.AST, theta: dict[str, Any], names: dict[str, Any], local: dict[str, ast.AST],
           swapped: dict[int, ast.AST | None]) -> Any:
    """`node`'s value from θ, the tool's arguments (`names`) and the locals assigned once from
    such values (`local`), with the nodes in `swapped` replaced; `_Unknown` for anything else
    (state, attributes, calls beyond len/min/max/abs)."""
    def value(n: ast.AST) -> Any:
        return _value(n, theta, names, local, swapped)

    if id(node) in swapped:  # the replacement may hold the node it replaces (`2 * p["k"]`): not swapped again
        return _value(swapped[id(node)], theta, names, local, {})
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in names:
            return names[node.id]
        if node.id in local:  # without itself: `n = n + 1` is not a definition
            return _value(local[node.id], theta, names, {k: v for k, v in local.items() if k != node.id}, swapped)
        raise _Unknown(node.id)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in theta and (
            (isinstance(node.value, ast.Name) and node.value.id in ("p", "params", "theta"))
            or (isinstance(node.value, ast.Attribute) and node.value.attr in ("p", "params", "theta"))):
        return theta[node.slice.value]
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        return -value(node.operand) if isinstance(node.op, ast.USub) else not value(node.operand)
    if isinstance(node, ast.BoolOp):
        values = [value(v) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        sides = [value(node.left), *(value(c) for c in node.comparators)]
        return all(_COMPARE[type(op)](a, b) for op, a, b in zip(node.ops, sides, sides[1:]))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS
            and not node.keywords):
        return _CALLS[node.func.id](*(value(a) for a in node.args))
    raise _Unknown(ast.unparse(node))


Ranges = list[dict[str, dict[str, tuple[str, float, float]]]]  # per judged θ: {tool: {argument: (type, low, high)}}
MOST_CALLS = 4096  # schema-valid argument combinations `_same_refusals` enumerates at most


def _ranges(family: Family, schemas: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> Ranges:
    """Per judged θ, every tool argument's type and widest bounds in θ's fitted schemas."""
    names = [spec.name for spec in family.tools]
    out: Ranges = []
    for _, fitted in schemas:
        tools: dict[str, dict[str, tuple[str, float, float]]] = {}
        for name, schema in zip(names * 2, fitted):
            for argument, prop in schema.get("properties", {}).items():
                low, high = prop.get("minimum", -float("inf")), prop.get("maximum", float("inf"))
                kind, known_low, known_high = tools.setdefault(name, {}).get(argument, (prop.get("type"), low, high))
                tools[name][argument] = (kind, min(low, known_low), max(high, known_high))
        out.append(tools)
    return out


def _same_refusals(method: ast.FunctionDef, thetas: list[dict[str, Any]], ranges: Ranges, target: ast.AST,
                   replacement: ast.AST | None) -> bool:
    """True when `target` lies in the guard of an `if …: raise AgentError(…)` of a tool whose test
    reads only θ and the tool's integer arguments (never reassigned), and the guard with `target`
    replaced (`replacement`; None: the raise dropped) refuses exactly the calls it refused, among
    every call the schemas fitted to each judged θ accept. The runtime refuses every other call
    before the World sees it, so such a mutant is the module itself through `Env`."""
    if not method.name.startswith("tool_"):
        return False
    parents = {id(child): node for node in ast.walk(method) for child in ast.iter_child_nodes(node)}
    guard, node = None, target
    while id(node) in parents:
        node, child = parents[id(node)], node
        if isinstance(node, ast.If):
            guard = node if child is node.test or (child in node.body and child is target) else None
            break
    if guard is None or len(guard.body) != 1 or not _agent_error(guard.body[0]) or guard.orelse:
        return False
    stores = [n.id for n in ast.walk(method) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    parameters = {a.arg for a in method.args.args[1:]}
    arguments = parameters - set(stores)
    local = {a.targets[0].id: a.value for a in ast.walk(method) if isinstance(a, ast.Assign) and len(a.targets) == 1
             and isinstance(a.targets[0], ast.Name) and a.targets[0].id not in parameters
             and stores.count(a.targets[0].id) == 1 and a.lineno < guard.lineno}
    used = sorted({n.id for n in ast.walk(guard.test) if isinstance(n, ast.Name)} & arguments)
    swapped = {} if replacement is None else {id(target): replacement}
    for theta, tools in zip(thetas, ranges):
        bounds = tools.get(method.name[len("tool_"):], {})
        if any(bounds.get(a, ("", 0, 0))[0] != "integer" or not all(map(np.isfinite, bounds[a][1:])) for a in used):
            return False
        grid = [range(int(bounds[a][1]), int(bounds[a][2]) + 1) for a in used]
        if int(np.prod([len(g) for g in grid])) > MOST_CALLS:
            return False
        for values in itertools.product(*grid):
            names = dict(zip(used, values))
            try:
                before = bool(_value(guard.test, theta, names, local, {}))
                after = False if replacement is None else bool(_value(guard.test, theta, names, local, swapped))
            except (_Unknown, ArithmeticError, TypeError, IndexError, KeyError):
                return False
            if before != after:
                return False
    return True


def _guard_test(method: ast.FunctionDef, raise_: ast.Raise) -> ast.AST:
    """The test of the `if` whose body is `raise_`."""
    return next(node.test for node in ast.walk(method) if isinstance(node, ast.If) and raise_ in node.body)


def _splice(module: str, world: ast.AST) -> str:
    start, end = _world_span(module)
    return module[:start] + ast.unparse(ast.fix_missing_locations(world)) + "\n\n" + module[end:]


def _parsed(module: str) -> ast.ClassDef:
    start, end = _world_span(module)
    tree = ast.parse(module[start:end])
    return next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "World")


class _Swap(ast.NodeTransformer):
    """Replace one node (by identity) with `make(node)`."""

    def __init__(self, target: ast.AST, make: Callable[[Any], ast.AST]):
        self.target, self.make = target, make

    def visit(self, node: ast.AST) -> ast.AST:
        if node is self.target:
            return self.make(node)
        return super().visit(node)


def _each_site(module: str, find: Callable[[ast.ClassDef], list], make: Callable[[Any], ast.AST], operator: str,
               rng: np.random.Generator) -> list[Mutant]:
    """Up to SITES_PER_OPERATOR mutants, each with one site (chosen by `rng`) replaced by `make`."""
    sites = find(_parsed(module))
    picks = sorted(rng.choice(len(sites), size=min(SITES_PER_OPERATOR, len(sites)), replace=False)) if sites else []
    mutants = []
    for index in picks:
        world = _parsed(module)  # a fresh tree per mutant
        method, node = find(world)[int(index)]
        world = _Swap(node, make).visit(world)
        mutants.append(Mutant(operator, method, _splice(module, world)))
    return mutants


def _read(sub: ast.Subscript) -> ast.Subscript:
    return ast.Subscript(value=sub.value, slice=ast.Constant(sub.slice.value), ctx=ast.Load())


def mutants(family: Family, output: SetterOutputRecord, theta: dict[str, Any], u_constant: float,
            rng: np.random.Generator, thetas: list[dict[str, Any]] | None = None,
            equivalent: list[str] | None = None) -> list[Mutant]:
    """Every operator's mutants of one module (see the module docstring). `thetas`: the θ of
    every candidate the mutants will be judged on; a `scale_cost` site whose field is 0 in one of
    them is not mutated (2·0 = 0: on that candidate the mutant is the module itself, so it can
    never be rejected), and is appended to `equivalent` instead."""
    module = output.module
    numeric = {k for k, v in theta.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    zero = {k for k in numeric if any(t.get(k) == 0 for t in (thetas or [theta]))}

    horizon = [k for k in HORIZON_FIELDS if k in theta]
    moving = {"tool_" + t.name for t in family.tools if t.role in ("decision", "clock")}
    found: list[Mutant] = []

    judged = thetas or [theta]
    schemas = [(t, fitted_schemas(family, t)) for t in judged]
    ranges = _ranges(family, schemas)

    def flip(node):
        if isinstance(node, ast.BinOp):
            return ast.BinOp(node.left, _FLIPS[type(node.op)](), node.right)
        return ast.Compare(node.left, [_FLIPS[type(node.ops[0])](), *node.ops[1:]], node.comparators)

    def all_operators(world):
        return [(m, node) for m in _dynamics_methods(family, world) for node in _outside_messages(m)
                if (isinstance(node, ast.BinOp) and type(node.op) in _FLIPS)
                or (isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIPS)]

    def operators(world):
        return [(m.name, node) for m, node in all_operators(world)
                if not _same_refusals(m, judged, ranges, node, flip(node))]

    if equivalent is not None:
        equivalent += [f"flip_operator: {m.name}'s `{ast.unparse(node)}` flipped refuses the same schema-valid calls"
                       for m, node in all_operators(_parsed(module))
                       if _same_refusals(m, judged, ranges, node, flip(node))]
    found += _each_site(module, operators, flip, "flip_operator", rng)

    def past_schema(m, sub):  # an id bound above every id θ's fitted schemas accept, in a judged θ: 2n bounds the same ids
        return any(isinstance(t.get(sub.slice.value), int) and (top := _id_bounds(fitted, m, sub)) is not None
                   and t[sub.slice.value] > top for t, fitted in schemas)

    def cost_reads(world):
        zero_tests = {id(side) for m in _dynamics_methods(family, world) for c in ast.walk(m)
                      if isinstance(c, ast.Compare) and any(isinstance(x, ast.Constant) and x.value == 0
                                                            for x in [c.left, *c.comparators])
                      for side in [c.left, *c.comparators]}  # 2·x == 0 iff x == 0: an equivalent mutant
        return [(m.name, sub) for m in _dynamics_methods(family, world)
                for sub in _theta_reads(m, numeric - set(horizon) - zero) if id(sub) not in zero_tests
                and not past_schema(m, sub) and not _same_refusals(m, judged, ranges, sub, double(sub))]

    def double(sub):
        return ast.BinOp(ast.Constant(2), ast.Mult(), _read(sub))

    if equivalent is not None:
        equivalent += [f"scale_cost: {m.name} reads {sub.slice.value}, which is 0 in a judged θ"
                       for m in _dynamics_methods(family, _parsed(module))
                       for sub in _theta_reads(m, zero - set(horizon))]
        equivalent += [f"scale_cost: {m.name} bounds ids by {sub.slice.value}, which in a judged θ is past the "
                       f"largest id the tool schemas accept"
                       for m in _dynamics_methods(family, _parsed(module))
                       for sub in _theta_reads(m, numeric - set(horizon) - zero) if past_schema(m, sub)]
        equivalent += [f"scale_cost: {m.name} doubled {sub.slice.value} refuses the same schema-valid calls"
                       for m in _dynamics_methods(family, _parsed(module))
                       for sub in _theta_reads(m, numeric - set(horizon) - zero)
                       if not past_schema(m, sub) and _same_refusals(m, judged, ranges, sub, double(sub))]
    found += _each_site(module, cost_reads, double, "scale_cost", rng)

    def all_checks(world):
        return [(m, node) for m in world.body if isinstance(m, ast.FunctionDef) and m.name in moving
                for node in ast.walk(m) if _agent_error(node)]

    def checks(world):
        return [(m.name, node) for m, node in all_checks(world)
                if not _refused_anyway(m, node) and not _same_refusals(m, judged, ranges, node, None)]

    if equivalent is not None:
        equivalent += [f"drop_check: {m.name} refuses with its next statement anyway (only the message differs)"
                       for m, node in all_checks(_parsed(module)) if _refused_anyway(m, node)]
        equivalent += [f"drop_check: {m.name}'s `{ast.unparse(_guard_test(m, node))}` refuses no schema-valid call"
                       for m, node in all_checks(_parsed(module))
                       if not _refused_anyway(m, node) and _same_refusals(m, judged, ranges, node, None)]
    found += _each_site(module, checks, lambda node: ast.Pass(), "drop_check", rng)

    if horizon:
        world = _parsed(module)
        reads = list(_theta_reads(world, set(horizon)))
        for sub in reads:
            world = _Swap(sub, lambda s: ast.BinOp(_read(s), ast.Add(), ast.Constant(1))).visit(world)
        if reads:
            found.append(Mutant("shift_horizon", f"{len(reads)} reads of {horizon[0]}", _splice(module, world)))

    skin = skin_of(module)
    probes = [t for t in skin["tools"] if t["role"] == "probe"] if skin else []
    if probes:
        free = dict(skin, tools=[dict(t, turn_cost=0) if t is probes[0] else t for t in skin["tools"]])
        found.append(Mutant("free_probe", probes[0]["canonical"], with_skin(module, free)))

    hidden = [k for k in family.hidden if k in theta]
    looks = [t.name for t in family.tools if t.role == "observe" and not t.input_schema.get("required")]
    world = _parsed(module)
    store = next((sub.value for sub in _theta_reads(world, set(theta)) if isinstance(sub.value, ast.Attribute)), None)
    method = next((m for m in world.body if isinstance(m, ast.FunctionDef) and looks and m.name == "tool_" + looks[0]),
                  None)
    if hidden and method is not None and store is not None:
        key = hidden[int(rng.integers(len(hidden)))]
        for node in [n for n in ast.walk(method) if isinstance(n, ast.Return) and n.value is not None]:
            leak = ast.Subscript(value=store, slice=ast.Constant(key), ctx=ast.Load())
            node.value = ast.Call(ast.Name("dict", ast.Load()), [node.value], [ast.keyword("leaked", leak)])
        found.append(Mutant("leak_hidden", f"{method.name} returns {key}", _splice(module, world)))

    decisions = [t.name for t in family.tools if t.role == "decision"]
    lists = [k for k in hidden if isinstance(theta[k], list) and theta[k]]
    world = _parsed(module)
    method = next((m for m in world.body if isinstance(m, ast.FunctionDef) and decisions
                   and m.name == "tool_" + decisions[0]), None)
    if lists and method is not None and store is not None and not family.stochastic:
        key = lists[int(rng.integers(len(lists)))]
        for node in [n for n in ast.walk(method) if isinstance(n, ast.Return) and n.value is not None]:
            entry = ast.Subscript(value=ast.Subscript(value=store, slice=ast.Constant(key), ctx=ast.Load()),
                                  slice=ast.UnaryOp(ast.USub(), ast.Constant(1)), ctx=ast.Load())
            node.value = ast.Call(ast.Name("dict", ast.Load()), [node.value], [ast.keyword("note", entry)])
        found.append(Mutant("side_channel", f"{method.name} echoes the last entry of {key}", _splice(module, world)))

    world = _parsed(module)
    utility = next((m for m in world.body if isinstance(m, ast.FunctionDef) and m.name == "utility"), None)
    if utility is not None:
        utility.body = [ast.Return(ast.Constant(float(u_constant)))]
        found.append(Mutant("constant_utility", "utility", _splice(module, world)))
    stale = _stale_state(module)
    if stale is not None:
        found.append(Mutant("stale_state", "BaseWorld._set", stale))
    return found


def _stale_state(module: str) -> str | None:
    """The module with the runtime's `BaseWorld._set` writing nothing (None: a module without a BaseWorld)."""
    base = next((node for node in ast.parse(module).body if isinstance(node, ast.ClassDef) and node.name == "BaseWorld"),
                None)
    setter = next((m for m in base.body if isinstance(m, ast.FunctionDef) and m.name == "_set"), None) if base else None
    if setter is None:
        return None
    setter.body, lines = [ast.Pass()], module.splitlines(keepends=True)
    return "".join(lines[:base.lineno - 1]) + ast.unparse(ast.fix_missing_locations(base)) + "\n" + "".join(lines[base.end_lineno:])


A_ONLY = ("leak_hidden", "free_probe", "side_channel")  # bugs that only presentation A must not have


def diff(original: str, mutated: str) -> str:
    """The change, on ast-normalised World source (or the whole module when the World is unchanged)."""
    before, after = ast.unparse(_parsed(original)), ast.unparse(_parsed(mutated))
    if before == after:
        before, after = original, mutated
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), "admitted", "mutant", n=1, lineterm="")
    return "\n".join(list(lines)[2:30])
