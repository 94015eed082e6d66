"""One exported environment served by OpenEnv's own server (`create_app`), with its MCP tool interface.

    >>> app = app_for(row)                  # OpenEnv's FastAPI app; `serve(row, host, port)` runs it under uvicorn
    >>> sorted({"/ws", "/reset", "/step", "/state", "/schema", "/health"} - {route.path for route in app.routes})
    []

OpenEnv's clients talk to it: `MCPToolClient` (`list_tools()`, `call_tool(name, **arguments)`,
`step(...)`) and `GenericEnvClient` (dicts), each over its own WebSocket session (`/ws`), so
concurrent rollouts are independent episodes (one `TextToolEnv` per session, the one turn rule
and reward of every surface). Actions (`VhdAction`):

    {"type": "list_tools"}                                → ListToolsObservation: the row's player tools
    {"type": "call_tool", "tool_name": T, "arguments": A} → ToolResultObservation: one step
    {"type": "finish"}                                    → FinishObservation: the episode stopped by
                                                             the module's `Env.finish()`

`reset(seed=k)` plays a fresh episode of the same θ on episode seed k (no seed: the stored
episode); its observation holds the instruction and the tools. Reward: every observation of an
episode but the last has `reward` 0.0; the one with `done` true (the tool call that ended it, or
`finish`) has the episode's decision reward (`reward` of `vhd score`), so a trainer that sums the
rewards and one that takes the last get the same number. The Gym's per-step rewards (the step
rewards of `vhd score`, which also sum to it) are in `info["step_reward"]`; the last `info` also
has `utility`, `outcome_reward`, `turns_used` and `calls_used`. A call after the end, or before
`reset`, is answered with an error. OpenEnv's stateless HTTP `/reset` and `/step` make a new
environment per request (OpenEnv's design): play episodes over `/ws`. The `/mcp` JSON-RPC route
bypasses `step` (no reward) and answers "Environment does not support MCP" here.

`app` (what `uvicorn vhd.adapters.openenv:app` and the repository's openenv.yaml name) is the app
of the environment `VHD_ENV_ID` in the warehouse `VHD_DB` (the default warehouse if unset),
built when first asked for.

The generated module runs in the server's process (docs/TRAINING.md, "Trust model").
"""

from __future__ import annotations

import functools
import json
import os
import types
import uuid
from typing import Any, Literal

from pydantic import Field, model_validator

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import CallToolObservation, ListToolsObservation, Tool
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from vhd.adapters.gym import TextToolEnv, load_module
from vhd.schemas.errors import UnknownEnvironment

MAX_SESSIONS = 256  # concurrent WebSocket sessions of one app, by default


class VhdAction(Action):
    """An action of an exported environment: OpenEnv's `ListToolsAction` / `CallToolAction`
    payloads (what `MCPToolClient` sends) or `{"type": "finish"}`."""

    type: Literal["list_tools", "call_tool", "finish"] = Field(description="list_tools, call_tool or finish")
    tool_name: str | None = Field(default=None, description="the tool to call (call_tool only)")
    arguments: dict[str, Any] = Field(default_factory=dict, description="the tool's arguments (call_tool only)")

    @model_validator(mode="after")
    def _tool_named(self) -> "VhdAction":
        if self.type == "call_tool" and not self.tool_name:
            raise ValueError("a call_tool action needs tool_name; expected one of the tools list_tools gives")
        return self


class EpisodeObservation(Observation):
    """The start of an episode (reset): the player's instruction and tools."""

    instruction: str = Field(description="the player's instruction")
    tools: list[Tool] = Field(description="the player's tools (as list_tools gives them)")
    info: dict[str, Any] = Field(default_factory=dict, description="env_id, turn_budget, episode_seed")


class FinishObservation(Observation):
    """The end of an episode by `finish` (the module's `Env.finish()` plays the rest)."""

    info: dict[str, Any] = Field(default_factory=dict,
                                 description="utility, reward, outcome_reward, turns_used, calls_used")


class ToolResultObservation(CallToolObservation):
    """A tool's answer (`result`, the module's JSON object), with the step's `info`."""

    info: dict[str, Any] = Field(default_factory=dict, description="steps, step_reward; the outcome at the end")


