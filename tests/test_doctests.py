"""Every `>>>` example in vhd/ runs as a doctest (issue 15 item 5; STYLE.md rule 14).

Every module of the package is imported by name (a module that does not import fails its test;
none is skipped) and its docstrings are run by `doctest` with ELLIPSIS and NORMALIZE_WHITESPACE,
one test per module, over a shared namespace of real objects built once per session by the
pipeline's own stages in process (`build_namespace`: one slot of refresh, one admitted
inventory_dp environment in presentation I, and a warehouse holding it). An example may use:

    np, Path, registry, family (inventory_dp), passage (the first built-in one, a bakery),
    output = setter_output, model, theta, solution, candidate, verdict, env, row (its export row),
    db (the warehouse file), wh (a Warehouse open on db, read-only), chain (env's lineage chain),
    scratch (a directory to write in)

A module with no example passes. Controls: the package has examples, every `>>>` line of a
module is an example doctest runs (none sits where doctest does not look), and a wrong expected
output is reported as a failure. An example that cannot run offline and fast (a Prefect flow, a
server, an LLM API) is written as a plain illustration, without `>>>`.
"""

from __future__ import annotations

import doctest
import importlib
import io
import pkgutil
import sys
from pathlib import Path

import numpy as np
import pytest

import vhd

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
ROOT = Path(vhd.__file__).resolve().parent
MODULES = sorted(m.name for m in pkgutil.walk_packages(vhd.__path__, "vhd."))
# modules that are scripts run beside a sibling they import by its file name: imported here with
# that sibling under the name the script uses, as when it runs (module -> (name, sibling module))
SCRIPT_SIBLINGS = {"vhd.tasks.sandbox.zygote": ("runner", "vhd.tasks.sandbox.runner")}
_attempted: dict[str, int] = {}


def _file_modules() -> set[str]:
    """Every module of vhd/ by its files, so the collector is seen to leave none out."""
    names = set()
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names - {"vhd"}


def build_namespace(scratch: Path) -> dict:
    """Real objects of one slot of refresh, made by the pipeline's own stages in process: one
    inventory_dp model (batch "doctest", seed 30) sampled, solved, skinned by the passage its seed
    picks (the first built-in passage, a bakery), checked in the sandbox in presentation I,
    admitted, annotated and exported; and a warehouse at `db` holding that slot as refresh writes
    it (run, passages, model, solution, module, environment, checks, lineage), open read-only as
    `wh`, with the environment's `chain` loaded from it. `scratch` is a directory to write in."""
    from vhd import __version__
    from vhd.mechanisms import registry
    from vhd.schemas.records import RunRecord
    from vhd.tasks.stages.annotate import annotate, make_candidates, upstream_edges
    from vhd.tasks.stages.check import check_batch
    from vhd.tasks.corpus.export import export_row
    from vhd.tasks.setters.passages import builtin_passages
    from vhd.tasks.stages.sample import sample_models
    from vhd.tasks.stages.solve import solve_models
    from vhd.tasks.stages.synthesize import synthesize
    from vhd.warehouse.lineage import load_chain
    from vhd.warehouse.store import Warehouse

    family = registry.get("inventory_dp")
    passages = builtin_passages()
    models = sample_models(family, 1, seed=30, batch="doctest")  # seed 30: in band, skinned by the first passage
    solutions = {s.model_id: s for s in solve_models(family, models)}
    outputs, assignment = synthesize(family, models, passages)
    output, = outputs
    candidate, = make_candidates(family, models, solutions, {output.setter_output_id: output}, assignment, ("I",),
                                 {p.passage_id: p for p in passages})
    verdict, = check_batch(family, output, [candidate])
    assert verdict.admitted and output.passage_id == passages[0].passage_id, verdict
    env, checks, edges = annotate(family, verdict)
    solution = solutions[candidate.model.model_id]
    row = export_row(env, candidate.model, output, family, solution)

    db = scratch / "vhd.duckdb"
    run = RunRecord(run_id="doctest", flow="refresh", started_at="2026-01-01T00:00:00+00:00",
                    code_version=__version__, status="completed")
    stamped = [r.model_copy(update={"run_id": run.run_id}) for r in (candidate.model, solution, output, env, *checks)]
    with Warehouse.open(db) as writer, writer.transaction():
        writer.upsert_run(run)
        writer.insert(passages)
        for record in stamped:
            writer.insert([record])
        writer.insert(upstream_edges([solution], [output]) + edges)
    wh = Warehouse.open(db, read_only=True)
    chain = load_chain(wh, env.env_id)
    return {"np": np, "Path": Path, "registry": registry, "family": family, "passage": passages[0], "output": output,
            "setter_output": output, "model": candidate.model, "theta": candidate.model.theta, "solution": solution,
            "candidate": candidate, "verdict": verdict, "env": env, "row": row, "db": db, "wh": wh, "chain": chain,
            "scratch": scratch}


@pytest.fixture(scope="session")
def namespace(tmp_path_factory):
    globs = build_namespace(tmp_path_factory.mktemp("doctests"))
    yield globs
    globs["wh"].close()


def import_module(name: str):
    """The module `name`, imported as the package (or, for a script, the sandbox) imports it."""
    if name in SCRIPT_SIBLINGS and name not in sys.modules:
        alias, sibling = SCRIPT_SIBLINGS[name]
        saved = sys.modules.get(alias)
        sys.modules[alias] = importlib.import_module(sibling)
        try:
            return importlib.import_module(name)
        finally:
            if saved is None:
                del sys.modules[alias]
            else:
                sys.modules[alias] = saved
    return importlib.import_module(name)


def run_examples(module, globs: dict) -> tuple[doctest.TestResults, str]:
    """doctest's results on every docstring of `module` (its own globals plus `globs`), and its report."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = io.StringIO()
    for test in finder.find(module, module.__name__, extraglobs=globs):
        runner.run(test, out=report.write)
    return doctest.TestResults(runner.failures, runner.tries), report.getvalue()


def test_every_module_is_collected():
    assert set(MODULES) == _file_modules()


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name, namespace):
    module = import_module(name)
    results, report = run_examples(module, dict(namespace))
    _attempted[name] = results.attempted
    assert results.failed == 0, f"{name}: {results.failed} of {results.attempted} examples failed\n{report}"


def test_the_collector_finds_every_example():
    """The package has examples; every `>>>` line of a module's source is an example doctest finds
    (none sits in a comment, a nested function or a string that is not a docstring); and the
    per-module tests, when they all ran in this session, ran every one of them."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    found, written = {}, {}
    for name in MODULES:
        module = import_module(name)
        found[name] = sum(len(test.examples) for test in finder.find(module, name, globs={}))
        lines = Path(module.__file__).read_text(encoding="utf-8").splitlines()
        written[name] = sum(line.lstrip().startswith(">>>") for line in lines)
    assert sum(found.values()) > 0
    assert found == written
    if set(_attempted) == set(MODULES):
        assert _attempted == found


def test_a_wrong_example_fails():
    """The control that a wrong output is caught, under the same flags and runner."""
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=FLAGS)
    wrong = parser.get_doctest(">>> 1 + 1\n3\n>>> 'a' * 3\n'aaa'\n", {}, "wrong", None, 0)
    runner.run(wrong, out=io.StringIO().write)
    assert (runner.failures, runner.tries) == (1, 2)
