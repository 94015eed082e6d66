"""What the gates read about one candidate: the sandbox's reports, each trajectory by its name.

    >>> twin_names(2)
    ['looks', 'sequence_0', 'sequence_1']

A candidate's module plays, in this order (`trajectory_names`, the one place it is written):
the simulator's reference episodes (optimal, default, idle, random_0, ...), every call sequence
(sequence_0, ...), the episode finished at once (FINISHED_AT_ONCE), one read of every
argument-free observation tool (LOOKS) and one call of every probe (PROBES). Its twin
(presentation A) plays the looks with hidden θ moved and each call sequence on its own twin θ
(`sequences.twin_theta`), in `twin_names`' order.
`batch._job` writes the job in these orders; the gates read the reports through `Evidence`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vhd.mechanisms import Family
from vhd.tasks.stages.check.candidates import Candidate, References

FINISHED_AT_ONCE = "finished_at_once"  # doing nothing: `Env.finish()` before any call (`sequences.IDLE`)
LOOKS = "looks"  # one call of every observation tool that needs no argument
PROBES = "probes"  # one call of every probe, its required arguments at their schema minimum


def sequence_name(k: int) -> str:
    """The name of the k-th call sequence (`sequences.call_sequences`)."""
    return f"sequence_{k}"


def trajectory_names(refs: References, sequences: int) -> list[str]:
    """The names of a candidate's trajectories, in the order its job plays them."""
    return ([name for name, _ in refs.episodes()] + [sequence_name(k) for k in range(sequences)]
            + [FINISHED_AT_ONCE, LOOKS, PROBES])


def twin_names(sequences: int) -> list[str]:
    """The names of the twin's trajectories, in the order its job plays them."""
    return [LOOKS] + [sequence_name(k) for k in range(sequences)]


Report = dict[str, Any]  # one episode's sandbox report: "describe", "trajectories" (a list), maybe "fuzz"


@dataclass(frozen=True)
class Evidence:
    """One candidate's evidence: its references, the module's reports and the reference World's runs."""

    family: Family
    candidate: Candidate
    refs: References
    first: Report | None  # the module's report from the first process (hash seed 1), with the fuzz report
    second: Report | None  # the same trajectories replayed in a second process (hash seed 2)
    extras: list[Report]  # the module on EXTRA_THETAS other θ, each its episode finished at once
    failure: str  # why the first run gave no usable report ("" if it did)
    twin: Report | None = None  # presentation A: the episode with every hidden number moved
    reference_runs: list[Report] = field(default_factory=list)  # the reference World on each call sequence
    sequences: list[list[dict[str, Any]]] = field(default_factory=list)  # the canonical calls of each sequence
    reference_idle: Report | None = None  # the reference World's episode finished at once

    def named(self, report: Report) -> dict[str, Report]:
        """A report of the candidate's episode (the first process's or the second's), trajectory by name."""
        return dict(zip(trajectory_names(self.refs, len(self.sequences)), report["trajectories"]))

    def trajectory(self, name: str) -> Report:
        """The module's trajectory `name` in the first process: "optimal", "random_0", PROBES, ..."""
        return self.named(self.first)[name]

    def sequences_played(self) -> list[Report]:
        """The module's trajectory of every call sequence, in the order of `sequences` and `reference_runs`."""
        return [self.trajectory(sequence_name(k)) for k in range(len(self.sequences))]

    def twin_trajectory(self, name: str) -> Report:
        """The twin's trajectory `name`: LOOKS or a call sequence's."""
        return dict(zip(twin_names(len(self.sequences)), self.twin["trajectories"]))[name]
