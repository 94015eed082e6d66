"""The admission gates of DESIGN §7: each reads one candidate's Evidence and says whether it passed, and why.

    >>> [name for name, _ in GATES][-3:]
    ['robustness', 'information_hiding', 'instruction_agreement']

A gate is a function of the Evidence alone (the candidate, its references, the sandbox's
reports read by name), returning (passed, message); GATES runs them in this file's order.
A change of what a gate proves bumps CHECKER_VERSION (candidates.py): new environment ids.
"""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Callable

import numpy as np
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from vhd.tasks.grading.step_advantages import step_advantages
from vhd.tasks.stages.check.evidence import FINISHED_AT_ONCE, Evidence
from vhd.tasks.stages.check.planning import budget_binds, default_band
from vhd.tasks.stages.check.reading import gate_information_hiding, gate_instruction_agreement
from vhd.tasks.stages.solve import unpack_policy

DECISION_SEEDS = 3  # episode seeds, beside the candidate's, on which π*'s decision reward is checked
# (each replay of a plan on the reference World costs ~10 ms of the flow's own CPU; 12 seeds of three
# plans added ~300 s to the paper preset, over its 10-minute bar)
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ROLES_REQUIRED = ("probe", "decision", "clock")


def _close(a: float, b: float) -> bool:
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def gate_executes(ev: Evidence) -> tuple[bool, str]:
    """The module runs: create() succeeds and no tool call raises, on the candidate's θ and on
    EXTRA_THETAS others (a module fitted to one draw fails there), and every reference policy's
    episode ends with a finite utility. Fails on a sandbox run without a report (a crash, a
    timeout, an import error: its message), an exception, a non-finite utility or an episode that
    did not end; the gates after it are then not run."""
    if ev.failure:
        return False, ev.failure
    reports = [(ev.first, [ev.trajectory(name) for name, _ in ev.refs.episodes()])]
    reports += [(extra, extra["trajectories"]) for extra in ev.extras]  # an extra θ's one episode
    for report, finished in reports:
        if "exception" in report["describe"]:
            return False, "create() raised: " + report["describe"]["exception"][-300:]
        if any(t.get("exception") for t in report["trajectories"]):
            raised = [t for t in report["trajectories"] if t.get("exception")][0]
            return False, "a tool call raised: " + raised["exception"][-300:]
        for trajectory in finished:
            utility = trajectory.get("utility")
            if not isinstance(utility, (int, float)) or not math.isfinite(utility):
                return False, f"utility {utility!r} is not a finite number"
            if trajectory.get("terminal") is not True:
                return False, "a reference policy did not reach the end of the episode"
    return True, f"create() and every reference policy ran on {1 + len(ev.extras)} θ"


@functools.lru_cache(maxsize=4096)
def _schema_problem(schema: str) -> str:
    """Why a tool's input schema (as sorted JSON) is not valid JSON Schema 2020-12, or "" (cached:
    every candidate of a module has the same tools, and checking a schema is slow)."""
    try:
        Draft202012Validator.check_schema(json.loads(schema))
    except SchemaError as exc:
        return exc.message
    return ""


def gate_interface(ev: Evidence) -> tuple[bool, str]:
    """The tools are a usable interface: at least 10, unique names an API accepts, each with a
    description and a valid JSON Schema 2020-12 object as input_schema, and among them a probe, a
    decision and a clock. Fails on the first tool that breaks one of these, or a missing role."""
    tools = ev.first["describe"].get("tools", [])
    names = [t.get("name") for t in tools if isinstance(t, dict)]
    if len(names) < 10:
        return False, f"{len(names)} tools; expected at least 10"
    bad = [n for n in names if not isinstance(n, str) or not TOOL_NAME.match(n)]
    if bad or len(set(names)) != len(names):
        return False, f"tool names must be unique and match {TOOL_NAME.pattern}: {bad or names}"
    for tool in tools:
        if set(tool) != {"name", "description", "input_schema"}:
            return False, f"tool {tool.get('name')} has keys {sorted(tool)}; expected name, description, input_schema"
        schema = tool["input_schema"]
        if not isinstance(schema, dict) or schema.get("type") != "object" or not isinstance(schema.get("properties", {}), dict):
            return False, f"tool {tool['name']}: input_schema must be a JSON Schema object"
        problem = _schema_problem(json.dumps(schema, sort_keys=True))
        if problem:
            return False, f"tool {tool['name']}: input_schema is not valid JSON Schema 2020-12: {problem}"
    roles = {b.role for b in ev.candidate.setter_output.interface if b.name in names}
    missing = [r for r in ROLES_REQUIRED if r not in roles]
    if missing:
        return False, f"no tool with role {missing}"
    return True, f"{len(names)} tools with roles {sorted(roles)}"


