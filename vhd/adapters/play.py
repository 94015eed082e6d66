"""`vhd play`: a person plays one environment in the terminal.

Lines are `TOOL {json arguments}` (arguments may be omitted for none), or `help`, `tools`, `quit`.

In I and A the episode runs in a `TextToolEnv` (the module's own turn rule, `Env.finish()` on
`quit`). In F (`play_written`) the instruction states the whole model and the one tool is
`submit_plan {"plan": ...}`: a line that is not a call of it with exactly a JSON-array `plan` is
refused with one line and the player tries again (nothing was submitted); a submission ends
the episode and is graded by `tasks.written.score_trajectory` — the function `vhd score` grades
F with — on the one-call trajectory, so a plan not of the family's form scores 0 there as here.
`quit` before submitting grades the empty trajectory (0, as `vhd score` gives it).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator, TextIO

from vhd.adapters.gym import TextToolEnv

HELP = ("commands: TOOL {json arguments}  (e.g. end_day {} or place_order {\"quantity\": 3}); "
        "tools = list the tools; help = this text; quit = stop (the episode is finished as when the turns run out)")
HELP_F = ("commands: submit_plan {\"plan\": [...]}  (your whole plan, once: it ends the episode); "
          "tools = show the tool; help = this text; quit = stop without submitting (reward 0)")


def describe_tools(env: TextToolEnv | list[dict[str, Any]]) -> str:
    """Every tool with its description and argument schema (`env`: a TextToolEnv or a tool list)."""
    lines = []
    for tool in env.tools if isinstance(env, TextToolEnv) else env:
        lines.append(f"{tool['name']}: {tool.get('description', '')}")
        lines.append(f"    arguments: {json.dumps(tool.get('input_schema', {}), sort_keys=True)}")
    return "\n".join(lines)


def parse_line(line: str) -> dict:
    name, _, rest = line.strip().partition(" ")
    rest = rest.strip()
    try:
        arguments = json.loads(rest) if rest else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments of {name} are not JSON ({exc.msg}); expected TOOL {{json object}}") from None
    except (RecursionError, ValueError):
        raise ValueError(f"arguments of {name} are nested too deeply or hold a number too long; "
                         "expected TOOL {json object}") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"arguments of {name} must be a JSON object; expected TOOL {{json object}}")
    return {"tool": name, "arguments": arguments}


def calls(lines: TextIO, out: Callable[[str], None], help_text: str, tools_text: str) -> Iterator[dict]:
    """The calls typed in `lines` until `quit` or end of input; `help` and `tools` are answered
    and a line that is no call gets a one-line error, here, and the player goes on."""
    for raw in lines:
        line = raw.strip()
        if line == "quit":
            return
        if line in ("help", "tools"):
            out(help_text if line == "help" else tools_text)
        elif line:
            try:
                yield parse_line(line)
            except ValueError as exc:
                out(f"error: {exc}")


def play(env: TextToolEnv, lines: TextIO, out: Callable[[str], None]) -> float:
    """Play from `lines` until the episode ends, `quit` or end of input; return the reward."""
    observation, info = env.reset()
    out(env.row["player"]["instruction"])
    out("")
    out(describe_tools(env))
    out(f"\n{info['turn_budget']} turns. {HELP}")
    for call in calls(lines, out, HELP, describe_tools(env)):
        observation, r, terminated, truncated, info = env.step(call)
        out(observation)
        if terminated:  # the last step's reward is the rest; the episode's is `info["reward"]`
            out(f"episode ended: utility {info['utility']:g}, reward {info['reward']:.4f}")
            return info["reward"]
    # quit or end of input: the episode is finished by the module's rule, as every surface does
    r, info = env.finish()
    out(f"stopped; the episode was finished as when the turns run out: utility {info['utility']:g}, reward {r:.4f}")
    return r


# --- presentation F: the written-out model, one submit_plan ---------------------------------


class WrittenEpisode:
    """One F episode of an export row: its instruction, its one tool and the grade of a
    submission by `tasks.written.score_trajectory` with the row's u*, u_default, u_idle (the
    environment's, as `vhd score` reads them) and the family this vhd registers under the
    row's version."""

    def __init__(self, row: dict[str, Any]):
        from vhd.mechanisms import registry
        from vhd.schemas.errors import TrajectoryFormatError
        from vhd.tasks.grading import written

        grader = row["grader"]
        if grader["config"].get("presentation") != "F":
            raise TrajectoryFormatError("play_written plays presentation F; expected an F environment")
        family = registry.get(str(grader.get("family", "")).partition("@")[0])
        if family.code_version != grader.get("family"):
            raise TrajectoryFormatError(f"the row was exported from {grader.get('family')} but this vhd has "
                                        f"{family.code_version}; expected a row of this version (re-export it)")
        self.row, self.family, self.written = row, family, written
        self.instruction = row["player"]["instruction"]
        self.tools = row["player"]["tools"]

    def refusal(self, call: dict[str, Any]) -> str | None:
        """Why `call` is no submission (one line), or None: the tool is submit_plan and its
        arguments are exactly {"plan": a JSON array} (the tool's input schema)."""
        submit = self.written.SUBMIT
        if call["tool"] != submit:
            return f"unknown tool {call['tool'][:64]!r}; the only tool is {submit} (type `tools` to see it)"
        keys = sorted(str(k)[:64] for k in call["arguments"])
        if keys != ["plan"]:
            return f"{submit} takes exactly one argument, plan; got {keys[:5]}"
        if not isinstance(call["arguments"]["plan"], list):
            return f"plan must be a JSON array; got {type(call['arguments']['plan']).__name__}"
        return None

    def grade(self, trajectory: list[dict[str, Any]]) -> dict[str, Any]:
        """{"reward", "utility", "error", ...} of an F trajectory, as `vhd score` grades it."""
        grader = self.row["grader"]
        return self.written.score_trajectory(self.family, grader["config"]["params"], grader["u_star"],
                                             grader["u_default"], trajectory, grader.get("u_idle"))


def play_written(row: dict[str, Any], lines: TextIO, out: Callable[[str], None]) -> float:
    """Play an F environment from `lines`: the instruction and `submit_plan`, one submission
    (which ends the episode), `quit` or end of input; return the reward."""
    episode = WrittenEpisode(row)
    out(episode.instruction)
    out("")
    out(describe_tools(episode.tools))
    out(f"\nOne submission. {HELP_F}")
    for call in calls(lines, out, HELP_F, describe_tools(episode.tools)):
        refused = episode.refusal(call)
        if refused is not None:
            out(f"error: {refused}")
            continue
        graded = episode.grade([call])
        if graded["error"]:
            out(f"episode ended: {graded['error']}; reward {graded['reward']:.4f}")
        else:
            out(f"episode ended: utility {graded['utility']:g}, reward {graded['reward']:.4f}")
        return graded["reward"]
    graded = episode.grade([])
    out(f"stopped without a plan: reward {graded['reward']:.4f}")
    return graded["reward"]


def play_row(row: dict[str, Any], lines: TextIO, out: Callable[[str], None]) -> float:
    """Play an export row: F by `play_written`, I and A in a `TextToolEnv`."""
    if row["grader"]["config"].get("presentation") == "F":
        return play_written(row, lines, out)
    return play(TextToolEnv(row), lines, out)
