"""`vhd family-check NAME`: Gymnasium's `check_env`, for a mechanism family (issue 28).

    >>> from vhd.mechanisms import registry
    >>> names_check(registry.get("stopping")).passed
    True

What a family author runs first. On one registered family it runs

- the registry-wide contract (`CONTRACT`: the checks tests/test_contract.py makes of every family,
  which call the same functions here), each answering a list of problems, one line each, saying
  what is wrong and what to fix;
- `draws` seeded θ draws (`sample_models`, batch "family-check"), each solved: the distribution of
  z = (u_default − u_idle) / (u* − u_idle), the default's position as the default_band gate
  computes it (`Family.default_position`), against the family's DEFAULT_BAND;
- random call sequences (the checker's own `random_calls`, in its four role profiles) on the
  family's reference World (`reference_module`): each episode ends within `call_limit` of its turn
  budget, and nothing but a structured refusal comes back (no exception);
- budget tightness: with BUDGET_BINDS the share of in-band θ whose A budget binds
  (`vhd/tasks/stages/check/budget.py`; tests/test_budget.py wants 40 %), without it whether the turn budget fits
  π*'s play (its longest over the fixed reserve seeds) on every draw;
- the module-level names `Family.of` reads (`CONVENTION`): which the module declares, which optional
  ones it leaves to their defaults; a missing required one is an error. A module that does not even
  import (Family.of refused it) is reported with the names it lacks (`broken_modules`).

Each check is a `Check`; `check_family` runs them all into one report dict (what `--json` prints).
"""

from __future__ import annotations

import importlib
import json
import math
import pkgutil
import re
import sys
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from vhd.mechanisms import BaseWorld, Family, registry, tools_of
from vhd.mechanisms._contract import CONVENTION, REQUIRED
from vhd.mechanisms._runtime import call_limit
from vhd.schemas.records import SetterOutputRecord
from vhd.tasks.setters.passages import builtin_passages

DRAWS = 24
SECTIONS = ("Model", "State", "Tools", "Plan", "Reward", "Episode end")
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
BINDING_SHARE = 0.4  # tests/test_budget.py: the budget binds for at least this share of the in-band θ
REPLAY_EVERY = 12  # the module replay runs in every 12th built-in passage (the World is the same in every one)

# what each conventional name is, for the line that says what to fix when it is missing
MEANING = {
    "Params": "a pydantic model of the size and horizon knobs (`knob(default, low, high, sampled=…)`)",
    "sample": "sample(params, rng) -> θ, drawing with the given numpy Generator only",
    "solve": "solve(θ) -> Solution, the exact solver wrapped in `_solve.certified`",
    "default_policy": "default_policy(θ), the fixed heuristic the reward is measured from",
    "idle_policy": "idle_policy(θ), the plan that does nothing",
    "random_policy": "random_policy(θ, rng), a random valid plan",
    "evaluate": "evaluate(θ, plan) -> the plan's exact expected utility",
    "simulate": "simulate(θ, plan, episode_seed) -> Episode, the canonical calls that play the plan",
    "World": "class World(BaseWorld), the tools over SQLite",
    "__doc__": "a module docstring with the sections " + ", ".join(SECTIONS),
    "turn_budget": "turn_budget(θ), one budget for presentations I and A",
    "HIDDEN": "HIDDEN = (…), the θ fields presentation A withholds, each in some probe's reveals",
    "DEFAULT_BAND": "DEFAULT_BAND = (lo, hi), the admissible position of the default between idle and π*",
    "TABLES": "TABLES = (…), the World's canonical table names, `state` among them",
}


@dataclass
class Check:
    """One check's verdict: its name, the problems it found (one line each: what is wrong, what to
    fix; none when it passed) and what it measured."""

    name: str
    problems: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, **asdict(self)}


# --- the contract of every family (tests/test_contract.py calls these) -----------------------------------

_MODULES: dict[tuple[str, int], tuple[SetterOutputRecord, types.ModuleType]] = {}


