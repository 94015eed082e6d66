"""The gates on what the player reads: the instruction states θ as the family's own World does
(`instruction_agreement`), and in presentation A nothing read without paying a probe depends on
hidden θ (`information_hiding`)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from vhd.tasks.stages.check.evidence import LOOKS, PROBES, Evidence, sequence_name
from vhd.tasks.grading.oracle import reference_in_skin
from vhd.tasks.sandbox.runner import MAX_TEXT


# a number standing alone in a text (not part of a label such as "SD-800-L03"), signed or not
STATED_NUMBER = re.compile(r"(?<![\w.-])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?!\w)")


def _stated(instruction: str) -> list[str]:
    """The numbers an instruction states after its opening paragraph (the passage's narrative)."""
    return STATED_NUMBER.findall(instruction.split("\n\n", 1)[-1])


def gate_instruction_agreement(ev: Evidence) -> tuple[bool, str]:
    """The instruction states the numbers the family's own World states for the same config:
    θ in presentation I; in A what it tells (sizes, ranges, stickers, the budget). Compared as
    the multiset of stand-alone numbers after the opening paragraph, so the wording and the
    order are the setter's, but a misstated value, a dropped line or an added number is not
    (no other gate reads the instruction against θ). An instruction cut at the sandbox's report
    size is compared on the numbers before the cut, in order. Fails naming up to five numbers
    stated and not told, and five told and not stated."""
    module = reference_in_skin(ev.family, ev.candidate.setter_output)
    told = _stated(module.create(ev.candidate.config()).instruction)
    text = ev.first["describe"]["instruction"]
    stated = _stated(text)
    if len(text) > MAX_TEXT:  # cut by the runner (`_short`): the numbers before the cut, in order
        stated = stated[:-1]
        if stated != told[:len(stated)]:
            return False, f"the instruction's first {len(stated)} numbers differ from the reference World's"
        return True, f"the first {len(stated)} numbers of the instruction (cut by the sandbox report) agree"
    extra, missing = Counter(stated) - Counter(told), Counter(told) - Counter(stated)
    if extra or missing:
        return False, (f"the instruction states numbers the family's World does not for this θ "
                       f"({', '.join(sorted(extra)[:5]) or 'none'}) and leaves out ones it does "
                       f"({', '.join(sorted(missing)[:5]) or 'none'})")
    return True, f"the instruction states the {len(told)} numbers the family's World states for this config"


def gate_information_hiding(ev: Evidence) -> tuple[bool, str]:
    """Presentation A hides θ's `hidden` fields: only probes, which cost turns, reveal them, and
    each reveals only what the family's `belief` says it shows.

    The twin is the same episode (seed, budget, module) on another θ: the looks on θ with every
    hidden number moved (`perturbed`), and each call sequence on its own `twin_theta`, which keeps
    the numbers that the sequence's accepted calls show (a probe's reading, a decision's declared
    consequence: the family's `belief`) and moves every other hidden one. Nothing the player reads
    may tell the two apart unless it was paid for:

    - every probe must cost at least one turn (calling each once uses the sum of their costs);
    - the instruction, the tool list (the schemas' bounds fitted to the instance), and the first
      answer of every argument-free observation tool, are the same;
    - the twin plays every call sequence the candidate played (`tailed`), and at every position
      where both worlds refuse, or both accept, the answers are the same (`_twin_difference`): a
      refusal names the rule that was broken, never a hidden number (a cap, a travel time) nor
      which of several hidden rules binds; an accepted answer of any role (a decision's, an
      observation's after decisions, a probe's) shows nothing of an entry no probe of the
      sequence has read — a decision may report its consequences only through what was read
      (facility's total cost, a machine's load, a job's completion time are side channels when
      they sum unread costs). The comparison stops where one world accepts and the other refuses
      (a refusal uses its turn, so the difference is paid for), and at the call that ends the
      episode (its answer is the outcome). In a stochastic family only refusals are compared (its
      hidden θ are distributions, which the draws every answer reports depend on); once an
      accepted clock answer differs, two refusals may name different rules, but one rule must read
      the same, numbers and all.

    Fails on a free probe or on the first difference above; passes (saying so) when the twin could
    not be built for this module.
    """
    if ev.candidate.presentation != "A":
        return True, "presentation I reveals θ by design"
    probes = ev.trajectory(PROBES)
    expected = sum(b.turn_cost for b in ev.candidate.setter_output.interface if b.role == "probe")
    if probes.get("errors") or probes.get("turns_used") != expected or any(
            b.turn_cost < 1 for b in ev.candidate.setter_output.interface if b.role == "probe"):
        return False, f"probes must each cost ≥ 1 turn: calling each once used {probes.get('turns_used')}, expected {expected}"
    twin = ev.twin
    if twin is None or "exception" in twin["describe"] or ev.twin_trajectory(LOOKS).get("exception"):
        return True, "probes cost turns; hidden θ could not be perturbed for this module (leak check not run)"
    if twin["describe"]["instruction"] != ev.first["describe"]["instruction"]:
        return False, "the A instruction changes when only hidden parameters change: it leaks them"
    if twin["describe"].get("tools") != ev.first["describe"].get("tools"):
        return False, "the A tool list (its argument bounds) changes when only hidden parameters change: it leaks them"
    if ev.twin_trajectory(LOOKS)["obs_digest"] != ev.trajectory(LOOKS)["obs_digest"]:
        return False, "an observation tool's first answer changes when only hidden parameters change: it leaks them"
    roles = {t.name: t.role for t in ev.family.tools}
    compared = 0
    twin_sequences = [ev.twin_trajectory(sequence_name(k)) for k in range(len(ev.sequences))]
    for k, (calls, mine, theirs) in enumerate(zip(ev.sequences, ev.sequences_played(), twin_sequences)):
        leak = _twin_difference(mine.get("answers") or [], theirs.get("answers") or [], calls, roles,
                                ev.family.stochastic, blind=ev.family.belief is None)
        if leak:
            return False, f"call sequence {k}: {leak}, when only hidden parameters no probe read change: it leaks them"
        compared += not mine.get("exception") and not theirs.get("exception")
    compared_what = "refusals" if ev.family.stochastic else "answers and refusals"
    return True, (f"instruction, {compared_what} invariant to the hidden θ not read ({compared} call "
                  f"sequences replayed on their twins); probes cost turns")


NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _twin_difference(mine: list[list[Any]], theirs: list[list[Any]], calls: list[dict[str, Any]],
                     roles: dict[str, str], stochastic: bool, blind: bool = False) -> str:
    """Where two worlds that differ only in hidden θ no probe of the sequence read answered one
    call sequence differently ('' if nowhere): a refusal's text, or an accepted answer.

    Compared while both worlds accept or both refuse, up to the call that ends the episode (the
    last accepted one: every call after the end is refused; its own answer, the outcome, is not
    compared). In a stochastic family accepted answers are not compared: its hidden θ are
    distributions whose draws every answer may report, and a moved distribution (its weights no
    longer summing to their total) is no θ the family samples; once an accepted clock answer
    differs (the period's draws), two refusals may name different rules, but the same rule must
    still read the same, numbers and all. `blind` (the family declares no `belief`, so the twin
    moved what the probes read too): accepted answers are compared up to the first accepted
    probe only."""
    drawn = blinded = False
    end = min(max([at for at, (ok, _) in enumerate(answers) if ok], default=-1) for answers in (mine, theirs))
    for at, ((ok, text), (twin_ok, twin_text)) in enumerate(zip(mine[:end + 1], theirs)):
        call = calls[at] if at < len(calls) else {"tool": "the clock", "arguments": {}}
        role = roles.get(call["tool"], "clock")
        if ok != twin_ok:
            return ""
        what = f"call {at} ({call['tool']}{call['arguments']})"
        if not ok:
            if text != twin_text and not (drawn and NUMBER.sub("#", text) != NUMBER.sub("#", twin_text)):
                return f"the refusal of {what} reads {text[:150]!r} in one world and {twin_text[:150]!r} in the other"
            continue
        if stochastic:  # the draws depend on hidden θ: from the first that differs, refusals may differ in numbers
            drawn = drawn or (role == "clock" and text != twin_text)
            continue
        blinded = blinded or (blind and role == "probe")  # the twin moved what this probe reads
        if at == end or blinded:
            continue
        if text != twin_text:
            return f"the answer of {what} differs"
    return ""
