"""Adding a family is one file plus one test (docs/ADDING_A_FAMILY.md), proven on a copy of the tree.

The family is not a copy of one the tree has: `tests/data/new_family/assignment.py` is a model of
its own (n workers × m jobs, solved by the Hungarian method) with its own test,
`tests/data/new_family/test_assignment.py`, written from ADDING_A_FAMILY.md alone. The copy of the
tree gets those two files as `vhd/mechanisms/assignment.py` and `tests/mechanisms/test_assignment.py`
and nothing else. In a fresh interpreter that imports the copy's `vhd`:

- `vhd family-check assignment` passes;
- every test file that enumerates the registry (`registry_wide()`) and those that check a list derived
  from it (prefect.yaml, the docs, the generated tool-name table, the import graph, the doctests of
  every module) run in one pytest process, with `only_the_new_family.py` (a plugin kept with the
  data): a test parametrised by a family's name runs for the new family only; of the others, those
  marked `@pytest.mark.registry` and every test of WHOLE's files;
- a real refresh (`vhd refresh --families assignment`) admits environments of the new family,
  `vhd verify` finds the published corpus intact and `vhd selftest` finds no mutant of an admitted
  module that the gates let through.

Which unparametrised tests run again in the copy. A test not parametrised by family whose outcome
cannot depend on which families are registered passes or fails in the copy as it does in the suite
running this file (the same code, the same data, the new family's two files aside): running it there
again checks nothing. So the copy runs only those that can: each carries `@pytest.mark.registry`
(pyproject's markers), decided by reading it — it reads the registry's list of families (a
parametrisation of it, a loop, a preset or a module-level list made from it), refreshes every family
(a `vhd refresh` without `--families`), or checks a list derived from them (a generated doc). The
files of WHOLE run whole (DERIVED: what they check is derived from the tree's files, the new
module's among them, without a registry call to mark; the other two have no unparametrised test
that does not read the registry). The guard, run at the collection of the run in the copy (its
reading: `test_the_guard_sees_what_reads_the_registry`), fails on an unmarked unparametrised test of these
files whose code — the test, its fixtures, and the functions and module-level names of the tests
folder they name, followed through — says `registry.` anything but `get` of a family it names,
calls `.names()` or `.all()`, or runs a `refresh` without `--families` (`only_the_new_family.py`).
A dependence the guard cannot see (a list made inside `vhd` from the registry) is the reader's to
mark.
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
# Files run whole in the copy: DERIVED, and those whose only unparametrised test reads the registry
# (test_advantages: some family declares advantages; test_decision_rewards: every stochastic family has
# a walk-away play), so that whole is the marked ones.
WHOLE = DERIVED + ("test_advantages.py", "test_decision_rewards.py")
# Registry-wide files with no test to run there: their parametrisations leave the new family out.
NOTHING_TO_RUN = {
    "test_sidechannel.py": "parametrised by the paper preset's families (the new family is in none of its slots); "
                           "its other tests name their families",
}


def registry_wide() -> list[str]:
    """The test files whose tests enumerate the registry (`registry.names()` or `registry.all()`: a
    parametrisation, a loop, a preset of it), but NOT_REGISTRY_WIDE, and the DERIVED ones."""
    naming = sorted(path.name for path in (ROOT / "tests").glob("test_*.py")
                    if re.search(r"registry\.(names|all)\(\)", path.read_text(encoding="utf-8")))
    return [name for name in naming if name not in NOT_REGISTRY_WIDE] + list(DERIVED)


# Slow marked tests that read the registry only to build corpora of preset families, whatever else
# it holds (the new family's group is `beyond`: in no preset slot): by the fixture that builds the
# corpus, or by name. (Unmarked tests that build a named family's corpus do not run there at all.)
DESELECTED_FIXTURES = {
    "paper_small": "a refresh of the paper preset's families",
}
DESELECTED = {
    "tests/test_presets.py::test_diagnostic_preset_builds_f_i_and_a_and_f_is_scored": "the diagnostic five families",
}
# The files whose slowest tests are marked first on the command line: with `--dist loadfile` the two
# workers start on them (the run's wall time is its slowest worker's).
FIRST = ("test_terminal.py", "test_trl_adapter.py")
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


def _plugin_env(*whole: str, **extra: str) -> dict[str, str]:
    return {"VHD_WHOLE_FILES": json.dumps(WHOLE + whole), **extra}


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


def test_the_guard_sees_what_reads_the_registry():
    """Controls for the guard's reading: each of these reads the registry's list of families, and the
    named-family ones do not."""
    sys.path.insert(0, str(DATA))
    try:
        from only_the_new_family import reads_the_registry
    finally:
        sys.path.remove(str(DATA))
    reads = ["names = registry.names()", "for f in registry.all(): pass", "families = map(registry.get, names)",
             "def t():\n    for name in NAMES:\n        registry.get(name)", "x = fams.all()",
             'run_vhd(server, "refresh", "--per-family", "1")', 'runner.invoke(app, ["refresh", "--follow", p])',
             'run_vhd(server, "refresh", *ARGS)', "slots = [registry.get(s.family) for s in slots]"]
    for source in reads:
        assert reads_the_registry(source, {"ARGS": ("--per-family", "1")}), source
    named = ['registry.get("qp")', "registry.get(FAMILY)", "def module(name):\n    return registry.get(name)",
             'run_vhd(server, "refresh", "--families", "knapsack")', 'run_vhd(server, "refresh", *ARGS)',
             '("refresh",) in commands', "all(x for x in y)"]
    for source in named:
        assert reads_the_registry(source, {"FAMILY": "lp", "ARGS": ("--families", "knapsack")}) is None, source


def test_family_check_passes_on_the_new_family(tree):
    result = _run(tree, "-m", "vhd.cli", "family-check", NEW, "--json", timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["family"] == NEW and report["passed"], report
    assert [check["name"] for check in report["checks"] if not check["passed"]] == []


def test_every_registry_wide_test_passes_on_the_new_family(tree, tmp_path):
    junit = tmp_path / "junit.xml"
    env = _env(tree, **_plugin_env(f"test_{NEW}.py", VHD_NEW_FAMILY=NEW, VHD_DESELECT=json.dumps(DESELECTED),
                                   VHD_DESELECT_FIXTURES=json.dumps(DESELECTED_FIXTURES),
                                   VHD_EXPECTED_FAILURES=json.dumps(EXPECTED_FAILURES)))
    wide = registry_wide()
    assert set(FIRST) <= set(wide)
    files = [f"tests/{name}" for name in sorted(wide, key=lambda name: name not in FIRST)]
    files.append(f"tests/mechanisms/test_{NEW}.py")
    result = _run(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "only_the_new_family", "-n", "2",
                  "--dist", "loadfile", f"--junitxml={junit}", *files, env=env)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    cases = [(case.get("classname"), case.get("name"), [child.tag for child in case])
             for case in ET.parse(junit).getroot().iter("testcase")]
    ran = {(cls, name) for cls, name, outcome in cases if not outcome}
    # every file ran (but those with nothing to run there), and each file parametrised by family ran the
    # new family's cases
    modules = {cls.rsplit(".", 1)[-1] for cls, _ in ran}
    assert set(NOTHING_TO_RUN) <= set(wide)
    assert {name[:-3] for name in wide if name not in NOTHING_TO_RUN} | {f"test_{NEW}"} <= modules, sorted(modules)
    assert not {name[:-3] for name in NOTHING_TO_RUN} & modules, "NOTHING_TO_RUN is stale"
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
