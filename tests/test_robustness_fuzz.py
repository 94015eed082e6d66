"""The robustness fuzz schedules its own episodes: under any turn budget every invalid call of
`fuzz_calls` meets an episode that is not over, and none is made as the call limit's own call.

The fuzz makes half of π*'s calls, then every invalid call, each judged against the state the
call before it left. An episode ends after `call_limit(turn_budget)` = 2 × budget + 50 calls,
refused ones included, and the call that reaches the limit ends it by the turns-ran-out rule
(`Env.finish()`: the World's `run_out` changes the state). Under a small budget a single episode
held fewer calls than the fuzz: the limit's own call was judged "state changed" (a false
rejection), and every call after it met an episode that was over, answered "the episode is over"
before any of the module's own code ran (an untested fuzz). `runner._fuzz` now goes on in a fresh
episode of the same config (π*'s first half again) before the limit, as often as it takes.

The smallest turn budget any family allows is 4 (negotiation and pandora at their smallest
knobs; `test_the_smallest_budget_any_family_allows`), a call limit of 58. The fuzz of qp, at its
smallest knobs (2 projects: π* makes 2 or 3 calls, the first one is the fuzz's prefix), has 60
invalid calls: 1 + 60 calls do not fit in 57. qp's own budget there is 7 (3n + 1; limit 64, the
fuzz fits), so the candidates below are qp's θ at its smallest knobs under the smallest budget of
any family: a config the module must be right under, as every config.
"""

import dataclasses
import itertools

import pytest

from vhd.mechanisms import registry
from vhd.mechanisms._runtime import call_limit
from vhd.tasks.stages.annotate import make_candidates
from vhd.tasks.stages.check import _job, call_sequences, check_batch, fuzz_calls, reference_runs, references
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.stages.sample import cell_batch, draw, sample_models
from vhd.tasks.sandbox import run_job
from vhd.tasks.stages.solve import solve_models
from vhd.tasks.stages.synthesize import synthesize

QP = registry.get("qp")
# qp's module with the clock tool's arguments not validated: commit_allocation("not an object")
# reaches the World as **"not an object", a TypeError. The fuzz makes the clock's invalid calls
# last (its 59th and 60th), which one episode of budget 4 never reached.
UNVALIDATED_CLOCK = ('problem = schema_problem(spec["input_schema"], arguments)',
                     'problem = None if spec.get("role") == "clock" else '
                     'schema_problem(spec["input_schema"], arguments)')
NO_STATE_DIGEST = ("def state_digest(self):", "def _state_digest(self):")  # the fuzz checks structure only


def smallest_knobs(family):
    return {name: lo for name, (lo, _) in family.knob_ranges.items()}


def smallest_budget():
    """The smallest turn budget of any family: its turn_budget on θ drawn at every corner of its
    knob ranges (three seeds each; the budgets grow with the knobs)."""
    budgets = []
    for family in map(registry.get, registry.names()):
        ranges = sorted(family.knob_ranges.items())
        for corner in itertools.product(*[(lo, hi) for _, (lo, hi) in ranges]):
            for seed in range(3):
                _, theta = draw(family, seed, {name: v for (name, _), v in zip(ranges, corner)})
                budgets.append((family.turn_budget(theta), family.name))
    return min(budgets)


def _batch(family, budget=None, n=2):
    models = sample_models(family, n, seed=1, batch=cell_batch("fuzz", smallest_knobs(family)))
    solutions = {s.model_id: s for s in solve_models(family, models)}
    outputs, assignment = synthesize(family, models, builtin_passages()[:1])
    candidates = make_candidates(family, models, solutions, {o.setter_output_id: o for o in outputs}, assignment,
                                 ("I",))
    if budget is not None:
        candidates = [dataclasses.replace(c, turn_budget=budget) for c in candidates]
    return outputs[0], candidates


@pytest.fixture(scope="module")
def small():
    budget, _ = smallest_budget()
    return (budget, *_batch(QP, budget))


def _mutated(output, *changes):
    for old, new in changes:
        assert old in output.module, old
        output = output.model_copy(update={"module": output.module.replace(old, new, 1)})
    return output


def _fuzz_reports(family, output, candidates, limit=True):
    """Each candidate's fuzz report from a real sandbox run of the job check_batch plays (without
    the call limit in the job when `limit` is false: the fuzz then restarts only when an episode
    is over)."""
    refs = [references(family, c) for c in candidates]
    sequences = [call_sequences(family, c, r) for c, r in zip(candidates, refs)]
    job = _job(family, output, candidates, refs, sequences, reference_runs(family, candidates, sequences))
    if not limit:
        job = {**job, "episodes": [{**e, "fuzz": {k: v for k, v in e["fuzz"].items() if k != "limit"}} if e.get("fuzz")
                                   else e for e in job["episodes"]]}
    result = run_job(job).settled()
    assert result.status == "ok", result.message
    return [result.episodes[c.env_id]["fuzz"] for c in candidates]


