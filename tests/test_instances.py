"""External instances: the two knapsack parsers, the shipped public instances and their published
optima, refusal of a wrong optimum, `vhd import-instances` end to end, and `vhd audit` of an import."""

import io
import json
import random
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import run_vhd

from vhd.mechanisms import registry
from vhd.schemas.records import ModelRecord
from vhd.tasks.corpus import instances as imp
from vhd.tasks.corpus.audit import verify
from vhd.tasks.corpus.instances import InstanceError, parse_orlib, parse_pisinger, read_source
from vhd.warehouse import Warehouse
from vhd.warehouse.lineage import load_chain

FAM = registry.get("knapsack")
DATA = Path(__file__).parent / "data" / "knapsack"
LOW = DATA / "low-dimensional"
MKNAP1 = DATA / "mknap1.txt"
NO_PREFECT = "http://127.0.0.1:9/api"  # import-instances never talks to Prefect

# Published optima as listed in tests/data/knapsack/README.md (low-dimensional: J. Ortega's table;
# mknap1: the optimum on each problem's first line of OR-Library's file).
PUBLISHED = {
    "f1_l-d_kp_10_269": 295, "f2_l-d_kp_20_878": 1024, "f3_l-d_kp_4_20": 35, "f4_l-d_kp_4_11": 23,
    "f5_l-d_kp_15_375": 481.0694, "f6_l-d_kp_10_60": 52, "f7_l-d_kp_7_50": 107, "f8_l-d_kp_23_10000": 9767,
    "f9_l-d_kp_5_80": 130, "f10_l-d_kp_20_879": 1025,
    "mknap1.txt#1": 3800, "mknap1.txt#2": 8706.1, "mknap1.txt#3": 4015, "mknap1.txt#4": 6120,
    "mknap1.txt#5": 12400, "mknap1.txt#6": 10618, "mknap1.txt#7": 16537,
}
REFUSED = {"f5_l-d_kp_15_375", "mknap1.txt#2"}  # fractional values: the family takes integers only


def shipped_sources():
    return [read_source(p) for p in sorted(LOW.iterdir())] + [read_source(MKNAP1)]


def shipped_instances():
    return [inst for source in shipped_sources() for inst in source.instances]


# ---------------------------------------------------------------------------------------------
# Parsers on good files.


def test_pisinger_file_with_its_optimum_sidecar():
    source = read_source(LOW / "f1_l-d_kp_10_269")
    assert source.format == "pisinger" and source.name == "f1_l-d_kp_10_269"
    assert source.batch == "import:f1_l-d_kp_10_269:" + source.digest[:12] and len(source.digest) == 64
    (inst,) = source.instances
    assert (inst.name, inst.n, inst.m, inst.published, inst.refused) == ("f1_l-d_kp_10_269", 10, 1, 295, "")
    assert inst.theta == {"n_items": 10, "n_resources": 1, "values": [55, 10, 47, 5, 4, 50, 8, 61, 85, 87],
                          "weights": [[95, 4, 60, 32, 23, 72, 80, 62, 65, 46]], "capacities": [269]}


def test_orlib_file_every_problem():
    source = read_source(MKNAP1)
    assert source.format == "orlib"
    assert [(i.name, i.n, i.m, i.published) for i in source.instances] == [
        ("mknap1.txt#1", 6, 10, 3800), ("mknap1.txt#2", 10, 10, 8706.1), ("mknap1.txt#3", 15, 10, 4015),
        ("mknap1.txt#4", 20, 10, 6120), ("mknap1.txt#5", 28, 10, 12400), ("mknap1.txt#6", 39, 5, 10618),
        ("mknap1.txt#7", 50, 5, 16537)]
    first = source.instances[0].theta
    assert first["values"] == [100, 600, 1200, 2400, 500, 2000]
    assert first["weights"][0] == [8, 12, 13, 64, 22, 41] and first["weights"][9] == [3, 2, 4, 8, 8, 4]
    assert first["capacities"] == [80, 96, 20, 36, 44, 48, 10, 18, 22, 24]
    last = source.instances[-1].theta
    assert len(last["values"]) == 50 and len(last["weights"]) == 5 and last["capacities"] == [800, 650, 550, 550, 650]
    assert source.instances[1].theta is None
    assert source.instances[1].refused.startswith("values are not all whole numbers (600.1 on line 18)")


