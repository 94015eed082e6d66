"""vhd.adapters.openenv: an export row served by OpenEnv's own `create_app` under uvicorn on
loopback, played by OpenEnv's own clients (`MCPToolClient`, `GenericEnvClient`) over `/ws`."""

import asyncio
import json
import socket
import threading
import time
from importlib.metadata import version
from pathlib import Path

import pytest
import uvicorn
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient

from family_kit import admitted_environments
from vhd.adapters import reward
from vhd.adapters.gym import TextToolEnv
from vhd.adapters.openenv import VhdAction, app_for
from vhd.mechanisms import registry
from vhd.schemas.errors import UnknownEnvironment

ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def rows():
    """An I and an A export row of one admitted pandora environment (the fastest family to admit)."""
    return [row for _, row, *_ in admitted_environments(registry.get("pandora"))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(rows):
    """(row, base URL) of each row's app under uvicorn, in a thread."""
    servers, urls = [], []
    for row in rows:
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(app_for(row), host="127.0.0.1", port=port, log_level="warning"))
        threading.Thread(target=server.run, daemon=True).start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        servers.append(server)
        urls.append(f"http://127.0.0.1:{port}")
    yield list(zip(rows, urls))
    for server in servers:
        server.should_exit = True


async def _play_mcp(url, calls, finish=False, seed=None):
    """(the last StepResult, the list of rewards) of one episode through MCPToolClient."""
    async with MCPToolClient(base_url=url) as env:
        await (env.reset() if seed is None else env.reset(seed=seed))
        rewards, last = [], None
        for call in calls:
            last = await env.step(CallToolAction(tool_name=call["tool"], arguments=call["arguments"]))
            rewards.append(last.reward)
            if last.done:
                return last, rewards
        if finish:
            last = await env.step(VhdAction(type="finish"))
            rewards.append(last.reward)
        return last, rewards


def test_list_tools_are_the_rows_player_tools(served):
    for row, url in served:
        async def listed():
            async with MCPToolClient(base_url=url) as env:
                return await env.list_tools()

        tools = asyncio.run(listed())
        assert [(t.name, t.description, t.input_schema) for t in tools] == \
            [(t["name"], t["description"], t["input_schema"]) for t in row["player"]["tools"]]


def test_reference_gives_one_with_done_and_finish_zero(served):
    for row, url in served:
        calls = row["grader"]["reference_trajectory"]
        last, rewards = asyncio.run(_play_mcp(url, calls))
        assert isinstance(last.observation, CallToolObservation) and last.done is True
        assert last.reward == 1.0 == sum(rewards) == reward(row["grader"], calls, row["module"])
        assert rewards[:-1] == [0.0] * (len(calls) - 1)
        empty, rewards = asyncio.run(_play_mcp(url, [], finish=True))
        assert (empty.done, empty.reward, rewards) == (True, 0.0, [0.0])
        assert reward(row["grader"], [], row["module"]) == 0.0


def test_call_tool_returns_the_modules_answer_and_info(served):
    row, url = served[0]
    calls = row["grader"]["reference_trajectory"]

    async def first_call():
        async with MCPToolClient(base_url=url) as env:
            await env.reset()
            answer = await env.call_tool(calls[0]["tool"], **calls[0]["arguments"])
            state = await env.state()
            return answer, state

    answer, state = asyncio.run(first_call())
    gym = TextToolEnv(row)
    gym.reset()
    assert answer == json.loads(gym.step(calls[0])[0]) and state.step_count == 1


def test_generic_client_plays_a_fresh_seed_like_the_gym(served):
    """GenericEnvClient (dicts): reset(seed=k), the half-played reference finished early; the
    final reward is the Gym's episode reward on the same seed, the outcome in info."""
    row, url = served[1]
    calls = row["grader"]["reference_trajectory"][:1]
    client = GenericEnvClient(base_url=url).sync()
    with client:
        opened = client.reset(seed=3)
        assert opened.observation["instruction"] == row["player"]["instruction"]
        assert opened.observation["info"]["episode_seed"] == 3
        for call in calls:
            step = client.step({"type": "call_tool", "tool_name": call["tool"], "arguments": call["arguments"]})
        ended = step if step.done else client.step({"type": "finish"})
        state = client.state()
    gym = TextToolEnv(row)
    gym.reset(seed=3)
    for call in calls:
        _, _, terminated, _, info = gym.step(call)
    expected = info["reward"] if terminated else gym.finish()[0]
    assert ended.done and ended.reward == expected == ended.observation["info"]["reward"]
    assert state["trajectory"] == calls and state["finished"] and state["result"]["reward"] == expected


