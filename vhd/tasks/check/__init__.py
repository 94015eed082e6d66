"""Stage 4, check: the admission gates of DESIGN §7, run against a sandboxed module.

    >>> verdicts = check_batch(family, setter_output, candidates)
    >>> [g.name for g in verdicts[0].gates if not g.passed]
    []

The parent plays the family's reference simulator for π*, the default, the idle policy and
K random policies on each candidate's episode seed; the module plays the same decisions as
tool calls in two fresh sandboxed processes with different hash seeds; every verdict is
computed here, from the numbers the sandbox reported.
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from vhd.mechanisms import Episode, Family
from vhd.schemas.records import ModelRecord, SetterOutputRecord, SolutionRecord
from vhd.tasks import AST_LOCK, written
from vhd.tasks.sample import draw
from vhd.tasks.sandbox import Limits, SandboxResult, run_job
from vhd.tasks.solve import unpack_policy

CHECKER_VERSION = "6"  # 6: idle_floor, modules with finish(); 2: reference_agreement, JSON Schema 2020-12 in interface, F gates; 3: boundary, look and edge
# sequences, answers compared with the reference World by their numbers; 4: sequences played to the end of the
# episode and two calls past it (not a turn budget of clock calls), the reference World in a sandbox child; 5: the
# information-hiding twin replays every call sequence, its refusals (and untouched observations) compared
RANDOM_TRAJECTORIES = 3
RANDOM_CALL_SEQUENCES = 4
RANDOM_CALLS = 60
INSERTED_DECISIONS = 6
EXTRA_THETAS = 2
IDLE = {"calls": [], "finish": True}  # doing nothing: the episode finished at once (`Env.finish()`)
NOT_RUN = "not run: "  # the message of a gate recorded as failed without being run
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ROLES_REQUIRED = ("probe", "decision", "clock")


@dataclass(frozen=True)
class Candidate:
    """One would-be environment: a solved θ, a module, a presentation, an episode seed."""

    env_id: str
    model: ModelRecord
    solution: SolutionRecord
    setter_output: SetterOutputRecord
    presentation: str
    episode_seed: int
    turn_budget: int
    narrative: str = ""
    split: str = ""

    def config(self) -> dict[str, Any]:
        return {"params": self.model.theta, "presentation": self.presentation,
                "episode_seed": self.episode_seed, "turn_budget": self.turn_budget}


def candidate_from(env: Any, model: ModelRecord, solution: SolutionRecord, output: SetterOutputRecord,
                   narrative: str = "") -> Candidate:
    """The candidate a stored environment was made from (to check it again, or its mutants)."""
    return Candidate(env.env_id, model, solution, output, env.presentation, env.episode_seed, env.turn_budget,
                     narrative, env.split)


@dataclass(frozen=True)
class References:
    """The family simulator's episodes on the candidate's seed, and exact expected values."""

    optimal: Episode
    default: Episode
    idle: Episode
    random: list[Episode]
    random_values: list[float]

    def episodes(self) -> list[tuple[str, Episode]]:
        named = [("optimal", self.optimal), ("default", self.default), ("idle", self.idle)]
        return named + [(f"random_{k}", ep) for k, ep in enumerate(self.random)]


@dataclass(frozen=True)
class GateResult:
    name: str
    passed: bool
    message: str
    seconds: float = 0.0


@dataclass
class Verdict:
    candidate: Candidate
    references: References | None  # None in presentation F: no episode is played
    gates: list[GateResult] = field(default_factory=list)
    instruction: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    graded: tuple[float, float] | None = None  # presentation F: (u*, u₀) as the plan grader computes them
    idle: float | None = None  # what doing nothing realizes (I, A: the module's episode finished at once; F: E[idle])

    @property
    def admitted(self) -> bool:
        return all(gate.passed for gate in self.gates)

    @property
    def reason(self) -> str:
        """The first gate that failed when it ran (the gates after it may be recorded as not run)."""
        failed = [gate for gate in self.gates if not gate.passed]
        ran = [gate for gate in failed if not gate.message.startswith(NOT_RUN)]
        return f"{(ran or failed)[0].name}: {(ran or failed)[0].message}" if failed else ""


def to_calls(setter_output: SetterOutputRecord, canonical: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Canonical tool calls renamed to the module's own tool names."""
    names = {b.canonical: b.name for b in setter_output.interface}
    return [{"tool": names[c["tool"]], "arguments": c["arguments"]} for c in canonical]


def references(family: Family, candidate: Candidate) -> References:
    theta, seed = candidate.model.theta, candidate.episode_seed
    rng = np.random.default_rng([seed, 0x5EED])
    policies = [family.random_policy(theta, rng) for _ in range(RANDOM_TRAJECTORIES)]
    return References(
        optimal=family.simulate(theta, unpack_policy(candidate.solution.policy), seed),
        default=family.simulate(theta, family.default_policy(theta), seed),
        idle=family.simulate(theta, family.idle_policy(theta), seed),
        random=[family.simulate(theta, policy, seed) for policy in policies],
        random_values=[family.evaluate(theta, policy) for policy in policies],
    )


