"""Worlds that write ids and name arguments their own way (issue 29 item 2), registry-wide.

A World counts its entities 0, 1, 2…; a world's skin shows them as those numbers, from 1, or as
codes (`P-07`), and calls an id argument by the world's noun (`consignment` for knapsack's
`item`). Each is a declared axis of the skin (`SKIN["ids"]`, `SKIN["renamed"]`), never a change
of the model: the module's `Env` and everything outside it (`vhd.tasks.setters.skin.Interface`)
translate with the same functions, so a call means one thing on every side. Checked here over
every family that declares ids × every built-in passage: the three styles occur; an argument's
name is a slug the family does not use otherwise; canonical calls, valid or not, go there and back
unchanged; a malformed call in the world's style is malformed for the World too; the schema a
module shows is the style's (codes listed, bounds from 1); and a styled module's answers are the
plain module's answers written in its style. Gates, grades and the canonical export on styled
skins: test_surfaces.
"""

from __future__ import annotations

import re
import types

import numpy as np
import pytest
from family_kit import PASSAGES

from vhd.mechanisms import registry
from vhd.mechanisms._runtime import read_id, show_id, style_of
from vhd.tasks.grading.oracle import reference_module
from vhd.tasks.setters.lexicon import id_skin
from vhd.tasks.setters.skin import Interface, skin_of
from vhd.tasks.setters.template import render_module
from vhd.tasks.stages.check.sequences import fuzz_calls, random_calls
from vhd.tasks.stages.sample import draw

WITH_IDS = [name for name in registry.names() if getattr(registry.get(name).world, "IDS", {})]
RL_WORDS = {"reward", "score", "return", "advantage", "value"}


def _styled(family):
    """A built-in passage per id style of the family's first kind: {style: (passage, module output)}."""
    kind = sorted(set(family.world.IDS.values()))[0]
    found = {}
    for passage in PASSAGES:
        style = id_skin(family, passage)[0][kind].split(":")[0]
        if style not in found:
            found[style] = (passage, render_module(family, passage))
        if len(found) == 3:
            break
    return found


def _executed(output):
    module = types.ModuleType(f"skinned_{output.setter_output_id[:8]}")
    exec(compile(output.module, "<skinned>", "exec"), module.__dict__)
    return module


@pytest.mark.registry
def test_some_families_write_ids():
    assert {"knapsack"} <= set(WITH_IDS)


@pytest.mark.parametrize("name", WITH_IDS)
def test_every_family_with_ids_writes_them_in_three_styles_and_names_them_its_worlds_way(name):
    family = registry.get(name)
    keys = {key for spec in family.tools for key in spec.input_schema.get("properties", {})}
    styles, argument_names = {}, set()
    for passage in PASSAGES:
        ids, renamed = id_skin(family, passage)
        assert set(ids) == set(family.world.IDS.values())
        for kind, style in ids.items():
            styles.setdefault(kind, set()).add(style.split(":")[0])
            if style.startswith("code:"):
                assert re.fullmatch(r"[A-Z]{1,3}\d*", style[5:]), style
        codes = [style for style in ids.values() if style.startswith("code:")]
        assert len(codes) == len(set(codes)), (passage.domain, ids)  # two kinds never share a prefix
        for key, new in renamed.items():
            assert key in family.world.IDS and re.fullmatch(r"[a-z][a-z0-9_]{0,63}", new), (key, new)
            assert new not in keys and not set(new.split("_")) & RL_WORDS, (key, new)
        assert len(set(renamed.values())) == len(renamed)
        argument_names.update(renamed.get(key, key) for key in keys)
    assert all(found == {"number", "ordinal", "code"} for found in styles.values()), styles
    assert len(argument_names) > len(keys), "no world renames an argument"


@pytest.mark.parametrize("name", WITH_IDS)
def test_calls_go_there_and_back_and_malformed_stays_malformed(name):
    family = registry.get(name)
    _, theta = draw(family, 3)
    rng = np.random.default_rng(3)
    module, _ = reference_module(family)
    config = {"params": theta, "presentation": "I", "episode_seed": 0, "turn_budget": family.turn_budget(theta)}
    for style, (passage, output) in _styled(family).items():
        interface = Interface.of(family, output)
        calls = random_calls(family, {"n": 8}, rng, length=60) + [
            {"tool": c["tool"], "arguments": c["arguments"]} for c in fuzz_calls(output, family)[1:]
            if c["tool"] in interface.names]
        for call in calls[:60]:  # canonical calls, valid or not: there and back unchanged
            assert interface.canonical(interface.shown(call)) == call, (style, call)
        env, plain = _executed(output).create(config), module.create(config)
        # a fuzzed call in the world's style (fuzz_calls makes them so): refused by both as malformed,
        # so without a turn (a refusal by the world would use one)
        for call in fuzz_calls(output, family)[1:]:
            made = env.call(call["tool"], call["arguments"])
            canonical = interface.canonical(call)
            theirs = plain.call(reference_module(family)[1].tool_name(canonical["tool"]), canonical["arguments"])
            assert made["ok"] is False and theirs["ok"] is False, (style, call, made, theirs)
            assert "turns_left" not in made and "turns_left" not in theirs, (style, call, made, theirs)
        assert env.outcome()["turns_used"] == plain.outcome()["turns_used"] == 0, style