def test_two_concurrent_sessions_are_independent(served):
    """Two clients interleave their steps: one plays π* (1.0), the other only finishes (0.0)."""
    row, url = served[0]
    calls = row["grader"]["reference_trajectory"]

    async def both():
        async with MCPToolClient(base_url=url) as a, MCPToolClient(base_url=url) as b:
            await a.reset()
            await b.reset()
            for call in calls:
                last = await a.step(CallToolAction(tool_name=call["tool"], arguments=call["arguments"]))
                assert (await b.state()).step_count == 0
            ended = await b.step(VhdAction(type="finish"))
            return last, ended, await a.state(), await b.state()

    last, ended, state_a, state_b = asyncio.run(both())
    assert (last.done, last.reward, ended.done, ended.reward) == (True, 1.0, True, 0.0)
    assert (state_a.step_count, state_b.step_count) == (len(calls), 0)
    assert state_a.episode_id != state_b.episode_id


def test_a_call_after_the_end_is_an_error(served):
    row, url = served[0]
    calls = row["grader"]["reference_trajectory"]

    async def after():
        async with MCPToolClient(base_url=url) as env:
            await env.reset()
            for call in calls:
                await env.step(CallToolAction(tool_name=call["tool"], arguments=call["arguments"]))
            await env.step(CallToolAction(tool_name=calls[-1]["tool"], arguments=calls[-1]["arguments"]))

    with pytest.raises(RuntimeError, match="episode has ended"):
        asyncio.run(after())


def test_openenv_yaml_names_the_app_factory():
    import yaml

    manifest = yaml.safe_load((ROOT / "openenv.yaml").read_text(encoding="utf-8"))
    module, _, name = manifest["app"].partition(":")
    assert (manifest["spec_version"], manifest["runtime"]) == (1, "fastapi")
    assert (module, name) == ("vhd.adapters.openenv", "app")


def test_training_md_openenv_example_runs(served):
    """The OpenEnv section of docs/TRAINING.md, run as written with π*'s calls as the policy."""
    text = (ROOT / "docs" / "TRAINING.md").read_text(encoding="utf-8")
    section = text[text.index("## OpenEnv"):]
    assert f"openenv-core {version('openenv-core')}" in section
    code = section[section.index("```python") + len("```python"):]
    code = code[:code.index("```")]
    namespace: dict = {}
    exec(compile(code, "TRAINING.md", "exec"), namespace)
    row, url = served[0]
    calls = iter(row["grader"]["reference_trajectory"])
    messages, r = asyncio.run(namespace["rollout"](lambda messages, tools: next(calls), url))
    assert r == 1.0 and messages[0]["content"] == row["player"]["instruction"]


def test_app_without_vhd_env_id_is_a_one_line_error(monkeypatch):
    import vhd.adapters.openenv as module

    monkeypatch.delenv("VHD_ENV_ID", raising=False)
    with pytest.raises(UnknownEnvironment, match="VHD_ENV_ID is not set"):
        module.app


def test_metadata_mcp_route_and_a_step_before_reset(served):
    import httpx

    row, url = served[0]
    assert httpx.get(url + "/metadata").json()["description"] == row["player"]["instruction"]
    answer = httpx.post(url + "/mcp", json={"jsonrpc": "2.0", "method": "tools/list", "params": {}, "id": 1}).json()
    assert answer["error"]["message"] == "Environment does not support MCP"

    async def unreset():
        async with MCPToolClient(base_url=url) as env:
            await env.list_tools()  # needs no reset
            await env.call_tool("view_log")

    with pytest.raises(RuntimeError, match="call reset"):
        asyncio.run(unreset())
