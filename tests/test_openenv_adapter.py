"""vhd.adapters.openenv: an export row served by openenv 0.10's own `create_app` over its
`MCPEnvironment` (uvicorn on loopback), played by OpenEnv's own clients (`MCPToolClient` over
`/mcp` + `/ws`, `GenericEnvClient` over `/ws`) and raw `/ws`, `/mcp` and HTTP requests; and the
OpenEnv package `vhd export --format openenv` writes, checked by openenv's own validator
(`openenv validate`, and its `run_validation` entry point for the runtime graders)."""

import asyncio
import json
import math
import shutil
import socket
import subprocess
import sys
import threading
import time
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest
import uvicorn
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation, ListToolsAction
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from websockets.sync.client import connect

from family_kit import admitted_environments
from vhd.adapters import grade, reward
from vhd.adapters.gym import TextToolEnv
from vhd.adapters.openenv import VhdAction, app_for
from vhd.mechanisms import registry
from vhd.schemas.errors import TrajectoryFormatError, UnknownEnvironment
from vhd.tasks.corpus.openenv_package import runtime_plan, write_package

ROOT = Path(__file__).parent.parent
OPENENV = Path(sys.executable).with_name("openenv")  # the validator's own CLI, installed with openenv


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


def _action(call):
    return CallToolAction(tool_name=call["tool"], arguments=call["arguments"])


async def _play_mcp(url, calls, finish=False, seed=None):
    """(the reset result, the last StepResult, the rewards) of one episode through MCPToolClient."""
    async with MCPToolClient(base_url=url) as env:
        opened = await (env.reset() if seed is None else env.reset(seed=seed))
        rewards, last = [], None
        for call in calls:
            last = await env.step(_action(call))
            rewards.append(last.reward)
            if last.done:
                return opened, last, rewards
        if finish:
            last = await env.step(VhdAction(type="finish"))
            rewards.append(last.reward)
        return opened, last, rewards


def test_openenv_is_the_version_targeted():
    assert version("openenv") == "0.10.0"


def test_list_tools_are_the_rows_player_tools(served):
    """MCPToolClient (production mode: MCP `tools/list` on /mcp) and a `list_tools` step."""
    for row, url in served:
        expected = [(t["name"], t["description"], t["input_schema"]) for t in row["player"]["tools"]]

        async def listed():
            async with MCPToolClient(base_url=url) as env:
                await env.reset()
                over_mcp = await env.list_tools()
                step = await env.step(ListToolsAction())
                return over_mcp, step, await env.state()

        over_mcp, step, state = asyncio.run(listed())
        assert [(t.name, t.description, t.input_schema) for t in over_mcp] == expected
        assert [(t.name, t.description, t.input_schema) for t in step.observation.tools] == expected
        assert (step.reward, step.done, state.step_count) == (0.0, False, 1)


def test_mcp_tool_client_plays_pi_star_to_one_and_the_empty_episode_to_its_score(served):
    """0.10's MCPToolClient: reset keeps the instruction; π*'s calls end with reward 1.0 and
    `done`, every earlier step 0.0; finishing at once gives `vhd score`'s reward of []."""
    for row, url in served:
        calls = row["grader"]["reference_trajectory"]
        opened, last, rewards = asyncio.run(_play_mcp(url, calls))
        assert opened.observation.instruction == row["player"]["instruction"]
        assert [t["name"] for t in opened.observation.player_tools] == [t["name"] for t in row["player"]["tools"]]
        assert (opened.reward, opened.done) == (0.0, False)
        assert isinstance(last.observation, CallToolObservation) and last.done is True
        assert last.reward == 1.0 == sum(rewards) == reward(row["grader"], calls, row["module"])
        assert rewards[:-1] == [0.0] * (len(calls) - 1)
        _, empty, rewards = asyncio.run(_play_mcp(url, [], finish=True))
        assert empty.done and rewards == [empty.reward] == [reward(row["grader"], [], row["module"])]