def rendered(family: Family, k: int) -> tuple[SetterOutputRecord, types.ModuleType]:
    """The template setter's module of `family` in built-in passage k, executed (cached per process)."""
    from vhd.tasks.setters.template import render_module

    key = (family.code_version, k)
    if key not in _MODULES:
        out = render_module(family, builtin_passages()[k])
        module = types.ModuleType(f"family_check_{family.name}_{k}")
        exec(compile(out.module, f"<generated {family.name} {k}>", "exec"), module.__dict__)
        _MODULES[key] = (out, module)
    return _MODULES[key]


def _episode(module: types.ModuleType, theta: dict[str, Any], presentation: str, seed: int, budget: int) -> Any:
    return module.create({"params": theta, "presentation": presentation, "episode_seed": seed, "turn_budget": budget})


def check_draw(family: Family) -> list[str]:
    """The same seed draws the same θ, another seed another; θ is plain JSON; knobs within their ranges."""
    from vhd.tasks.stages.sample import draw

    problems = []
    if draw(family, 11) != draw(family, 11):
        problems.append("draw(seed 11) differs between two calls: sample() must use only the rng it is given "
                        "(no global RNG, clock or set order)")
    if draw(family, 11) == draw(family, 12):
        problems.append("seeds 11 and 12 draw the same θ: sample() must draw from the rng it is given")
    knobs, theta = draw(family, 11)
    try:
        round_trip = json.loads(json.dumps(theta))
    except (TypeError, ValueError) as exc:
        round_trip = exc
    if round_trip != theta:
        problems.append("θ is not plain JSON (a JSON round trip changes it): cast numpy scalars and arrays in sample()")
    for knob, (lo, hi) in family.knob_ranges.items():
        if not lo <= knobs[knob] <= hi:
            problems.append(f"knob {knob} = {knobs[knob]} outside its sampled range {lo} … {hi}: fix Params' knob()")
    return problems


def check_dominance(family: Family, seeds: int = 4) -> list[str]:
    """On `seeds` draws the certificate is optimal and u* is at least the default's, idle's and a
    random plan's value."""
    from vhd.tasks.stages.sample import draw

    problems = []
    for seed in range(seeds):
        _, theta = draw(family, seed)
        s = family.solve(theta)
        if s.certificate.status != "optimal":
            problems.append(f"draw {seed}: the certificate says {s.certificate.status!r}, not 'optimal': solve() must "
                            "be exact (wrap it in _solve.certified)")
        if not (s.u_star >= s.u_default - 1e-9 and s.u_star >= s.u_idle - 1e-9):
            problems.append(f"draw {seed}: u* = {s.u_star:g} is below u_default = {s.u_default:g} or u_idle = "
                            f"{s.u_idle:g}: solve() is not optimal, or evaluate() disagrees with it")
        rng = np.random.default_rng(seed)
        random_value = family.evaluate(theta, family.random_policy(theta, rng))
        if random_value > s.u_star + 1e-9:
            problems.append(f"draw {seed}: a random plan is worth {random_value:g} > u* = {s.u_star:g}: solve() is "
                            "not optimal, or evaluate() overrates plans")
    return problems


def check_tool_table(family: Family) -> list[str]:
    """Probe, decision and clock roles, at least 10 tools, valid names, every hidden field reachable
    through a probe, the docstring's sections."""
    from vhd.tasks.stages.sample import draw

    problems = []
    _, theta = draw(family, 0)
    roles = {t.role for t in family.tools}
    if not {"probe", "decision", "clock"} <= roles or len(family.tools) < 10:
        problems.append(f"the World has {len(family.tools)} tools with roles {sorted(roles)}: it needs at least 10, "
                        "among them a probe, a decision and a clock")
    bad = [t.name for t in family.tools if not TOOL_NAME.fullmatch(t.name)]
    if bad:
        problems.append(f"tool names {bad} are not [a-zA-Z0-9_-]{{1,64}}: rename the tool_<name> methods")
    revealed = {name for t in family.tools for name in t.reveals}
    if not revealed <= set(theta):
        problems.append(f"probes reveal {sorted(revealed - set(theta))}, which θ lacks: fix the @tool(reveals=…)")
    if not set(family.hidden) <= set(theta):
        problems.append(f"HIDDEN names {sorted(set(family.hidden) - set(theta))}, which θ lacks: HIDDEN lists θ keys")
    if not set(family.hidden) <= revealed:
        problems.append(f"hidden {sorted(set(family.hidden) - revealed)} is revealed by no probe: every hidden "
                        "parameter must be reachable through a probe (@tool('probe', …, reveals=…))")
    missing = [section for section in SECTIONS if f"\n{section}\n" not in family.doc]
    if missing:
        problems.append(f"the docstring lacks the sections {missing}: each on a line of its own, its text indented")
    return problems


