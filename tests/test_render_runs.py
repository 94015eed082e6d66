"""A module the template setter renders plays each call sequence as the family's reference World does.

The check stage plays every candidate's call sequences on the family's own World (the oracle of
`reference_agreement`, `idle_floor` and the twins of `information_hiding`) and on the module. For
a module that is the template setter's render of its family and passage (`renders.is_render`:
its content id is the render's), the two are one code in one skin: its own runs of the sequences
stand for the reference World's, and the check stage plays them once (`batch._play_and_judge`).
This file holds that substitution to the reference World's sandbox runs, registry-wide and
report for report, in presentations I and A and in a world that restyles ids; and shows that a
module which is not the render still meets the reference World. A render is also compiled once in
the parent (`sandbox.compiled`): its code plays report for report as its source does.
"""

from __future__ import annotations

import pytest
from family_kit import PASSAGES

from vhd.mechanisms import registry
from vhd.tasks.setters.lexicon import id_skin
from vhd.tasks.setters.renders import is_render
from vhd.tasks.setters.template import render_module
from vhd.tasks.stages.annotate import make_candidates
from vhd.tasks.stages.check import batch as check_batch_module
from vhd.tasks.stages.check.candidates import references
from vhd.tasks.stages.check.evidence import FINISHED_AT_ONCE, sequence_name, trajectory_names
from vhd.tasks.stages.check.planning import in_band
from vhd.tasks.stages.check.reference import reference_runs
from vhd.tasks.stages.check.sequences import call_sequences
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.stages.solve import solve_models
from vhd.tasks.sandbox import Limits, compiled, run_job


def _passage(family):
    """A passage whose world writes the family's ids as codes where it has ids, else the first."""
    kinds = sorted(set(getattr(family.world, "IDS", {}).values()))
    return next((p for p in PASSAGES if kinds and all(id_skin(family, p)[0][k].startswith("code:") for k in kinds)),
                PASSAGES[0])


def _candidates(family, count=4):
    models = sample_models(family, count, 0, "render-runs")
    solutions = {s.model_id: s for s in solve_models(family, models)}
    output = render_module(family, _passage(family))
    assignment = {m.model_id: output.setter_output_id for m in models}
    return output, make_candidates(family, models, solutions, {output.setter_output_id: output}, assignment, ("I", "A"))


@pytest.mark.parametrize("name", registry.names())
def test_a_renders_own_runs_of_the_call_sequences_are_the_reference_worlds(name):
    family = registry.get(name)
    output, candidates = _candidates(family)
    assert is_render(family, output)
    candidates = [c for c in candidates if c.presentation != "F"]
    refs = [references(family, c) for c in candidates]
    sequences = [call_sequences(family, c, r) for c, r in zip(candidates, refs)]
    expected = reference_runs(family, candidates, sequences, Limits(), output)
    job = check_batch_module._job(family, output, candidates, refs, sequences, None)
    own = run_job(job, Limits(), hash_seed=1).settled()
    assert own.status == "ok", own.message
    for c, r, seqs, runs in zip(candidates, refs, sequences, expected):
        named = dict(zip(trajectory_names(r, len(seqs)), own.episodes[c.env_id]["trajectories"]))
        mine = [named[sequence_name(k)] for k in range(len(seqs))] + [named[FINISHED_AT_ONCE]]
        assert check_batch_module.own_runs(own.episodes[c.env_id], r, len(seqs)) == mine
        assert mine == runs, f"{name} {c.presentation}: the render's own runs differ from the reference World's"


def test_only_the_render_itself_is_a_render():
    """A changed byte, another passage's module relabelled, or another setter's module is not the
    render: such a module is compared with the reference World's own runs (tests/test_gates.py's
    mutants, e.g. a dropped domain check caught by reference_agreement)."""
    family = registry.get("knapsack")
    output = render_module(family, PASSAGES[0])
    other = render_module(family, PASSAGES[1])
    assert is_render(family, output) and is_render(family, other)
    assert not is_render(family, output.model_copy(update={"module": output.module + "\n# changed\n"}))
    assert not is_render(family, other.model_copy(update={"passage_id": output.passage_id}))
    assert not is_render(family, output.model_copy(update={"setter": "anthropic"}))
    assert not is_render(registry.get("lp"), output)


@pytest.mark.parametrize("name", registry.names())
def test_a_render_compiled_in_the_parent_plays_as_its_source_does(name):
    """The check stage compiles a render once and sends the code with each job (`job["code"]`);
    every report of every trajectory, fuzz and describe included, is the one the child's own
    compile of the source gives."""
    family = registry.get(name)
    output, candidates = _candidates(family, count=2)
    candidates = [c for c in candidates if c.presentation == "A"]
    refs = [references(family, c) for c in candidates]
    sequences = [call_sequences(family, c, r) for c, r in zip(candidates, refs)]
    job = check_batch_module._job(family, output, candidates, refs, sequences, None)
    code = compiled(output.module)
    assert code is not None
    from_source = run_job(job, Limits(), hash_seed=1).settled()
    from_code = run_job({**job, "code": code}, Limits(), hash_seed=1).settled()
    assert from_source.status == from_code.status == "ok", (from_source.message, from_code.message)
    assert from_code.episodes == from_source.episodes


def test_a_compiled_module_takes_no_future_flag_from_the_parent():
    """`compiled` runs in a module that imports `annotations` from __future__; the runner compiles
    without it, so an annotation naming nothing fails when the module is executed. The code the
    parent sends must fail the same way, not defer the annotation; and a module that does not
    compile gets no code (the child compiles it and reports the error)."""
    source = "def create(config: no_such_name):\n    return config\n"
    job = {"module": source, "episodes": [{"key": "k", "config": {}, "trajectories": []}]}
    from_source = run_job(job, Limits())
    from_code = run_job({**job, "code": compiled(source)}, Limits())
    assert from_source.status == from_code.status == "import_error"
    assert "no_such_name" in from_code.message
    assert compiled("def create(:\n") is None


@pytest.mark.parametrize("name", registry.names())
def test_a_render_is_judged_as_any_module_is(name, monkeypatch):
    """The render's shortcuts (its own runs for the reference World's, its code compiled in the
    parent, its twins played beside the determinism replay at hash seed 2) give every gate's
    verdict and message that the path of any other setter's module gives: the reference World in
    a child of its own, the twins in the first run at hash seed 1."""
    family = registry.get(name)
    output, candidates = _candidates(family, count=4)
    banded = [c for c in candidates if c.presentation == "A" and in_band(family, c)]
    candidates = [c for c in candidates if c.presentation == "I"][:1] + banded[:1]  # the twins are played
    assert len(candidates) == 2, f"{name}: no candidate of presentation A in the band among 4 θ"
    fast = check_batch_module.check_batch(family, output, candidates)
    monkeypatch.setattr(check_batch_module, "is_render", lambda family, output: False)
    slow = check_batch_module.check_batch(family, output, candidates)

    def judged(verdicts):
        return [(v.candidate.env_id, v.instruction, [(g.name, g.passed, g.message) for g in v.gates]) for v in verdicts]

    assert judged(fast) == judged(slow)
