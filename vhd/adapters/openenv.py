"""One exported environment served by OpenEnv's own server (openenv 0.10: `create_app` over an
`MCPEnvironment`), played by OpenEnv's own clients.

    >>> app = app_for(row)                  # OpenEnv's FastAPI app; `serve(row, host, port)` runs it under uvicorn
    >>> sorted({"/ws", "/mcp", "/reset", "/step", "/state", "/schema", "/health"} - {route.path for route in app.routes})
    []

Each session (a WebSocket `/ws`, or an `/mcp` session from `openenv/session/create`, which
`MCPToolClient` opens and attaches its WebSocket to) holds one `VhdEnvironment`: a `TextToolEnv`
(the one turn rule and reward of every surface) and a FastMCP server whose tools are the row's
player tools, each call one step of that episode. Actions (`VhdAction`, the `/ws` step data):

    {"type": "list_tools"}                                → the row's player tools (`tools`)
    {"type": "call_tool", "tool_name": T, "arguments": A} → one step: `tool_name`, `result` (the module's answer), `info`
    {"type": "finish"}                                    → the episode stopped by the module's `Env.finish()`: `info`

and the MCP methods `tools/list` and `tools/call` on `/mcp` (JSON-RPC), which list and play the
same tools (a `tools/call` is a step; its `_meta` holds `reward`, `done` and `info`).
`reset(seed=k, episode_id=E)` plays a fresh episode of the same θ on episode seed k (no seed:
the stored episode); its observation holds `instruction`, `player_tools` and `info`.

Every step observation has a finite `reward`: 0.0 until the episode ends, and on the one with
`done` true (the call that ended it, or `finish`) the episode's decision reward (`reward` of
`vhd score`), so a trainer that sums the rewards and one that takes the last get the same number.
The Gym's dense step rewards (the `step_rewards` of `vhd score`) are in `info["step_reward"]`;
the last `info` also has `utility`, `reward`, `outcome_reward`, `turns_used`, `calls_used`.
`state.step_count` counts every step (list_tools, call_tool, finish, and `/mcp` tools/call).
A malformed action is a validation error (the session stays open); a step before `reset` or
after the end is refused with a one-line error (WebSocket error message, HTTP 409, JSON-RPC
error). OpenEnv's stateless HTTP `/reset` and `/step` make a new environment per request
(OpenEnv's design), so HTTP `/step` always answers 409: play episodes over `/ws` or `/mcp`.

`app` (what `uvicorn vhd.adapters.openenv:app` names) is the app of the environment
`VHD_ENV_ID` in the warehouse `VHD_DB` (the default warehouse if unset), built when first asked
for; a package written by `vhd export --format openenv` serves its `row.json` with
`app_for(row_from_file(...))` (its `server/app.py`).

The generated module runs in the server's process (docs/TRAINING.md, "Trust model").
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import types
import uuid
from pathlib import Path
from typing import Any, Literal

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.tools.base import Tool as FastMCPTool
from fastmcp.tools.base import ToolResult
from mcp.types import TextContent
from pydantic import Field, model_serializer, model_validator
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import RESERVED_TOOL_NAMES, Tool
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from vhd.adapters.gym import TextToolEnv, load_module
from vhd.schemas.errors import TrajectoryFormatError, UnknownEnvironment

MAX_SESSIONS = 256  # concurrent sessions of one app, by default


class EpisodeStateError(RuntimeError):
    """A step the episode cannot take now (before `reset`, after the end): HTTP 409."""


class VhdAction(Action):
    """An action of an exported environment: OpenEnv's `ListToolsAction` / `CallToolAction`
    payloads (what `MCPToolClient` sends) or `{"type": "finish"}`."""

    type: Literal["list_tools", "call_tool", "finish"] = Field(description="list_tools, call_tool or finish")
    tool_name: str | None = Field(default=None, description="the tool to call (call_tool only)")
    arguments: dict[str, Any] = Field(default_factory=dict, description="the tool's arguments (call_tool only)")

    @model_validator(mode="after")
    def _tool_named(self) -> "VhdAction":
        # a PydanticCustomError (not a ValueError) so that the error is JSON (OpenEnv sends `errors()`)
        if self.type == "call_tool" and not self.tool_name:
            raise PydanticCustomError("missing_tool_name", "a call_tool action needs tool_name; "
                                      "expected one of the tools list_tools gives")
        if self.type != "call_tool" and (self.tool_name is not None or self.arguments):
            raise PydanticCustomError("unexpected_tool", "only a call_tool action has tool_name and arguments")
        return self


class VhdResetObservation(Observation):
    """The start of an episode (reset): the player's instruction and tools."""

    instruction: str = Field(description="the player's instruction")
    player_tools: list[Tool] = Field(description="the player's tools (as list_tools gives them)")
    info: dict[str, Any] = Field(default_factory=dict, description="env_id, turn_budget, episode_seed")


