"""The import direction of DESIGN §3, read from the source (an `ast` walk, not a convention)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "vhd"
ALLOWED = {  # package -> vhd packages it may import
    "schemas": {"schemas"},
    "mechanisms": {"schemas", "mechanisms"},
    "tasks": {"schemas", "mechanisms", "tasks"},
    "warehouse": {"schemas", "warehouse"},
    "agents": {"schemas", "mechanisms", "tasks", "agents"},
    "flows": {"schemas", "mechanisms", "tasks", "agents", "warehouse", "flows"},  # agents sits beside tasks (DESIGN §3)
    "adapters": {"schemas", "mechanisms", "tasks", "warehouse", "adapters"},  # what a trainer imports: no prefect
    "cli.py": {"schemas", "mechanisms", "tasks", "agents", "warehouse", "flows", "adapters"},
}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _files(package: str):
    return [ROOT / package] if package.endswith(".py") else sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_vhd_imports_flow_one_way(package):
    for path in _files(package):
        for name in _imports(path):
            if name == "vhd" or name.startswith("vhd."):
                target = name.split(".")[1] if "." in name else ""
                assert target in ALLOWED[package] or target == "", f"{path.relative_to(ROOT)} imports {name}"


@pytest.mark.parametrize("library, owner", [("duckdb", "warehouse"), ("prefect", "flows")])
def test_only_one_package_imports(library, owner):
    offenders = [
        str(path.relative_to(ROOT)) for path in ROOT.rglob("*.py")
        if any(n == library or n.startswith(library + ".") for n in _imports(path))
        and path.relative_to(ROOT).parts[0] != owner
    ]
    assert offenders == []


def test_the_walk_sees_imports():
    """A control: the walker finds the imports that are there, so an empty result means something."""
    assert "duckdb" in _imports(ROOT / "warehouse" / "store.py")
    assert "prefect" in _imports(ROOT / "flows" / "refresh.py")


def test_sandbox_runner_and_env_runtime_use_the_standard_library_only():
    import sys

    for path in (ROOT / "tasks" / "sandbox" / "runner.py", ROOT / "tasks" / "sandbox" / "session.py",
                 ROOT / "mechanisms" / "_runtime.py"):
        roots = {name.split(".")[0] for name in _imports(path)}
        assert roots <= set(sys.stdlib_module_names), (path, roots - set(sys.stdlib_module_names))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """vhd module -> the vhd modules it imports, at any depth of its code (a lazy import inside a
    function is an edge too: it only hides a circle)."""
    modules = {_module_name(path): path for path in ROOT.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


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