def check_world_tools(family: Family) -> list[str]:
    """The tool table is the World's `@tool` declarations over `BaseWorld`, one per `tool_*` method."""
    problems = []
    if not issubclass(family.world, BaseWorld) or family.tools != tools_of(family.world):
        problems.append("World is not a BaseWorld subclass declaring its tools with @tool: "
                        "`class World(BaseWorld)` from vhd.mechanisms._contract")
    methods = sorted(attr[len("tool_"):] for attr in dir(family.world) if attr.startswith("tool_"))
    declared = sorted(spec.name for spec in family.tools)
    if methods != declared:
        problems.append(f"tool_ methods without @tool: {sorted(set(methods) - set(declared))}: declare each with "
                        "@tool(role, description, …) or rename it")
    if "state" not in family.tables:
        problems.append(f"TABLES = {family.tables} lacks 'state' (BaseWorld's key-value table): add it")
    return problems


def check_passage_names(family: Family) -> list[str]:
    """In every built-in passage the skinned tool names are distinct and valid."""
    from vhd.tasks.setters.template import render_module

    problems = []
    for k, passage in enumerate(builtin_passages()):
        out = _MODULES[(family.code_version, k)][0] if (family.code_version, k) in _MODULES else render_module(
            family, passage)  # only its names: not executed, not kept
        names = [out.tool_name(spec.name) for spec in family.tools]
        if len(set(names)) != len(names) or not all(TOOL_NAME.fullmatch(n) for n in names):
            problems.append(f"passage {k} skins the tools as {names}: duplicate or invalid names; give the tools "
                            "names whose words differ")
    return problems


def gradable(family: Family, wanted: int = 3, tries: int = 30) -> tuple[list[tuple], str]:
    """The first seeds whose episode has a positive reward span (π* strictly above the default on
    the episode's own draw; others are rejected by the default_band gate and never become
    environments; for stochastic families ties are common), and a problem when fewer than `wanted`
    of `tries` seeds have one."""
    from vhd.tasks.stages.sample import draw

    found = []
    for seed in range(tries):
        _, theta = draw(family, seed)
        solution = family.solve(theta)
        optimal = family.simulate(theta, solution.policy, seed)
        default = family.simulate(theta, family.default_policy(theta), seed)
        if optimal.utility > default.utility:
            found.append((seed, theta, optimal, default))
        if len(found) == wanted:
            return found, ""
    return found, (f"only {len(found)} of {tries} seeds give a positive reward span (π* above the default on the "
                   "episode): make the default weaker or the sampler draw harder θ")


def check_scores(family: Family) -> list[str]:
    """On three gradable seeds the module played with π*'s calls scores 1, with the default's 0."""
    from vhd.tasks.stages.check import to_calls
    from vhd.tasks.grading.score import reward

    found, problem = gradable(family)
    if problem:
        return [problem]
    passages = builtin_passages()
    for seed, theta, optimal, default in found:
        out, module = rendered(family, seed % len(passages))
        utilities = []
        for episode in (optimal, default):
            env = _episode(module, theta, "I", seed, family.turn_budget(theta))
            for call in to_calls(out, episode.calls):
                answer = env.call(call["tool"], call["arguments"])
                if not answer["ok"]:
                    return [f"seed {seed}: the World refuses the simulator's call {call} ({answer.get('error')}): "
                            "simulate() must make only calls the World accepts"]
            utilities.append(env.outcome()["utility"])
        scores = reward(utilities[0], optimal.utility, default.utility), reward(utilities[1], optimal.utility,
                                                                                 default.utility)
        if scores != (1.0, 0.0):
            return [f"seed {seed}: π*'s calls score {scores[0]:g} and the default's {scores[1]:g} on the World (want 1 "
                    "and 0): the World and simulate() disagree on the utility"]
    return []


