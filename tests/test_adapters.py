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
from vhd.mechanisms._runtime import call_limit
from vhd.tasks.corpus.export import read_export


@pytest.fixture(scope="module")
def exported(refreshed, tmp_path_factory):
    db, _ = refreshed
    out = tmp_path_factory.mktemp("export")
    result = subprocess.run([sys.executable, "-m", "vhd.cli", "export", "--out", out, "--db", db],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = read_export(out)
    rows = [r for r in rows if r["presentation"] in ("I", "A")]
    assert {r["presentation"] for r in rows} == {"I", "A"}
    return db, rows


def _play(env, calls):
    """(the episode's summed step rewards, terminated, truncated, info) once the episode ends."""
    env.reset()
    total = 0.0
    for call in calls:
        observation, r, terminated, truncated, info = env.step(json.dumps(call))
        total += r
        if terminated:
            assert abs(total - info["reward"]) <= 1e-12
            return info["reward"], terminated, truncated, info
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
    env = TextToolEnv(row)
    env.reset()
    r, info = env.finish()
    assert r == 0.0 == reward(row["grader"], [], row["module"])


def test_malformed_actions_count_toward_the_call_limit_like_refused_calls(exported):
    # a malformed action reaches the module as a refused call, so the module's call limit ends
    # the episode, and the recorded trajectory replays to the same reward everywhere
    _, rows = exported
    row = rows[0]
    env = TextToolEnv(row)
    env.reset()
    paid = []
    for steps in range(1, 10_000):
        observation, r, terminated, truncated, info = env.step("{bad")
        paid.append(r)
        if terminated:
            break
    assert steps == call_limit(env.turn_budget) and not truncated
    assert "episode_over" in json.loads(observation)
    assert info["reward"] == reward(row["grader"], env.trajectory, row["module"]) == 0.0
    assert paid[0] == 1.0 and paid[-1] == -1.0 and set(paid[1:-1]) == {0.0}  # the baseline, given back at the end


def test_refused_calls_use_no_turn_on_the_wrapper(exported):
    # regression: the wrapper counted every call as a turn, so k refusals before π* scored 0
    _, rows = exported
    for row in rows:
        optimal = row["grader"]["reference_trajectory"]
        calls = [{"tool": "no_such_tool", "arguments": {}}] * 20 + optimal
        r, terminated, _, info = _play(TextToolEnv(row), calls)
        assert (r, terminated) == (1.0, True) and info["turns_used"] <= row["grader"]["config"]["turn_budget"]
        assert reward(row["grader"], calls, row["module"]) == 1.0


def test_deeply_nested_actions_are_one_line_errors(exported):
    _, rows = exported
    env = TextToolEnv(rows[0])
    env.reset()
    for action in ("[" * 1500 + "]" * 1500, '{"tool": "x", "arguments": ' + "[" * 5000 + "]" * 5000 + "}",
                   "9" * 5000, "x" * 100_000):
        body = json.loads(env.step(action)[0])
        assert body["ok"] is False and "\n" not in body["error"], body
    name = rows[0]["player"]["tools"][0]["name"]
    body = json.loads(env.step({"tool": name, "arguments": {"day": [[[[[]]]]] * 3, "x" * 10_000: 1}})[0])
    assert body["ok"] is False and len(body["error"]) < 1000


def test_bad_action_is_a_one_line_error_observation(exported):
    _, rows = exported
    env = TextToolEnv(rows[0])
    env.reset()
    observation, r, terminated, truncated, _ = env.step("{not json")
    body = json.loads(observation)
    assert body["ok"] is False and "not JSON" in body["error"] and "\n" not in body["error"]
    assert (r, terminated, truncated) == (1.0, False, False)  # the first step's baseline; a malformed call is worth 0
    body = json.loads(env.step({"tool": 3})[0])
    assert body["ok"] is False and "\n" not in body["error"]


def test_http_round_trip_equals_in_process(exported):
    _, rows = exported
    row = rows[0]
    calls = row["grader"]["reference_trajectory"]
    local = TextToolEnv(row)
    expected = [local.reset()] + [local.step(c) for c in calls]
    server = make_server(TextToolEnv(row))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = HttpEnvClient(f"http://127.0.0.1:{server.server_address[1]}")
        observation, info = client.reset()
        got = [(observation, info)] + [client.step(c) for c in calls]
        assert [list(x) for x in got] == [json.loads(json.dumps(list(x))) for x in expected]
        state = client.state()
        assert state["steps"] == len(calls) and state["finished"] and state["trajectory"] == calls
        assert state["session_id"] == client.session_id and state["result"]["reward"] == 1.0
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
    assert reward(row["grader"], [], row["module"]) == 0.0


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


def _post(url, path, body):
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # a new connection per request
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture()
def served(exported):
    _, rows = exported
    server = make_server(rows[0])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield rows[0], f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_serve_env_answers_every_request_on_a_new_connection(served):
    # regression: the module's SQLite connection was bound to the thread that made it, so a
    # request served by another thread lost its step (5 of 20 unanswered)
    row, url = served
    calls = row["grader"]["reference_trajectory"]
    status, opened = _post(url, "/reset", {})
    assert status == 200
    session = opened["session_id"]
    answers = [_post(url, "/step", {"session_id": session, "action": call}) for call in calls[:20]]
    assert all(status == 200 for status, _ in answers), answers
    for _ in range(20 - len(answers)):
        assert _post(url, "/reset", {"session_id": "again"})[0] == 200
    for body in ("[" * 100_000 + "]" * 100_000, '{"session_id": 3, "action": {}}', "{not json"):
        import urllib.request

        request = urllib.request.Request(url + "/step", data=body.encode(), method="POST")
        try:
            urllib.request.urlopen(request, timeout=60)
            raise AssertionError("a bad body was accepted")
        except urllib.error.HTTPError as exc:
            assert exc.code == 400 and "error" in json.loads(exc.read())


def test_serve_env_plays_fifty_concurrent_sessions(served):
    row, url = served
    calls = row["grader"]["reference_trajectory"]
    plays = {k: calls[: len(calls) * (k % 5) // 4] for k in range(50)}  # π* cut at 0, ¼, ½, ¾ and whole
    expected = {k: reward(row["grader"], p, row["module"]) for k, p in list(plays.items())[:5]}
    got: dict[int, float] = {}

    def player(k):
        client = HttpEnvClient(url)
        client.reset()
        paid, terminated = 0.0, False
        for call in plays[k]:
            _, r, terminated, _, _ = client.step(call)
            paid += r
        got[k] = paid if terminated else client.finish()[0]
        client.close()

    threads = [threading.Thread(target=player, args=(k,)) for k in plays]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == {k: expected[k % 5] for k in plays}
    assert expected[4] == 1.0 and expected[0] == 0.0