def test_orlib_line_breaks_do_not_matter_and_zero_means_unknown():
    a = parse_orlib("1\n2 1 0\n5 6\n3 4\n6\n", "a.txt")
    b = parse_orlib(" 1 2 1 0 5 6 3 4 6", "b.txt")
    assert a[0].theta == b[0].theta == {"n_items": 2, "n_resources": 1, "values": [5, 6], "weights": [[3, 4]],
                                        "capacities": [6]}
    assert a[0].published is None and a[0].name == "a.txt#1" and a[0].line == 2


def test_format_is_detected_or_forced(tmp_path):
    assert imp.detect("7\n\n 6 10 3800\n", "x") == "orlib" and imp.detect("\n10 269\n1 2\n", "x") == "pisinger"
    with pytest.raises(InstanceError, match="line 1: expected 'n W'"):
        read_source(MKNAP1, "pisinger")
    with pytest.raises(InstanceError, match="--format must be"):
        read_source(MKNAP1, "csv")
    with pytest.raises(InstanceError, match=r"x line 2: 3 numbers; expected 'n W' \(pisinger\)"):
        imp.detect("\n1 2 3\n", "x")


def test_pisinger_optimum_from_either_sidecar(tmp_path):
    (tmp_path / "low").mkdir()
    (tmp_path / "low-optimum").mkdir()
    target = tmp_path / "low" / "f4"
    shutil.copy(LOW / "f4_l-d_kp_4_11", target)
    assert read_source(target).instances[0].published is None  # no sidecar: unknown, not compared
    (tmp_path / "low-optimum" / "f4").write_text("23\n0 1 1 0\n")  # a later line (a 0/1 vector) is ignored
    assert read_source(target).instances[0].published == 23
    (tmp_path / "low" / "f4.optimum").write_text("23")
    assert read_source(target).instances[0].published == 23
    (tmp_path / "low" / "f4.optimum").write_text("24\n")
    with pytest.raises(InstanceError, match="disagree"):
        read_source(target)
    (tmp_path / "low" / "f4.optimum").write_text("23 24\n")
    with pytest.raises(InstanceError, match=r"f4.optimum line 1: expected the published optimum alone"):
        read_source(target)


# ---------------------------------------------------------------------------------------------
# Parsers on malformed files: one line, with the line number.


@pytest.mark.parametrize("text,message", [
    ("", "f is empty; expected a first line 'n W'"),
    ("3 10 99\n1 2\n", "f line 1: expected 'n W' (number of items, capacity), got 3 numbers"),
    ("2 10\n1 2\n3\n", "f line 3: expected 'value weight', got 1 number"),
    ("2 10\n1 2\n3 four\n", "f line 3: expected a number, got 'four'"),
    ("2 10\n1 2\n", "f line 2: the file ends after 1 of the 2 item lines"),
    ("2 10\n1 2\n\n3 4\n5 6\n", "f line 5: more than the 2 item lines the header announces"),
    ("0 10\n", "f line 1: the number of items n must be a positive whole number, got 0"),
    ("2.5 10\n1 2\n3 4\n", "f line 1: the number of items n must be a positive whole number, got 2.5"),
])
def test_pisinger_malformed(text, message):
    with pytest.raises(InstanceError) as info:
        parse_pisinger(text, "f")
    assert str(info.value) == message


