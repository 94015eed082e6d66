"""Trainer adapters: Gymnasium wrapper, reward function, HTTP server, `vhd play`."""

import json
import subprocess
import sys
import threading

import pytest
from gymnasium.utils.env_checker import check_env

from vhd.adapters import load_row, reward
from vhd.adapters.gym import TextToolEnv
from vhd.adapters.http import HttpEnvClient, make_server


@pytest.fixture(scope="module")
def exported(refreshed, tmp_path_factory):
    db, _ = refreshed
    out = tmp_path_factory.mktemp("export")
    result = subprocess.run([sys.executable, "-m", "vhd.cli", "export", "--out", out, "--db", db],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (out / "environments.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["presentation"] in ("I", "A")]
    assert {r["presentation"] for r in rows} == {"I", "A"}
    return db, rows


def _play(env, calls):
    env.reset(seed=0)
    for call in calls:
        observation, r, terminated, truncated, info = env.step(json.dumps(call))
        if terminated or truncated:
            return r, terminated, truncated, info
    raise AssertionError("episode did not end")


def test_check_env_passes(exported):
    _, rows = exported
    for row in rows[:2]:
        check_env(TextToolEnv(row), skip_render_check=True)


def test_reference_gives_one_default_zero(exported):
    _, rows = exported
    for row in rows:
        grader = row["grader"]
        r, terminated, truncated, _ = _play(TextToolEnv(row), grader["reference_trajectory"])
        assert (r, terminated, truncated) == (1.0, True, False)
        assert reward(grader, grader["reference_trajectory"], row["module"]) == 1.0
    row = rows[0]
    clock = row["grader"]["reference_trajectory"][-1]
    r, terminated, _, info = _play(TextToolEnv(row), [clock] * row["grader"]["config"]["turn_budget"])
    assert terminated and r == 0.0 == reward(row["grader"], [], row["module"])


def test_truncated_at_turn_budget(exported):
    # actions that never reach the module (not JSON) use no module turn, so only the wrapper's
    # budget ends the episode: truncated, and the clock plays the rest as the grader does
    _, rows = exported
    row = rows[0]
    env = TextToolEnv(row)
    env.reset(seed=0)
    for _ in range(env.turn_budget):
        observation, r, terminated, truncated, info = env.step("{bad")
    assert truncated and not terminated and info["steps"] == env.turn_budget
    assert r == reward(row["grader"], [], row["module"]) == 0.0


def test_bad_action_is_a_one_line_error_observation(exported):
    _, rows = exported
    env = TextToolEnv(rows[0])
    env.reset(seed=0)
    observation, r, terminated, truncated, _ = env.step("{not json")
    body = json.loads(observation)
    assert body["ok"] is False and "not JSON" in body["error"] and "\n" not in body["error"]
    assert (r, terminated, truncated) == (0.0, False, False)
    body = json.loads(env.step({"tool": 3})[0])
    assert body["ok"] is False and "\n" not in body["error"]


def test_http_round_trip_equals_in_process(exported):
    _, rows = exported
    row = rows[0]
    calls = row["grader"]["reference_trajectory"]
    local = TextToolEnv(row)
    expected = [local.reset(seed=0)] + [local.step(c) for c in calls]
    server = make_server(TextToolEnv(row))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = HttpEnvClient(f"http://127.0.0.1:{server.server_address[1]}")
        observation, info = client.reset(seed=0)
        got = [(observation, info)] + [client.step(c) for c in calls]
        assert [list(x) for x in got] == [json.loads(json.dumps(list(x))) for x in expected]
        state = client.state()
        assert state["steps"] == len(calls) and state["finished"] and state["trajectory"] == calls
        client.close()
    finally:
        server.shutdown()
        server.server_close()


def test_load_row_from_warehouse_matches_export(exported):
    db, rows = exported
    assert load_row(rows[0]["env_id"], db) == rows[0]


def test_play_with_scripted_stdin(exported):
    db, rows = exported
    row = rows[0]
    lines = ["help", "tools", "nosuch {bad"] + [f"{c['tool']} {json.dumps(c['arguments'])}"
                                                for c in row["grader"]["reference_trajectory"]]
    result = subprocess.run([sys.executable, "-m", "vhd.cli", "play", row["env_id"][:16], "--db", db],
                            input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert row["player"]["tools"][0]["name"] in result.stdout
    assert json.dumps(row["player"]["tools"][0]["input_schema"], sort_keys=True) in result.stdout
    assert "error: arguments of nosuch are not JSON" in result.stdout
    assert result.stdout.rstrip().endswith("reward 1.0000")
    quit_ = subprocess.run([sys.executable, "-m", "vhd.cli", "play", row["env_id"], "--db", db],
                           input="quit\n", capture_output=True, text=True, timeout=120)
    assert quit_.returncode == 0 and quit_.stdout.rstrip().endswith("reward 0.0000")


def test_unknown_env_id_is_one_line_exit_1(exported):
    db, _ = exported
    for command in ("play", "serve-env"):
        result = subprocess.run([sys.executable, "-m", "vhd.cli", command, "nosuchenv", "--db", db],
                                input="", capture_output=True, text=True, timeout=120)
        assert result.returncode == 1
        assert result.stderr.strip().count("\n") == 0 and "nosuchenv" in result.stderr


def test_training_md_worked_example_runs(exported):
    """The OpenEnv-style rollout in docs/TRAINING.md, run as written with π*'s calls as the policy."""
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "TRAINING.md").read_text(encoding="utf-8")
    section = text[text.index("## Worked example"):]
    code = section[section.index("```python") + len("```python"):]
    code = code[:code.index("```")]
    namespace: dict = {}
    exec(compile(code, "TRAINING.md", "exec"), namespace)
    _, rows = exported
    row = rows[0]
    calls = iter(row["grader"]["reference_trajectory"])
    server = make_server(TextToolEnv(row))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        messages, r, trajectory = namespace["rollout"](lambda messages, tools: next(calls),
                                                       f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    assert r == 1.0 and trajectory == row["grader"]["reference_trajectory"]
    assert messages[0]["content"] == row["player"]["instruction"]
