"""Adding a family is one file plus one test (docs/ADDING_A_FAMILY.md), proven on a copy of the tree.

The family is not a copy of one the tree has: `tests/data/new_family/assignment.py` is a model of
its own (n workers × m jobs, solved by the Hungarian method) with its own test,
`tests/data/new_family/test_assignment.py`, written from ADDING_A_FAMILY.md alone. The copy of the
tree gets those two files as `vhd/mechanisms/assignment.py` and `tests/mechanisms/test_assignment.py`
and nothing else. In a fresh interpreter that imports the copy's `vhd`:

- `vhd family-check assignment` passes;
- every test file that enumerates the registry (`registry_wide()`) and those that check a list derived
  from it (prefect.yaml, the docs, the generated tool-name table, the import graph, the doctests of
  every module) run in one pytest process: a test parametrised by a family's name runs for the new
  family only (`only_the_new_family.py`, a plugin kept with the data), every other one as it is;
- a real refresh (`vhd refresh --families assignment`) admits environments of the new family,
  `vhd verify` finds the published corpus intact and `vhd selftest` finds no mutant of an admitted
  module that the gates let through.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "new_family"
NEW = "assignment"
ADDED = {f"vhd/mechanisms/{NEW}.py": DATA / f"{NEW}.py", f"tests/mechanisms/test_{NEW}.py": DATA / f"test_{NEW}.py"}
COPIED = ("vhd", "tests", "docs", "bench")  # and the files of the root below
ROOT_FILES = ("pyproject.toml", "prefect.yaml", "README.md", "CHANGELOG.md")

# Test files that name the registry but test named families only, and why they are not run here.
NOT_REGISTRY_WIDE = {
    "test_family_check.py": "family-check on knapsack, stopping and copies of them; the new family's family-check "
                            "runs here itself",
    "test_add_family.py": "this file",
}
# Test files that check a list derived from the registry without naming it: prefect.yaml's deployment (no
# family list), every vhd module's imports and doctests (the new module's among them).
DERIVED = ("test_serve.py", "test_imports.py", "test_doctests.py")


def registry_wide() -> list[str]:
    """The test files whose tests enumerate the registry (`registry.names()` or `registry.all()`: a
    parametrisation, a loop, a preset of it), but NOT_REGISTRY_WIDE, and the DERIVED ones."""
    naming = sorted(path.name for path in (ROOT / "tests").glob("test_*.py")
                    if re.search(r"registry\.(names|all)\(\)", path.read_text(encoding="utf-8")))
    return [name for name in naming if name not in NOT_REGISTRY_WIDE] + list(DERIVED)


# Slow tests of the registry-wide files that only build corpora of named families, whatever the
# registry holds (the new family's group is `beyond`: in no preset slot): by the fixture that builds
# the corpus, or by name.
DESELECTED_FIXTURES = {
    "refreshed": "a refresh of inventory_dp (tests/conftest.py)",
    "banded": "a refresh of knapsack in a difficulty band",
    "paper_small": "a refresh of the paper preset's families",
    "f_env": "lp's F environment",
    "leaky_facility": "a leak planted in facility",
}
DESELECTED = {
    "tests/test_presets.py::test_diagnostic_preset_builds_f_i_and_a_and_f_is_scored": "the diagnostic five families",
    "tests/test_budget.py::test_the_gate_rejects_an_a_candidate_whose_budget_does_not_bind_and_admits_only_"
    "binding_ones": "knapsack's gated run",
}
# Tests that fail on a new family until what they check is derived from the registry, as strict
# xfails in the copy (the run fails once one passes). None: the one file and the one test suffice.
EXPECTED_FAILURES: dict[str, str] = {}


def _copy_tree(into: Path) -> Path:
    tree = into / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for part in COPIED:
        shutil.copytree(ROOT / part, tree / part, ignore=ignore)
    for name in ROOT_FILES:
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, tree / name)
    return tree


def _files(top: Path) -> set[str]:
    return {path.relative_to(top).as_posix() for part in COPIED for path in (top / part).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"} | \
        {name for name in ROOT_FILES if (top / name).exists()}


def _env(tree: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(tree), str(tree / "tests" / "data" / "new_family")])
    return {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1", **extra}


def _run(tree: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=tree, env=env or _env(tree), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tree = _copy_tree(tmp_path_factory.mktemp("add-family"))
    for where, source in ADDED.items():
        shutil.copy2(source, tree / where)
    return tree


def test_the_copy_is_the_tree_and_the_two_files_and_registers_the_new_family(tree):
    assert _files(tree) - _files(ROOT) == set(ADDED)
    assert not (ROOT / "vhd" / "mechanisms" / f"{NEW}.py").exists()  # not a family of this tree
    out = _run(tree, "-c", "import vhd; from vhd.mechanisms import registry; f = registry.get(%r); "
                           "print(vhd.__file__, f.code_version, f.group, f.stochastic)" % NEW, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    where, version, group, stochastic = out.stdout.split()
    assert Path(where).is_relative_to(tree) and version == f"{NEW}@1"
    assert (group, stochastic) == ("beyond", "False")  # what DESELECTED_FIXTURES says of it


def test_the_registry_wide_files_are_found():
    found = registry_wide()
    assert {"test_contract.py", "test_difficulty.py", "test_docs.py", "test_presets.py", "test_terminal.py",
            "test_tool_names.py", "test_surfaces.py", "test_serve.py"} <= set(found), found
    assert all((ROOT / "tests" / name).exists() for name in list(found) + list(NOT_REGISTRY_WIDE))


def test_family_check_passes_on_the_new_family(tree):
    result = _run(tree, "-m", "vhd.cli", "family-check", NEW, "--json", timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["family"] == NEW and report["passed"], report
    assert [check["name"] for check in report["checks"] if not check["passed"]] == []


def test_every_registry_wide_test_passes_on_the_new_family(tree, tmp_path):
    junit = tmp_path / "junit.xml"
    env = _env(tree, VHD_NEW_FAMILY=NEW, VHD_DESELECT=json.dumps(DESELECTED),
               VHD_DESELECT_FIXTURES=json.dumps(DESELECTED_FIXTURES),
               VHD_EXPECTED_FAILURES=json.dumps(EXPECTED_FAILURES))
    wide = registry_wide()
    files = [f"tests/{name}" for name in wide] + [f"tests/mechanisms/test_{NEW}.py"]
    result = _run(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "only_the_new_family", "-n", "2",
                  "--dist", "loadfile", f"--junitxml={junit}", *files, env=env)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    cases = [(case.get("classname"), case.get("name"), [child.tag for child in case])
             for case in ET.parse(junit).getroot().iter("testcase")]
    ran = {(cls, name) for cls, name, outcome in cases if not outcome}
    # every file ran, and each file parametrised by family ran the new family's cases
    modules = {cls.rsplit(".", 1)[-1] for cls, _ in ran}
    assert {name[:-3] for name in wide} | {f"test_{NEW}"} <= modules, sorted(modules)
    mine = {cls.rsplit(".", 1)[-1] for cls, name in ran if re.search(rf"[\[-](vhd\.mechanisms\.)?{NEW}[\]-]", name)}
    assert {"test_contract", "test_difficulty", "test_advantages", "test_decision_rewards", "test_presentation_a",
            "test_surfaces", "test_tool_names", "test_written", "test_play_f", "test_passages",
            "test_refusal_leaks", "test_doctests"} <= mine, sorted(mine)
    assert sum(cls.startswith("tests.mechanisms") for cls, _ in ran) >= 40  # the family's own test
    xfailed = {f"{cls.replace('.', '/')}.py::{name}" for cls, name, outcome in cases if outcome == ["skipped"]}
    assert xfailed == set(EXPECTED_FAILURES), (xfailed, result.stdout[-3000:])


def test_a_real_refresh_admits_the_new_family_and_verify_and_selftest_pass(tree, tmp_path, prefect_server):
    db = tmp_path / "w.duckdb"
    env = _env(tree, PREFECT_API_URL=prefect_server)
    result = _run(tree, "-m", "vhd.cli", "refresh", "--families", NEW, "--per-family", "3", "--batch", "add-family",
                  "--db", str(db), "--json", env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["admitted"] >= 3 and summary["admitted"] + summary["rejected"] == 6, summary
    verify = _run(tree, "-m", "vhd.cli", "verify", "--db", str(db), env=env, timeout=600)
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]
    # the gates reject every mutant of an admitted module (flipped operators, dropped checks, leaks, ...)
    selftest = _run(tree, "-m", "vhd.cli", "selftest", "--families", NEW, "--modules", "1", "--envs", "2",
                    "--db", str(db), "--json", env=env, timeout=600)
    assert selftest.returncode == 0, selftest.stdout[-2000:] + selftest.stderr[-2000:]
    report = json.loads(selftest.stdout)
    assert report["mutants"] >= 5 and report["survivors"] == 0 and report["false_rejections"] == 0, report