_STEP_FIELDS = ("tools", "tool_name", "result", "info")  # sent only when set: OpenEnv's clients key on them


class VhdObservation(Observation):
    """A step's answer. list_tools: `tools`; call_tool: `tool_name`, `result` (the module's JSON
    answer) and `info` (`steps`, `step_reward`; the outcome at the end); finish: `info` (the
    outcome). Fields a step does not set are left out of what is sent."""

    tools: list[Tool] | SkipJsonSchema[None] = Field(default=None, description="the player's tools (list_tools)")
    tool_name: str | SkipJsonSchema[None] = Field(default=None, description="the tool called (call_tool)")
    result: dict[str, Any] | SkipJsonSchema[None] = Field(default=None,
                                                          description="the module's answer (call_tool)")
    info: dict[str, Any] | SkipJsonSchema[None] = Field(
        default=None, description="steps, step_reward; utility, reward, outcome_reward, turns_used, calls_used at the end")

    @model_serializer(mode="wrap")
    def _set_fields_only(self, handler):
        data = handler(self)
        return {k: v for k, v in data.items() if not (k in _STEP_FIELDS and v is None)}


class VhdState(State):
    """The session's episode: `episode_id`, `step_count` (every step) and the calls so far."""

    env_id: str
    turn_budget: int
    trajectory: list[dict[str, Any]] = Field(default_factory=list)
    finished: bool = False
    result: dict[str, Any] | None = None


def _tools(row: dict[str, Any]) -> list[Tool]:
    return [Tool(name=t["name"], description=t.get("description", ""), input_schema=t["input_schema"])
            for t in row["player"]["tools"]]


class _PlayerTool(FastMCPTool):
    """One player tool on the session's FastMCP server: a call is one step of its episode."""

    play: SkipJsonSchema[Any] = Field(default=None, exclude=True)

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        try:
            observation = self.play(self.name, arguments)
        except EpisodeStateError as exc:
            raise ToolError(str(exc)) from None
        return ToolResult(content=[TextContent(type="text", text=json.dumps(observation.result, sort_keys=True))],
                          structured_content=observation.result,
                          meta={"reward": observation.reward, "done": observation.done, "info": observation.info})