@pytest.mark.parametrize("text,message", [
    ("", "g is empty; expected the number of problems first"),
    ("2\n2 1 5\n1 2\n3 4\n6\n", "g line 5: the file ends inside problem 2 (reading 'n m optimum')"),
    ("1\n2 2 5\n1 2\n3 4\n5 6\n7\n", "g line 6: the file ends inside problem 1 (reading the 2 capacities)"),
    ("1\n2 1 5\n1 2\n3 4\n6\n9 9\n", "g line 6: more data after the 1 problems the first line announces"),
    ("1\n2 1 5\n1 2\n3 x\n6\n", "g line 4: expected a number, got 'x'"),
    ("1\n2 0 5\n1 2\n", "g line 2: problem 1's number of constraints m must be a positive whole number, got 0"),
    ("1\n2 1 -5\n1 2\n3 4\n6\n", "g line 2: problem 1's optimum must not be negative"),
    ("0\n", "g line 1: the number of problems must be a positive whole number, got 0"),
])
def test_orlib_malformed(text, message):
    with pytest.raises(InstanceError) as info:
        parse_orlib(text, "g")
    assert str(info.value) == message


def test_instances_the_family_cannot_take_are_refused_with_the_reason():
    (frac,) = parse_pisinger("2 10\n1 2.5\n3 4\n", "h")
    assert frac.theta is None and frac.refused == ("weights are not all whole numbers (2.5 on line 2); the knapsack "
                                                   "family takes integer data only")
    (neg,) = parse_orlib("1\n2 1 5\n1 2\n3 -4\n6\n", "h")
    assert neg.refused == "weights must not be negative (-4 on line 4)"
    big = "101 100\n" + "1 1\n" * 101
    (large,) = parse_pisinger(big, "h")
    assert large.refused == ("n = 101 lots, m = 1 resources is beyond the knapsack family's bounds "
                             "(size ≤ 100, horizon ≤ 12)")
    wide = "1\n51 2 0\n" + "1 " * 51 + "\n" + ("1 " * 51 + "\n") * 2 + "10 10\n"
    (multi,) = parse_orlib(wide, "h")
    assert multi.theta is None and multi.refused.startswith(
        "n = 51 lots, m = 2 resources is beyond the knapsack family's bounds (size ≤ 50 with two or more resources")
    assert parse_pisinger("1 5\n7 5.0\n", "h")[0].theta["weights"] == [[5]]  # a whole number written 5.0 is taken


def test_the_solver_refuses_what_the_import_refuses_and_takes_what_it_takes():
    """Issue 14: a fraction must never reach a solver that would truncate it. The import's refusal
    (above) and the family's own check in solve() agree: the same data is InvalidParams there."""
    from vhd.mechanisms.knapsack import check_theta
    from vhd.schemas.errors import InvalidParams

    fractional = {"n_items": 2, "n_resources": 1, "values": [1, 3], "weights": [[2.5, 4]], "capacities": [10]}
    with pytest.raises(InvalidParams, match=r"knapsack θ\['weights'\]\[0\]\[0\] = 2.5: expected a whole number"):
        FAM.solve(fractional)
    taken = [inst.theta for inst in shipped_instances() if inst.theta is not None]
    assert taken and all(check_theta(theta) is None for theta in taken)


def _best_by_capacity(values, weights, capacity):
    """The 0/1 knapsack optimum by the textbook dynamic programme over capacities (one resource)."""
    best = [0] * (capacity + 1)
    for v, w in zip(values, weights):
        for c in range(capacity, w - 1, -1):
            best[c] = max(best[c], best[c - w] + v)
    return best[capacity]


@pytest.mark.parametrize("kind", ["uncorrelated", "strongly-correlated"])
def test_a_pisinger_size_instance_is_imported_and_solved_to_its_optimum(tmp_path, kind):
    """Issue 16: Pisinger's n = 100 instances (`n W`, then `value weight` lines, the optimum in
    <dir>-optimum/<name>), which the importer refused at 50 lots, are taken and solved exactly."""
    rng = random.Random(100 if kind == "uncorrelated" else 101)
    weights = [rng.randint(1, 1000) for _ in range(100)]
    values = [rng.randint(1, 1000) for _ in weights] if kind == "uncorrelated" else [w + 100 for w in weights]
    capacity = sum(weights) // 2
    optimum = _best_by_capacity(values, weights, capacity)
    name = f"knapPI_{1 if kind == 'uncorrelated' else 3}_100_1000_1"
    (tmp_path / "large_scale").mkdir()
    (tmp_path / "large_scale-optimum").mkdir()
    path = tmp_path / "large_scale" / name
    path.write_text(f"100 {capacity}\n" + "".join(f"{v} {w}\n" for v, w in zip(values, weights)))
    (tmp_path / "large_scale-optimum" / name).write_text(f"{optimum}\n")
    source = read_source(path)
    (inst,) = source.instances
    assert (source.format, inst.n, inst.m, inst.published, inst.refused) == ("pisinger", 100, 1, optimum, "")
    imported = imp.import_models(FAM, source)
    assert [i.model.knobs for i in imported] == [{"size": 100, "horizon": 1}]
    (solution,) = imp.solve_checked(FAM, imported).values()  # InstanceError unless u* is the optimum
    policy = np.load(io.BytesIO(zlib.decompress(solution.policy)))
    assert solution.u_star == optimum and FAM.evaluate(inst.theta, policy) == optimum


