"""`vhd play` on presentation F (issue 16 item 5): the written-out instruction and `submit_plan`
with its schema; a submission ends the episode with the reward `vhd score` gives the same plan
(π*'s plan 1, the default's 0, a plan not of the family's form 0 with its one-line error); a
line that is no submission gets a one-line error and the player tries again; `quit` before
submitting scores what `vhd score` gives the empty trajectory.

And the F instruction of every family names the model's quantities, not the generator's knobs:
no "knob", no `size` or `horizon` unless θ has a parameter of that name, no knob range such as
2..8, no unfilled {placeholder}."""

import json
import re
import subprocess
import sys

import pytest

from vhd.mechanisms import registry
from vhd.tasks.grading import written
from vhd.tasks.stages.annotate import annotate
from vhd.tasks.stages.in_process import check_models
from vhd.tasks.stages.sample import draw
from vhd.warehouse import Warehouse

FAMILY = "lp"  # the family whose F text issue 16 quoted


@pytest.fixture(scope="module")
def f_env(tmp_path_factory):
    """A warehouse holding one admitted F environment of lp, made by the pipeline's stages."""
    family = registry.get(FAMILY)
    run = check_models(family, count=1, seed=14, presentations=("F",))
    (verdict,) = run.verdicts
    assert verdict.admitted, verdict.reason
    env, checks, edges = annotate(family, verdict)
    db = tmp_path_factory.mktemp("play-f") / "f.duckdb"
    with Warehouse.open(db) as wh, wh.transaction():
        wh.insert(run.models)
        wh.insert([verdict.candidate.solution])
        wh.insert(run.outputs)
        wh.insert([env])
        wh.insert(checks)
        wh.insert(edges)
    return db, env, family, run.models[0].theta


def _vhd(db, *args, stdin=""):
    result = subprocess.run([sys.executable, "-m", "vhd.cli", *args, "--db", str(db)], input=stdin,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _play(db, env_id, lines):
    out = _vhd(db, "play", env_id, stdin="\n".join(lines) + "\n")
    last = out.rstrip().splitlines()[-1]
    assert last.rsplit("reward ", 1)[0] != last, out[-2000:]
    return out, float(last.rsplit("reward ", 1)[1])


def _submit(plan):
    return f"{written.SUBMIT} {json.dumps({'plan': plan})}"


def test_play_f_gives_the_reward_vhd_score_gives(f_env, tmp_path):
    db, env, family, theta = f_env
    optimal = env.reference_trajectory[0]["arguments"]["plan"]
    default = env.default_trajectory[0]["arguments"]["plan"]
    invalid = [-1.0] * len(optimal)  # of the right length, every quantity below 0
    short = optimal[:-1]  # one product left out
    plans = {"optimal": optimal, "default": default, "invalid": invalid, "short": short}
    trajectories = tmp_path / "t.jsonl"
    trajectories.write_text("".join(json.dumps([{"tool": written.SUBMIT, "arguments": {"plan": p}}]) + "\n"
                                    for p in plans.values()) + "[]\n")
    scored = json.loads(_vhd(db, "score", env.env_id, "--trajectories", str(trajectories), "--json"))
    by_plan = dict(zip([*plans, "none"], scored))
    assert by_plan["optimal"]["reward"] == 1.0 and by_plan["default"]["reward"] == 0.0
    assert by_plan["invalid"]["reward"] == 0.0 and by_plan["invalid"]["error"].startswith("invalid plan")
    assert by_plan["none"]["reward"] == 0.0

    for label, plan in plans.items():
        out, r = _play(db, env.env_id[:16], [_submit(plan), _submit(optimal)])
        assert r == by_plan[label]["reward"], (label, r, by_plan[label])
        assert out.count("episode ended") == 1  # the second submission was never read
        if by_plan[label]["error"]:
            assert by_plan[label]["error"] in out
        else:
            assert f"utility {by_plan[label]['utility']:g}" in out
    out, r = _play(db, env.env_id, ["quit", _submit(optimal)])
    assert r == by_plan["none"]["reward"] == 0.0 and "stopped without a plan" in out


def test_play_f_shows_the_instruction_and_the_tool_and_refuses_non_submissions(f_env):
    db, env, family, theta = f_env
    optimal = env.reference_trajectory[0]["arguments"]["plan"]
    bad = ["help", "tools", "place_order {\"quantity\": 3}", f"{written.SUBMIT} {{bad", f"{written.SUBMIT} []",
           f"{written.SUBMIT} {{}}", f"{written.SUBMIT} {json.dumps({'plan': optimal, 'note': 1})}",
           f"{written.SUBMIT} {json.dumps({'plan': 'all of it'})}"]
    out, r = _play(db, env.env_id, [*bad, _submit(optimal)])
    assert r == 1.0
    assert out.startswith(env.instruction)
    tool = written.tools(family)[0]
    assert f"{tool['name']}: {tool['description']}" in out
    assert f"    arguments: {json.dumps(tool['input_schema'], sort_keys=True)}" in out
    assert "One submission." in out and out.count("commands: submit_plan") == 2  # the banner and `help`
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 6, errors  # one line each; `help` and `tools` are no errors
    assert "unknown tool 'place_order'; the only tool is submit_plan" in errors[0]
    assert "not JSON" in errors[1] and "must be a JSON object" in errors[2]
    assert "exactly one argument, plan; got []" in errors[3]
    assert "exactly one argument, plan; got ['note', 'plan']" in errors[4]
    assert "plan must be a JSON array; got str" in errors[5]
    assert out.count("episode ended") == 1 and out.rstrip().endswith("reward 1.0000")


def test_play_f_at_end_of_input_scores_no_plan(f_env):
    db, env, _, _ = f_env
    out, r = _play(db, env.env_id, ["tools"])
    assert r == 0.0 and "stopped without a plan: reward 0.0000" in out


@pytest.mark.parametrize("name", registry.names())
def test_f_instruction_names_the_model_not_the_generator(name):
    family = registry.get(name)
    for seed in (1, 2, 3):
        _, theta = draw(family, seed)
        text = written.instruction(family, theta, "A narrative from a passage.")
        stated = json.dumps(theta, sort_keys=True)
        assert stated in text
        prose = text.replace(stated, "")  # the model, the plan format and the rules: no θ values
        assert not re.search(r"knob", text, re.IGNORECASE), (name, re.findall(r".{60}knob.{60}", text, re.S))
        for knob in family.knob_ranges:  # `size`, `horizon`: named only where θ has a parameter of that name
            if knob not in theta:
                assert not re.search(rf"\b{knob}\b", prose), (name, knob, re.findall(rf".{{60}}\b{knob}\b.{{60}}", prose, re.S))
        assert not re.findall(r"\d+\s*\.\.\s*\d+", prose), name  # a knob range such as 2..8
        assert not re.findall(r"\{[A-Za-z_][A-Za-z0-9_]*\}", prose), name  # a template field left unfilled