def _close(a: float, b: float) -> bool:
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


# --- the gates: each reads the candidate, its references and the two sandbox reports --------


@dataclass(frozen=True)
class Evidence:
    family: Family
    candidate: Candidate
    refs: References
    first: dict[str, Any] | None
    second: dict[str, Any] | None
    extras: list[dict[str, Any]]
    failure: str
    twin: dict[str, Any] | None = None
    reference_runs: list[dict[str, Any]] = field(default_factory=list)
    sequences: list[list[dict[str, Any]]] = field(default_factory=list)  # canonical calls of reference_runs
    reference_idle: dict[str, Any] | None = None  # the reference World's episode finished at once

    def played(self, name: str) -> dict[str, Any]:
        index = [n for n, _ in self.refs.episodes()].index(name)
        return self.first["trajectories"][index]

    def random_calls_played(self) -> list[dict[str, Any]]:
        start = len(self.refs.episodes())
        return self.first["trajectories"][start:start + len(self.reference_runs)]

    def idle_played(self) -> dict[str, Any]:
        """The module's episode finished at once (`IDLE`), played after the call sequences."""
        return self.first["trajectories"][len(self.refs.episodes()) + len(self.reference_runs)]


def gate_executes(ev: Evidence) -> tuple[bool, str]:
    if ev.failure:
        return False, ev.failure
    references = len(ev.refs.episodes())
    for report, played in [(ev.first, references), *((extra, 1) for extra in ev.extras)]:
        if "exception" in report["describe"]:
            return False, "create() raised: " + report["describe"]["exception"][-300:]
        if any(t.get("exception") for t in report["trajectories"]):
            raised = [t for t in report["trajectories"] if t.get("exception")][0]
            return False, "a tool call raised: " + raised["exception"][-300:]
        for trajectory in report["trajectories"][:played]:
            utility = trajectory.get("utility")
            if not isinstance(utility, (int, float)) or not math.isfinite(utility):
                return False, f"utility {utility!r} is not a finite number"
            if trajectory.get("terminal") is not True:
                return False, "a reference policy did not reach the end of the episode"
    return True, f"create() and every reference policy ran on {1 + len(ev.extras)} θ"


def gate_default_band(ev: Evidence) -> tuple[bool, str]:
    return default_band(ev.family, ev.candidate.solution, ev.refs.optimal.utility, ev.refs.default.utility)


def default_band(family: Family, s: SolutionRecord, optimal: float, default: float) -> tuple[bool, str]:
    """The default's value sits in the family's band between idle and π*, and on the episode
    π* (realizing `optimal`) does better than the default (realizing `default`)."""
    lo, hi = family.default_band
    position = family.default_position(s.u_star, s.u_default, s.u_idle)
    realized_gap = optimal - default
    if position == math.inf:
        return False, f"doing nothing is already optimal (u* = {s.u_star:g} ≤ u_idle = {s.u_idle:g}): nothing to learn"
    if not lo <= position <= hi:
        return False, f"default sits at {position:.3f} between idle (0) and optimal (1); admissible band [{lo}, {hi}]"
    if not realized_gap > 1e-9 * max(1.0, abs(optimal)):
        return False, f"on this episode the default ({default}) is not below π* ({optimal})"
    return True, f"default at {position:.3f} in [{lo}, {hi}]; realized gap {realized_gap:g}"


def in_band(family: Family, candidate: Candidate) -> bool:
    """Whether the candidate passes `default_band` (two simulator episodes, no module involved)."""
    s, theta = candidate.solution, candidate.model.theta
    if candidate.presentation == "F":
        return written.gate_default_band(family, s.u_star, s.u_default, s.u_idle)[0]
    optimal = family.simulate(theta, unpack_policy(s.policy), candidate.episode_seed).utility
    default = family.simulate(theta, family.default_policy(theta), candidate.episode_seed).utility
    return default_band(family, s, optimal, default)[0]


def needed_checks(family: Family, candidates: list[Candidate], verdicts: dict[str, bool], wanted: int) -> list[Candidate]:
    """The candidates without a verdict that a slot wanting `wanted` admitted environments (in
    candidate order) must check: those up to where the known verdicts, and for the others
    `in_band` as the guess, reach `wanted`. Nearly every in-band candidate is admitted, so the
    slot checks few candidates it will not keep; a guess that fails leaves the slot short, and
    the next round makes up for it."""
    pending, count = [], 0
    for c in candidates:
        if count >= wanted:
            break
        if c.env_id in verdicts:
            count += verdicts[c.env_id]
        else:
            pending.append(c)
            count += in_band(family, c)
    return pending