def _gate(verdict, name="robustness"):
    return next(g for g in verdict.gates if g.name == name)


@pytest.mark.registry
def test_the_smallest_budget_any_family_allows():
    """4 today (negotiation's and pandora's), the numbers of this file's docstrings; a family with a
    smaller one only makes the fuzz below take more episodes."""
    budget, _ = smallest_budget()
    assert budget <= 4 < QP.turn_budget(draw(QP, 0, smallest_knobs(QP))[1]) == 7


@pytest.mark.registry
def test_the_whole_fuzz_is_played_over_several_episodes_under_the_smallest_budget(small):
    """qp under budget 4: 1 + 56 calls in the first episode (the 58th would be the limit's), then a
    fresh one with π*'s first call again and the last 4 invalid calls, the rest of π*'s calls and
    the 3 after the end. Every one of the 60 met an episode not yet over."""
    budget, output, candidates = small
    fuzz = fuzz_calls(output, QP)
    optimal = references(QP, candidates[0]).optimal.calls
    assert len(optimal) // 2 + len(fuzz) >= call_limit(budget)  # more than one episode holds
    for report in _fuzz_reports(QP, output, candidates):
        assert report["failed"] == 0, report["failures"]
        assert report["episodes"] > 1
        assert report["played"] == len(fuzz) == 60
        assert report["calls"] == len(fuzz) + 3


@pytest.mark.registry
def test_a_correct_module_is_admitted_under_the_smallest_budget(small):
    """Before (checker 10, the fuzz in one episode): both candidates rejected by robustness alone,
    "1 of 63 invalid calls mishandled, e.g. mid-episode reset_allocation("not an object"): state
    changed" — the 58th call, the call limit's, ran the episode out. Now admitted."""
    budget, output, candidates = small
    verdicts = check_batch(QP, output, candidates)
    assert all(v.admitted for v in verdicts), [v.reason for v in verdicts]
    assert all("in 2 episodes" in _gate(v).message for v in verdicts)


@pytest.mark.registry
def test_without_the_limit_the_call_that_reaches_it_is_judged_a_state_change(small):
    """What the limit in the fuzz's job is for: a fuzz that goes on only once an episode is over
    makes the limit's own call, whose state change (the episode run out) is no fault of the call."""
    budget, output, candidates = small
    for report in _fuzz_reports(QP, output, candidates, limit=False):
        assert report["failed"] == 1 and "state changed" in report["failures"][0]
        assert report["played"] == 60 and report["episodes"] == 2


@pytest.mark.parametrize("changes", [(UNVALIDATED_CLOCK,), (UNVALIDATED_CLOCK, NO_STATE_DIGEST)],
                         ids=["with-state-digest", "structure-only"])
@pytest.mark.registry
def test_a_module_that_raises_on_the_fuzz_s_last_calls_is_rejected_by_robustness(small, changes):
    """The clock's invalid calls are the fuzz's 59th and 60th; under budget 4 only the second
    episode reaches them. Before (checker 10), the same two candidates: with state_digest,
    rejected by robustness for the wrong reason (the limit's call, "reset_allocation("not an
    object"): state changed"); without it (structure only), ADMITTED: "63 invalid calls gave
    structured errors; no state_digest() to compare (structure only)", every gate passed, the
    clock's calls answered "the episode is over". Now rejected by robustness alone, on the
    TypeError. (Under qp's own budget, 7, the fuzz fits one episode and both versions rejected
    it already.)"""
    budget, output, candidates = small
    verdicts = check_batch(QP, _mutated(output, *changes), candidates)
    for verdict in verdicts:
        assert not verdict.admitted
        assert {g.name for g in verdict.gates if not g.passed} == {"robustness"}
        message = _gate(verdict).message
        assert "raised" in message and "TypeError" in message and "must be a mapping" in message


@pytest.mark.registry
def test_the_same_candidates_give_the_same_fuzz_and_verdicts(small):
    budget, output, candidates = small
    wrong = _mutated(output, UNVALIDATED_CLOCK, NO_STATE_DIGEST)
    assert _fuzz_reports(QP, output, candidates) == _fuzz_reports(QP, output, candidates)
    first, second = check_batch(QP, wrong, candidates), check_batch(QP, wrong, candidates)
    assert [[(g.name, g.passed, g.message) for g in v.gates] for v in first] == \
        [[(g.name, g.passed, g.message) for g in v.gates] for v in second]


def test_a_fuzz_that_fits_one_episode_takes_one():
    """negotiation at its own smallest budget, 4 (limit 58): π*'s first call and 43 invalid calls
    fit, so the fuzz is what it was, one episode."""
    family = registry.get("negotiation")
    output, candidates = _batch(family)
    assert {c.turn_budget for c in candidates} == {4}
    for report in _fuzz_reports(family, output, candidates):
        assert (report["episodes"], report["played"], report["failed"]) == (1, len(fuzz_calls(output, family)), 0)