def check_written(family: Family, seeds: int = 6) -> list[str]:
    """Presentation F: π* as JSON scores 1, the default 0, and every F gate but default_band passes."""
    from vhd.tasks.grading import written
    from vhd.tasks.stages.sample import draw

    if not family.plan_format.strip():
        return ["the docstring's Plan section is empty: a family must say what its plans look like (presentation F)"]
    passed = 0
    for seed in range(seeds):
        if passed == 2:
            break  # two admitted seeds are enough (ecommerce's plans are large to evaluate)
        _, theta = draw(family, seed)
        s = family.solve(theta)
        if s.u_star - s.u_default <= 1e-9 * max(1.0, abs(s.u_star)):
            continue  # no span: default_band rejects it
        text = written.instruction(family, theta, "A test passage.")
        if json.dumps(theta, sort_keys=True) not in text or family.plan_format not in text:
            return [f"draw {seed}: the F instruction lacks θ or the plan format: θ must be plain JSON"]
        u_star, u_default = written.graded_values(family, theta, s.policy)
        if not (abs(u_star - s.u_star) <= 1e-6 * max(1.0, abs(s.u_star)) and u_default == s.u_default):
            return [f"draw {seed}: F grades u* = {u_star:g}, u_default = {u_default:g}, the solver says {s.u_star:g}, "
                    f"{s.u_default:g}: evaluate() must agree with solve()"]
        best = written.score_plan(family, theta, u_star, u_default, json.loads(json.dumps(s.policy.tolist())))
        base = written.score_plan(family, theta, u_star, u_default, family.default_policy(theta).tolist())
        if (best["reward"], base["reward"]) != (1.0, 0.0):
            return [f"draw {seed}: in F π* scores {best['reward']} and the default {base['reward']} (want 1 and 0): "
                    "plan_spec() or evaluate() refuses or misgrades the reference plans"]
        gates = written.gates(family, theta, s.policy, s.u_star, s.u_default, s.u_idle, text, seed)
        failed = [(g, message) for g, ok, message, _ in gates if not ok]
        if any(g != "default_band" for g, _ in failed):
            return [f"draw {seed}: F gates fail: " + "; ".join(f"{g}: {m}" for g, m in failed)]
        passed += not failed
    if not passed:
        return [f"no F candidate admitted on {seeds} seeds: the default sits outside DEFAULT_BAND; widen it or change "
                "the sampler"]
    return []


def replayed_passages() -> range:
    """The built-in passages the module replay runs in."""
    return range(0, len(builtin_passages()), REPLAY_EVERY)


def check_replay(family: Family, k: int) -> list[str]:
    """In passage k's words the module plays π*, the default, the idle and a random plan on two
    episode seeds, in I and A, to the utility of the family's own simulator, ending the episode."""
    from vhd.tasks.stages.check import to_calls
    from vhd.tasks.stages.sample import draw

    out, module = rendered(family, k)
    _, theta = draw(family, k)
    rng = np.random.default_rng(k)
    plans = {"π*": family.solve(theta).policy, "default": family.default_policy(theta),
             "idle": family.idle_policy(theta), "random": family.random_policy(theta, rng)}
    for which, plan in plans.items():
        for seed in (k, 100 + k):
            episode = family.simulate(theta, plan, seed)
            for presentation in ("I", "A"):
                env = _episode(module, theta, presentation, seed, family.turn_budget(theta))
                for call in to_calls(out, episode.calls):
                    answer = env.call(call["tool"], call["arguments"])
                    if not answer["ok"]:
                        return [f"passage {k}, {which} plan, seed {seed}, {presentation}: the World refuses {call} "
                                f"({answer.get('error')}): simulate() and the World disagree on what is allowed"]
                utility = env.outcome()["utility"]
                if not env.done or abs(utility - episode.utility) > 1e-9:
                    return [f"passage {k}, {which} plan, seed {seed}, {presentation}: the World ends "
                            f"{'at' if env.done else 'not at all, at'} utility {utility:g}, simulate() at "
                            f"{episode.utility:g}: they must play the same episode to the end"]
    return []


