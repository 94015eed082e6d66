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
    return sorted((ROOT / package).rglob("*.py"))


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
                 ROOT / "tasks" / "setters" / "runtime.py"):
        roots = {name.split(".")[0] for name in _imports(path)}
        assert roots <= set(sys.stdlib_module_names), (path, roots - set(sys.stdlib_module_names))