def gate_replay_agreement(ev: Evidence) -> tuple[bool, str]:
    played = ev.played("optimal")
    if played["errors"]:
        return False, f"π* made {played['errors']} rejected calls; first: {played['first_error']}"
    if not _close(played["utility"], ev.refs.optimal.utility):
        return False, f"π* replayed through the tools gives {played['utility']}, the model says {ev.refs.optimal.utility}"
    return True, f"π* reproduces u = {ev.refs.optimal.utility:g}"


def gate_no_policy_beats_optimum(ev: Evidence) -> tuple[bool, str]:
    solution = ev.candidate.solution
    values = {"default": solution.u_default, "idle": solution.u_idle}
    values.update({f"random_{k}": v for k, v in enumerate(ev.refs.random_values)})
    if not ev.family.stochastic:  # deterministic: realized utilities are the values
        values.update({name: ev.played(name)["utility"] for name, _ in ev.refs.episodes()[1:]})
    tolerance = 1e-9 * max(1.0, abs(solution.u_star))
    beaten = {name: v for name, v in values.items() if v > solution.u_star + tolerance}
    if beaten:
        return False, f"policies beat u* = {solution.u_star:g}: {beaten}"
    return True, f"{len(values)} policies ≤ u* = {solution.u_star:g} (in expectation)" if ev.family.stochastic else "ok"


def gate_dynamics_agreement(ev: Evidence) -> tuple[bool, str]:
    for name, episode in ev.refs.episodes()[1:]:
        played = ev.played(name)
        if played["errors"]:
            return False, f"{name}: {played['errors']} valid decisions were rejected; first: {played['first_error']}"
        if not _close(played["utility"], episode.utility):
            return False, f"{name}: the tools report {played['utility']}, the model says {episode.utility}"
    return True, f"{len(ev.refs.episodes()) - 1} trajectories agree with the reference simulator"