def failed(verdicts: list[Any]) -> set[str]:
    """The names of the gates that failed in any of `verdicts`."""
    return {g.name for v in verdicts for g in v.gates if not g.passed}


def unbound(verdict: Any) -> bool:
    """Rejected only because θ's turn budget does not bind in presentation A (default_band's
    `planning.budget_binds`): a verdict on θ, which tests/test_budget.py measures, not on the module."""
    return not verdict.admitted and failed([verdict]) == {"default_band"} and any(
        g.name == "default_band" and g.message.startswith("in presentation A") for g in verdict.gates)


def fit(verdict: Any) -> bool:
    """Admitted, or refused by the binding-budget check alone: the module passed every gate on θ."""
    return verdict.admitted or unbound(verdict)


def check_gates(family: Family, run: Any = None, models: int = 6) -> list[str]:
    """`models` sampled models through the real gates (`check_models`, or a run given): every
    rejection is the model's own default band, and at least half of the candidates are admitted in
    each presentation."""
    from vhd.tasks.stages.in_process import check_models

    run = run if run is not None else check_models(family, models, seed=0, passages=builtin_passages())
    problems = []
    if len(run.verdicts) != 2 * models:
        problems.append(f"{len(run.verdicts)} verdicts for {models} models in I and A, not {2 * models}")
    for v in run.verdicts:
        if not (v.admitted or failed([v]) == {"default_band"}):
            problems.append(f"a candidate in {v.candidate.presentation} is rejected by {v.reason[:300]}: see "
                            "'Which gate catches what' in docs/ADDING_A_FAMILY.md")
            break
        if not v.instruction or len(v.tools) != len(family.tools):
            problems.append("a verdict lacks the instruction or some tools: the World's instruction() must say "
                            "something and every tool must render")
            break
    for presentation in ("I", "A"):
        mine = [v for v in run.verdicts if v.candidate.presentation == presentation]
        admitted = sum(fit(v) for v in mine)
        if admitted < 3:
            rejected = [v for v in mine if not fit(v)]
            gates = sorted(set().union(*(failed([v]) for v in rejected)))
            band = all(failed([v]) == {"default_band"} for v in rejected)
            problems.append(f"{presentation}: {admitted} of {len(mine)} candidates admitted (want 3), rejected by "
                            f"{', '.join(gates)} (e.g. {rejected[0].reason[:160]}): "
                            + ("widen DEFAULT_BAND or change the sampler" if band else
                               "see 'Which gate catches what' in docs/ADDING_A_FAMILY.md"))
    return problems


def contract(family: Family) -> list[tuple[str, Callable[[], list[str]]]]:
    """The contract checks of `family`, by name, each to run (the registry-wide tests of
    tests/test_contract.py)."""
    checks: list[tuple[str, Callable[[], list[str]]]] = [
        ("draws", lambda: check_draw(family)),
        ("optimality", lambda: check_dominance(family)),
        ("tool table", lambda: check_tool_table(family)),
        ("world tools", lambda: check_world_tools(family)),
        ("passage tool names", lambda: check_passage_names(family)),
        ("π* scores 1, default 0", lambda: check_scores(family)),
        ("presentation F", lambda: check_written(family)),
    ]
    checks += [(f"replay in passage {k}", lambda k=k: check_replay(family, k)) for k in replayed_passages()]
    checks.append(("gates", lambda: check_gates(family)))
    return checks


# --- the module-level names ---------------------------------------------------------------------------------


def module_namespace(family: Family) -> dict[str, Any]:
    """The globals of the module that registered `family` (its World's module)."""
    module = sys.modules.get(family.world.__module__)
    return vars(module) if module is not None else {}


