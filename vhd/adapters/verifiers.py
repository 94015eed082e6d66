"""A verifiers (0.4, `verifiers.v1`) environment over exported environments: native tool calls,
scored by the decision reward.

    >>> env = load_environment(rows=[row])          # rows of `vhd export`, or path="DIR" (its directory)
    >>> [task.data.name for task in env.taskset] == [row["env_id"]]
    True

One task per exported row (presentations I and A; F rows are left out): the prompt is the
player's instruction, the tools are the row's own tools as OpenAI function tools (their JSON
Schemas unchanged). `VhdHarness` is the agent loop: it runs in process (verifiers' harness
contract allows a loop in process as long as every model call goes through the rollout's
interception endpoint), asks the model for the next message with the tools offered, plays each
tool call on a `vhd.adapters.gym.TextToolEnv` of the row and answers with the tool's result,
until the episode ends or the model answers without a tool call. `VhdTask.decision_reward` (a
`@vf.reward`) reads the tool calls back from the finished trace and grades them with
`vhd.adapters.grade` (the sandboxed replay of `vhd score`): an episode the model leaves
unfinished is finished by the module's `Env.finish()`, and the reward equals every other
surface's (docs/TRAINING.md, "One episode, one reward").

verifiers (0.4) finds a taskset by its id: it imports `verifiers.v1.tasksets.<id>`, else the
top-level module `<id>` (`-` read as `_`), and takes the Taskset, Harness and Env subclasses it
exports in `__all__`; there are no entry points. The `vhd` package itself exports `VhdTaskset`,
`VhdHarness` and `VhdEnv` (imported from here only when asked for, so `import vhd` does not import
verifiers), so verifiers' own CLI runs an export with nothing else: `vf-eval vhd --env.taskset.path
DIR -m MODEL --client.base-url URL`.
`VhdEnv` is the single-agent env with the runtime defaulting to `vf.SubprocessConfig()` (the loop
runs in process; verifiers' default runtime is Prime's sandboxes). The generated modules run in
this process (docs/TRAINING.md, "Trust model").
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import Field, field_validator

from vhd.adapters import grade
from vhd.schemas.errors import TrajectoryFormatError, VhdError
from vhd.tasks.corpus.export import export_files, read_export, row_of_record

ID = "vhd"  # the taskset id: the top-level module verifiers imports (vhd/__init__.py exports the classes)

__all__ = ["ID", "VhdEnv", "VhdHarness", "VhdTaskset", "load_environment", "tool_calls", "openai_tools"]


def openai_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A row's tools as OpenAI function tools, their JSON Schemas unchanged."""
    return [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                              "parameters": t["input_schema"]}} for t in tools]


def tool_calls(trace: vf.Trace) -> list[dict[str, Any]]:
    """The tool calls the model made in a trace, in order, as `vhd score` takes them; arguments
    that are not a JSON object become a call the module refuses, as on the Gym wrapper."""
    calls = []
    for node in trace.nodes:
        message = node.message
        if not node.sampled or not isinstance(message, vf.AssistantMessage):
            continue
        for call in message.tool_calls or []:
            calls.append(_call(call.name, call.arguments))
    return calls


def _call(name: str, arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments or "{}")
    except (json.JSONDecodeError, RecursionError, ValueError):
        parsed = None
    if not isinstance(parsed, dict):
        return {"tool": "", "arguments": {}}  # the malformed action's record (vhd.adapters.INVALID_TOOL)
    return {"tool": name, "arguments": parsed}


class VhdData(vf.TaskData):
    row: dict[str, Any]
    """The export row: env_id, player, grader (θ and π*: never shown to the model) and module."""


class VhdTask(vf.Task[VhdData]):
    @vf.reward
    async def decision_reward(self, trace: vf.Trace) -> float:
        """The decision reward of the trace's tool calls (`vhd.adapters.grade`), in [0, 1]."""
        row = self.data.row  # the replay runs the module in the sandbox: off the event loop
        return (await asyncio.to_thread(grade, row["grader"], tool_calls(trace), row["module"]))["reward"]

    @vf.metric
    async def tool_call_count(self, trace: vf.Trace) -> float:
        """How many tool calls the model made (refused ones included)."""
        return float(len(tool_calls(trace)))