def gate_default_band(ev: Evidence) -> tuple[bool, str]:
    """θ is worth learning on: the default policy sits in the family's band between doing nothing
    and π*, and on this episode π* realizes more than the default (`planning.default_band`).
    Judges θ and its solution, not the module: decided first, and a candidate that fails it is
    not played (its other gates are recorded as not run). Fails when idle is already optimal,
    the default is outside the band, or π* does not beat it on this episode; and in presentation
    A of a family declaring BUDGET_BINDS, when the turn budget does not bind (`planning.budget_binds`:
    every probe fits beside π*'s play, or the probes π* depends on do not)."""
    verdict = default_band(ev.family, ev.candidate.solution, ev.refs.optimal.utility, ev.refs.default.utility)
    if not verdict[0]:
        return verdict
    binds = budget_binds(ev.family, ev.candidate)
    return verdict if binds[0] else binds


def gate_replay_agreement(ev: Evidence) -> tuple[bool, str]:
    """π*, replayed through the module's tools, realizes the utility the family's simulator says:
    the reward's optimum is reachable through the tools. Fails when a call of π*'s is refused or
    the utility differs (relative tolerance 1e-6)."""
    played = ev.trajectory("optimal")
    if played["errors"]:
        return False, f"π* made {played['errors']} rejected calls; first: {played['first_error']}"
    if not _close(played["utility"], ev.refs.optimal.utility):
        return False, f"π* replayed through the tools gives {played['utility']}, the model says {ev.refs.optimal.utility}"
    return True, f"π* reproduces u = {ev.refs.optimal.utility:g}"


def gate_no_policy_beats_optimum(ev: Evidence) -> tuple[bool, str]:
    """u* is an upper bound: the default, the idle and the random policies' values (their exact
    expectations; in a deterministic family also what they realized through the module) are at
    most u* (relative tolerance 1e-9). Fails when any policy beats u* (naming them): the solver's
    optimum is wrong, or the module pays more than the model."""
    solution = ev.candidate.solution
    values = {"default": solution.u_default, "idle": solution.u_idle}
    values.update({f"random_{k}": v for k, v in enumerate(ev.refs.random_values)})
    if not ev.family.stochastic:  # deterministic: realized utilities are the values
        values.update({name: ev.trajectory(name)["utility"] for name, _ in ev.refs.baselines()})
    tolerance = 1e-9 * max(1.0, abs(solution.u_star))
    beaten = {name: v for name, v in values.items() if v > solution.u_star + tolerance}
    if beaten:
        return False, f"policies beat u* = {solution.u_star:g}: {beaten}"
    return True, f"{len(values)} policies ≤ u* = {solution.u_star:g} (in expectation)" if ev.family.stochastic else "ok"


def gate_dynamics_agreement(ev: Evidence) -> tuple[bool, str]:
    """The module's dynamics are the model's: the default's, the idle policy's and the random
    policies' decisions, played as tool calls, are all accepted and realize the simulator's
    utility. Fails on the first policy whose valid decision is refused or whose utility differs."""
    for name, episode in ev.refs.baselines():
        played = ev.trajectory(name)
        if played["errors"]:
            return False, f"{name}: {played['errors']} valid decisions were rejected; first: {played['first_error']}"
        if not _close(played["utility"], episode.utility):
            return False, f"{name}: the tools report {played['utility']}, the model says {episode.utility}"
    return True, f"{len(ev.refs.baselines())} trajectories agree with the reference simulator"


