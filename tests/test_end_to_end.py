"""The spine end to end: `vhd refresh` on the real Prefect engine, then envs, audit, score, export."""

import json

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from vhd.cli import app
from vhd.tasks.corpus.export import read_export

from conftest import run_vhd

runner = CliRunner()


def vhd(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_refresh_admits_and_reports(refreshed):
    _, summary = refreshed
    assert {"run_id", "admitted", "rejected", "seconds"} <= set(summary)
    assert summary["admitted"] + summary["rejected"] == 20
    assert summary["admitted"] >= 16


def test_envs_lists_admitted_environments(refreshed):
    db, summary = refreshed
    rows = json.loads(vhd("envs", "--db", db, "--json").stdout)
    assert len(rows) == summary["admitted"]
    assert {"env_id", "family", "presentation", "knobs"} <= set(rows[0])
    assert {r["presentation"] for r in rows} == {"I", "A"}


def test_every_admitted_environment_is_verified_by_audit(refreshed):
    db, _ = refreshed
    for row in json.loads(vhd("envs", "--db", db, "--json").stdout):
        result = vhd("audit", row["env_id"], "--db", db, "--json")
        report = json.loads(result.stdout)
        assert result.exit_code == 0 and report["verified"] is True, report["problems"]
        kinds = [link["kind"] for link in report["chain"]]
        assert kinds[:5] == ["environment", "model", "solution", "setter_output", "passage"]
        assert report["seed"] is not None and all(report["runs"].values())


def test_optimal_scores_one_default_zero(refreshed, tmp_path):
    db, _ = refreshed
    env_id = json.loads(vhd("envs", "--db", db, "--json").stdout)[0]["env_id"]
    con = duckdb.connect(str(db), read_only=True)
    reference, default, interface = con.execute(
        "SELECT e.reference_trajectory, e.default_trajectory, s.interface FROM environments e JOIN setter_outputs s "
        "ON s.setter_output_id = e.setter_output_id WHERE e.env_id = ?", [env_id]).fetchall()[0]
    con.close()
    clock = [b["name"] for b in json.loads(interface) if b["role"] == "clock"][0]  # the world's name for end_day
    file = tmp_path / "t.jsonl"
    file.write_text("\n".join([reference, default, json.dumps([{"tool": clock, "arguments": {}}])]) + "\n")
    rows = json.loads(vhd("score", env_id, "--trajectories", file, "--db", db, "--json").stdout)
    # the outcome reward on the episode's own draws: π* 1, the default 0; the decision reward: π* 1 on
    # every seed, the default's decisions below π*'s (0 only in expectation over seeds)
    assert [r["outcome_reward"] for r in rows[:2]] == [1.0, 0.0] and rows[0]["reward"] == 1.0 > rows[1]["reward"]
    steps = rows[0]["step_rewards"]  # π*: the baseline 1 on the first call, then every advantage 0
    assert steps == [1.0] + [0.0] * (len(steps) - 1) and len(rows[1]["step_rewards"]) == len(json.loads(default))
    assert rows[2]["error"] is None and 0.0 <= rows[2]["reward"] <= 1.0  # idle: the clock alone, padded to the end


def test_export_splits_player_and_grader(refreshed, tmp_path):
    db, _ = refreshed
    assert vhd("export", "--out", tmp_path, "--db", db).exit_code == 0
    rows = read_export(tmp_path)
    assert rows and all(set(r) >= {"env_id", "family", "presentation", "module", "player", "grader"} for r in rows)
    hidden = [r for r in rows if r["presentation"] == "A"][0]
    assert "unit_cost" not in hidden["player"]["config"]["params"] and "unit_cost" in hidden["grader"]["config"]["params"]
    assert "episode_seed" not in hidden["player"]["config"]
    assert vhd("export", "--out", tmp_path, "--format", "parquet", "--db", db).exit_code == 0
    assert pl.read_parquet(tmp_path / "data" / "*.parquet").height == len(rows)


def test_first_run_publishes_a_corpus_version(refreshed):
    db, summary = refreshed
    assert summary["corpus_version"] == "v1" and summary["published"] is True
    assert summary["computed"] == {"sample": 10, "solve": 10, "synthesize": summary["computed"]["synthesize"],
                                   "check": 20, "annotate": 20}
    rows = json.loads(vhd("versions", "--db", db, "--json").stdout)
    assert [(r["version"], r["admitted"]) for r in rows] == [("v1", summary["admitted"])]
    assert sum(rows[0]["counts"]["presentation"].values()) == summary["admitted"]


def test_rerun_of_a_batch_does_nothing_and_a_new_batch_adds_a_version(refreshed, prefect_server, tmp_path):
    import shutil

    db, first = refreshed
    copy = tmp_path / "grow.duckdb"
    shutil.copy(db, copy)
    args = ("refresh", "--families", "inventory_dp", "--per-family", "10", "--seed", "3", "--db", copy, "--json")
    again = json.loads(run_vhd(prefect_server, *args, "--batch", "t1").stdout)
    assert again["nothing_to_do"] is True and again["admitted"] == 0 and again["reused"] == 20
    assert set(again["computed"].values()) == {0}
    assert again["found"]["solve"] == 10 and again["found"]["check"] == 20
    assert again["corpus_version"] == "v1" and again["published"] is False
    con = duckdb.connect(str(copy), read_only=True)
    assert con.execute("SELECT count(*) FROM environments").fetchall()[0][0] == 20
    assert con.execute("SELECT count(*) FROM runs").fetchall()[0][0] == 2
    con.close()
    grown = json.loads(run_vhd(prefect_server, "refresh", "--families", "inventory_dp", "--per-family", "1",
                               "--seed", "3", "--db", copy, "--json", "--batch", "t2").stdout)  # one θ, two checks
    assert grown["computed"]["check"] == 2 and grown["corpus_version"] == "v2" and grown["published"] is True
    counts = {r["version"]: r["admitted"] for r in json.loads(vhd("versions", "--db", copy, "--json").stdout)}
    assert counts == {"v1": first["admitted"], "v2": first["admitted"] + grown["admitted"]}
    out = tmp_path / "v1"
    assert vhd("export", "--out", out, "--corpus-version", "v1", "--db", copy).exit_code == 0
    assert len(read_export(out)) == first["admitted"]
    result = vhd("export", "--out", out, "--corpus-version", "v9", "--db", copy)
    assert result.exit_code == 1 and "no corpus version 'v9'" in result.stderr


def test_tampering_is_caught_by_audit(refreshed, tmp_path):
    import shutil

    db, _ = refreshed
    copy = tmp_path / "tampered.duckdb"
    shutil.copy(db, copy)
    env_id = json.loads(vhd("envs", "--db", copy, "--json").stdout)[0]["env_id"]
    con = duckdb.connect(str(copy))
    model_id = con.execute("SELECT model_id FROM environments WHERE env_id = ?", [env_id]).fetchall()[0][0]
    theta = json.loads(con.execute("SELECT theta FROM models WHERE model_id = ?", [model_id]).fetchall()[0][0])
    theta["price"] += 1
    con.execute("UPDATE models SET theta = ? WHERE model_id = ?", [json.dumps(theta), model_id])
    con.close()
    result = vhd("audit", env_id, "--db", copy, "--json")
    assert result.exit_code == 1 and json.loads(result.stdout)["verified"] is False


@pytest.mark.parametrize("args, message", [
    (["refresh", "--families", "nope"], "unknown family 'nope'"),
    (["refresh", "--families", ","], "names no family"),  # not "every family"
    (["envs", "--family", "nope"], "unknown family 'nope'"),
    (["audit", "deadbeef"], "no environment matches"),
    (["refresh", "--families", "inventory_dp", "--presentations", "X"], "--presentations"),
])
def test_bad_input_gets_one_line_and_exit_1(refreshed, args, message):
    db, _ = refreshed
    before = duckdb.connect(str(db), read_only=True).execute("SELECT count(*) FROM environments").fetchall()
    result = vhd(*args, "--db", db)
    assert result.exit_code == 1
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert duckdb.connect(str(db), read_only=True).execute("SELECT count(*) FROM environments").fetchall() == before


def test_missing_warehouse_and_bad_trajectories(refreshed, tmp_path):
    db, _ = refreshed
    result = vhd("envs", "--db", tmp_path / "none.duckdb")
    assert result.exit_code == 1 and "no warehouse at" in result.stderr
    assert not (tmp_path / "none.duckdb").exists()
    env_id = json.loads(vhd("envs", "--db", db, "--json").stdout)[0]["env_id"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('[{"tool": "x", "arguments": {}}]\n{"not": "a list"}\n')
    result = vhd("score", env_id, "--trajectories", bad, "--db", db)
    assert result.exit_code == 1 and "bad.jsonl:2" in result.stderr


def test_families_lists_inventory():
    rows = json.loads(vhd("families", "--json").stdout)
    assert any(r["name"] == "inventory_dp" and r["group"] == "train" for r in rows)


def test_check_reruns_the_gates_and_rejects_a_broken_replacement(refreshed, tmp_path):
    db, _ = refreshed
    env_id = json.loads(vhd("envs", "--db", db, "--json").stdout)[0]["env_id"]
    result = vhd("check", env_id, "--db", db, "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0 and report["admitted"] is True
    assert {g["name"] for g in report["gates"]} >= {"executes", "replay_agreement", "robustness", "determinism"}
    con = duckdb.connect(str(db), read_only=True)
    module = con.execute("SELECT module FROM setter_outputs s JOIN environments e USING (setter_output_id) "
                         "WHERE env_id = ?", [env_id]).fetchall()[0][0]
    con.close()
    broken = tmp_path / "broken.py"
    broken.write_text(module.replace('("sales", p["price"] * sold)', '("sales", p["price"] * sold + 1)'))
    result = vhd("check", env_id, "--code", broken, "--db", db, "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["admitted"] is False and report["module"] == "replacement"
    assert not [g for g in report["gates"] if g["name"] == "replay_agreement"][0]["passed"]
    missing = vhd("check", env_id, "--code", tmp_path / "absent.py", "--db", db)
    assert missing.exit_code == 1 and "cannot read module" in missing.stderr


def test_refresh_reports_its_distinct_worlds(refreshed):
    """`worlds` counts (family, passage domain) pairs of the admitted environments, read here
    independently through each environment's setter output and its passage."""
    db, summary = refreshed
    con = duckdb.connect(str(db), read_only=True)
    try:
        passage_of = dict(con.execute("SELECT setter_output_id, passage_id FROM setter_outputs").fetchall())
        domain_of = dict(con.execute("SELECT passage_id, domain FROM passages").fetchall())
        envs = con.execute("SELECT family, setter_output_id FROM environments WHERE admitted").fetchall()
    finally:
        con.close()
    pairs = {(family, domain_of[passage_of[output]]) for family, output in envs}
    assert summary["worlds"]["worlds"] == len(pairs) > 1
    assert summary["worlds"]["domains"] == len({d for _, d in pairs})
    assert sum(summary["worlds"]["families"].values()) == len(pairs)


def test_score_refuses_a_rejected_environment(prefect_server, tmp_path):
    """A rejected environment's u*, default and module were never shown to agree: `vhd score`
    answers one line naming the rejection (it answered reward 1.0 for π*'s calls before)."""
    db = tmp_path / "w.duckdb"
    result = run_vhd(prefect_server, "refresh", "--families", "stopping", "--per-family", "4", "--seed", "7",
                     "--batch", "st", "--db", db, "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    rejected = con.execute("SELECT env_id, reference_trajectory FROM environments WHERE NOT admitted "
                           "AND presentation <> 'F' ORDER BY env_id LIMIT 1").fetchall()
    con.close()
    assert rejected, "the refresh rejected nothing to try"
    env_id, reference = rejected[0]
    file = tmp_path / "t.jsonl"
    file.write_text((reference or "[]") + "\n")
    result = vhd("score", env_id[:12], "--trajectories", file, "--db", db)
    assert result.exit_code == 1 and "was rejected by the gates" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_stats_counts_the_interfaces_of_the_admitted_environments(refreshed):
    """`vhd stats` (issue 29 item 4) against the same counts read straight from the warehouse."""
    db, _ = refreshed
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT family, tools FROM environments WHERE admitted AND presentation <> 'F' "
                       "AND env_id NOT IN (SELECT id FROM superseded)").fetchall()
    con.close()
    tools = [(family, json.loads(text)) for family, text in rows]
    names = {t["name"] for _, ts in tools for t in ts}
    arguments = {a for _, ts in tools for t in ts for a in t["input_schema"].get("properties", {})}
    sets = {(family, frozenset(t["name"] for t in ts)) for family, ts in tools}
    found = json.loads(vhd("stats", "--db", db, "--json").stdout)
    assert (found["environments"], found["tool_names"], found["argument_names"]) == (len(rows), len(names), len(arguments))
    assert found["tool_sets"] == {"inventory_dp": len(sets)} and found["environments"] > 0
    assert "distinct tool names" in vhd("stats", "--db", db).stdout
