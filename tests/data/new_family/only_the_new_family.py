"""A pytest plugin for tests/test_add_family.py's run in a copy of the tree (`-p only_the_new_family`).

Which tests run there: a test parametrised by a registered family's name (or by a family module's
name, `vhd.mechanisms.NAME`) runs only for the new family, `VHD_NEW_FAMILY`; of the other tests (the
"unparametrised" ones) only those marked `@pytest.mark.registry` run, and every test of the files
named in `VHD_WHOLE_FILES` (JSON list of file names). An unmarked unparametrised test does not
depend on which families are registered, so it passes or fails in the copy as it did in the suite
that runs this one: running it again checks nothing new. `VHD_DESELECT` names tests and
`VHD_DESELECT_FIXTURES` fixtures whose tests are not run (JSON: {node id or fixture: reason}).
`VHD_EXPECTED_FAILURES` ({node id: reason}) marks a test a strict xfail: a test that is expected to
fail there until what it checks is derived from the registry, and that fails this run once it
passes (the mark is then stale and must go). A name in any of the three that no collected test has
is an error (renamed?).

The guard (`unmarked`, run at every collection with this plugin; without `VHD_NEW_FAMILY` it is
all the plugin does, e.g. `pytest --collect-only -p only_the_new_family FILES` with this folder on
PYTHONPATH): an unparametrised test
outside the whole files whose code reads the registry's list of families and that is not marked
fails the collection. Its code: the test function, the fixtures it uses and the functions and
module-level names of the tests folder they name, followed to the end (`_sources`). Reading the
list: `registry.` anything but `get("a literal name")`, a call `.names()` or `.all()`, or a
`refresh` command given without `--families` (it refreshes every family).
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import textwrap
import types
from pathlib import Path

import pytest

MARK = "registry"


def _family_in(value, families):
    if not isinstance(value, str):
        return None
    name = value[len("vhd.mechanisms."):] if value.startswith("vhd.mechanisms.") else value
    return name if name in families else None


def _family_names(item, families):
    params = getattr(getattr(item, "callspec", None), "params", {})
    return {_family_in(value, families) for value in params.values()} - {None}


def _ours(obj, tests: Path) -> bool:
    try:
        where = inspect.getsourcefile(obj)
    except TypeError:
        return False
    return where is not None and Path(where).resolve().is_relative_to(tests)


def _assignments(module: types.ModuleType) -> dict[str, list[str]]:
    """{name: the source of each module-level statement that binds it} of a test module."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return {}
    found: dict[str, list[str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        found.setdefault(name.id, []).append(ast.get_source_segment(source, node))
    return found


def _sources(item, tests: Path) -> list[tuple[str, dict]]:
    """(source, its module's namespace) of the test, of every fixture it uses and of every function,
    class and module-level name of the tests folder that these name, transitively."""
    todo = [item.function]
    for name in item.fixturenames:
        for fixturedef in (item._fixtureinfo.name2fixturedefs.get(name) or ()):
            todo.append(fixturedef.func)
    seen, sources = set(), []
    while todo:
        obj = todo.pop()
        obj = getattr(obj, "__wrapped__", obj)
        if id(obj) in seen or not _ours(obj, tests):
            continue
        seen.add(id(obj))
        try:
            source = textwrap.dedent(inspect.getsource(obj))
        except (OSError, TypeError):
            continue
        module = inspect.getmodule(obj)
        namespace = vars(module) if module else {}
        sources.append((source, namespace))
        bound = _assignments(module) if module else {}
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Name) and node.id in namespace:
                value = namespace[node.id]
                if isinstance(value, (types.FunctionType, type)):
                    todo.append(value)
                for statement in bound.get(node.id, ()):
                    key = ("statement", module.__name__, statement)
                    if key not in seen:
                        seen.add(key)
                        sources.append((statement, namespace))
                        todo.extend(_named_in(statement, namespace))
    return sources


def _named_in(source: str, namespace: dict) -> list:
    return [namespace[node.id] for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Name) and isinstance(namespace.get(node.id), (types.FunctionType, type))]


