"""What the family tests share: a family's rendered modules, episodes of them, one gated run,
and a mutant judged by the real gates. The registry-wide tests of every family are in
tests/test_contract.py; a family's own test file keeps only what is particular to its model.

    >>> from vhd.mechanisms import registry
    >>> out, module = generated(registry.get("stopping"), 0)
    >>> out.tool_name("accept_offer") in [tool["name"] for tool in module.SKIN["tools"]]
    True
"""

from __future__ import annotations

import copy
import types
from typing import Any

from vhd.mechanisms import Family
from vhd.schemas.errors import SetterError
from vhd.schemas.records import SetterOutputRecord
from vhd.tasks.stages.annotate import annotate, make_candidates
from vhd.tasks.stages.check import Verdict, check_batch, in_band
from vhd.tasks.corpus.export import export_row
from vhd.tasks.family_check import failed, fit, unbound  # noqa: F401  (the tests import them from here)
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.setters.lexicon import id_skin
from vhd.tasks.setters.skin import interface_of
from vhd.tasks.stages.in_process import CheckedBatch, check_models
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.setters.template import render_module
from vhd.tasks.stages.solve import solve_models

PASSAGES = builtin_passages()


_MODULES: dict[tuple[str, int], tuple[SetterOutputRecord, types.ModuleType]] = {}
_RUNS: dict[tuple[str, int, int], CheckedBatch] = {}


def generated(family: Family, k: int) -> tuple[SetterOutputRecord, types.ModuleType]:
    """The template setter's module of `family` in the world of built-in passage k, executed, its
    ids and arguments the family's own (`plain`: a family's tests speak of lot 0 and `item`; how a
    world writes ids and names arguments is tested registry-wide in test_skins and test_surfaces)."""
    key = (family.code_version, k)
    if key not in _MODULES:
        out = render_module(family, PASSAGES[k], plain=True)
        module = types.ModuleType(f"generated_{family.name}_{k}")
        exec(compile(out.module, f"<generated {family.name} {k}>", "exec"), module.__dict__)
        _MODULES[key] = (out, module)
    return _MODULES[key]


def env_of(family: Family, k: int, theta: dict[str, Any], presentation: str = "I", seed: int = 0,
           budget: int | None = None) -> Any:
    """A fresh episode of that module on θ (the family's own turn budget unless given)."""
    return generated(family, k)[1].create({
        "params": theta, "presentation": presentation, "episode_seed": seed,
        "turn_budget": family.turn_budget(theta) if budget is None else budget,
    })


def coded_world(family: Family, *kinds: str) -> tuple[SetterOutputRecord, types.ModuleType, dict, dict]:
    """(output, executed module, {kind: id style}, {key: its name in the world}) of the template
    setter's module in the first built-in passage whose world writes every kind of `kinds` as codes
    and names the first kind's argument by its own word (issue 29 item 2)."""
    for passage in PASSAGES:
        styles, renamed = id_skin(family, passage)
        if all(styles[kind].startswith("code:") for kind in kinds) and kinds[0] in renamed:
            out = render_module(family, passage)
            module = types.ModuleType(f"coded_{family.name}")
            exec(compile(out.module, f"<coded {family.name}>", "exec"), module.__dict__)
            return out, module, styles, renamed
    raise AssertionError(f"no built-in passage writes {family.name}'s {', '.join(kinds)} as codes")


def shown(out: SetterOutputRecord, call: dict[str, Any]) -> tuple[str, Any]:
    """(tool, arguments) of a canonical call as the module's player makes it: its tool names,
    argument names and ids (`vhd.tasks.setters.skin`)."""
    made = interface_of(out).shown(call)
    return made["tool"], made["arguments"]


