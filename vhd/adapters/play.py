"""`vhd play`: a person plays one environment in the terminal.

Lines are `TOOL {json arguments}` (arguments may be omitted for none), or `help`, `tools`, `quit`.
"""

from __future__ import annotations

import json
from typing import Callable, TextIO

from vhd.adapters.gym import TextToolEnv

HELP = ("commands: TOOL {json arguments}  (e.g. end_day {} or place_order {\"quantity\": 3}); "
        "tools = list the tools; help = this text; quit = stop (the episode is finished as when the turns run out)")


def describe_tools(env: TextToolEnv) -> str:
    lines = []
    for tool in env.tools:
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


def play(env: TextToolEnv, lines: TextIO, out: Callable[[str], None]) -> float:
    """Play from `lines` until the episode ends, `quit` or end of input; return the reward."""
    observation, info = env.reset()
    out(env.row["player"]["instruction"])
    out("")
    out(describe_tools(env))
    out(f"\n{info['turn_budget']} turns. {HELP}")
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if line == "help":
            out(HELP)
            continue
        if line == "tools":
            out(describe_tools(env))
            continue
        if line == "quit":
            break
        try:
            call = parse_line(line)
        except ValueError as exc:
            out(f"error: {exc}")
            continue
        observation, r, terminated, truncated, info = env.step(call)
        out(observation)
        if terminated:
            out(f"episode ended: utility {info['utility']:g}, reward {r:.4f}")
            return r
    # quit or end of input: the episode is finished by the module's rule, as every surface does
    r, info = env.finish()
    out(f"stopped; the episode was finished as when the turns run out: utility {info['utility']:g}, reward {r:.4f}")
    return r