def reads_the_registry(source: str, namespace: dict | None = None) -> str | None:
    """What in `source` reads the registry's list of families (see the module's docstring), or None.
    `registry.get(NAME)` reads one family: NAME a literal, a module-level string of `namespace`, or a
    parameter of the function it is in (its caller says which family; the caller is in the sources)."""
    namespace = namespace or {}

    def visit(node, params):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            params = params | {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            call = node.func
            if isinstance(call.value, ast.Name) and call.value.id == "registry" and call.attr == "get":
                name = node.args[0] if node.args else None
                named = (isinstance(name, ast.Constant) and isinstance(name.value, str)) or (
                    isinstance(name, ast.Name) and (isinstance(namespace.get(name.id), str) or name.id in params))
                if not named:
                    return "registry.get of a family the test does not name"
                return next((why for arg in node.args for why in [visit(arg, params)] if why), None)
            if call.attr in ("names", "all") and not node.args and not node.keywords:
                return f".{call.attr}()"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "registry":
            return f"registry.{node.attr}"  # a bare `registry.get` too: mapped over names
        if isinstance(node, (ast.Call, ast.List, ast.Tuple)):
            parts = node.args if isinstance(node, ast.Call) else node.elts
            words = _words(parts, namespace)
            command = isinstance(node, ast.Call) or len(parts) > 1  # not `("refresh",) in commands`
            if command and any(w == "refresh" or w.startswith("refresh ") for w in words) and not any(
                    w.startswith("--families") for w in words):
                return "a refresh without --families"
        return next((why for child in ast.iter_child_nodes(node) for why in [visit(child, params)] if why), None)

    return visit(ast.parse(source), frozenset())


def _words(parts, namespace: dict) -> list[str]:
    """The strings of a call's arguments or a list's items, a `*NAME` of a module-level tuple of
    strings spelled out."""
    words = []
    for part in parts:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            words.append(part.value)
        elif isinstance(part, ast.Starred) and isinstance(part.value, ast.Name):
            value = namespace.get(part.value.id)
            if isinstance(value, (tuple, list)):
                words += [word for word in value if isinstance(word, str)]
    return words


def unmarked(items, families, whole) -> list[str]:
    """The guard: the unparametrised tests outside `whole` that read the registry's list of families
    without the mark, each with what it reads."""
    tests = Path(str(items[0].config.rootpath)).resolve() / "tests" if items else Path()
    found = []
    for item in items:
        if (_family_names(item, families) or Path(str(item.path)).name in whole
                or item.get_closest_marker(MARK) is not None):
            continue
        for source, namespace in _sources(item, tests):
            why = reads_the_registry(source, namespace)
            if why:
                found.append(f"{item.nodeid} ({why})")
                break
    return found


def pytest_collection_modifyitems(config, items):
    from vhd.mechanisms import registry

    families = set(registry.names())
    whole = set(json.loads(os.environ.get("VHD_WHOLE_FILES", "[]")))
    missing = unmarked(items, families, whole)
    if missing:
        raise pytest.UsageError(
            f"unparametrised tests that read the registry's list of families without @pytest.mark.{MARK} "
            f"(tests/test_add_family.py would not run them on a new family): " + "; ".join(missing))
    if "VHD_NEW_FAMILY" not in os.environ:
        return  # the guard only
    new = os.environ["VHD_NEW_FAMILY"]
    assert new in families, f"the copy does not register {new!r}"
    deselect = json.loads(os.environ.get("VHD_DESELECT", "{}"))
    fixtures = json.loads(os.environ.get("VHD_DESELECT_FIXTURES", "{}"))
    expected = json.loads(os.environ.get("VHD_EXPECTED_FAILURES", "{}"))
    keep, drop = [], []
    for item in items:
        named = _family_names(item, families)
        wanted = (new in named if named else
                  Path(str(item.path)).name in whole or item.get_closest_marker(MARK) is not None)
        if not wanted or item.nodeid in deselect or set(fixtures) & set(item.fixturenames):
            drop.append(item)
            continue
        if item.nodeid in expected:
            item.add_marker(pytest.mark.xfail(strict=True, reason=expected[item.nodeid]))
        keep.append(item)
    unknown = (set(deselect) | set(expected)) - {item.nodeid for item in items}
    unknown |= set(fixtures) - {name for item in items for name in item.fixturenames}
    assert not unknown, f"no such tests or fixtures (renamed?): {sorted(unknown)}"
    config.hook.pytest_deselected(items=drop)
    items[:] = keep