@pytest.mark.parametrize("name", WITH_IDS)
def test_a_styled_module_shows_the_styles_schema_and_answers_in_its_style(name):
    family = registry.get(name)
    _, theta = draw(family, 5)
    config = {"params": theta, "presentation": "I", "episode_seed": 0, "turn_budget": family.turn_budget(theta) + 40}
    best = family.simulate(theta, family.solve(theta).policy, 0).calls
    observe = [{"tool": spec.name, "arguments": {}} for spec in family.tools
               if spec.role in ("observe", "probe") and not spec.input_schema.get("required")]
    for style, (passage, output) in _styled(family).items():
        skin = skin_of(output.module)
        interface = Interface.of(family, output)
        plain_output = render_module(family, passage, plain=True)  # the same world's words, ids as counted
        skinned, unskinned = _executed(output), _executed(plain_output)
        env, plain = skinned.create(config), unskinned.create(config)
        world = env._world
        shown_tools = {tool["name"]: tool["input_schema"]["properties"] for tool in env.tools}
        plain_tools = {tool["name"]: tool["input_schema"]["properties"] for tool in plain.tools}
        for spec in family.tools:
            for key, prop in spec.input_schema.get("properties", {}).items():
                mine = shown_tools[output.tool_name(spec.name)][skin["renamed"].get(key, key)]
                theirs = plain_tools[plain_output.tool_name(spec.name)][key]
                kind = family.world.IDS.get(key)
                if kind is None:
                    assert mine == theirs
                    continue
                written = skin["ids"][kind]
                assert style_of(mine) == written.split(":")[0] and style_of(theirs) == "number"
                low, high = theirs["minimum"], theirs["maximum"]
                if written.startswith("code:"):
                    assert mine["enum"] == [show_id(written, k) for k in range(low, high + 1)]
                    assert len(mine["enum"]) <= 200, (spec.name, key)  # a list a player can read
                    assert [read_id(written, code) for code in mine["enum"]] == list(range(low, high + 1))
                else:
                    assert (mine["minimum"], mine["maximum"]) == (show_id(written, low), show_id(written, high))
        for call in observe + best + observe:
            mine = interface.shown(call)
            made = env.call(mine["tool"], mine["arguments"])
            theirs = plain.call(plain_output.tool_name(call["tool"]), call["arguments"])
            assert made == world.shown(theirs), (style, call)
        assert env.outcome() == plain.outcome()
        for kind, written in skin["ids"].items():  # presentation I lists θ entity by entity, in the world's ids
            if written.startswith("code:"):
                assert re.search(rf"\b{show_id(written, 0)}\b", env.instruction), (kind, written, env.instruction)


@pytest.mark.parametrize("name", registry.names())
def test_the_reference_world_in_a_skin_is_its_skinned_text_run(name):
    """`oracle.reference_in_skin` runs the reference module's code compiled once and then sets its
    SKIN: the same world, tool for tool and answer for answer, as the skinned text compiled whole
    (`with_skin`), on π*'s calls and random ones, for a passage that restyles ids where it can."""
    from vhd.tasks.grading.oracle import reference_in_skin, reference_skin
    from vhd.tasks.setters.skin import with_skin

    family = registry.get(name)
    kinds = sorted(set(getattr(family.world, "IDS", {}).values()))
    passage = next((p for p in PASSAGES if kinds and all(id_skin(family, p)[0][k].startswith("code:") for k in kinds)),
                   PASSAGES[-1])
    out = render_module(family, passage)
    fast = reference_in_skin(family, out)
    whole = types.ModuleType("whole")
    exec(compile(with_skin(reference_module(family)[1].module, reference_skin(family, out)), "<whole>", "exec"),
         whole.__dict__)
    assert fast is not reference_module(family)[0] and fast.SKIN == whole.SKIN
    _, theta = draw(family, 3)
    config = {"params": theta, "presentation": "A", "episode_seed": 4, "turn_budget": family.turn_budget(theta)}
    interface = Interface.of(family, out)
    calls = family.simulate(theta, family.solve(theta).policy, 4).calls
    calls += random_calls(family, {}, np.random.default_rng(5), 40)
    envs = [module.create(config) for module in (fast, whole)]
    assert envs[0].instruction == envs[1].instruction and envs[0].tools == envs[1].tools
    for call in calls:
        made = interface.shown(call)
        assert envs[0].call(made["tool"], made["arguments"]) == envs[1].call(made["tool"], made["arguments"])
    assert envs[0].outcome() == envs[1].outcome() and envs[0].state_digest() == envs[1].state_digest()