def names_check(family: Family | None, namespace: dict[str, Any] | None = None) -> Check:
    """Which conventional names (`CONVENTION`) the module declares, which optional ones it leaves to
    defaults; a required one missing is a problem unless the Family got it otherwise (a keyword of
    Family.of, TABLES from World.SCHEMA)."""
    namespace = module_namespace(family) if namespace is None else namespace
    declared = [name for name in CONVENTION.values() if namespace.get(name) is not None]
    required = [name for key, name in CONVENTION.items() if key in REQUIRED]
    optional = [name for key, name in CONVENTION.items() if key not in REQUIRED]
    otherwise = [name for key, name in CONVENTION.items() if key in REQUIRED and name not in declared
                 and family is not None and getattr(family, key, None) is not None]
    missing = [name for name in required if name not in declared and name not in otherwise]
    check = Check("names", details={"declared": declared, "defaults": [n for n in optional if n not in declared],
                                    "required_given_otherwise": otherwise, "missing_required": missing})
    check.problems = [f"the module defines no {name}: define {MEANING.get(name, name)}" for name in missing]
    return check


def broken_modules() -> dict[str, tuple[BaseException, dict[str, Any]]]:
    """The family modules of vhd.mechanisms that do not import: their exception and the globals the
    module had when it raised (all of them when `register(Family.of(...))`, its last line, refused)."""
    import vhd.mechanisms as package

    broken = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        try:
            importlib.import_module(f"{package.__name__}.{info.name}")
        except Exception as exc:  # a family module that does not import: what family-check is for
            path = str(Path(package.__path__[0]) / f"{info.name}.py")
            frames, tb = [], exc.__traceback__
            while tb is not None:
                frames.append(tb.tb_frame)
                tb = tb.tb_next
            namespace = next((f.f_globals for f in frames if f.f_code.co_filename == path
                              and f.f_code.co_name == "<module>"), {})
            broken[info.name] = (exc, namespace)
    return broken


def broken_report(module: str, exc: BaseException, namespace: dict[str, Any]) -> dict[str, Any]:
    """The report of a family module that does not import."""
    names = names_check(None, namespace)
    first = (str(exc).splitlines() or [""])[0]
    imports = Check("imports", [f"vhd/mechanisms/{module}.py does not import ({type(exc).__name__}: {first}): "
                                "fix it, or no family can be loaded"])
    checks = [imports, names] if namespace else [imports]  # no globals: it failed before defining anything
    return {"family": module, "passed": False, "checks": [c.as_dict() for c in checks]}


# --- draws: z against the band, fuzzed calls, the budget -----------------------------------------------------


def z_summary(zs: list[float], band: tuple[float, float]) -> dict[str, Any]:
    """The distribution of z over the draws against the band: counts inside, below, above, with no span."""
    lo, hi = band
    finite = sorted(z for z in zs if math.isfinite(z))
    quantiles = [float(np.quantile(finite, q)) for q in (0.0, 0.25, 0.5, 0.75, 1.0)] if finite else []
    return {"band": [lo, hi], "draws": len(zs), "inside": sum(lo <= z <= hi for z in finite),
            "below": sum(z < lo for z in finite), "above": sum(z > hi for z in finite),
            "no_span": len(zs) - len(finite), "quantiles": quantiles,
            "z": [z if math.isfinite(z) else None for z in zs]}


def band_check(family: Family, zs: list[float]) -> Check:
    """At least half of the draws have z in DEFAULT_BAND (the gates' contract: half the candidates admitted)."""
    summary = z_summary(zs, family.default_band)
    check = Check("default band", details=summary)
    if 2 * summary["inside"] < summary["draws"]:
        shown = ", ".join(f"{q:.2f}" for q in summary["quantiles"]) or "none finite"
        check.problems.append(f"{summary['inside']} of {summary['draws']} draws have z in DEFAULT_BAND "
                              f"{tuple(family.default_band)} (z quantiles 0/25/50/75/100 %: {shown}; "
                              f"{summary['no_span']} with no span): widen DEFAULT_BAND or change the sampler")
    return check