# ---------------------------------------------------------------------------------------------
# The shipped instances against their published optima.


@pytest.mark.parametrize("inst", shipped_instances(), ids=lambda i: i.name)
def test_each_shipped_instance_solves_to_its_published_optimum(inst):
    assert inst.published == PUBLISHED[inst.name]
    if inst.name in REFUSED:
        assert inst.theta is None and "not all whole numbers" in inst.refused
        return
    solution = FAM.solve(inst.theta)
    assert imp.matches(solution.u_star, inst.published)
    assert solution.u_star == inst.published and solution.certificate.gap <= 1e-9
    assert FAM.evaluate(inst.theta, solution.policy) == inst.published


def test_every_shipped_file_is_named_in_the_readme():
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    for path in [MKNAP1, *LOW.iterdir()]:
        assert path.name in readme
    for name, optimum in PUBLISHED.items():
        assert str(optimum) in readme, name


def test_models_have_stable_content_derived_ids():
    source = read_source(MKNAP1)
    first, again = imp.import_models(FAM, source), imp.import_models(FAM, read_source(MKNAP1))
    assert [i.model.model_id for i in first] == [i.model.model_id for i in again]
    assert [i.instance.name for i in first] == [f"mknap1.txt#{k}" for k in (1, 3, 4, 5, 6, 7)]
    for item in first:
        model = item.model
        assert model.batch == source.batch and model.seed == imp.instance_seed(model.theta) < 2 ** 63
        assert model.knobs == {"size": item.instance.n, "horizon": item.instance.m}
        assert model.expected_id() == model.model_id and model.family_version == FAM.version
    assert len({i.model.seed for i in first}) == len(first)


def test_a_wrong_published_optimum_is_refused():
    (inst,) = read_source(LOW / "f7_l-d_kp_7_50").instances
    wrong = imp.Instance(inst.name, inst.line, inst.n, inst.m, inst.theta, 108)
    models = imp.import_models(FAM, imp.Source(LOW, "f7", "0" * 64, "pisinger", (wrong,)))
    with pytest.raises(InstanceError) as info:
        imp.solve_checked(FAM, models)
    assert str(info.value) == ("f7_l-d_kp_7_50: the published optimum is 108 but the solver's u* is 107; "
                               "nothing was written")
    near = imp.Instance(inst.name, inst.line, inst.n, inst.m, inst.theta, 107 * (1 + 1e-12))
    assert imp.solve_checked(FAM, imp.import_models(FAM, imp.Source(LOW, "f7", "0" * 64, "pisinger", (near,))))


# ---------------------------------------------------------------------------------------------
# `vhd import-instances` end to end, in a temp warehouse.


def vhd(*args):
    return run_vhd(NO_PREFECT, *args)


def counts(db):
    with Warehouse.open(db, read_only=True) as wh:
        return wh.counts()


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    db = tmp_path_factory.mktemp("imports") / "vhd.duckdb"
    out = {}
    for path in (MKNAP1, LOW / "f1_l-d_kp_10_269", LOW / "f9_l-d_kp_5_80"):
        result = vhd("import-instances", "knapsack", path, "--db", db, "--json")
        assert result.returncode == 0, result.stderr[-3000:]
        out[path.name] = json.loads(result.stdout)
    return db, out