def gate_reference_agreement(ev: Evidence) -> tuple[bool, str]:
    """Schema-valid random calls, valid for the domain or not, are accepted or refused exactly
    as the family's reference World does, with the same utility and turn count afterwards, and
    every answer carries the same numbers. Fails on the first call sequence where the reference
    World or the module raised, or they differ in refusals, utility, turns, the episode's end or
    an answer's numbers (the message names the call)."""
    for k, (calls, played, expected) in enumerate(zip(ev.sequences, ev.sequences_played(), ev.reference_runs)):
        if expected.get("exception"):
            return False, f"the family's reference World raised on random sequence {k}: {expected['exception'][-200:]}"
        if played.get("exception"):
            return False, f"random call sequence {k} raised: {played['exception'][-300:]}"
        if played["errors"] != expected["errors"]:
            return False, (f"random call sequence {k}: the module refused {played['errors']} calls, "
                           f"the family's reference World {expected['errors']} (reference's first refusal: "
                           f"{expected['first_error']}; module's: {played['first_error']})")
        if not _close(played["utility"], expected["utility"]) or played["turns_used"] != expected["turns_used"] or \
                played["terminal"] != expected["terminal"]:
            return False, (f"random call sequence {k}: after the same calls the module reports utility "
                           f"{played['utility']} in {played['turns_used']} turns, the reference World "
                           f"{expected['utility']} in {expected['turns_used']}")
        mine, theirs = played.get("obs_numbers"), expected.get("obs_numbers")
        if mine != theirs:
            at = next((i for i, (a, b) in enumerate(zip(mine or [], theirs or [])) if a != b), None)
            if at is not None and at < len(calls):
                what = f"call {at} ({calls[at]['tool']}{calls[at]['arguments']})"
            elif at is not None:
                what = f"clock call {at - len(calls)} after the sequence"
            else:
                what = f"{len(mine or [])} answers where the reference World gave {len(theirs or [])}"
            return False, (f"call sequence {k}: the numbers the module reports at {what} differ from the ones "
                           f"the family's reference World reports for the same calls")
    return True, (f"{len(ev.reference_runs)} call sequences agree with the reference World: refusals, utility, "
                  f"turns and the numbers of every answer")


def gate_idle_floor(ev: Evidence) -> tuple[bool, str]:
    """Doing nothing never pays: the episode finished at once (`Env.finish()` before any call)
    ends, realizes what the family's reference World realizes, and π* beats it on this episode
    (default_band judges π* against the default). The reward's zero is max(u_default, u_idle),
    so the empty trajectory scores exactly 0. Fails when finishing at once raises or does not end
    the episode, its utility differs from the reference World's, or (θ in the band) it is not
    below π*'s on this episode."""
    played, expected = ev.trajectory(FINISHED_AT_ONCE), ev.reference_idle or {}
    if played.get("exception"):
        return False, "finishing the episode at once raised: " + played["exception"][-300:]
    if expected.get("exception"):
        return False, "the family's reference World raised finishing at once: " + expected["exception"][-200:]
    if played.get("terminal") is not True:
        return False, "finish() did not end the episode"
    idle = played.get("utility")
    if not isinstance(idle, (int, float)) or not _close(idle, expected.get("utility", math.nan)):
        return False, f"finishing at once gives {idle!r}, the family's reference World {expected.get('utility')!r}"
    optimal = ev.refs.optimal.utility  # π* above the default is default_band's to judge
    if not gate_default_band(ev)[0]:  # a θ default_band rejects is not judged twice
        return True, f"finishing at once agrees with the reference World ({idle:g}); θ is default_band's verdict"
    if not optimal - idle > 1e-9 * max(1.0, abs(optimal)):
        return False, f"on this episode doing nothing ({idle:g}) is not below π* ({optimal:g})"
    zero = max(ev.refs.default.utility, idle)
    return True, f"doing nothing realizes {idle:g}; the reward's zero is {zero:g}, π* {optimal:g}"


def gate_decision_reward(ev: Evidence) -> tuple[bool, str]:
    """The decision reward is exact on this θ: replayed on the family's own World, π*'s decisions
    have advantage 0 (reward 1) on the candidate's episode seed (in a stochastic family on
    DECISION_SEEDS others too), no decision of the default or of a random plan has a positive
    advantage on the candidate's seed (V* is the best of the Q*), and in a deterministic family
    their advantages sum to u − u* exactly. Fails on every candidate of a family that does not
    define `decision_values`, `decision_state` and `advantage` (`until_committed(solve)` of
    vhd/mechanisms/_advantage.py gives them to a deterministic family whose plan stays open until
    one call commits it), on a nonzero advantage of π*, a positive one, or a deterministic sum
    that is not u − u*. These invariants hold on every seed; that the default's sum averages
    E[u_default] − u* over seeds is a property of the family's advantage code, tested over many
    seeds in tests/test_advantages.py (a per-environment sample of a few seeds would reject
    correct environments on rare draws)."""
    family, candidate = ev.family, ev.candidate
    if None in (family.decision_values, family.decision_state, family.advantage):
        return False, f"{family.name} declares no advantages (decision_values, decision_state, advantage)"
    theta, s = candidate.model.theta, candidate.solution
    seeds = [candidate.episode_seed] + [candidate.episode_seed + 1 + k for k in range(DECISION_SEEDS)]
    plans = {"π*": unpack_policy(s.policy), "the default": family.default_policy(theta),
             "a random plan": family.random_policy(theta, np.random.default_rng([candidate.episode_seed, 0xADA]))}
    simulated = {("π*", candidate.episode_seed): ev.refs.optimal, ("the default", candidate.episode_seed): ev.refs.default}
    tolerance = 1e-6 * max(1.0, abs(s.u_star))
    for seed in seeds if family.stochastic else seeds[:1]:
        config = dict(candidate.config(), episode_seed=seed)
        for name, plan in plans.items() if seed == candidate.episode_seed else [("π*", plans["π*"])]:
            episode = simulated.get((name, seed)) or family.simulate(theta, plan, seed)  # (the references' own)
            steps = step_advantages(family, config, episode.calls)
            if name == "π*" and (steps.total != 0.0 or any(steps.per_call)):
                return False, f"π*'s decisions have advantage {steps.total:.6g} on episode seed {seed}, not 0"
            if max(steps.per_call + [steps.finish]) > tolerance:
                return False, f"a decision of {name} has a positive advantage on episode seed {seed}"
            if not family.stochastic and abs(steps.total - (steps.utility - s.u_star)) > tolerance:
                return False, (f"{name}'s advantages sum to {steps.total:.6g}, not its utility less u* "
                               f"({steps.utility - s.u_star:.6g})")
    checked = len(seeds) if family.stochastic else 1
    return True, f"π*'s advantages 0 on {checked} episode seed(s), no positive advantage on the candidate's"