def gate_reference_agreement(ev: Evidence) -> tuple[bool, str]:
    """Schema-valid random calls, valid for the domain or not, are accepted or refused exactly
    as the family's reference World does, with the same utility and turn count afterwards."""
    for k, (played, expected) in enumerate(zip(ev.random_calls_played(), ev.reference_runs)):
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
            calls = ev.sequences[k] if k < len(ev.sequences) else []
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
    so the empty trajectory scores exactly 0."""
    played, expected = ev.idle_played(), ev.reference_idle or {}
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


def gate_determinism(ev: Evidence) -> tuple[bool, str]:
    if ev.second is None:
        return False, "the second process produced no report"
    keys = ("utility", "terminal", "turns_used", "obs_digest")
    for k, (a, b) in enumerate(zip(ev.first["trajectories"], ev.second["trajectories"])):
        if any(a.get(key) != b.get(key) for key in keys):
            return False, f"trajectory {k} differs between processes with different PYTHONHASHSEED"
    if ev.first["describe"] != ev.second["describe"]:
        return False, "instruction or tools differ between processes"
    return True, "identical observations and utilities in two fresh processes"


def gate_robustness(ev: Evidence) -> tuple[bool, str]:
    report = ev.first.get("fuzz")
    if report is None:
        return False, "no fuzz report from the sandbox"
    if report.get("exception"):
        return False, "an invalid call raised instead of returning an error: " + report["exception"][-300:]
    if report["failed"]:
        return False, f"{report['failed']} of {report['calls']} invalid calls mishandled, e.g. {report['failures'][0]}"
    checked = "state digest unchanged" if report["digest"] else "no state_digest() to compare (structure only)"
    return True, f"{report['calls']} invalid calls gave structured errors; {checked}"


def gate_information_hiding(ev: Evidence) -> tuple[bool, str]:
    """Presentation A hides θ's `hidden` fields: only probes, which cost turns, reveal them.

    The twin is the same episode (seed, budget, module) with every hidden number moved
    (`perturbed`). Nothing the player reads without probing may tell the two apart:

    - every probe must cost at least one turn (calling each once uses the sum of their costs);
    - the instruction, and the first answer of every argument-free observation tool, are the same;
    - the twin plays every call sequence (`tailed`) the candidate played, and wherever both
      worlds refuse the call at the same position, the refusal texts are identical: a refusal
      names the rule that was broken, never a hidden number (a cap, a travel time) nor which of
      several hidden rules binds (availability or a shift limit). A refusal costs no turn, so a
      hidden number in it would be free information. The comparison of a sequence stops where
      the states may legitimately differ (`_twin_difference`): where one world accepts and the
      other refuses, and past either episode's end; in a stochastic family, once the clock's
      answers differ (the period's draws depend on hidden θ), two refusals may name different
      rules, but one rule must read the same, numbers and all;
    - in a deterministic family, while the world is untouched (no probe, decision or clock call
      accepted yet in the sequence), every observation tool's answer is identical too,
      arguments and all.

    Accepted answers past that point may differ: every accepted call costs turns, so a
    decision's answer that reports its consequence (the minutes a drive took, a machine's
    load) is paid for like a probe.
    """
    if ev.candidate.presentation != "A":
        return True, "presentation I reveals θ by design"
    probes = ev.first["trajectories"][-1]
    expected = sum(b.turn_cost for b in ev.candidate.setter_output.interface if b.role == "probe")
    if probes.get("errors") or probes.get("turns_used") != expected or any(
            b.turn_cost < 1 for b in ev.candidate.setter_output.interface if b.role == "probe"):
        return False, f"probes must each cost ≥ 1 turn: calling each once used {probes.get('turns_used')}, expected {expected}"
    twin = ev.twin
    if twin is None or "exception" in twin["describe"] or twin["trajectories"][0].get("exception"):
        return True, "probes cost turns; hidden θ could not be perturbed for this module (leak check not run)"
    if twin["describe"]["instruction"] != ev.first["describe"]["instruction"]:
        return False, "the A instruction changes when only hidden parameters change: it leaks them"
    if twin["trajectories"][0]["obs_digest"] != ev.first["trajectories"][-2]["obs_digest"]:
        return False, "an observation tool's first answer changes when only hidden parameters change: it leaks them"
    roles = {t.name: t.role for t in ev.family.tools}
    compared = 0
    for k, (mine, theirs) in enumerate(zip(ev.random_calls_played(), twin["trajectories"][1:])):
        calls = ev.sequences[k] if k < len(ev.sequences) else []
        leak = _twin_difference(mine.get("answers") or [], theirs.get("answers") or [], calls, roles,
                                ev.family.stochastic)
        if leak:
            return False, f"call sequence {k}: {leak}, when only hidden parameters change: it leaks them"
        compared += not mine.get("exception") and not theirs.get("exception")
    return True, (f"instruction, observations and refusals invariant to hidden θ ({compared} call sequences "
                  f"replayed on the twin); probes cost turns")


NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _twin_difference(mine: list[list[Any]], theirs: list[list[Any]], calls: list[dict[str, Any]],
                     roles: dict[str, str], stochastic: bool) -> str:
    """Where two worlds that differ only in hidden θ answered one call sequence differently
    ('' if nowhere): a refusal text, or (deterministic families) an observation tool's answer
    while the world is untouched (no probe, decision or clock call accepted yet).

    The comparison stops where one world accepts a call the other refuses, and past either
    episode's end (its last accepted call: every call after the end is refused). In a
    stochastic family, once an accepted clock call's answers differ (the period's draws depend
    on hidden θ, so the visible state may differ by chance from there), two refusals may name
    different rules; the same rule must still read the same, numbers and all."""
    untouched, drawn = True, False
    end = min(max([at for at, (ok, _) in enumerate(answers) if ok], default=-1) for answers in (mine, theirs))
    for at, ((ok, text), (twin_ok, twin_text)) in enumerate(zip(mine[:end + 1], theirs)):
        call = calls[at] if at < len(calls) else {"tool": "the clock", "arguments": {}}
        role = roles.get(call["tool"], "clock")
        if ok != twin_ok:
            return ""
        what = f"call {at} ({call['tool']}{call['arguments']})"
        if not ok and text != twin_text and not (drawn and NUMBER.sub("#", text) != NUMBER.sub("#", twin_text)):
            return f"the refusal of {what} reads {text[:150]!r} in one world and {twin_text[:150]!r} in the other"
        if ok and text != twin_text and untouched and role == "observe" and not stochastic:
            return f"the answer of {what}, before any probe or decision, differs"
        untouched = untouched and (role == "observe" or not ok)
        drawn = drawn or (stochastic and ok and role == "clock" and text != twin_text)
    return ""


def perturbed(value: Any) -> Any:
    """Every number moved (ints by +1), structure kept: a θ that differs in every hidden field."""
    if isinstance(value, bool) or not isinstance(value, (int, float, list)):
        return value
    if isinstance(value, list):
        return [perturbed(v) for v in value]
    return value + 1 if isinstance(value, int) else value * 1.25 + 0.5


def _random_value(prop: dict[str, Any], rng: np.random.Generator, scale: int) -> Any:
    """A value the schema accepts: near the bottom of the range most of the time, anywhere else."""
    if "enum" in prop:
        return prop["enum"][int(rng.integers(len(prop["enum"])))]
    kind = prop.get("type")
    if kind in ("integer", "number"):
        lo = prop.get("minimum", 0)
        hi = min(prop.get("maximum", lo + 3 * scale), lo + (scale if rng.random() < 0.7 else 3 * scale))
        value = int(rng.integers(int(math.ceil(lo)), int(math.floor(hi)) + 1))
        return value if kind == "integer" else value + (0.5 if value + 0.5 <= hi and rng.random() < 0.3 else 0.0)
    if kind == "boolean":
        return bool(rng.integers(2))
    return "note " + str(int(rng.integers(100)))


CALL_PROFILES = (  # role weights of the random sequences: balanced, long decision runs, the clock to the end, mixed
    {"decision": 0.5, "clock": 0.2, "observe": 0.15, "probe": 0.15},
    {"decision": 0.8, "clock": 0.02, "observe": 0.09, "probe": 0.09},
    {"decision": 0.0, "clock": 0.6, "observe": 0.2, "probe": 0.2},
    {"decision": 0.3, "clock": 0.5, "observe": 0.1, "probe": 0.1},
)


def random_calls(family: Family, knobs: dict[str, Any], rng: np.random.Generator, length: int = RANDOM_CALLS,
                 weights: dict[str, float] = CALL_PROFILES[0]) -> list[dict[str, Any]]:
    """Canonical calls that every schema accepts, valid for the world or not: mostly decisions,
    then the clock, observations and probes (the turn budget is left to the world). Integers
    fall mostly within the knobs' scale (item numbers, quantities, days), so that many calls
    are valid and the refusals that remain are the world's own domain checks."""
    scale = max([int(v) for v in knobs.values() if isinstance(v, int)] + [4])
    tools = [t for t in family.tools]
    p = np.array([weights[t.role] / sum(1 for u in tools if u.role == t.role) for t in tools])
    calls = []
    for _ in range(length):
        spec = tools[int(rng.choice(len(tools), p=p / p.sum()))]
        properties = spec.input_schema.get("properties", {})
        required = set(spec.input_schema.get("required", []))
        arguments = {key: _random_value(prop, rng, scale) for key, prop in properties.items()
                     if key in required or rng.random() < 0.5}
        calls.append({"tool": spec.name, "arguments": arguments})
    return calls


