"""Adding a family is one file plus one test (docs/ADDING_A_FAMILY.md), shown on a copy of the tree.

The copy gets `stopping.py` again as a new family `stopping_copy`, and its test again pointed at
that name; nothing else in the copy is edited. The registry-wide contract tests, the copied family
test, the docs, presets and import checks then run in the copy, in a fresh interpreter that
imports the copy's `vhd`.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NEW = "stopping_copy"


def _copy_tree(into: Path) -> Path:
    tree = into / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for part in ("vhd", "tests", "docs"):
        shutil.copytree(ROOT / part, tree / part, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def _add_family(tree: Path) -> None:
    """The one file and the one test: the same family and test under a new name."""
    source = (ROOT / "vhd" / "mechanisms" / "stopping.py").read_text(encoding="utf-8")
    assert source.count('    name="stopping",\n') == 1
    (tree / "vhd" / "mechanisms" / f"{NEW}.py").write_text(
        source.replace('    name="stopping",\n', f'    name="{NEW}",\n'), encoding="utf-8")
    test = (ROOT / "tests" / "mechanisms" / "test_stopping.py").read_text(encoding="utf-8")
    assert 'registry.get("stopping")' in test
    test = test.replace('registry.get("stopping")', f'registry.get("{NEW}")')
    assert test.count("from vhd.mechanisms import stopping as st") == 1
    test = test.replace("from vhd.mechanisms import stopping as st", f"from vhd.mechanisms import {NEW} as st")
    (tree / "tests" / "mechanisms" / f"test_{NEW}.py").write_text(test, encoding="utf-8")


def _pytest(tree: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tree = _copy_tree(tmp_path_factory.mktemp("add-family"))
    _add_family(tree)
    return tree


def test_the_copy_imports_its_own_tree_and_registers_the_new_family(tree):
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", "import vhd; from vhd.mechanisms import registry; "
                          "print(vhd.__file__); print(registry.get('stopping_copy').code_version)"],
                         cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    where, version = out.stdout.split()
    assert Path(where).is_relative_to(tree) and version.startswith(f"{NEW}@")


def test_the_contract_tests_pass_on_the_new_family(tree):
    result = _pytest(tree, "tests/test_contract.py", "-k", NEW)
    assert result.returncode == 0, result.stdout[-4000:]
    assert " passed" in result.stdout and int(result.stdout.split(" passed")[0].split()[-1]) >= 10


def test_its_own_test_and_the_docs_presets_and_imports_tests_pass(tree):
    result = _pytest(tree, f"tests/mechanisms/test_{NEW}.py", "tests/test_docs.py", "tests/test_imports.py",
                     "tests/test_presets.py", "-k", "not fills_every_slot and not rerun_finds and not diagnostic_preset_builds")
    assert result.returncode == 0, result.stdout[-4000:]
