"""Stage 4, check: the admission gates of DESIGN §7, run against a sandboxed module.

    >>> [name for name, _ in GATES][:3]  # verdicts = check_batch(family, setter_output, candidates)
    ['executes', 'interface', 'default_band']

The parent plays the family's reference simulator for π*, the default, the idle policy and
K random policies on each candidate's episode seed; the module plays the same decisions as
tool calls in two fresh sandboxed processes with different hash seeds; every verdict is
computed here, from the numbers the sandbox reported.

The package, by what each file holds (each imports only those above it):

    candidates.py  a candidate, the simulator's episodes on its seed (References), its Verdict
    sequences.py   the call sequences, invalid calls and twin θ the module is made to play
    reference.py   the family's own World, the oracle of reference_agreement, and its runs
    planning.py    default_band, and which candidates a slot must check (in_band, needed_checks)
    evidence.py    what the gates read: the sandbox's reports, each trajectory by its name
    gates.py       every gate (one docstring each: what it proves, when it fails), GATES in order
    batch.py       check_batch: one module's candidates played in the sandbox and judged
"""

from vhd.tasks.stages.check.batch import EXTRA_THETAS, _job, check_batch, check_written
from vhd.tasks.stages.check.candidates import (
    ANNOTATOR_VERSION, CHECKER_VERSION, CODE_VERSION, NOT_RUN, RANDOM_TRAJECTORIES, Candidate, GateResult, References,
    Verdict, candidate_from, make_candidates, references, to_calls,
)
from vhd.tasks.stages.check.evidence import Evidence
from vhd.tasks.stages.check.gates import GATES
from vhd.tasks.stages.check.reading import _twin_difference
from vhd.tasks.stages.check.planning import default_band, in_band, needed_checks
from vhd.tasks.stages.check.reference import reference_module, reference_runs
from vhd.tasks.stages.check.sequences import (
    CALL_PROFILES, IDLE, call_sequences, edge_sequences, edge_values, fuzz_calls, look_sequences, looks, perturbed, probed,
    random_calls, tailed, twin_theta,
)

__all__ = [
    "ANNOTATOR_VERSION", "CALL_PROFILES", "CHECKER_VERSION", "CODE_VERSION", "EXTRA_THETAS", "GATES", "IDLE", "NOT_RUN",
    "RANDOM_TRAJECTORIES", "Candidate", "Evidence", "GateResult", "References", "Verdict", "_job", "_twin_difference",
    "call_sequences", "candidate_from", "check_batch", "check_written", "default_band", "edge_sequences", "edge_values",
    "fuzz_calls", "in_band", "look_sequences", "looks", "make_candidates", "needed_checks", "perturbed", "probed",
    "random_calls", "reference_module", "reference_runs", "references", "tailed", "to_calls", "twin_theta",
]
