"""LLM agents end to end: the real anthropic / openai SDK clients against loopback servers that
speak the Anthropic Messages (tool_use) and OpenAI chat-completions (tool_calls) formats, each
scripted to replay the oracle's calls; the episode scores 1.0 by sandbox replay, tokens stored."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from vhd.agents import Table
from vhd.agents.live import parse_agent, play_llm
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.tasks.stages.annotate import annotate
from vhd.tasks.stages.in_process import check_models
from vhd.warehouse import Warehouse


@pytest.fixture(scope="module")
def table():
    family = registry.get("knapsack")
    run = check_models(family, count=1, seed=14, presentations=("I",))
    outputs = {o.setter_output_id: o for o in run.outputs}
    verdict = run.verdicts[0]
    env, _, _ = annotate(family, verdict)
    assert env.admitted
    return Table(env, verdict.candidate.model, verdict.candidate.solution, outputs[env.setter_output_id], family)


def _serve(respond):
    """A loopback HTTP server whose POST handler answers respond(path, body) as JSON."""
    requests = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append((self.path, body))
            data = json.dumps(respond(self.path, body, len(requests))).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, requests


def test_anthropic_agent_replays_the_oracle_through_the_messages_api(table, monkeypatch, tmp_path):
    calls = table.env.reference_trajectory

    def respond(path, body, n):
        assert path == "/v1/messages"
        content = ([{"type": "tool_use", "id": f"toolu_{n}", "name": calls[n - 1]["tool"], "input": calls[n - 1]["arguments"]}]
                   if n <= len(calls) else [{"type": "text", "text": "done"}])
        return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": body["model"], "content": content,
                "stop_reason": "tool_use" if n <= len(calls) else "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": 100 + n, "output_tokens": 10}}

    server, requests = _serve(respond)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    try:
        episode = play_llm(table, "anthropic:claude-test")
    finally:
        server.shutdown()
    assert episode.reward == 1.0 and episode.tool_calls == calls
    assert {t["name"]: t["input_schema"] for t in requests[0][1]["tools"]} == {
        t["name"]: t["input_schema"] for t in table.env.tools}  # schemas go over unchanged
    # every tool_use was answered with a tool_result carrying the session's observation
    second = requests[1][1]["messages"]
    assert second[-1]["content"][0]["type"] == "tool_result" and json.loads(second[-1]["content"][0]["content"])["ok"]
    n = len(requests)
    assert episode.tokens == {"input": sum(100 + k for k in range(1, n + 1)), "output": 10 * n}
    with Warehouse.open(tmp_path / "w.duckdb") as wh, wh.transaction():
        wh.insert([episode])
    with Warehouse.open(tmp_path / "w.duckdb", read_only=True) as wh:
        assert wh.episodes("anthropic:claude-test") == [episode]


def test_openai_agent_replays_the_oracle_through_chat_completions(table):
    calls = table.env.reference_trajectory

    def respond(path, body, n):
        assert path == "/v1/chat/completions"
        if n <= len(calls):
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{n}", "type": "function",
                "function": {"name": calls[n - 1]["tool"], "arguments": json.dumps(calls[n - 1]["arguments"])}}]}
        else:
            message = {"role": "assistant", "content": "done"}
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if n <= len(calls) else "stop"}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}}

    server, requests = _serve(respond)
    try:
        episode = play_llm(table, f"openai:http://127.0.0.1:{server.server_port}/v1:qwen-test")
    finally:
        server.shutdown()
    assert episode.reward == 1.0 and episode.tool_calls == calls
    assert [t["function"]["parameters"] for t in requests[0][1]["tools"]] == [t["input_schema"] for t in table.env.tools]
    assert requests[1][1]["messages"][-1]["role"] == "tool"
    assert episode.tokens == {"input": 50 * len(requests), "output": 5 * len(requests)}


@pytest.mark.parametrize("name", ["anthropic:", "openai:model", "gpt"])
def test_bad_agent_names_are_refused(name):
    with pytest.raises(InvalidParams, match="expected anthropic:MODEL or openai:BASE_URL:MODEL"):
        parse_agent(name)


def test_openai_agent_through_vhd_eval_on_presentation_f(tmp_path):
    """`vhd eval --agent openai:...` on an F environment: the scripted server submits π*'s plan."""
    from typer.testing import CliRunner

    from vhd.cli import app

    family = registry.get("knapsack")
    run = check_models(family, count=1, seed=14, presentations=("F",))
    verdict = run.verdicts[0]
    env, checks, edges = annotate(family, verdict)
    db = tmp_path / "f.duckdb"
    with Warehouse.open(db) as wh, wh.transaction():
        wh.insert(run.models)
        wh.insert([verdict.candidate.solution])
        wh.insert(run.outputs)
        wh.insert([env])
    plan = env.reference_trajectory[0]

    def respond(path, body, n):
        message = ({"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": plan["tool"], "arguments": json.dumps(plan["arguments"])}}]} if n == 1
            else {"role": "assistant", "content": "submitted"})
        return {"id": f"c{n}", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}

    server, requests = _serve(respond)
    try:
        result = CliRunner().invoke(app, ["eval", "--db", str(db), "--json", "--presentations", "F", "--agent",
                                          f"openai:http://127.0.0.1:{server.server_port}/v1:qwen-test"])
    finally:
        server.shutdown()
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["families"] == {"knapsack": {"F": 1.0}}
    assert len(requests) == 1  # the episode ended with the one submission
    with Warehouse.open(db, read_only=True) as wh:
        (episode,) = wh.episodes()
    assert episode.tokens == {"input": 7, "output": 3} and episode.messages[0]["role"] == "user"