_REFERENCE: dict[str, tuple[Any, SetterOutputRecord]] = {}
_REFERENCE_LOCK = AST_LOCK  # check tasks run in threads; CPython 3.11's ast.parse is not thread-safe


def reference_module(family: Family) -> tuple[Any, SetterOutputRecord]:
    """The family's own World rendered by the template setter and executed here: trusted code,
    the oracle the reference_agreement gate compares a candidate module with."""
    with _REFERENCE_LOCK:
        return _reference_module(family)


def _reference_module(family: Family) -> tuple[Any, SetterOutputRecord]:
    if family.code_version not in _REFERENCE:
        import types

        from vhd.schemas.errors import SetterError
        from vhd.tasks.passages import builtin_passages
        from vhd.tasks.setters.template import render_module

        output = None
        for passage in builtin_passages():  # the first passage that has the family's vocabulary
            try:
                output = render_module(family, passage)
                break
            except SetterError:
                continue
        if output is None:
            raise SetterError(f"no built-in passage can skin {family.name}'s reference World")
        module = types.ModuleType(f"vhd_reference_{family.name}")
        exec(compile(output.module, f"<reference {family.code_version}>", "exec"), module.__dict__)
        _REFERENCE[family.code_version] = (module, output)
    return _REFERENCE[family.code_version]