def test_call_tool_over_mcp_plays_the_episode_with_its_reward_in_meta(served):
    """`call_tool` (MCP tools/call on /mcp, the session MCPToolClient attached its WebSocket to)
    is a step: the module's answers, step_count; the raw JSON-RPC answer's `_meta` has the reward."""
    row, url = served[0]
    calls = row["grader"]["reference_trajectory"]

    async def called():
        async with MCPToolClient(base_url=url) as env:
            await env.reset()
            answers = [await env.call_tool(c["tool"], **c["arguments"]) for c in calls]
            return answers, await env.state()

    answers, state = asyncio.run(called())
    gym = TextToolEnv(row)
    gym.reset()
    assert answers == [json.loads(gym.step(c)[0]) for c in calls]
    assert state.step_count == len(calls)

    def rpc(method, params):
        return httpx.post(url + "/mcp", json={"jsonrpc": "2.0", "method": method, "params": params, "id": 1}).json()

    session = rpc("openenv/session/create", {})["result"]["session_id"]
    with connect(url.replace("http", "ws") + f"/ws?session_id={session}") as ws:
        ws.send(json.dumps({"type": "reset", "data": {}}))
        assert json.loads(ws.recv())["type"] == "observation"
        metas = [rpc("tools/call", {"name": c["tool"], "arguments": c["arguments"], "session_id": session})
                 ["result"]["meta"] for c in calls]
    assert [m["reward"] for m in metas] == [0.0] * (len(calls) - 1) + [1.0]
    assert [m["done"] for m in metas][-1] is True and metas[-1]["info"]["reward"] == 1.0
    tools = rpc("tools/list", {})["result"]["tools"]
    assert [t["name"] for t in tools] == [t["name"] for t in row["player"]["tools"]]


def test_every_steps_reward_is_finite_and_the_last_is_vhd_scores(served):
    """A trajectory with a malformed call (wrong argument type: a refused call), a list_tools step
    and an unknown tool, then `finish`: every reward finite, 0.0 until done, the last
    `vhd score`'s (`grade`); step_count counts every step; the state's trajectory is the calls."""
    row, url = served[1]
    first = row["grader"]["reference_trajectory"][0]
    name = first["tool"]
    bad = {"tool": name, "arguments": {k: "not a value" for k in first["arguments"]} or {"nonsense": 1}}
    calls = [bad, {"tool": "no_such_tool", "arguments": {}}, first]
    with GenericEnvClient(base_url=url).sync() as client:
        client.reset()
        steps = [client.step({"type": "call_tool", "tool_name": c["tool"], "arguments": c["arguments"]})
                 for c in calls[:2]]
        steps.append(client.step({"type": "list_tools"}))
        steps.append(client.step({"type": "call_tool", "tool_name": calls[2]["tool"], "arguments": calls[2]["arguments"]}))
        if not steps[-1].done:
            steps.append(client.step({"type": "finish"}))
        state = client.state()
    rewards = [s.reward for s in steps]
    assert all(isinstance(r, float) and math.isfinite(r) for r in rewards)
    assert rewards[:-1] == [0.0] * (len(steps) - 1) and steps[-1].done
    scored = grade(row["grader"], calls, row["module"])
    assert rewards[-1] == scored["reward"] == steps[-1].observation["info"]["reward"]
    assert steps[0].observation["result"]["ok"] is False  # the module refused the malformed call
    assert state["step_count"] == len(steps) and state["trajectory"] == calls and state["finished"]


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
    """Two clients interleave their steps: one plays π* (1.0), the other only finishes."""
    row, url = served[0]
    calls = row["grader"]["reference_trajectory"]

    async def both():
        async with MCPToolClient(base_url=url) as a, MCPToolClient(base_url=url) as b:
            await a.reset()
            await b.reset()
            for call in calls:
                last = await a.step(_action(call))
                assert (await b.state()).step_count == 0
            ended = await b.step(VhdAction(type="finish"))
            return last, ended, await a.state(), await b.state()

    last, ended, state_a, state_b = asyncio.run(both())
    assert (last.done, last.reward, ended.done, ended.reward) == (True, 1.0, True, reward(row["grader"], [], row["module"]))
    assert (state_a.step_count, state_b.step_count) == (len(calls), 1)
    assert state_a.episode_id != state_b.episode_id