def fuzz(family: Family, knobs: dict[str, Any], theta: dict[str, Any], seed: int) -> tuple[int, list[str]]:
    """Random call sequences (`random_calls`, one per role profile) on the reference World, each
    played whole: an episode that ends first (or would reach its call limit) goes on in a fresh one,
    and each episode is then played on by the clock. Every episode ends within its call limit and
    every answer is a result or a structured refusal. The calls made and the problems (at most one
    per sequence)."""
    from vhd.tasks.stages.check.sequences import CALL_PROFILES, random_calls
    from vhd.tasks.grading.oracle import reference_module

    module, output = reference_module(family)
    budget = family.turn_budget(theta)
    limit = call_limit(budget)
    clock = family.tools_with_role("clock")[0].name
    rng = np.random.default_rng([seed, 0xF022])
    made, problems = 0, []
    for k, profile in enumerate(CALL_PROFILES):
        pending = random_calls(family, knobs, rng, weights=profile)
        while pending and not problems:  # an episode the limit (or the World) ends goes on in a fresh one
            try:
                env = _episode(module, theta, "I" if k % 2 == 0 else "A", seed, budget)
            except Exception as exc:
                return made, [f"the World does not start on a sampled θ (episode seed {seed}; {type(exc).__name__}: "
                              f"{_first(exc)}): its __init__ must take every θ sample() draws"]
            played = 0
            while pending and not env.done and played < limit - 1:
                problem = _call(env, output, pending.pop(0), k)
                made, played = made + 1, played + 1
                if problem:
                    problems.append(problem)
                    break
            for _ in range(limit + 1):  # then the clock, until the episode is over
                if env.done or problems:
                    break
                problem = _call(env, output, {"tool": clock, "arguments": {}}, k)
                made += 1
                if problem:
                    problems.append(problem)
            if not problems and not (env.done and env.outcome()["calls_used"] <= limit):
                problems.append(f"a random sequence (profile {k}) does not end within {limit} calls (the call limit "
                                f"of a {budget}-turn budget): over() must become true")
        if problems:
            break
    return made, problems


def _call(env: Any, output: Any, call: dict[str, Any], k: int) -> str | None:
    """One call on the reference World: None, or the problem (it raised, or answered no result or refusal)."""
    try:
        answer = env.call(output.tool_name(call["tool"]), call["arguments"])
    except Exception as exc:
        return (f"{call['tool']}({call['arguments']}) raised {type(exc).__name__}: {_first(exc)} "
                f"(profile {k}): raise AgentError for a player's mistake, nothing else")
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool) or (
            not answer["ok"] and not (isinstance(answer.get("error"), str) and answer["error"])):
        return f"{call['tool']} answers {str(answer)[:120]}, not a result or a refusal: a tool returns a dict"
    return None


def budget_of(family: Family, theta: dict[str, Any], solution: Any, in_band: bool) -> dict[str, Any]:
    """With BUDGET_BINDS and θ in the band: θ's binding measure; otherwise whether π*'s play fits
    its turn budget."""
    from vhd.tasks.stages.check.budget import measure, reserved_turns

    if family.budget_binds:
        if not in_band:
            return {}
        b = measure(family, theta, solution)
        return {"binds": b.binds, "why_not": b.why_not(), "budget": b.budget, "play": b.play,
                "full_reading": b.full_reading, "needed_reading": b.needed_reading}
    play, budget = reserved_turns(family, theta, solution.policy), family.turn_budget(theta)
    return {"fits": play <= budget, "play": play, "budget": budget}


def budget_check(family: Family, rows: list[dict[str, Any]]) -> Check:
    """BUDGET_BINDS: the budget binds for at least BINDING_SHARE of the in-band draws; otherwise π*'s
    play fits the budget on every draw."""
    measured = [row for row in rows if row]
    if family.budget_binds:
        binding = sum(row["binds"] for row in measured)
        share = binding / len(measured) if measured else None
        check = Check("budget", details={"budget_binds": True, "in_band": len(measured), "binding": binding,
                                         "share": share})
        reasons = sorted({row["why_not"].split(":")[0] for row in measured if not row["binds"]})
        if not measured:
            check.problems.append("no draw in the band to measure the budget on: fix DEFAULT_BAND first")
        elif share < BINDING_SHARE:
            check.problems.append(f"the A budget binds on {binding} of {len(measured)} in-band draws (want "
                                  f"{BINDING_SHARE:.0%}; {'; '.join(reasons)[:200]}): change turn_budget() so reading "
                                  "everything does not fit beside π*'s play and the reading it needs does")
        return check
    short = [row for row in measured if not row["fits"]]
    check = Check("budget", details={"budget_binds": False, "draws": len(measured), "fits": len(measured) - len(short)})
    if short:
        worst = max(short, key=lambda row: row["play"] - row["budget"])
        check.problems.append(f"π*'s play does not fit the turn budget on {len(short)} of {len(measured)} draws (e.g. "
                              f"{worst['play']} turns in a budget of {worst['budget']}): raise turn_budget()")
    return check


