"""LLM agents through real SDK clients, played turn by turn against a sandboxed session.

For example (it calls an LLM API, so it is not a doctest):

        episode = play_llm(table, "anthropic:claude-sonnet-4-5", episode=0)
        episode.reward, episode.tokens      # (1.0, {'input': 1840, 'output': 212})

`anthropic:MODEL` uses the `anthropic` SDK's Messages tool use (base URL from
$ANTHROPIC_BASE_URL, key from $ANTHROPIC_API_KEY, as the SDK reads them). The environment's
tool schemas go over unchanged as `input_schema`. The loop stops when the model answers
without a tool call, when the episode is done, at the turn budget, or at the token budget.

The module runs in a child process (`tasks/sandbox/session.py`) launched with the sandbox's
isolation and limits; the agent process never executes generated code. The session's
observations only feed the model: the episode is scored by replaying the calls it made in
the sandbox (`tasks/grading/score.py`), like every scripted agent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vhd.agents import Table
from vhd.schemas.errors import InvalidParams
from vhd.schemas.records import EpisodeRecord
from vhd.tasks.sandbox import launch as sandbox
from vhd.tasks.corpus.export import player_config
from vhd.tasks.grading.score import score

SESSION = Path(sandbox.__file__).with_name("session.py")
TOKEN_BUDGET = 200_000
MAX_TOKENS = 1024


class Session:
    """One episode of a generated module in a sandboxed child, driven call by call."""

    def __init__(self, t: Table, limits: sandbox.Limits = sandbox.Limits()):
        how = sandbox.plan()
        self.scratch = tempfile.mkdtemp(prefix="vhd-session-")
        if how.uid is not None:
            os.chown(self.scratch, how.uid, how.uid)
        command = [*sandbox._prefix(how.mode, self.scratch), sys.executable, "-s", "-B", str(SESSION)]
        if how.uid is not None:
            command.append(str(how.uid))
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     cwd=self.scratch, text=True, start_new_session=True,
                                     env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": self.scratch},
                                     preexec_fn=sandbox._limit(limits))
        opening = self._send({"module": t.setter_output.module, "config": t.env.config(t.model.theta)})
        self.instruction, self.tools, self.done = opening["instruction"], opening["tools"], False

    def _send(self, message: dict[str, Any]) -> dict[str, Any]:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise InvalidParams("the environment session ended unexpectedly (the module crashed or hit a limit)")
        return json.loads(line)

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        reply = self._send({"tool": tool, "arguments": arguments})
        self.done = reply["done"]
        return reply["observation"]

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        shutil.rmtree(self.scratch, ignore_errors=True)


class WrittenSession:
    """Presentation F in process: no generated module, one `submit_plan` call that ends the episode
    (graded afterwards by the family's evaluator through tasks/grading/score.py)."""

    def __init__(self, t: Table):
        from vhd.tasks.grading import written

        self.instruction, self.tools, self.done, self.submit = t.env.instruction, written.tools(t.family), False, written.SUBMIT

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.done:
            return {"ok": False, "error": "the plan was already submitted; the episode is over"}
        if tool != self.submit:
            return {"ok": False, "error": f"unknown tool {tool!r}; the only tool is {self.submit}"}
        self.done = True
        return {"ok": True, "submitted": True, "note": "the plan is scored after the episode"}

    def close(self) -> None:
        pass


def parse_agent(name: str) -> tuple[str, str, str]:
    """("anthropic", "", MODEL) or ("openai", BASE_URL, MODEL); InvalidParams otherwise."""
    if name.startswith("anthropic:") and len(name) > len("anthropic:"):
        return "anthropic", "", name.split(":", 1)[1]
    if name.startswith("openai:"):
        base, _, model = name[len("openai:"):].rpartition(":")
        if base and model:
            return "openai", base, model
    raise InvalidParams(f"unknown agent {name!r}; expected anthropic:MODEL or openai:BASE_URL:MODEL")


def _prompt(t: Table, instruction: str) -> str:
    return (instruction + "\n\nThe configuration you may see: " + json.dumps(player_config(t.env, t.model.theta, t.family))
            + f"\nYou have {t.env.turn_budget} turns. Call the tools; stop when the episode is over.")


def _anthropic_loop(t: Table, model: str, session: Any, prompt: str, messages: list[dict[str, Any]],
                    calls: list[dict[str, Any]], tokens: dict[str, int], token_budget: int) -> None:
    import anthropic

    client = anthropic.Anthropic()
    tools = [{"name": x["name"], "description": x.get("description", ""), "input_schema": x["input_schema"]}
             for x in session.tools]
    messages.append({"role": "user", "content": prompt})
    while not session.done and tokens["input"] + tokens["output"] < token_budget:  # the module's turn rule and call limit end it
        reply = client.messages.create(model=model, max_tokens=MAX_TOKENS, tools=tools, messages=messages)
        tokens["input"] += reply.usage.input_tokens
        tokens["output"] += reply.usage.output_tokens
        content = [block.model_dump(mode="json", exclude_none=True) for block in reply.content]
        messages.append({"role": "assistant", "content": content})
        uses = [block for block in reply.content if block.type == "tool_use"]
        if not uses:
            return
        results = []
        for use in uses:
            arguments = use.input if isinstance(use.input, dict) else {}
            calls.append({"tool": use.name, "arguments": arguments})
            observation = session.call(use.name, arguments)
            results.append({"type": "tool_result", "tool_use_id": use.id, "content": json.dumps(observation)})
        messages.append({"role": "user", "content": results})


def _openai_loop(t: Table, base_url: str, model: str, session: Any, prompt: str, messages: list[dict[str, Any]],
                 calls: list[dict[str, Any]], tokens: dict[str, int], token_budget: int) -> None:
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "not-needed"))
    tools = [{"type": "function", "function": {"name": x["name"], "description": x.get("description", ""),
                                               "parameters": x["input_schema"]}} for x in session.tools]
    messages.append({"role": "user", "content": prompt})
    while not session.done and tokens["input"] + tokens["output"] < token_budget:  # the module's turn rule and call limit end it
        reply = client.chat.completions.create(model=model, messages=messages, tools=tools, max_tokens=MAX_TOKENS)
        if reply.usage is not None:
            tokens["input"] += reply.usage.prompt_tokens
            tokens["output"] += reply.usage.completion_tokens
        message = reply.choices[0].message
        messages.append(message.model_dump(mode="json", exclude_none=True))
        if not message.tool_calls:
            return
        for tool_call in message.tool_calls:
            try:
                arguments = json.loads(tool_call.function.arguments or "{}")
            except json.JSONDecodeError:
                arguments = None
            if not isinstance(arguments, dict):
                observation = {"ok": False, "error": "arguments must be a JSON object"}
            else:
                calls.append({"tool": tool_call.function.name, "arguments": arguments})
                observation = session.call(tool_call.function.name, arguments)
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": json.dumps(observation)})