def test_bad_actions_are_validation_errors_and_the_session_lives(served):
    """Raw /ws: malformed actions are VALIDATION_ERROR answers with a JSON message and the same
    session then plays π* to 1.0; a step after the end is refused, the session still open."""
    row, url = served[0]
    calls = row["grader"]["reference_trajectory"]
    bad = [{"type": "call_tool"}, {"type": "bogus"}, {"type": "call_tool", "tool_name": "x", "arguments": 3},
           {"type": "list_tools", "extra": 1}, {"type": "finish", "tool_name": "x"}]
    with connect(url.replace("http", "ws") + "/ws") as ws:
        def send(message):
            ws.send(json.dumps(message))
            return json.loads(ws.recv())

        assert send({"type": "reset", "data": {"episode_id": "e-1"}})["type"] == "observation"
        for action in bad:
            answer = send({"type": "step", "data": action})
            assert (answer["type"], answer["data"]["code"]) == ("error", "VALIDATION_ERROR"), action
        missing = send({"type": "step", "data": bad[0]})["data"]["errors"][0]
        assert missing["msg"].startswith("a call_tool action needs tool_name")
        assert send({"type": "state"})["data"]["step_count"] == 0
        for call in calls:
            answer = send({"type": "step", "data": {"type": "call_tool", "tool_name": call["tool"],
                                                    "arguments": call["arguments"]}})
        assert (answer["data"]["reward"], answer["data"]["done"]) == (1.0, True)
        after = send({"type": "step", "data": {"type": "finish"}})
        assert after["type"] == "error" and after["data"]["message"].startswith("the episode has ended")
        state = send({"type": "state"})["data"]
        assert (state["episode_id"], state["step_count"]) == ("e-1", len(calls))


def test_http_step_is_answered_not_a_bare_500(served):
    """OpenEnv's stateless HTTP /step (a new environment per request): a malformed action is a
    422 naming the problem, a well-formed one a 409 saying to play over /ws or /mcp."""
    row, url = served[0]
    malformed = httpx.post(url + "/step", json={"action": {"type": "call_tool"}})
    assert malformed.status_code == 422
    assert malformed.json()["detail"][0]["msg"].startswith("a call_tool action needs tool_name")
    tool = row["player"]["tools"][0]["name"]
    stateless = httpx.post(url + "/step", json={"action": {"type": "call_tool", "tool_name": tool, "arguments": {}}})
    assert stateless.status_code == 409 and "play an episode over /ws or /mcp" in stateless.json()["detail"]
    opened = httpx.post(url + "/reset", json={}).json()
    assert opened["observation"]["instruction"] == row["player"]["instruction"] and opened["reward"] == 0.0


def test_a_call_before_reset_is_an_error(served):
    row, url = served[0]

    async def unreset():
        async with MCPToolClient(base_url=url) as env:
            assert len(await env.list_tools()) == len(row["player"]["tools"])  # needs no reset
            await env.call_tool(row["player"]["tools"][0]["name"])

    with pytest.raises(RuntimeError, match="call reset"):
        asyncio.run(unreset())


def test_schema_declares_the_observations_sent(served):
    row, url = served[0]
    schema = httpx.get(url + "/schema").json()
    assert {"tools", "tool_name", "result", "info"} <= set(schema["observation"]["properties"])
    assert {"instruction", "player_tools", "info"} <= set(schema["reset_observation"]["properties"])
    assert schema["observation"]["additionalProperties"] is False


def test_metadata_is_the_instruction(served):
    row, url = served[0]
    assert httpx.get(url + "/metadata").json()["description"] == row["player"]["instruction"]


