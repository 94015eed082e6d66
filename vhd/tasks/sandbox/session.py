"""Interactive session child: one generated module played turn by turn (standard library only).

    python -s -B session.py [UID]  # stdin: {"module", "config"} then one {"tool", "arguments"} a line

Writes one JSON line per input line to stdout: first {"instruction", "tools"}, then per call
{"observation", "done"}; on end of input (or when the episode is done and a call comes in)
{"outcome"}. Launched by `vhd.agents.live.Session` under the sandbox's limits and isolation
(`tasks/sandbox`: rlimits, no network, scratch cwd, scrubbed environment). What it reports
only feeds the agent; the reward always comes from replaying the calls in the sandbox.
"""

import importlib.util
import json
import os
import sys
import types


def _sibling(name):
    """The sandbox child `name`.py beside this file (both are launched by path, not imported
    from the vhd package): the session shares runner.py's privilege drop."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


drop_privileges = _sibling("runner").drop_privileges


def main(uid=None):
    first = json.loads(sys.stdin.readline())
    if uid is not None:
        drop_privileges(uid, "session")
    module = types.ModuleType("vhd_env")
    exec(compile(first["module"], "vhd_env.py", "exec"), module.__dict__)
    env = module.create(first["config"])
    out = sys.stdout
    out.write(json.dumps({"instruction": str(env.instruction), "tools": env.tools}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        call = json.loads(line)
        if call.get("tool") is None:
            break
        observation = env.call(call["tool"], call.get("arguments") or {})
        out.write(json.dumps({"observation": observation, "done": bool(env.done)}, default=repr) + "\n")
        out.flush()
    out.write(json.dumps({"outcome": env.outcome()}, default=repr) + "\n")
    out.flush()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else None)