def test_cli_imports_mknap1_with_admitted_environments(imported):
    _, out = imported
    summary = out["mknap1.txt"]
    assert summary["format"] == "orlib" and summary["batch"].startswith("import:mknap1.txt:")
    rows = {r["name"]: r for r in summary["instances"]}
    assert rows["mknap1.txt#2"]["status"] == "refused" and "600.1 on line 18" in rows["mknap1.txt#2"]["reason"]
    done = [r for r in rows.values() if r["status"] == "imported"]
    assert len(done) == 6
    for r in done:
        assert r["u_star"] == r["published"] == PUBLISHED[r["name"]] and r["verified"]
        assert set(r["admitted"]) == {"I", "A"}
    assert sum(ok for r in done for ok in r["admitted"].values()) >= 10, [r["reasons"] for r in done]
    assert summary["admitted"] + summary["rejected"] == 12 and summary["reused"] == 0


def test_cli_reports_a_default_band_rejection_as_a_verdict(imported):
    _, out = imported
    (row,) = out["f9_l-d_kp_5_80"]["instances"]  # index-order first fit is already optimal on f9
    assert row["u_star"] == 130 and row["admitted"] == {"I": False, "A": False}
    assert all(reason.startswith("default_band:") for reason in row["reasons"].values())
    (row,) = out["f1_l-d_kp_10_269"]["instances"]  # in A its budget does not bind (tasks/stages/check/budget.py)
    assert row["admitted"] == {"I": True, "A": False} and row["n"] == 10 and row["m"] == 1
    assert list(row["reasons"]) == ["A"] and row["reasons"]["A"].startswith("default_band: in presentation A ")