def tailed(family: Family, setter_output: SetterOutputRecord, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A call sequence in the module's tool names, played on by the clock to the end of the
    episode and `runner.PAST_END` calls past it (`runner._play`)."""
    return {"calls": to_calls(setter_output, calls), "then": setter_output.tool_name(family.tools_with_role("clock")[0].name)}


def reference_runs(family: Family, candidates: list[Candidate], sequences: list[list[list[dict[str, Any]]]],
                   limits: Limits = Limits()) -> list[list[dict[str, Any]]]:
    """The family's reference World played on every candidate's call sequences, in a sandbox
    child of its own: trusted code, but CPU work the check tasks' threads would otherwise do
    under one GIL. If the child fails, every run carries its message as the exception."""
    _, output = reference_module(family)
    job = {"module": output.module, "episodes": [
        {"key": c.env_id, "config": c.config(),
         "trajectories": [tailed(family, output, calls) for calls in seqs] + [IDLE]}
        for c, seqs in zip(candidates, sequences)]}
    result = run_job(job, limits, hash_seed=0).settled()  # a wall_timeout is retried, not a verdict
    failed = {"exception": f"the reference World's sandbox run ended {result.status}: {result.message}"}
    return [result.episodes[c.env_id]["trajectories"] if result.status == "ok" and c.env_id in result.episodes
            else [failed] * (len(seqs) + 1) for c, seqs in zip(candidates, sequences)]


def call_sequences(family: Family, candidate: Candidate, refs: References) -> list[list[dict[str, Any]]]:
    """Random call sequences, each played on by the clock to the end of the episode and two calls
    past it (`tailed`: the calls past the end must be refused on both sides): RANDOM_CALL_SEQUENCES
    from the role profiles, and π*'s and the default's paths with INSERTED_DECISIONS random
    decisions slipped in at random points (the boundary cases: a full knapsack, a spent budget),
    and the family's own near-boundary sequences when it has them (`Family.boundary_calls`)."""
    rng = np.random.default_rng([candidate.episode_seed, 0xCA11])
    sequences = [random_calls(family, candidate.model.knobs, rng, weights=CALL_PROFILES[k % len(CALL_PROFILES)])
                 for k in range(RANDOM_CALL_SEQUENCES)]
    decisions_only = {"decision": 1.0, "clock": 0.0, "observe": 0.0, "probe": 0.0}
    for episode in (refs.optimal, refs.default):
        path = list(episode.calls)
        for extra in random_calls(family, candidate.model.knobs, rng, INSERTED_DECISIONS, decisions_only):
            path.insert(int(rng.integers(len(path) + 1)), extra)
        sequences.append(path)
    if family.boundary_calls is not None:
        sequences += family.boundary_calls(candidate.model.theta, rng)
    sequences += look_sequences(family, refs)
    sequences += edge_sequences(family, candidate.model.theta)
    return sequences


def looks(family: Family) -> list[dict[str, Any]]:
    """One call of every observation tool that needs no argument (the log views with their defaults)."""
    return [{"tool": t.name, "arguments": {}} for t in family.tools_with_role("observe")
            if not t.input_schema.get("required")]


def look_sequences(family: Family, refs: References) -> list[list[dict[str, Any]]]:
    """π*'s and the default's paths with every observation read halfway and before the last
    call, and π*'s first half followed by each no-argument decision and every observation:
    what the module records (counters, log tables, derived columns) is then compared,
    number by number, with what the reference World records for the same decisions."""
    sequences = []
    for episode in (refs.optimal, refs.default):
        path = list(episode.calls)
        half = len(path) // 2
        sequences.append(path[:half] + looks(family) + path[half:])
        sequences.append(path[:-1] + looks(family) + path[-1:])
    path = list(refs.optimal.calls)
    for spec in family.tools_with_role("decision"):  # each no-argument decision (reset, clear, cancel) halfway
        if not spec.input_schema.get("required"):
            sequences.append(path[:len(path) // 2] + [{"tool": spec.name, "arguments": {}}] + looks(family))
    return sequences


TOLERANCE_PROBE = 1e-9  # amounts a hair above and below each θ number: a `>` vs `>=` at x + TOL
MAX_EDGE_IDS = 12  # ids per (integer, number) argument pair that get their own amount sequence


def _theta_numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _theta_numbers(v)]
    return []


def edge_values(prop: dict[str, Any], theta: dict[str, Any]) -> list[Any]:
    """Values at the edges of what θ makes valid, inside what the schema accepts, largest first
    (the refusals, which leave the state alone, come before the accepted calls):
    - integers (ids, counts): 0, 1, -1 and n - 1, n, n + 1, 2n - 1, 2n for every integer n of θ
      and every list length of θ (a schema is wider than the true range, so random ids rarely
      land just past it);
    - numbers (amounts): every number of θ, and it ± TOLERANCE_PROBE."""
    lo, hi = prop.get("minimum", -math.inf), prop.get("maximum", math.inf)
    if prop.get("type") == "integer":
        sizes = [v for v in theta.values() if isinstance(v, int) and not isinstance(v, bool)]
        sizes += [len(v) for v in theta.values() if isinstance(v, (list, tuple))]
        found = {0, 1, -1} | {n + d for n in sizes for d in (-1, 0, 1)} | {2 * n - 1 for n in sizes} | {2 * n for n in sizes}
    elif prop.get("type") == "number":
        numbers = sorted(set(_theta_numbers(list(theta.values()))))
        if len(numbers) > 40:  # evenly spread, ends kept
            numbers = [numbers[round(i * (len(numbers) - 1) / 39)] for i in range(40)]
        found = {x + d for x in numbers for d in (-TOLERANCE_PROBE, 0.0, TOLERANCE_PROBE)}
    else:
        return []
    return sorted((v for v in found if lo <= v <= hi), reverse=True)


def edge_sequences(family: Family, theta: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Per tool (not the clock) and numeric argument: that argument at each edge value
    (`edge_values`), each call made twice, the other required arguments at their schema minimum,
    then every observation. The reference World says which of these calls are valid."""
    sequences = []
    for spec in family.tools:
        if spec.role == "clock":
            continue
        properties = spec.input_schema.get("properties", {})
        base = {key: properties[key].get("minimum", 0) for key in spec.input_schema.get("required", [])}
        edges = {key: edge_values(prop, theta) for key, prop in properties.items()}
        for key, values in edges.items():  # each call twice: a repeated id (a duplicate lot, a job already queued)
            if values:
                sequences.append([{"tool": spec.name, "arguments": {**base, key: v}} for v in values for _ in (0, 1)]
                                 + looks(family))
        # an amount is checked against the limit of the id it goes with (a cap per asset, a demand
        # per product): each id's amounts in a fresh episode of their own, so that no earlier
        # call has used up a shared limit first
        for key in [k for k in edges if properties[k].get("type") == "integer" and k in base]:
            for amount in [k for k in edges if properties[k].get("type") == "number" and edges[k]]:
                for v in edges[key][:MAX_EDGE_IDS]:
                    sequences.append([{"tool": spec.name, "arguments": {**base, key: v, amount: x}}
                                      for x in edges[amount]] + looks(family))
    return sequences


def fuzz_calls(setter_output: SetterOutputRecord, family: Family) -> list[dict[str, Any]]:
    """Invalid calls from the tool schemas: unknown tool, non-object, wrong types, out of range, extra/missing."""
    calls: list[dict[str, Any]] = [{"tool": "no_such_tool", "arguments": {}}]
    for spec in family.tools:
        name = setter_output.tool_name(spec.name)
        calls += [{"tool": name, "arguments": "not an object"}, {"tool": name, "arguments": {"bogus_argument": 1}}]
        properties = spec.input_schema.get("properties", {})
        valid = {key: properties[key].get("minimum", 0) for key in spec.input_schema.get("required", [])}
        for required in valid:
            calls.append({"tool": name, "arguments": {k: v for k, v in valid.items() if k != required}})
        for key, prop in properties.items():
            wrong = "seven" if prop.get("type") in ("integer", "number") else 7
            calls.append({"tool": name, "arguments": {**valid, key: wrong}})
            if "minimum" in prop:
                calls.append({"tool": name, "arguments": {**valid, key: prop["minimum"] - 1}})
            if "maximum" in prop:
                calls.append({"tool": name, "arguments": {**valid, key: prop["maximum"] + 1}})
            if prop.get("type") == "integer":
                calls.append({"tool": name, "arguments": {**valid, key: 1.5}})
    return calls


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


GATES: tuple[tuple[str, Callable[[Evidence], tuple[bool, str]]], ...] = (
    ("executes", gate_executes),
    ("interface", gate_interface),
    ("default_band", gate_default_band),
    ("replay_agreement", gate_replay_agreement),
    ("no_policy_beats_optimum", gate_no_policy_beats_optimum),
    ("dynamics_agreement", gate_dynamics_agreement),
    ("reference_agreement", gate_reference_agreement),
    ("idle_floor", gate_idle_floor),
    ("determinism", gate_determinism),
    ("robustness", gate_robustness),
    ("information_hiding", gate_information_hiding),
)


# --- running a batch ------------------------------------------------------------------------


def _job(family: Family, setter_output: SetterOutputRecord, candidates: list[Candidate],
         refs: list[References], sequences: list[list[list[dict[str, Any]]]]) -> dict[str, Any]:
    fuzz = fuzz_calls(setter_output, family)
    looks = [{"tool": setter_output.tool_name(t.name), "arguments": {}} for t in family.tools_with_role("observe")
             if not t.input_schema.get("required")]
    probes = [{"tool": setter_output.tool_name(t.name), "arguments": {key: t.input_schema["properties"][key].get("minimum", 0)
                                                                      for key in t.input_schema.get("required", [])}}
              for t in family.tools_with_role("probe")]
    episodes = []
    for c, r, random_sequences in zip(candidates, refs, sequences):
        optimal = to_calls(setter_output, r.optimal.calls)
        half = len(optimal) // 2
        episodes.append({"key": c.env_id, "config": c.config(), "pad_with": None,
                         "trajectories": [to_calls(setter_output, ep.calls) for _, ep in r.episodes()]
                         + [tailed(family, setter_output, calls) for calls in random_sequences] + [IDLE, looks, probes],
                         "fuzz": {"prefix": optimal[:half], "calls": fuzz, "rest": optimal[half:]}})
        if c.presentation == "A":  # the same episode with every hidden parameter moved
            theta = {k: perturbed(v) if k in family.hidden else v for k, v in c.model.theta.items()}
            episodes.append({"key": c.env_id + ":twin", "config": {**c.config(), "params": theta}, "pad_with": None,
                             "trajectories": [looks] + [tailed(family, setter_output, calls)
                                                        for calls in random_sequences]})
    for k in range(EXTRA_THETAS):  # C1: the module must be parametric in θ, not fitted to one draw
        _, theta = draw(family, 1_000_003 + k, {name: lo for name, (lo, _) in family.knob_ranges.items()})
        config = {"params": theta, "presentation": "A", "episode_seed": k, "turn_budget": family.turn_budget(theta)}
        episodes.append({"key": f"extra-{k}", "config": config, "finish": True, "trajectories": [[]]})
    return {"module": setter_output.module, "episodes": episodes}


def check_written(family: Family, candidate: Candidate) -> Verdict:
    """The F gates, in process: no generated code is involved in presentation F."""
    s, theta = candidate.solution, candidate.model.theta
    text = written.instruction(family, theta, candidate.narrative)
    policy = unpack_policy(s.policy)
    verdict = Verdict(candidate, None, instruction=text, tools=written.tools(family))
    for name, passed, message, seconds in written.gates(family, theta, policy, s.u_star, s.u_default, s.u_idle, text,
                                                        candidate.episode_seed):
        verdict.gates.append(GateResult(name, passed, message, seconds))
    if verdict.admitted:
        verdict.graded = written.graded_values(family, theta, policy)
        verdict.idle = s.u_idle
    else:
        verdict.graded = (s.u_star, s.u_default)
    return verdict


def check_batch(family: Family, setter_output: SetterOutputRecord, candidates: list[Candidate],
                limits: Limits = Limits(), *, every_candidate: bool = False) -> list[Verdict]:
    """Every gate on every candidate that shares one module; two sandbox runs of the module and
    one of the reference World for the batch (presentation F candidates are checked in process),
    verdicts in the candidates' order.

    `default_band` judges θ and its solution, not the module, so it is decided first: a candidate
    that fails it is not played, and its other gates are recorded as not run. `every_candidate`
    plays every candidate whatever θ (the LLM setter's probe: its module must be checked even
    on a θ that will not be admitted)."""
    played = [c for c in candidates if c.presentation != "F"]
    verdicts = {c.env_id: v for c, v in zip(played, _check_played(family, setter_output, played, limits,
                                                                  every_candidate))}
    verdicts.update({c.env_id: check_written(family, c) for c in candidates if c.presentation == "F"})
    return [verdicts[c.env_id] for c in candidates]


def _check_played(family: Family, setter_output: SetterOutputRecord, everyone: list[Candidate],
                  limits: Limits, every_candidate: bool) -> list[Verdict]:
    started = time.perf_counter()
    all_refs = {c.env_id: references(family, c) for c in everyone}
    simulate_seconds = (time.perf_counter() - started) / max(1, len(everyone))
    verdicts: dict[str, Verdict] = {}
    for c in everyone:
        t0 = time.perf_counter()
        passed, message = gate_default_band(Evidence(family, c, all_refs[c.env_id], None, None, [], ""))
        if passed or every_candidate:
            continue
        band = GateResult("default_band", False, message, time.perf_counter() - t0)
        skipped = NOT_RUN + "θ is outside the family's default band, so the module was not played on it"
        verdicts[c.env_id] = Verdict(c, all_refs[c.env_id], gates=[band if name == band.name else
                                                                   GateResult(name, False, skipped) for name, _ in GATES])
    candidates = [c for c in everyone if c.env_id not in verdicts]
    if candidates:
        verdicts.update(_play_and_judge(family, setter_output, candidates, [all_refs[c.env_id] for c in candidates],
                                        limits, simulate_seconds))
    return [verdicts[c.env_id] for c in everyone]


def _play_and_judge(family: Family, setter_output: SetterOutputRecord, candidates: list[Candidate],
                    refs: list[References], limits: Limits, simulate_seconds: float) -> dict[str, Verdict]:
    started = time.perf_counter()
    sequences = [call_sequences(family, c, r) for c, r in zip(candidates, refs)]
    expected = reference_runs(family, candidates, sequences, limits)
    reference_seconds = (time.perf_counter() - started) / max(1, len(candidates))
    job = _job(family, setter_output, candidates, refs, sequences)
    first = run_job(job, limits, hash_seed=1).settled()  # SandboxError (retried) on a wall_timeout
    # the second process replays what `determinism` compares: the candidates' trajectories
    # (not the fuzz, the twins or the extra θ, which only the first run's gates read)
    keys = {c.env_id for c in candidates}
    replay = {**job, "episodes": [{**e, "fuzz": None} for e in job["episodes"] if e["key"] in keys]}
    second = (run_job(replay, limits, hash_seed=2).settled() if first.status == "ok"
              else SandboxResult(first.status))
    share = {"executes": first.seconds / max(1, len(candidates)), "determinism": second.seconds / max(1, len(candidates)),
             "replay_agreement": simulate_seconds / 2, "dynamics_agreement": simulate_seconds / 2,
             "reference_agreement": reference_seconds}
    extras = [first.episodes.get(f"extra-{k}") for k in range(EXTRA_THETAS)]
    verdicts = {}
    for candidate, ref, runs, seqs in zip(candidates, refs, expected, sequences):
        report = first.episodes.get(candidate.env_id)
        failure = "" if first.status == "ok" and report and all(extras) else (first.message or "no report from the sandbox")
        evidence = Evidence(family, candidate, ref, report, second.episodes.get(candidate.env_id),
                            [e for e in extras if e], failure, first.episodes.get(candidate.env_id + ":twin"),
                            runs[:-1], seqs, runs[-1])
        verdict = Verdict(candidate, ref)
        for name, gate in GATES:
            t0 = time.perf_counter()
            if failure and name != "executes":
                passed, message = False, NOT_RUN + "the module did not execute"
            elif name != "executes" and not verdict.gates[0].passed:
                passed, message = False, NOT_RUN + "executes failed, so the other reports are incomplete"
            else:
                passed, message = gate(evidence)
            verdict.gates.append(GateResult(name, passed, message, share.get(name, 0.0) + time.perf_counter() - t0))
        if report and "instruction" in report["describe"]:
            verdict.instruction, verdict.tools = report["describe"]["instruction"], report["describe"]["tools"]
        if verdict.admitted:
            verdict.idle = evidence.idle_played()["utility"]
        verdicts[candidate.env_id] = verdict
    return verdicts