def play(family: Family, k: int, env: Any, canonical_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Make canonical calls as the module's player makes them; the answers."""
    out = generated(family, k)[0]
    return [env.call(*shown(out, call)) for call in canonical_calls]


def named(family: Family, out: SetterOutputRecord, tool: str) -> str:
    """The module's name of a canonical tool of `family`; any other name (a made-up tool) as it is."""
    return out.tool_name(tool) if tool in {t.name for t in family.tools} else tool


def refused(env: Any, name: str, arguments: Any) -> dict[str, Any]:
    """Make a call the module must refuse, and check the rules of play on it: the answer is a
    structured refusal, the world's state is unchanged, and the turns used grow by the tool's turn
    cost when the world refused it, by nothing when the call was malformed (an unknown tool, or
    arguments its fitted schema refuses) or needed more turns than were left. The answer."""
    names = type(env).call.__globals__  # the module's own namespace: its `schema_problem`
    spec = env._specs.get(name) if isinstance(name, str) else None
    before, turns, over = env.state_digest(), env.outcome()["turns_used"], env.done
    answer = env.call(name, arguments)
    assert answer["ok"] is False and isinstance(answer["error"], str) and answer["error"], (name, arguments, answer)
    cost = spec.get("turn_cost", 1) if spec else 0
    free = (over or spec is None or names["schema_problem"](spec["input_schema"], arguments) is not None
            or turns + cost > env._budget)
    assert env.outcome()["turns_used"] == turns + (0 if free else cost), (name, arguments, answer)
    if free or turns + cost < env._budget:  # (a refusal that used the last turn ran the episode out)
        assert env.state_digest() == before, (name, arguments, "the refusal changed the world")
    return answer


def gated(family: Family, models: int = 6, seed: int = 0) -> CheckedBatch:
    """One run of the real gates over `models` sampled models of the family (cached per session)."""
    key = (family.code_version, models, seed)
    if key not in _RUNS:
        _RUNS[key] = check_models(family, models, seed=seed, passages=PASSAGES)
    return _RUNS[key]


def mutant_verdicts(family: Family, run: CheckedBatch, old: str, new: str, which: int = 0) -> list[Verdict]:
    """The gates' verdicts on output `which` of a gated run with `old` (found exactly once in its
    module) replaced by `new`, over that output's own candidates, every one of them played (on a
    θ outside the default band the other gates still judge the mutant, so "not admitted" cannot
    come from the band alone)."""
    output = run.outputs[which]
    assert output.module.count(old) == 1, f"{old!r} occurs {output.module.count(old)} times in the module"
    wrong = output.model_copy(update={"module": output.module.replace(old, new)})
    mine = [c for c in run.candidates if c.setter_output.setter_output_id == output.setter_output_id]
    return check_batch(family, wrong, mine, every_candidate=True)


def config(family: Family, theta: dict[str, Any], seed: int = 0, budget: int | None = None,
           presentation: str = "I") -> dict[str, Any]:
    """A module's create() config of θ (the family's own turn budget unless given)."""
    return {"params": theta, "presentation": presentation, "episode_seed": seed,
            "turn_budget": family.turn_budget(theta) if budget is None else budget}


def first_module(family: Family) -> SetterOutputRecord:
    """The template setter's module in the first built-in passage whose words can skin the family."""
    for passage in PASSAGES:
        try:
            return render_module(family, passage)
        except SetterError:
            continue
    raise AssertionError(f"no built-in passage can skin {family.name}")


def admitted_environments(family: Family, models_wanted: int = 8, batch: str = "surfaces",
                          output: SetterOutputRecord | None = None) -> list[tuple]:
    """(env, export row, setter output, θ, solution) in I and A of the first sampled model admitted
    in both, made by the pipeline's own stages (sample, solve, render, check, annotate, export),
    with `output` (the template setter's module in the first passage that skins the family by
    default). Made once per process (several registry-wide files ask for them); each caller gets
    its own copy."""
    return copy.deepcopy(_admitted(family, models_wanted, batch, output or first_module(family))[0])


def admitted_verdicts(family: Family, models_wanted: int = 8, batch: str = "surfaces") -> list[Verdict]:
    """The gates' verdicts on the pair `admitted_environments` returns (a copy)."""
    return copy.deepcopy(_admitted(family, models_wanted, batch, first_module(family))[1])


_ADMITTED: dict[tuple[str, int, str, str], tuple[list[tuple], list[Verdict]]] = {}


def _admitted(family: Family, models_wanted: int, batch: str,
              output: SetterOutputRecord) -> tuple[list[tuple], list[Verdict]]:
    key = (family.code_version, models_wanted, batch, output.setter_output_id)
    if key in _ADMITTED:
        return _ADMITTED[key]
    models = sample_models(family, models_wanted, seed=5, batch=batch)
    solutions = {s.model_id: s for s in solve_models(family, models)}
    candidates = make_candidates(family, models, solutions, {output.setter_output_id: output},
                                 {m.model_id: output.setter_output_id for m in models}, ("I", "A"))
    for k in range(0, len(candidates), 2):
        pair = candidates[k:k + 2]
        if not all(in_band(family, c) for c in pair):
            continue
        verdicts = check_batch(family, output, pair)
        if all(v.admitted for v in verdicts):
            envs = [annotate(family, v)[0] for v in verdicts]
            made = [(env, export_row(env, c.model, output, family, solutions[c.model.model_id]), output, c.model.theta,
                     solutions[c.model.model_id]) for env, c in zip(envs, pair)]
            _ADMITTED[key] = (made, verdicts)
            return _ADMITTED[key]
    raise AssertionError(f"{family.name}: no model of {models_wanted} admitted in both I and A with "
                         f"{output.setter_output_id[:12]}")


def worlds_after_each_call(family: Family, draws: int = 4) -> Any:
    """The family's reference World after every call of a random and the default play of each of
    `draws` θ (`draw(family, k)`, episode seed k, presentation I), and once more after each play is
    finished: where an invariant of the World's state (a kept balance equal to its ledger's sum) is
    asserted."""
    import numpy as np

    from vhd.tasks.grading.oracle import reference_module
    from vhd.tasks.stages.sample import draw

    module, output = reference_module(family)
    for k in range(draws):
        _, theta = draw(family, k)
        rng = np.random.default_rng(k)
        for plan in (family.random_policy(theta, rng), family.default_policy(theta)):
            env = module.create({"params": theta, "presentation": "I", "episode_seed": k,
                                 "turn_budget": family.turn_budget(theta)})
            for call in family.simulate(theta, plan, k).calls:
                env.call(output.tool_name(call["tool"]), call["arguments"])
                yield env._world
            env.finish()
            yield env._world