def steps(family: Family, draws: int) -> int:
    """The progress steps of `check_family` over `draws` draws (its contract checks, then the draws)."""
    return len(contract(family)) + draws


def _first(exc: BaseException) -> str:
    """The first line of an exception's message, at most 200 characters (a problem is one line)."""
    return (str(exc).splitlines() or [""])[0][:200]


def _raised(exc: BaseException, family: Family) -> str:
    """The problem line of an exception the family's own code raised during a check."""
    return (f"raised {type(exc).__name__}: {_first(exc)}: fix the family's code (`pytest tests/test_contract.py -k "
            f"{family.name}` shows the traceback)")


def check_family(family: Family, draws: int = DRAWS, seed: int = 0,
                 progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every check of `family` (the module docstring): the report dict, `passed` when no check found
    a problem. `progress(step)` is called after each of the `steps(draws)` steps."""
    from vhd.tasks.stages.sample import sample_models

    tick = progress or (lambda step: None)
    checks: list[Check] = [names_check(family)]
    for name, run in contract(family):
        try:
            problems = run()
        except Exception as exc:  # the family's own code raised: a finding, not a crash of the check
            problems = [_raised(exc, family)]
        checks.append(Check(f"contract: {name}", problems))
        tick(name)
    zs, budgets, fuzz_problems, calls_made, solve_problems, budget_problems = [], [], [], 0, [], []
    lo, hi = family.default_band
    for model in sample_models(family, draws, seed, batch="family-check"):
        try:
            s = family.solve(model.theta)
        except Exception as exc:
            solve_problems.append(f"solve() raises {type(exc).__name__} on a sampled θ (model seed {model.seed}): "
                                  f"{_first(exc)}: sample() must draw only θ that solve() takes")
            tick("draw")
            continue
        z = family.default_position(s.u_star, s.u_default, s.u_idle)
        zs.append(z)
        try:
            budgets.append(budget_of(family, model.theta, s, math.isfinite(z) and lo <= z <= hi))
        except Exception as exc:
            budget_problems = budget_problems or [_raised(exc, family)]
        if not fuzz_problems:
            try:
                made, fuzz_problems = fuzz(family, model.knobs, model.theta, model.seed % (2 ** 31))
            except Exception as exc:
                made, fuzz_problems = 0, [_raised(exc, family)]
            calls_made += made
        tick("draw")
    checks.append(Check("solve", solve_problems[:1] + ([f"… and {len(solve_problems) - 1} more"]
                                                       if len(solve_problems) > 1 else []),
                        {"draws": draws, "solved": len(zs)}))
    checks.append(band_check(family, zs))
    checks.append(Check("fuzz", fuzz_problems, {"calls": calls_made}))
    budget = budget_check(family, budgets)
    budget.problems = budget_problems or budget.problems
    checks.append(budget)
    return {"family": family.name, "version": family.version, "stochastic": family.stochastic,
            "passed": all(c.passed for c in checks), "checks": [c.as_dict() for c in checks]}


def check_named(names: list[str] | None, draws: int = DRAWS, seed: int = 0,
                progress: Callable[[str, int], Callable[[str], None]] | None = None) -> list[dict[str, Any]]:
    """The reports of the families `names` (None: every registered one). When a family module does not
    import, the registry cannot load: the report of each such module instead (what it lacks).
    `progress(family, steps)` gives the step callback of one family's run. UnknownFamily for a name
    the registry does not hold."""
    from vhd.schemas.errors import UnknownFamily

    try:
        families = registry.all() if names is None else [registry.get(name) for name in names]
    except UnknownFamily:
        raise
    except Exception:
        broken = broken_modules()
        if not broken:
            raise
        return [broken_report(module, exc, namespace) for module, (exc, namespace) in sorted(broken.items())]
    return [check_family(f, draws, seed, progress(f.name, steps(f, draws)) if progress else None) for f in families]
