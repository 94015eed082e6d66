"""The admission gates of DESIGN §7: each reads one candidate's evidence and says passed or not, and why."""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from vhd.mechanisms import Family
from vhd.tasks.check.candidates import Candidate, References
from vhd.tasks.check.planning import default_band

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ROLES_REQUIRED = ("probe", "decision", "clock")


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
