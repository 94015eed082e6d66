"""`vhd family-check NAME` (issue 28): the contract, z against DEFAULT_BAND, fuzzed calls, the budget
and the module's names of one family, passing on real families and failing, one line per problem, on
broken copies of them (a band no draw falls in; a required name missing)."""

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vhd.cli import app
from vhd.mechanisms import registry
from vhd.tasks.stages.check.budget import measure
from vhd.tasks.family_check import check_family, fuzz, names_check
from vhd.tasks.stages.sample import sample_models

ROOT = Path(__file__).resolve().parents[1]
DRAWS = 5
runner = CliRunner()


def _json(*args: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["family-check", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def _checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


@pytest.mark.parametrize("name", ["knapsack", "stopping"])  # deterministic, stochastic
def test_a_real_family_passes_and_its_numbers_are_its_own(name):
    family = registry.get(name)
    code, report = _json(name, "--draws", str(DRAWS), "--seed", "3")
    assert code == 0 and report["passed"] and report["family"] == name, report
    checks = _checks(report)
    assert all(c["passed"] and c["problems"] == [] for c in checks.values())
    assert sum(n.startswith("contract: ") for n in checks) >= 10 and "contract: gates" in checks

    # z and the in-band count, recomputed from the same draws without the command
    lo, hi = family.default_band
    zs, binding, in_band = [], 0, 0
    for model in sample_models(family, DRAWS, 3, batch="family-check"):
        s = family.solve(model.theta)
        z = family.default_position(s.u_star, s.u_default, s.u_idle)
        zs.append(z)
        if lo <= z <= hi:
            in_band += 1
            binding += measure(family, model.theta, s).binds
    band = checks["default band"]["details"]
    assert band["z"] == pytest.approx(zs, abs=1e-12) and band["inside"] == in_band and band["draws"] == DRAWS
    assert band["inside"] + band["below"] + band["above"] + band["no_span"] == DRAWS
    budget = checks["budget"]["details"]
    assert budget["budget_binds"] and (budget["in_band"], budget["binding"]) == (in_band, binding)
    assert checks["fuzz"]["details"]["calls"] > 4 * DRAWS  # four profiles a draw, each played to its end

    names = checks["names"]["details"]
    assert {"Params", "World", "HIDDEN", "DEFAULT_BAND", "BUDGET_BINDS"} <= set(names["declared"])
    assert ("boundary_calls" in names["defaults"]) == (family.boundary_calls is None) and not names["missing_required"]


def test_the_text_report_shows_the_z_distribution_against_the_band():
    result = runner.invoke(app, ["family-check", "stopping", "--draws", "4"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.stdout.splitlines() if line.strip().startswith("z over 4 draws"))
    assert "DEFAULT_BAND (-1.0, 0.95)" in line and "4 inside" in line
    assert "stopping passed" in result.stdout and "✗" not in result.stdout


def test_fuzzing_reports_a_tool_that_raises():
    """The fuzz check finds a World that raises something other than a refusal (and passes the real one)."""
    family = registry.get("stopping")
    model = sample_models(family, 1, 0, batch="family-check")[0]
    assert fuzz(family, model.knobs, model.theta, 1)[1] == []
    from vhd.tasks.grading.oracle import reference_module

    module, _ = reference_module(family)
    world = module.World
    original = world.tool_decline_offer
    world.tool_decline_offer = lambda self: 1 / 0  # the reference World's own class, restored below
    try:
        made, problems = fuzz(family, model.knobs, model.theta, 1)
    finally:
        world.tool_decline_offer = original
    assert len(problems) == 1 and "raised ZeroDivisionError" in problems[0] and "AgentError" in problems[0]


def test_the_fuzz_plays_every_random_call_over_as_many_episodes_as_it_takes():
    """negotiation: an episode ends after a few calls (a sale, a walk-away or
    the call limit), and the fuzz goes on in fresh episodes until every random call of every profile
    was made (36 calls in all before, of about 240 drawn)."""
    import numpy as np

    from vhd.tasks.stages.check.sequences import CALL_PROFILES, random_calls

    family = registry.get("negotiation")
    model = sample_models(family, 1, 0, batch="family-check")[0]
    rng = np.random.default_rng([1, 0xF022])  # the fuzz's own draw
    drawn = sum(len(random_calls(family, model.knobs, rng, weights=profile)) for profile in CALL_PROFILES)
    made, problems = fuzz(family, model.knobs, model.theta, 1)
    assert problems == [] and made >= drawn > 100


@pytest.fixture
def bad_band(tmp_path):
    """knapsack copied into a temporary package as `knapsack_badband` with DEFAULT_BAND (2.0, 3.0):
    z never exceeds 1, so no draw is in it. Registered for the test, the registry restored after."""
    source = (ROOT / "vhd" / "mechanisms" / "knapsack.py").read_text(encoding="utf-8")
    assert source.count("DEFAULT_BAND = (0.0, 0.95)") == 1 and source.count('    name="knapsack",\n') == 1
    source = source.replace("DEFAULT_BAND = (0.0, 0.95)", "DEFAULT_BAND = (2.0, 3.0)")
    source = source.replace('    name="knapsack",\n', '    name="knapsack_badband",\n')
    package = tmp_path
    (package / "fc_families").mkdir()
    (package / "fc_families" / "__init__.py").write_text("", encoding="utf-8")
    (package / "fc_families" / "knapsack_badband.py").write_text(source, encoding="utf-8")
    registry.names()  # discovered before the copy joins, so the restore below is the registry as it was
    before = dict(registry._families)
    sys.path.insert(0, str(package))
    try:
        importlib.import_module("fc_families.knapsack_badband")
        yield registry.get("knapsack_badband")
    finally:
        sys.path.remove(str(package))
        for module in ("fc_families.knapsack_badband", "fc_families"):
            sys.modules.pop(module, None)
        registry._families.clear()
        registry._families.update(before)
    assert "knapsack_badband" not in registry.names()


def test_a_band_no_draw_falls_in_fails_with_one_line_saying_what_to_fix(bad_band):
    result = runner.invoke(app, ["family-check", "knapsack_badband", "--draws", "4"])
    assert result.exit_code == 1
    failures = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("✗")]
    band = [line for line in failures if line.startswith("✗ default band:")]
    assert len(band) == 1 and "0 of 4 draws have z in DEFAULT_BAND (2.0, 3.0)" in band[0]
    assert band[0].endswith("widen DEFAULT_BAND or change the sampler")
    # the gates reject every candidate by the band too, and the budget has no in-band draw to measure
    assert any(line.startswith("✗ contract: gates:") and "widen DEFAULT_BAND" in line for line in failures)
    assert any(line.startswith("✗ budget:") and "fix DEFAULT_BAND first" in line for line in failures)
    assert not any(line.startswith(("✗ fuzz", "✗ names", "✗ contract: replay")) for line in failures)
    code, report = _json("knapsack_badband", "--draws", "4")
    assert code == 1 and not report["passed"] and not _checks(report)["default band"]["passed"]


def test_a_missing_required_name_fails_naming_it(tmp_path):
    """A family module without HIDDEN does not import (Family.of refuses it), so no registry loads;
    in a copy of the package, `vhd family-check` names the module and what it lacks."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "vhd", tree / "vhd", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    source = (ROOT / "vhd" / "mechanisms" / "stopping.py").read_text(encoding="utf-8")
    old = 'HIDDEN = ("values", "weights", "waiting_cost")\n'
    assert source.count(old) == 1
    source = source.replace(old, "").replace('    name="stopping",\n', '    name="stopping_nohidden",\n')
    (tree / "vhd" / "mechanisms" / "stopping_nohidden.py").write_text(source, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run([sys.executable, "-m", "vhd.cli", "family-check", "stopping_nohidden"], cwd=tree, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr[-2000:]
    failures = [line.strip() for line in run.stdout.splitlines() if line.strip().startswith("✗")]
    assert failures == [
        "✗ imports: vhd/mechanisms/stopping_nohidden.py does not import (TypeError: family 'stopping_nohidden' defines "
        "no HIDDEN (Family.of takes them from its module)): fix it, or no family can be loaded",
        "✗ names: the module defines no HIDDEN: define HIDDEN = (…), the θ fields presentation A withholds, each in "
        "some probe's reveals",
    ], run.stdout


def test_names_are_read_from_the_module():
    stopping = registry.get("stopping")
    check = names_check(stopping)
    assert check.passed and "boundary_calls" in check.details["defaults"]
    lacking = {k: v for k, v in vars(sys.modules[stopping.world.__module__]).items() if k not in ("TABLES", "sample")}
    check = names_check(None, lacking)
    assert check.details["missing_required"] == ["sample", "TABLES"] and len(check.problems) == 2


def test_bad_input_is_one_line():
    for args, message in ((["nosuch"], "unknown family 'nosuch'"), ([], "name the family to check"),
                          (["stopping", "--all"], "not both")):
        result = runner.invoke(app, ["family-check", *args])
        assert result.exit_code == 1 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = runner.invoke(app, ["family-check", "stopping", "--draws", "0"])
    assert result.exit_code != 0


def test_check_family_calls_progress_once_a_step():
    family = registry.get("stopping")
    from vhd.tasks.family_check import steps

    seen = []
    report = check_family(family, draws=2, progress=seen.append)
    assert len(seen) == steps(family, 2) and seen[-2:] == ["draw", "draw"] and report["passed"]