class VhdTasksetConfig(vf.TasksetConfig):
    rows: list[dict[str, Any]] = Field(default_factory=list)
    """Export rows (as `vhd export` makes them, or its stored records)."""
    path: str | None = None
    """An export: the directory `vhd export --out` wrote (every split), or one of its data files
    (`DIR/data/heldout-<digest>.jsonl` or `.parquet`); read when `rows` is empty."""

    @field_validator("path")
    @classmethod
    def _an_export(cls, path: str | None) -> str | None:
        if path is not None:  # checked when verifiers' CLI parses its flags: its one error message
            try:
                export_files(path)
            except VhdError as exc:
                raise ValueError(str(exc)) from None
        return path


class VhdTaskset(vf.Taskset[VhdTask, VhdTasksetConfig]):
    def load(self):
        if not self.config.rows and not self.config.path:
            raise TrajectoryFormatError("the vhd taskset has no rows; pass --env.taskset.path DIR (a `vhd export` "
                                        "directory or one of its data files)")
        rows = self.config.rows or read_export(self.config.path)
        for row in map(row_of_record, rows):  # any form of an export row: JSONL, Parquet structs, JSON texts
            player = row["player"]
            if player["config"].get("presentation") == "F":
                continue  # scored from a written answer, not tool calls
            full = {"env_id": row["env_id"], "player": player, "grader": row["grader"], "module": row["module"]}
            yield VhdTask(VhdData(id=row["env_id"], name=row["env_id"], prompt=player["instruction"], row=full),
                          self.config.task)


class VhdHarnessConfig(vf.HarnessConfig):
    id: str = ID


class VhdHarness(vf.Harness[VhdHarnessConfig]):
    """Native tool calling over one row's tools, in process: each model call goes through the
    rollout's interception endpoint; each tool call is played on a `TextToolEnv`."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False  # the tools are the row's own; the model runs nothing
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        import openai

        from vhd.adapters.gym import TextToolEnv
        from vhd.adapters.trl import _module

        row = data.row if isinstance(data, VhdData) else trace.task.data.row
        env = TextToolEnv(row, module=_module(row["module"]))
        env.reset()
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        tools = openai_tools(row["player"]["tools"])
        async with openai.AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            while not env.finished:
                try:
                    response = await client.chat.completions.create(model=ctx.model, messages=messages, tools=tools)
                except openai.APIError:
                    if trace.stop_condition is not None:  # a limit or @stop ended the rollout
                        break
                    raise
                message = response.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    break
                for call in message.tool_calls:
                    action = _call(call.function.name, call.function.arguments)
                    action = action if action["tool"] else {"tool": None}  # the wrapper refuses it, and counts it
                    observation, _, terminated, _, _ = env.step(action)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": observation})
                    if terminated:
                        break
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


class VhdEnvConfig(vf.SingleAgentEnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The one seat; its runtime defaults to a subprocess (the harness's loop runs in process)."""


class VhdEnv(vf.SingleAgentEnv, vf.Env[VhdEnvConfig]):
    """The single-agent env (one `agent` seat, one trace per episode) with `VhdEnvConfig`'s
    defaults: what `vf-eval vhd` runs."""


def load_environment(rows: list[dict[str, Any]] | None = None, path: str | Path | None = None,
                     **agent: Any) -> vf.Env:
    """The verifiers environment of an export (its rows, or the export at `path`: its directory or
    one data file): the vhd taskset, played by `VhdHarness`, in `VhdEnv`; `agent` goes to
    `vf.AgentConfig` (max_turns, timeout…; the runtime defaults to `vf.SubprocessConfig()`, as the
    loop runs in this process)."""
    if not rows and path is None:
        raise TrajectoryFormatError("no rows and no path; expected the rows of `vhd export` or its directory")
    taskset = VhdTasksetConfig(id=ID, rows=list(rows or []), path=str(path) if path is not None else None)
    agent.setdefault("runtime", vf.SubprocessConfig())  # the loop runs in this process: no sandbox to provision
    config = VhdEnvConfig(taskset=taskset, agent=vf.AgentConfig(harness=VhdHarnessConfig(), **agent))
    return vf.load_environment(config)
