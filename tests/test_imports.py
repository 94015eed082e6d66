"""The import direction of DESIGN §3, and no import circle, read from the source (an `ast` walk,
not a convention): every package and module of vhd/, the CLI and the adapters included; a lazy
import inside a function and a relative import count like any other."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "vhd"
ALLOWED = {  # package (or module) directly under vhd/ -> vhd packages it may import
    "__init__.py": {"adapters"},  # only the verifiers taskset id `vhd`: three classes, imported when asked for
    "schemas": {"schemas"},
    "mechanisms": {"schemas", "mechanisms"},
    "tasks": {"schemas", "mechanisms", "tasks"},
    "warehouse": {"schemas", "warehouse"},
    "agents": {"schemas", "mechanisms", "tasks", "agents"},
    "flows": {"schemas", "mechanisms", "tasks", "agents", "warehouse", "flows"},  # agents sits beside tasks (DESIGN §3)
    "adapters": {"schemas", "mechanisms", "tasks", "warehouse", "adapters"},  # what a trainer imports: no prefect
    "cli": {"schemas", "mechanisms", "tasks", "agents", "warehouse", "flows", "adapters", "cli"},
}
TASKS = {  # the packages of vhd/tasks, bottom up -> the parts of vhd/tasks each may import (ARCHITECTURE §3)
    "sandbox": {"sandbox"},
    "setters": {"setters"},
    "grading": {"sandbox", "setters", "grading"},
    "stages": {"sandbox", "setters", "grading", "stages"},
    "corpus": {"sandbox", "setters", "grading", "stages", "corpus"},
    "family_check.py": {"sandbox", "setters", "grading", "stages", "corpus"},
    "__init__.py": set(),
}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every name an import in `path` names, at any depth of its code (inside a function too),
    relative imports made absolute; `from m import n` names m and m.n (n may be a module)."""
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def _files(package: str):
    return [ROOT / package] if package.endswith(".py") else sorted((ROOT / package).rglob("*.py"))


def test_every_package_has_a_direction():
    """A new package or top-level module of vhd/ is not left out of the table (and so unchecked)."""
    found = {p.name for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    assert found == set(ALLOWED)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_vhd_imports_flow_one_way(package):
    for path in _files(package):
        for name in _imports(path):
            if name == "vhd" or name.startswith("vhd."):
                target = name.split(".")[1] if "." in name else ""
                if target not in {key.removesuffix(".py") for key in ALLOWED}:
                    target = ""  # a name of vhd/__init__ itself (`from vhd import __version__`)
                assert target in ALLOWED[package] or target == "", f"{path.relative_to(ROOT)} imports {name}"


@pytest.mark.parametrize("library, owner", [("duckdb", "warehouse"), ("prefect", "flows")])
def test_only_one_package_imports(library, owner):
    offenders = [
        str(path.relative_to(ROOT)) for path in ROOT.rglob("*.py")
        if any(n == library or n.startswith(library + ".") for n in _imports(path))
        and path.relative_to(ROOT).parts[0] != owner
    ]
    assert offenders == []


def test_every_part_of_tasks_has_a_direction():
    """A new package or module of vhd/tasks is not left out of the table (and so unchecked)."""
    tasks = ROOT / "tasks"
    assert {p.name for p in tasks.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()} == set(TASKS)


@pytest.mark.parametrize("part", sorted(TASKS))
def test_tasks_packages_import_downward_only(part):
    """Sandbox, setters, grading, stages, corpus: each part of vhd/tasks imports only those below
    it (and itself), never one above, not even lazily inside a function."""
    for path in _files("tasks/" + part if part.endswith(".py") else "tasks/" + part):
        for name in _imports(path):
            if name.startswith("vhd.tasks."):
                target = name.split(".")[2]
                target = target if target in TASKS else target + ".py"
                assert target in TASKS[part] or target == "__init__.py" or name == "vhd.tasks.AST_LOCK", \
                    f"{path.relative_to(ROOT)} imports {name}"


def test_the_walk_sees_imports():
    """A control: the walker finds the imports that are there, so an empty result means something."""
    assert "duckdb" in _imports(ROOT / "warehouse" / "store.py")
    assert "prefect" in _imports(ROOT / "flows" / "refresh.py")
    assert "vhd.tasks.stages.check.gates" in _imports(ROOT / "tasks" / "stages" / "check" / "batch.py")


def test_the_walk_sees_lazy_and_relative_imports(tmp_path):
    """A control: an import inside a function, and a relative one, are found and made absolute."""
    (tmp_path / "vhd" / "tasks").mkdir(parents=True)
    path = tmp_path / "vhd" / "tasks" / "check.py"
    path.write_text("def later():\n    from . import score\n    from ..flows.refresh import run\n")
    assert {"vhd.tasks.score", "vhd.flows.refresh"} <= _imports(path, tmp_path / "vhd")


def test_sandbox_runner_and_env_runtime_use_the_standard_library_only():
    import sys

    for path in (ROOT / "tasks" / "sandbox" / "runner.py", ROOT / "tasks" / "sandbox" / "session.py",
                 ROOT / "mechanisms" / "_runtime.py"):
        roots = {name.split(".")[0] for name in _imports(path)}
        assert roots <= set(sys.stdlib_module_names), (path, roots - set(sys.stdlib_module_names))


def _import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """vhd module -> the vhd modules it imports, at any depth of its code (a lazy import inside a
    function is an edge too: it only hides a circle). A package's __init__ is the package's
    module; importing a submodule is an edge to the submodule alone."""
    modules = {_module_name(path, root): path for path in root.rglob("*.py")}
    return {name: {t for t in _imports(path, root) if t in modules and t != name} for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert _circles(_import_graph()) == []


def test_the_circle_finder_finds_circles():
    """A control: a planted circle is found, so an empty result means something."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


PLANTED = {  # a package whose __init__ re-exports its modules, as vhd/tasks/stages/check does
    "vhd/__init__.py": "",
    "vhd/tasks/__init__.py": "",
    "vhd/tasks/stages/check/__init__.py": "from vhd.tasks.stages.check.batch import check_batch\n",
    "vhd/tasks/stages/check/gates.py": "import math\n",
    "vhd/tasks/stages/check/batch.py": "from vhd.tasks.stages.check.gates import GATES\n\n\ndef check_batch():\n    return GATES\n",
}


@pytest.mark.parametrize("gates, circle", [
    ("def later():\n    import vhd.tasks.stages.check.batch\n", ["vhd.tasks.stages.check.batch", "vhd.tasks.stages.check.gates"]),
    ("def later():\n    from .batch import check_batch\n", ["vhd.tasks.stages.check.batch", "vhd.tasks.stages.check.gates"]),
    ("from vhd.tasks.stages.check import check_batch\n",
     ["vhd.tasks.stages.check", "vhd.tasks.stages.check.batch", "vhd.tasks.stages.check.gates"]),
], ids=["lazy", "lazy-relative", "through-the-package"])
def test_a_circle_planted_in_files_is_found(tmp_path, gates, circle):
    """A control on files: the same walk as test_no_import_circles finds a circle closed by a lazy
    import, a relative one, or one back through a package's __init__; without it, none."""
    for name, text in PLANTED.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert _circles(_import_graph(tmp_path / "vhd")) == []
    (tmp_path / "vhd/tasks/stages/check/gates.py").write_text(gates)
    assert _circles(_import_graph(tmp_path / "vhd")) == [circle]