def test_app_without_vhd_env_id_is_a_one_line_error(monkeypatch):
    import vhd.adapters.openenv as module

    monkeypatch.delenv("VHD_ENV_ID", raising=False)
    with pytest.raises(UnknownEnvironment, match="VHD_ENV_ID is not set"):
        module.app


def test_training_md_openenv_example_runs(served):
    """The OpenEnv section of docs/TRAINING.md, run as written with π*'s calls as the policy."""
    text = (ROOT / "docs" / "TRAINING.md").read_text(encoding="utf-8")
    section = text[text.index("## OpenEnv"):]
    section = section[:section.index("\n## ", 1)]
    assert f"openenv {version('openenv')}" in section
    code = section[section.index("```python") + len("```python"):]
    code = code[:code.index("```")]
    namespace: dict = {}
    exec(compile(code, "TRAINING.md", "exec"), namespace)
    row, url = served[0]
    calls = iter(row["grader"]["reference_trajectory"])
    messages, r = asyncio.run(namespace["rollout"](lambda messages, tools: next(calls), url))
    assert r == 1.0 and messages[0]["content"] == row["player"]["instruction"]


# --- the OpenEnv package (vhd export --format openenv) and openenv's validator ---------------


class LocalProcessSubject:
    """A package's server (its Dockerfile's command, `uvicorn server.app:app`) in a local process."""

    def __init__(self, process: subprocess.Popen, base_url: str):
        self.process, self.base_url = process, base_url

    def inspect(self) -> dict:
        return {"provider": "local-process", "pid": self.process.pid}

    def logs(self, max_bytes: int = 65536) -> str:
        return ""

    def exec(self, argv, timeout_s):
        from openenv.validation.providers import ExecResult

        started = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        return ExecResult(done.returncode, done.stdout, done.stderr, time.monotonic() - started)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


class LocalProcessProvider:
    """An openenv validation provider (its `ValidationProvider` protocol) that runs the package's
    server command in a process of this interpreter instead of a Docker image, so that the
    validator's runtime graders (startup, reward_well_formed, observation_schema, state_contract)
    run without a Docker daemon. It declares no network-policy capability, so that check SKIPs."""

    name = "local-process"
    supported_network_modes = frozenset({"public"})

    def __init__(self):
        from openenv.validation.types import ProviderCapability

        self.capabilities = frozenset({ProviderCapability.IMAGE_BUILD})
        self.root: Path | None = None

    def build(self, root, execution) -> str:
        from openenv.validation.runner import source_digest

        self.root = Path(root)
        return "sha256:" + source_digest(self.root)

    def start(self, spec) -> LocalProcessSubject:
        from openenv.validation.providers import StartupError

        port = _free_port()
        process = subprocess.Popen([sys.executable, "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1",
                                    "--port", str(port), "--log-level", "warning"], cwd=self.root)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + spec.startup_timeout_s
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(url + "/health").status_code == 200:
                    return LocalProcessSubject(process, url)
            except httpx.TransportError:
                time.sleep(0.2)
        process.kill()
        raise StartupError("the package's server did not answer /health")


@pytest.fixture(scope="module")
def package(rows, tmp_path_factory):
    """The OpenEnv package of the A row, as `vhd export --format openenv` writes it."""
    return write_package(rows[1], tmp_path_factory.mktemp("openenv") / "pkg")


