"""verifiers 0.4 (`verifiers.v1`) environment (issue 17, item 3; issue 27, item 4): vhd.adapters.verifiers
and the taskset id `vhd` (the `vhd` package exports the classes).

Played through verifiers' own rollout (`Env.serving()` and `Env.run_episode`: its interception
server, its model client, its trace and its task scoring) against a loopback OpenAI-compatible
server (tests/llm_server.py) that replays π* as native `tool_calls`: reward 1.0; a model that
answers without a tool call: 0.0; a malformed call before π* is a refused call (no turn):
still 1.0. The tools reach the model as the rows' JSON Schemas, unchanged. And through
verifiers' own CLI: `vf-eval vhd` in a subprocess, on an export directory, finds the
installed environment by its id and gives every episode the reward `vhd score` gives its calls.
Rows are made in process by the pipeline's own stages (tests/test_surfaces.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import verifiers
import verifiers.v1 as vf

from llm_server import ChatCompletionsServer, replay_tool_calls
from family_kit import admitted_environments
from vhd.adapters import reward
from vhd.adapters.verifiers import load_environment, openai_tools
from vhd.mechanisms import registry
from vhd.tasks.corpus.export import write

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


def test_vf_eval_runs_the_installed_environment_by_its_id(tmp_path):
    """`vf-eval vhd` (verifiers' console script, in a subprocess) on a Parquet export of
    three families over three splits; the model plays, by row, π*, a cut π* then stops (the
    module's Env.finish() ends the episode), or no call. Each episode's reward is
    `vhd.adapters.reward` of the calls played: 1, 0 and in between."""
    made = [row for family in (*FAMILIES, "inventory_dp") for _, row, *_ in admitted_environments(registry.get(family))]
    made = [{**row, "split": ("train", "heldout", "ood")[k % 3]} for k, row in enumerate(made)]
    played = {r["env_id"]: r for r in made if r["presentation"] in ("I", "A")}
    cuts = {("knapsack", "I"): None, ("knapsack", "A"): -2, ("inventory_dp", "I"): 60, ("inventory_dp", "A"): 0,
            ("stopping", "I"): 0, ("stopping", "A"): None}  # how much of π* the model plays
    plan = {env_id: row["grader"]["reference_trajectory"][:cuts[row["family"], row["presentation"]]]
            for env_id, row in played.items()}
    by_prompt = {row["player"]["instruction"]: env_id for env_id, row in played.items()}
    assert len(by_prompt) == len(played) >= 6

    def reply(body):
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        return replay_tool_calls(plan[by_prompt[prompt]])(body)
    write(made, tmp_path / "export", "parquet")
    server = ChatCompletionsServer(reply)
    command = [str(Path(sys.executable).with_name("vf-eval")), "vhd",
               "--env.taskset.path", str(tmp_path / "export"), "-m", "replay", "--client.base-url", server.url,
               "--client.api-key-var", "VHD_TEST_KEY", "--no-push", "--no-rich", "-o", str(tmp_path / "runs")]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                                env={**os.environ, "VHD_TEST_KEY": "unused"})
    finally:
        server.close()
    assert result.returncode == 0, result.stderr[-3000:]
    (traces,) = (tmp_path / "runs").glob("*/traces.jsonl")
    episodes = [json.loads(line) for line in traces.read_text().splitlines()]
    assert sorted(e["task"]["data"]["id"] for e in episodes) == sorted(played)  # F rows are not tasks
    rewards = {}
    for episode in episodes:
        env_id, (trace,) = episode["task"]["data"]["id"], episode["traces"]
        row = played[env_id]
        assert episode["ok"] and trace["metrics"]["tool_call_count"] == len(plan[env_id]), episode["errors"]
        rewards[env_id] = reward(row["grader"], plan[env_id], row["module"])
        assert trace["rewards"] == {"decision_reward": {"score": rewards[env_id], "weight": 1.0}}  # the trace's reward
    by_cut = {cut: {rewards[e] for e, row in played.items() if cuts[row["family"], row["presentation"]] == cut}
              for cut in set(cuts.values())}
    assert by_cut[None] == {1.0} and by_cut[0] == {0.0}  # π*; no call
    assert all(0.0 < r < 1.0 for r in by_cut[-2] | by_cut[60]), by_cut  # cut short: in between


def test_vf_eval_refuses_a_path_that_is_no_export_in_one_message(tmp_path):
    command = [str(Path(sys.executable).with_name("vf-eval")), "vhd", "--env.taskset.path",
               str(tmp_path / "missing"), "-m", "replay", "--no-push", "--no-rich", "-o", str(tmp_path / "runs")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode != 0
    assert "no export at" in result.stdout + result.stderr and "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "runs").exists()