def gate_determinism(ev: Evidence) -> tuple[bool, str]:
    """The module is a function of its config: every trajectory gives the same utility, end,
    turns and observations, and the instruction and tools are the same, in two fresh processes
    with different PYTHONHASHSEED. Fails when the second process gave no report, or on the
    first trajectory (by its position in the job) or description that differs."""
    if ev.second is None:
        return False, "the second process produced no report"
    keys = ("utility", "terminal", "turns_used", "obs_digest")
    again = ev.named(ev.second)
    for k, (name, a) in enumerate(ev.named(ev.first).items()):
        if name not in again:  # the reports are compared as far as both go
            break
        b = again[name]
        if any(a.get(key) != b.get(key) for key in keys):
            return False, f"trajectory {k} differs between processes with different PYTHONHASHSEED"
    if ev.first["describe"] != ev.second["describe"]:
        return False, "instruction or tools differ between processes"
    return True, "identical observations and utilities in two fresh processes"


def gate_robustness(ev: Evidence) -> tuple[bool, str]:
    """Invalid calls (unknown tool, a non-object, wrong types, out of range, missing or extra
    arguments: `sequences.fuzz_calls`), made mid-episode, each return a structured error and
    leave the state alone (its `state_digest()`, if the module has one); three more after the end
    too. Every one is made on an episode not yet over, whatever the turn budget: the fuzz goes on
    in a fresh episode of the same config before the call limit would end one (`runner._fuzz`).
    Fails when there is no fuzz report, an invalid call raised, one was accepted or changed the
    state, or some met an episode already over."""
    report = ev.first.get("fuzz")
    if report is None:
        return False, "no fuzz report from the sandbox"
    if report.get("exception"):
        return False, "an invalid call raised instead of returning an error: " + report["exception"][-300:]
    if report["failed"]:
        return False, f"{report['failed']} of {report['calls']} invalid calls mishandled, e.g. {report['failures'][0]}"
    mid = report["calls"] - 3  # the three after the end are meant for an episode that is over
    if report["played"] != mid:
        return False, f"only {report['played']} of {mid} mid-episode invalid calls met an episode not yet over"
    checked = "state digest unchanged" if report["digest"] else "no state_digest() to compare (structure only)"
    episodes = f"{report['episodes']} episode" + ("s" if report["episodes"] != 1 else "")
    return True, f"{report['calls']} invalid calls gave structured errors, in {episodes}; {checked}"


GATES: tuple[tuple[str, Callable[[Evidence], tuple[bool, str]]], ...] = (
    ("executes", gate_executes),
    ("interface", gate_interface),
    ("default_band", gate_default_band),
    ("replay_agreement", gate_replay_agreement),
    ("no_policy_beats_optimum", gate_no_policy_beats_optimum),
    ("dynamics_agreement", gate_dynamics_agreement),
    ("reference_agreement", gate_reference_agreement),
    ("idle_floor", gate_idle_floor),
    ("decision_reward", gate_decision_reward),
    ("determinism", gate_determinism),
    ("robustness", gate_robustness),
    ("information_hiding", gate_information_hiding),
    ("instruction_agreement", gate_instruction_agreement),
)