def _validate(*args, cwd=None):
    return subprocess.run([str(OPENENV), "validate", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def test_the_package_has_the_files_openenv_and_docker_read(package, rows):
    import yaml

    manifest = yaml.safe_load((package / "openenv.yaml").read_text(encoding="utf-8"))
    assert (manifest["app"], manifest["port"], manifest["validation"]["execution"]["dockerfile"]) == \
        ("server.app:app", 8000, "Dockerfile")
    plan = json.loads((package / "validation" / "runtime.json").read_text(encoding="utf-8"))
    assert plan == runtime_plan(rows[1])
    assert plan["reset"]["seed"] == rows[1]["grader"]["config"]["episode_seed"]
    assert [(a["tool_name"], a["arguments"]) for a in plan["actions"]] == \
        [(c["tool"], c["arguments"]) for c in rows[1]["grader"]["reference_trajectory"]]
    dockerfile = (package / "Dockerfile").read_text(encoding="utf-8")
    assert "--no-index --find-links /tmp/wheels" in dockerfile and "server.app:app" in dockerfile
    assert [w.name.split("-")[0] for w in (package / "wheels").glob("*.whl")] == ["vhd_play"]
    assert json.loads((package / "row.json").read_text(encoding="utf-8")) == rows[1]


def test_openenv_validate_static_passes(package):
    done = _validate(package, "--level", "static", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "pass"
    assert [(r["check_id"], r["status"]) for r in report["results"]] == [("static.manifest", "pass")]


def test_openenv_validate_runtime_graders_pass_on_the_package_server(package):
    """openenv's `run_validation` (what `openenv validate` runs) at the runtime level, the server
    started from the package by LocalProcessProvider: the runtime contract checks pass."""
    from openenv.validation import Level, Verdict, run_validation

    report = run_validation(package, max_level=Level.RUNTIME, provider=LocalProcessProvider())
    status = {r.check_id: r.status.value for r in report.results}
    for check in ("static.manifest", "runtime.startup", "runtime.reward_well_formed",
                  "runtime.observation_schema", "runtime.state_contract"):
        assert status[check] == "pass", (check, [r.evidence for r in report.results if r.check_id == check])
    assert not {"fail", "error"} & set(status.values())
    assert report.verdict is not Verdict.FAIL


def test_the_runtime_plan_is_pi_star_to_one_and_validate_url_passes(package, rows):
    """The validator's own collector plays the plan on the package's server: rewards 0.0 until
    the last step's 1.0 (`vhd score`'s for π*), step_count every step; `openenv validate --url`
    (the running-server probe, CLI) passes."""
    from openenv.validation.runtime.collector import collect_runtime_evidence
    from openenv.validation.runtime.contracts import RuntimePlan

    provider = LocalProcessProvider()
    provider.build(package, None)
    from openenv.validation.runtime.contracts import LaunchSpec

    subject = provider.start(LaunchSpec.model_validate({
        "image_ref": "sha256:" + "0" * 64, "run_id": "vhd-test",
        "resources": {"cpu": 1.0, "memory_mb": 1024, "disk_mb": 2048, "episode_timeout_s": 300.0},
        "network": {"mode": "public"}}))
    try:
        plan = RuntimePlan.model_validate(runtime_plan(rows[1]))
        evidence = collect_runtime_evidence(subject.base_url, plan, episode_timeout_s=120)
        assert evidence.failure_reason is None
        steps = [json.loads(e.response_json)["data"] for e in evidence.exchanges if e.operation == "step"]
        states = [json.loads(e.response_json)["data"] for e in evidence.exchanges if e.operation == "state"]
        calls = rows[1]["grader"]["reference_trajectory"]
        assert [s["reward"] for s in steps] == [0.0] * (len(calls) - 1) + [reward(rows[1]["grader"], calls, rows[1]["module"])]
        assert steps[-1]["reward"] == 1.0 and steps[-1]["done"] is True
        assert [s["step_count"] for s in states] == list(range(len(calls) + 1))
        probe = _validate("--url", subject.base_url)
        assert probe.returncode == 0 and "Verdict: PASS" in probe.stdout, probe.stdout + probe.stderr
    finally:
        subject.stop()


def _docker_daemon() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


@pytest.mark.skipif(not _docker_daemon(), reason="no Docker daemon here: `openenv validate` builds the package's "
                    "image for its runtime level; the runtime graders run above on a local process instead")
def test_openenv_validate_with_the_docker_build_passes(rows, tmp_path):
    """The whole `openenv validate` (image build, no index: the wheelhouse is vhd-play[openenv]'s
    wheels, made by `pip wheel`)."""
    wheelhouse = tmp_path / "wheelhouse"
    made = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(wheelhouse), f"{ROOT}[openenv]"],
                          capture_output=True, text=True, timeout=3600)
    assert made.returncode == 0, made.stderr[-2000:]
    package = write_package(rows[0], tmp_path / "pkg", wheelhouse)
    done = _validate(package, "--level", "runtime")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_package_refuses_f_and_a_used_directory(rows, tmp_path):
    f_row = {**rows[0], "presentation": "F", "grader": {**rows[0]["grader"],
                                                        "config": {**rows[0]["grader"]["config"], "presentation": "F"}}}
    with pytest.raises(TrajectoryFormatError, match="presentation F"):
        write_package(f_row, tmp_path / "f")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    with pytest.raises(TrajectoryFormatError, match="not an empty directory"):
        write_package(rows[0], tmp_path / "used")


def test_vhd_export_format_openenv(refreshed, tmp_path):
    """`vhd export --format openenv --env PREFIX`: one package that `openenv validate` passes;
    a prefix that names no environment, and --env without --format openenv, are one line each."""
    db, _ = refreshed
    listed = subprocess.run([sys.executable, "-m", "vhd.cli", "envs", "--db", str(db), "--json"],
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    env_id = next(e["env_id"] for e in json.loads(listed.stdout) if e["presentation"] in ("I", "A"))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "vhd.cli", "export", "--format", "openenv", "--out", str(out),
                           "--env", env_id[:12], "--db", str(db)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (package,) = [path for path in out.iterdir() if path.is_dir()]  # and OUT/SEAL, the version's seal
    assert sorted(path.name for path in out.iterdir() if not path.is_dir()) == ["SEAL"]
    assert json.loads((package / "row.json").read_text())["env_id"] == env_id
    assert _validate(package, "--level", "static").returncode == 0
    for args, message in ((["--format", "openenv", "--env", "ffffffffffff"], "no environments of version"),
                          (["--env", env_id[:12]], "--env and --wheelhouse are options of --format openenv")):
        bad = subprocess.run([sys.executable, "-m", "vhd.cli", "export", "--out", str(tmp_path / "bad"), *args,
                              "--db", str(db)], capture_output=True, text=True, timeout=600)
        assert bad.returncode == 1 and message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_the_repository_is_not_an_openenv_package():
    """The repository serves any of its environments (`vhd serve-openenv ENV_ID`), so it has no
    openenv.yaml of its own; `openenv validate` of it says it is no package (exit 2)."""
    assert not (ROOT / "openenv.yaml").exists()
    done = _validate(ROOT, "--level", "static")
    assert done.returncode == 2 and "openenv.yaml" in done.stderr + done.stdout


def test_a_zero_argument_environment_reads_its_row_from_the_process_environment(rows, tmp_path, monkeypatch):
    """NeMo-Gym's OpenEnv resource server builds `env_class()` with no arguments: `VHD_ROW` (or
    `VHD_ENV_ID`/`VHD_DB`) names the row, and the episode pays what `vhd score` pays."""
    from vhd.adapters.openenv import VhdEnvironment, configured_row

    row = rows[0]
    (tmp_path / "row.json").write_text(json.dumps(row), encoding="utf-8")
    monkeypatch.delenv("VHD_ENV_ID", raising=False)
    monkeypatch.delenv("VHD_ROW", raising=False)
    configured_row.cache_clear()
    with pytest.raises(UnknownEnvironment, match="VHD_ROW"):
        VhdEnvironment()
    monkeypatch.setenv("VHD_ROW", str(tmp_path / "row.json"))
    env = VhdEnvironment()
    observation = env.reset()
    assert observation.instruction == row["player"]["instruction"] and env.row == row
    last = None
    for call in row["grader"]["reference_trajectory"]:
        last = env.step(VhdAction(type="call_tool", tool_name=call["tool"], arguments=call["arguments"]))
    assert last.done and last.reward == 1.0 == reward(row["grader"], row["grader"]["reference_trajectory"], row["module"])
    assert VhdEnvironment().row is env.row  # read once per process
    configured_row.cache_clear()