def test_cli_audit_verifies_an_imported_environment(imported):
    db, out = imported
    env_id = out["mknap1.txt"]["instances"][-1]["env_ids"]["A"]
    result = vhd("audit", env_id, "--db", db, "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["verified"], report["problems"]
    assert report["knobs"] == {"size": 50, "horizon": 5}
    (run,) = report["runs"].values()
    assert run["flow"] == "import-instances" and run["parameters"]["file"] == str(MKNAP1.resolve())


def test_cli_reimport_finds_everything_there(imported):
    db, _ = imported
    before = counts(db)
    result = vhd("import-instances", "knapsack", MKNAP1, "--db", db, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["admitted"], summary["rejected"], summary["reused"]) == (0, 0, 12)
    after = counts(db)
    assert after["runs"] == before["runs"] + 1 and {k: v for k, v in after.items() if k != "runs"} == {
        k: v for k, v in before.items() if k != "runs"}


def test_cli_table_output(imported, tmp_path):
    result = vhd("import-instances", "knapsack", LOW / "f3_l-d_kp_4_20", "--db", tmp_path / "t.duckdb")
    assert result.returncode == 0, result.stderr
    assert "f3_l-d_kp_4_20" in result.stdout and "1 admitted, 1 rejected" in result.stdout  # A: the budget


def test_cli_wrong_published_optimum_writes_nothing(imported, tmp_path):
    db, _ = imported
    wrong = tmp_path / "mknap1.txt"
    wrong.write_text(MKNAP1.read_text().replace(" 6 10 3800\n", " 6 10 3801\n", 1))
    before = counts(db)
    for target in (db, tmp_path / "fresh.duckdb"):
        result = vhd("import-instances", "knapsack", wrong, "--db", target)
        assert result.returncode == 1 and result.stdout == ""
        assert result.stderr == ("error: mknap1.txt#1: the published optimum is 3801 but the solver's u* is 3800; "
                                 "nothing was written\n")
    assert counts(db) == before and not (tmp_path / "fresh.duckdb").exists()


@pytest.mark.parametrize("args,message", [
    (["import-instances", "nope", MKNAP1], "unknown family 'nope'"),
    (["import-instances", "inventory_dp", MKNAP1], "family 'inventory_dp' has no instance importer"),
    (["import-instances", "knapsack", "/no/such/file"], "cannot read /no/such/file"),
    (["import-instances", "knapsack", LOW / "f5_l-d_kp_15_375"], "the knapsack family can take none of its instances"),
    (["import-instances", "knapsack", MKNAP1, "--format", "pisinger"], "mknap1.txt line 1: expected 'n W'"),
    (["import-instances", "knapsack", MKNAP1, "--presentations", "I,X"], "--presentations must list"),
])
def test_cli_bad_input_is_one_line_and_exit_1(tmp_path, args, message):
    db = tmp_path / "vhd.duckdb"
    result = vhd(*args, "--db", db)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: ") and message in result.stderr and result.stderr.count("\n") == 1
    assert not db.exists()


def test_cli_malformed_file_names_the_line(tmp_path):
    bad = tmp_path / "broken.txt"
    bad.write_text(MKNAP1.read_text().replace(" 3 6 4 18 6 4\n", " 3 6 4 l8 6 4\n", 1))
    result = vhd("import-instances", "knapsack", bad, "--db", tmp_path / "x.duckdb")
    assert result.returncode == 1 and result.stderr == "error: broken.txt line 7: expected a number, got 'l8'\n"


def test_import_instances_does_not_load_prefect(tmp_path):
    code = ("import sys; from vhd.cli import app; "
            f"app(['import-instances', 'knapsack', {str(LOW / 'f4_l-d_kp_4_11')!r}, '--db', "
            f"{str(tmp_path / 'p.duckdb')!r}, '--json'], standalone_mode=False); "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'prefect'], 'prefect was imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]


# ---------------------------------------------------------------------------------------------
# The audit of imported models: θ checked against the source file, not re-drawn from the seed.


def chain_of(db, env_id):
    with Warehouse.open(db, read_only=True) as wh:
        return load_chain(wh, env_id)


def test_audit_refuses_a_theta_that_is_not_in_the_source(imported):
    db, out = imported
    chain = chain_of(db, out["mknap1.txt"]["instances"][0]["env_ids"]["I"])
    assert verify(chain)["verified"]
    original = chain.model
    fields = original.model_dump(exclude={"model_id"})
    theta = dict(original.theta, capacities=[c + 1 for c in original.theta["capacities"]])
    chain.model = ModelRecord.build(**{**fields, "theta": theta, "seed": imp.instance_seed(theta)})
    problems = verify(chain)["problems"]  # hashes fine, seed derived from θ: only the source disagrees
    assert any("θ is not among the instances parsed from" in p for p in problems), problems
    chain.model = ModelRecord.build(**{**fields, "seed": 12345})
    assert "the seed of an imported model does not derive from its θ" in verify(chain)["problems"]
    chain.model = ModelRecord.build(**{**fields, "knobs": {"size": 7, "horizon": 10}})
    assert any(p.startswith("knobs {'size': 7, 'horizon': 10} do not match") for p in verify(chain)["problems"])


def test_audit_needs_the_source_file_and_finds_it_on_the_search_path(tmp_path, monkeypatch):
    own = tmp_path / "mine" / "f4_copy"  # the same instance as f4 but its own bytes (a trailing blank line)
    own.parent.mkdir()
    own.write_text((LOW / "f4_l-d_kp_4_11").read_text() + "\n")
    (tmp_path / "mine" / "f4_copy.optimum").write_text("23\n")
    db = tmp_path / "vhd.duckdb"
    result = vhd("import-instances", "knapsack", own, "--db", db, "--json", "--presentations", "I")
    assert result.returncode == 0, result.stderr
    env_id = json.loads(result.stdout)["instances"][0]["env_ids"]["I"]
    assert verify(chain_of(db, env_id))["verified"]
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.move(str(own), moved / "f4_copy")
    monkeypatch.delenv(imp.SEARCH_PATH, raising=False)
    problems = verify(chain_of(db, env_id))["problems"]
    assert len(problems) == 1 and problems[0].startswith("source file f4_copy (sha256 ") and "not found" in problems[0]
    assert vhd("audit", env_id, "--db", db).returncode == 1
    monkeypatch.setenv(imp.SEARCH_PATH, str(moved))
    report = verify(chain_of(db, env_id))
    assert report["verified"], report["problems"]
