"""verifiers 0.4 (`verifiers.v1`) environment (issue 17, item 3): vhd.adapters.verifiers.

Played through verifiers' own rollout (`Env.serving()` and `Env.run_episode`: its interception
server, its model client, its trace and its task scoring) against a loopback OpenAI-compatible
server (tests/llm_server.py) that replays π* as native `tool_calls`: reward 1.0; a model that
answers without a tool call: 0.0; a malformed call before π* is a refused call (no turn):
still 1.0. The tools reach the model as the rows' JSON Schemas, unchanged. Rows are made in
process by the pipeline's own stages (tests/test_surfaces.py).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import verifiers
import verifiers.v1 as vf

from llm_server import ChatCompletionsServer, replay_tool_calls
from family_kit import admitted_environments
from vhd.adapters.verifiers import load_environment, openai_tools
from vhd.mechanisms import registry

FAMILIES = ("knapsack", "stopping")


@pytest.fixture(scope="module", params=FAMILIES)
def rows(request):
    return [row for _, row, *_ in admitted_environments(registry.get(request.param))]


def episodes(rows, reply):
    """Every row's episode through verifiers' rollout, the model being `reply`; (episodes, requests)."""
    server = ChatCompletionsServer(reply)
    env = load_environment(rows=rows)
    ctx = vf.ModelContext(model="replay", client=vf.EvalClientConfig(base_url=server.url, api_key_var="VHD_NO_KEY"))

    async def run():
        async with env.serving():
            return [await env.run_episode(task, ctx) for task in env.taskset]
    try:
        return asyncio.run(run()), server.requests
    finally:
        server.close()


def test_installed_version():
    assert verifiers.__version__.startswith("0.4")


def test_pi_star_as_native_tool_calls_scores_one(rows):
    for row in rows:
        optimal = row["grader"]["reference_trajectory"]
        (episode,), requests = episodes([row], replay_tool_calls(optimal))
        assert episode.ok, episode.errors
        trace = episode.traces[0]
        assert trace.rewards["decision_reward"].score == 1.0 and trace.reward == 1.0, trace.rewards
        assert trace.metrics["tool_call_count"] == len(optimal)
        assert requests[0]["tools"] == openai_tools(row["player"]["tools"])  # the JSON Schemas, unchanged
        assert requests[0]["messages"][-1] == {"role": "user", "content": row["player"]["instruction"]}
        assert len(requests) == len(optimal)  # the episode ended at π*'s last call: no further model call


def test_no_tool_call_scores_zero(rows):
    (episode,), requests = episodes(rows[:1], lambda body: {"content": "I will not play."})
    assert episode.ok, episode.errors
    assert episode.traces[0].reward == 0.0 and len(requests) == 1


def test_a_malformed_call_is_refused_and_uses_no_turn(rows):
    row = rows[0]
    optimal = row["grader"]["reference_trajectory"]
    bad = {"id": "bad", "type": "function", "function": {"name": optimal[0]["tool"], "arguments": "{not json"}}
    replay = replay_tool_calls(optimal)

    def reply(body):  # one malformed call first, then π*
        tool_results = [m for m in body["messages"] if m.get("role") == "tool"]
        if not tool_results:
            return {"tool_calls": [bad]}
        return replay({**body, "messages": [m for m in body["messages"] if m.get("tool_call_id") != "bad"]})
    (episode,), requests = episodes([row], reply)
    refused = next(m for m in requests[1]["messages"] if m.get("tool_call_id") == "bad")
    assert json.loads(refused["content"])["ok"] is False
    assert episode.traces[0].reward == 1.0 and episode.traces[0].metrics["tool_call_count"] == len(optimal) + 1


def test_training_md_verifiers_example_runs(rows):
    """The verifiers example in docs/TRAINING.md, run as written against the replay server."""
    text = (Path(__file__).parent.parent / "docs" / "TRAINING.md").read_text(encoding="utf-8")
    section = text[text.index("## verifiers"):]
    code = section[section.index("```python") + len("```python"):]
    code = code[:code.index("```")]
    namespace: dict = {}
    exec(compile(code, "TRAINING.md", "exec"), namespace)
    row = rows[0]
    server = ChatCompletionsServer(replay_tool_calls(row["grader"]["reference_trajectory"]))
    try:
        assert namespace["evaluate"]([row], server.url, "replay") == [1.0]
    finally:
        server.close()