class VhdEnvironment(MCPEnvironment):
    """One session's episodes of one exported environment (a `TextToolEnv` underneath).

    Description: the player's instruction and tools of an export row; each `call_tool` (a `/ws`
    step or an `/mcp` tools/call) is one `TextToolEnv.step`. Action Space: `VhdAction`.
    Observation Space: `VhdResetObservation` (reset), `VhdObservation` (steps). Rewards: 0.0
    until the episode ends, then its decision reward. Starting State: the stored episode, or
    episode seed `seed`. Episode End: the module's turn rule (clock or done tool, turns or call
    limit) or `finish`. Arguments: the row, and the module loaded from it (shared by the
    sessions of one app). With no arguments (servers that build `env_class()` themselves, such
    as NeMo-Gym's OpenEnv resource server) the row is the one the process environment names:
    `VHD_ROW` (an export row's JSON file, e.g. a package's `row.json`) or `VHD_ENV_ID` (and
    `VHD_DB`), read once per process (`configured_row`).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session holds its own TextToolEnv; the module's create() is per episode

    def __init__(self, row: dict[str, Any] | None = None, module: types.ModuleType | None = None):
        if row is None:
            row, module = configured_row(os.environ.get("VHD_ROW"), os.environ.get("VHD_ENV_ID"),
                                         os.environ.get("VHD_DB"))
        server = FastMCP(f"vhd-{row['env_id'][:16]}")
        for t in row["player"]["tools"]:
            server.add_tool(_PlayerTool(name=t["name"], description=t.get("description", ""),
                                        parameters=t["input_schema"], play=self._play))
        super().__init__(server)
        self.row = row
        self._gym = TextToolEnv(row, module)
        self._episode_id: str | None = None
        self._step_count = 0
        self._started = False

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> VhdResetObservation:
        _, info = self._gym.reset(seed=seed)
        self._episode_id = episode_id or uuid.uuid4().hex
        self._step_count, self._started = 0, True
        return VhdResetObservation(instruction=self.row["player"]["instruction"], player_tools=_tools(self.row),
                                   info=info, reward=0.0, done=False)

    def _ready(self) -> None:
        if not self._started:
            raise EpisodeStateError("call reset() before a step (OpenEnv's HTTP /step is stateless: "
                                    "play an episode over /ws or /mcp)")
        if self._gym.finished:
            raise EpisodeStateError("the episode has ended; call reset() to play the next")

    def _play(self, tool: str, arguments: dict[str, Any]) -> VhdObservation:
        self._ready()
        text, step_reward, done, _, info = self._gym.step({"tool": tool, "arguments": arguments})
        self._step_count += 1
        info = {**info, "step_reward": step_reward}
        return VhdObservation(tool_name=tool, result=json.loads(text), info=info,
                              reward=info["reward"] if done else 0.0, done=done)

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> VhdObservation:
        kind = getattr(action, "type", None)
        if kind == "call_tool":
            return self._play(action.tool_name, action.arguments)
        if kind == "list_tools":
            if self._started:
                self._ready()
            self._step_count += 1
            return VhdObservation(tools=_tools(self.row), reward=0.0, done=False)
        if kind == "finish":
            self._ready()
            r, outcome = self._gym.finish()
            self._step_count += 1
            return VhdObservation(info=outcome, reward=r, done=True)
        raise TrajectoryFormatError(f"unknown action {type(action).__name__}; expected list_tools, call_tool or finish")

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> VhdObservation:
        return self.step(action, timeout_s, **kwargs)

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> VhdObservation:
        # every action, the MCP ones too, takes the one step above (the base would send a
        # call_tool through the FastMCP client, whose answer carries no reward)
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(self.step, action, timeout_s))

    @property
    def state(self) -> VhdState:
        g = self._gym
        return VhdState(episode_id=self._episode_id, step_count=self._step_count, env_id=self.row["env_id"],
                        turn_budget=g.turn_budget, trajectory=list(g.trajectory), finished=g.finished,
                        result=g.result)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=f"vhd-{self.row['env_id']}", description=self.row["player"]["instruction"])


def app_for(row: dict[str, Any], max_concurrent_envs: int = MAX_SESSIONS):
    """OpenEnv's FastAPI app (`create_app`) serving one export row, up to `max_concurrent_envs`
    sessions at once; the generated module is loaded once, here."""
    from fastapi.responses import JSONResponse

    if row["grader"]["config"].get("presentation") == "F":
        raise TrajectoryFormatError("presentation F is scored from a written answer, not tool calls; "
                                    "expected an I or A environment")
    reserved = sorted({t["name"] for t in row["player"]["tools"]} & RESERVED_TOOL_NAMES)
    if reserved:
        raise TrajectoryFormatError(f"tools {', '.join(reserved)} have names OpenEnv reserves "
                                    f"({', '.join(sorted(RESERVED_TOOL_NAMES))}); export with --tool-names canonical")
    factory = functools.partial(VhdEnvironment, row, load_module(row["module"]))
    app = create_app(factory, VhdAction, VhdObservation, env_name=f"vhd-{row['env_id']}",
                     max_concurrent_envs=max_concurrent_envs, state_cls=VhdState,
                     reset_observation_cls=VhdResetObservation)

    async def refused(request, exc: EpisodeStateError):
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    app.add_exception_handler(EpisodeStateError, refused)
    return app


def serve(row: dict[str, Any], host: str = "127.0.0.1", port: int = 8000,
          max_concurrent_envs: int = MAX_SESSIONS) -> None:
    """Serve `app_for(row)` with uvicorn until interrupted (loopback unless told otherwise)."""
    import uvicorn

    uvicorn.run(app_for(row, max_concurrent_envs), host=host, port=port)


@functools.lru_cache(maxsize=8)
def configured_row(row_file: str | None, env_id: str | None, db: str | None) -> tuple[dict[str, Any], types.ModuleType]:
    """The export row (and its loaded module) that `VHD_ROW` or `VHD_ENV_ID`/`VHD_DB` name, once per process."""
    if row_file:
        row = row_from_file(row_file)
    elif env_id:
        from vhd.adapters import load_row

        row = load_row(env_id, db or None)
    else:
        raise UnknownEnvironment("VhdEnvironment() without a row reads VHD_ROW (an export row's JSON file) or "
                                 "VHD_ENV_ID (and VHD_DB); neither is set")
    return row, load_module(row["module"])


def row_from_file(path: str | Path) -> dict[str, Any]:
    """The export row in a JSON file (as `vhd export --format openenv` writes `row.json`)."""
    try:
        row = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrajectoryFormatError(f"{path}: not a readable JSON export row ({exc})") from None
    if not (isinstance(row, dict) and {"env_id", "player", "grader", "module"} <= set(row)):
        raise TrajectoryFormatError(f"{path}: expected an export row (env_id, player, grader, module)")
    return row


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