class VhdState(State):
    """The session's episode: `episode_id`, `step_count` and the calls so far."""

    env_id: str
    turn_budget: int
    trajectory: list[dict[str, Any]] = Field(default_factory=list)
    finished: bool = False
    result: dict[str, Any] | None = None


def _tools(row: dict[str, Any]) -> list[Tool]:
    return [Tool(name=t["name"], description=t.get("description", ""), input_schema=t["input_schema"])
            for t in row["player"]["tools"]]


class VhdEnvironment(Environment):
    """One session's episodes of one exported environment (a `TextToolEnv` underneath).

    Description: the player's instruction and tools of an export row; each `call_tool` is one
    `TextToolEnv.step`. Action Space: `VhdAction`. Observation Space: `EpisodeObservation` (reset),
    `ListToolsObservation`, `ToolResultObservation`, `FinishObservation`. Rewards: 0.0 until the
    episode ends, then its decision reward. Starting State: the stored episode, or episode seed `seed`. Episode
    End: the module's turn rule (clock or done tool, turns or call limit) or `finish`.
    Arguments: the row, and the module loaded from it (shared by the sessions of one app).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session holds its own TextToolEnv; the module's create() is per episode

    def __init__(self, row: dict[str, Any], module: types.ModuleType | None = None):
        super().__init__()
        self.row = row
        self._gym = TextToolEnv(row, module)
        self._episode_id: str | None = None

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> EpisodeObservation:
        _, info = self._gym.reset(seed=seed)
        self._episode_id = episode_id or uuid.uuid4().hex
        return EpisodeObservation(instruction=self.row["player"]["instruction"], tools=_tools(self.row), info=info,
                                  reward=0.0, done=False)

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        kind = getattr(action, "type", None)
        if kind == "list_tools":
            return ListToolsObservation(tools=_tools(self.row))
        if kind == "finish":
            r, outcome = self._gym.finish()
            return FinishObservation(info=outcome, reward=r, done=True)
        if kind != "call_tool":
            raise ValueError(f"unknown action {action!r}; expected list_tools, call_tool or finish")
        text, step_reward, done, _, info = self._gym.step({"tool": action.tool_name, "arguments": action.arguments})
        info = {**info, "step_reward": step_reward}
        return ToolResultObservation(tool_name=action.tool_name, result=json.loads(text), info=info,
                                     reward=info["reward"] if done else 0.0, done=done)

    @property
    def state(self) -> VhdState:
        g = self._gym
        return VhdState(episode_id=self._episode_id, step_count=g.steps, env_id=self.row["env_id"],
                        turn_budget=g.turn_budget, trajectory=list(g.trajectory), finished=g.finished,
                        result=g.result)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=f"vhd-{self.row['env_id']}", description=self.row["player"]["instruction"])


def app_for(row: dict[str, Any], max_concurrent_envs: int = MAX_SESSIONS):
    """OpenEnv's FastAPI app (`create_app`) serving one export row, up to `max_concurrent_envs`
    WebSocket sessions at once; the generated module is loaded once, here."""
    factory = functools.partial(VhdEnvironment, row, load_module(row["module"]))
    return create_app(factory, VhdAction, Observation, env_name=f"vhd-{row['env_id']}",
                      max_concurrent_envs=max_concurrent_envs)


def serve(row: dict[str, Any], host: str = "127.0.0.1", port: int = 8000,
          max_concurrent_envs: int = MAX_SESSIONS) -> None:
    """Serve `app_for(row)` with uvicorn until interrupted (loopback unless told otherwise)."""
    import uvicorn

    uvicorn.run(app_for(row, max_concurrent_envs), host=host, port=port)


def __getattr__(name: str):
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from vhd.adapters import load_row
    from vhd.warehouse import Warehouse

    env_id, db = os.environ.get("VHD_ENV_ID"), os.environ.get("VHD_DB") or None
    if not env_id:
        raise UnknownEnvironment("VHD_ENV_ID is not set; expected the env_id (from `vhd envs`) "
                                 "of the environment to serve")
    with Warehouse.open(db, read_only=True) as wh:
        env_id = wh.resolve_env_id(env_id)  # a unique prefix will do, as for `vhd serve-env`
    globals()["app"] = built = app_for(load_row(env_id, db))
    return built