def play_llm(t: Table, agent: str, episode: int = 0, corpus_version: str = "",
             token_budget: int = TOKEN_BUDGET) -> EpisodeRecord:
    """One LLM episode, scored by tasks/grading/score.py: sandbox replay of the calls it made (I, A), the
    family's evaluator on its one submit_plan call (F)."""
    provider, base_url, model = parse_agent(agent)
    messages: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    tokens = {"input": 0, "output": 0}
    session = WrittenSession(t) if t.env.presentation == "F" else Session(t)
    try:
        prompt = _prompt(t, session.instruction)
        if provider == "anthropic":
            _anthropic_loop(t, model, session, prompt, messages, calls, tokens, token_budget)
        else:
            _openai_loop(t, base_url, model, session, prompt, messages, calls, tokens, token_budget)
    finally:
        session.close()
    row = score(t.env, t.setter_output, t.model.theta, t.family, t.solution, [calls])[0]
    observations = {k: row.get(k) for k in ("error", "terminal", "rejected_calls", "first_error", "obs_digest",
                                           "turns_used") if k in row}
    return EpisodeRecord.build(
        env_id=t.env.env_id, corpus_version=corpus_version, agent=agent, presentation=t.env.presentation,
        family=t.env.family, episode_seed=t.env.episode_seed, episode_index=episode, messages=messages,
        tool_calls=calls, observations=observations, tokens=tokens, utility=row["utility"], reward=row["reward"],
        created_at=datetime.now(timezone.utc).isoformat())
