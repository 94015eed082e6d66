"""The batch runner: one module's candidates played in the sandbox, then judged by every gate.

Per batch: the reference World's runs (`reference.reference_runs`, one sandbox child), the
module's job (`_job`, hash seed 1) and its replay without fuzz, twins or extra θ (hash seed 2);
then every gate of GATES on each candidate's Evidence. Presentation F is checked in process.

A module that is the template setter's render (`renders.is_render`) is the family's own World
in its skin: its runs of the call sequences are the reference World's, so they are played once.
Its job runs first without the twins, its own runs stand for the reference World's
(`own_runs`; tests/test_render_runs.py holds them equal, registry-wide), and the twins, built
from them, are played by the second process with the replay (hash seed 2): two sandbox runs of
the module per batch, as for any other module.
"""

from __future__ import annotations

import time
from typing import Any

from vhd.mechanisms import Family
from vhd.mechanisms._runtime import call_limit
from vhd.schemas.records import SetterOutputRecord
from vhd.tasks.grading import written
from vhd.tasks.stages.check.candidates import NOT_RUN, Candidate, GateResult, References, Verdict, references, to_calls
from vhd.tasks.stages.check.evidence import (
    FINISHED_AT_ONCE, LOOKS, PROBES, Evidence, sequence_name, trajectory_names, twin_names,
)
from vhd.tasks.stages.check.gates import GATES, gate_default_band
from vhd.tasks.stages.check.reference import reference_runs
from vhd.tasks.setters.renders import is_render
from vhd.tasks.stages.check.sequences import IDLE, call_sequences, fuzz_calls, probed, tailed, twin_theta
from vhd.tasks.stages.sample import draw
from vhd.tasks.sandbox import Limits, SandboxResult, compiled, run_job
from vhd.tasks.stages.solve import unpack_policy

EXTRA_THETAS = 2


def _job(family: Family, setter_output: SetterOutputRecord, candidates: list[Candidate],
         refs: list[References], sequences: list[list[list[dict[str, Any]]]],
         expected: list[list[dict[str, Any]]] | None) -> dict[str, Any]:
    """The first process's job: each candidate's trajectories (in `evidence.trajectory_names`' order)
    and fuzz, its twin in presentation A, and EXTRA_THETAS other θ the module must also run on.

    The twin plays the looks on θ with every hidden number moved, and each call sequence on its
    own `twin_theta`: every number the sequence's accepted calls showed (those the reference World
    accepted, `expected`, as the family's `belief` reads them) kept, every other one moved.
    `expected` None: the job without the twins (`_twin_job` plays them once the runs are known)."""
    fuzz = fuzz_calls(setter_output, family)
    looks = to_calls(setter_output, [{"tool": t.name, "arguments": {}} for t in family.tools_with_role("observe")
                                     if not t.input_schema.get("required")])
    probes = to_calls(setter_output, [{"tool": t.name, "arguments": {key: t.input_schema["properties"][key].get("minimum", 0)
                                                                    for key in t.input_schema.get("required", [])}}
                                      for t in family.tools_with_role("probe")])
    episodes = []
    for c, r, random_sequences, runs in zip(candidates, refs, sequences, expected or [None] * len(candidates)):
        plays = {name: to_calls(setter_output, ep.calls) for name, ep in r.episodes()}  # what each trajectory plays
        optimal = plays["optimal"]
        half = len(optimal) // 2
        plays.update({sequence_name(k): tailed(family, setter_output, calls, c.turn_budget)
                      for k, calls in enumerate(random_sequences)})
        plays.update({FINISHED_AT_ONCE: IDLE, LOOKS: looks, PROBES: probes})
        episodes.append({"key": c.env_id, "config": c.config(),
                         "trajectories": [plays[name] for name in trajectory_names(r, len(random_sequences))],
                         "fuzz": {"prefix": optimal[:half], "calls": fuzz, "rest": optimal[half:],
                                  "limit": call_limit(c.turn_budget)}})  # runner._fuzz: a fresh episode before it
        if c.presentation == "A" and runs is not None:  # the episode with the hidden numbers not paid for moved
            episodes.append(_twin(family, c, plays, random_sequences, runs))
    for k in range(EXTRA_THETAS):  # C1: the module must be parametric in θ, not fitted to one draw
        _, theta = draw(family, 1_000_003 + k, {name: lo for name, (lo, _) in family.knob_ranges.items()})
        config = {"params": theta, "presentation": "A", "episode_seed": k, "turn_budget": family.turn_budget(theta)}
        episodes.append({"key": f"extra-{k}", "config": config, "finish": True, "trajectories": [[]]})
    return {"module": setter_output.module, "episodes": episodes}


def _twin(family: Family, c: Candidate, plays: dict[str, Any], random_sequences: list[list[dict[str, Any]]],
          runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The twin episode of candidate `c` (presentation A): `_job`'s rule, `plays` its trajectories by name."""
    theta = twin_theta(family, c.model.theta, [])
    twins = {LOOKS: plays[LOOKS]}
    for k, (calls, run) in enumerate(zip(random_sequences, runs)):
        own = twin_theta(family, c.model.theta, probed(calls, run))  # None: the probes' reading unknown
        twins[sequence_name(k)] = plays[sequence_name(k)] if own in (None, theta) else \
            dict(plays[sequence_name(k)], params=own)  # (a θ of its own only where it differs)
    return {"key": c.env_id + ":twin", "config": {**c.config(), "params": theta}, "numbers": False,
            "trajectories": [twins[name] for name in twin_names(len(random_sequences))]}


def _twin_job(family: Family, setter_output: SetterOutputRecord, candidates: list[Candidate], refs: list[References],
              sequences: list[list[list[dict[str, Any]]]], expected: list[list[dict[str, Any]]],
              job: dict[str, Any]) -> dict[str, Any]:
    """The twins of `_job(..., expected)` alone: each A candidate's twin episode, its trajectories
    those `job` (the job without twins) plays, by name."""
    played = {e["key"]: e for e in job["episodes"]}
    episodes = [_twin(family, c, dict(zip(trajectory_names(r, len(seqs)), played[c.env_id]["trajectories"])), seqs, runs)
                for c, r, seqs, runs in zip(candidates, refs, sequences, expected) if c.presentation == "A"]
    return {"module": setter_output.module, "episodes": episodes}


def own_runs(report: dict[str, Any] | None, refs: References, sequences: int) -> list[dict[str, Any]] | None:
    """A render's own runs of a candidate's call sequences and of its episode finished at once, from
    its first report: what `reference.reference_runs` gives for the candidate (the same code in the
    same skin plays the same calls). None without a report."""
    if not report:
        return None
    named = dict(zip(trajectory_names(refs, sequences), report["trajectories"]))
    return [named[sequence_name(k)] for k in range(sequences)] + [named[FINISHED_AT_ONCE]]


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
        passed, message = gate_default_band(Evidence(family, c, all_refs[c.env_id], first=None, second=None,
                                                     extras=[], failure=""))
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
    twins: list[dict[str, Any]] = []  # a render's twin episodes, played in the second process
    if is_render(family, setter_output):  # the family's own World: its runs are the reference World's
        code = compiled(setter_output.module)  # trusted text: compiled once here, not in each job's child
        job = {**_job(family, setter_output, candidates, refs, sequences, None), "code": code}
        first = run_job(job, limits, hash_seed=1).settled()  # SandboxError (retried) on a wall_timeout
        failed = {"exception": f"the module's sandbox run ended {first.status}: {first.message}"}
        expected = [own_runs(first.episodes.get(c.env_id) if first.status == "ok" else None, r, len(seqs))
                    or [failed] * (len(seqs) + 1) for c, r, seqs in zip(candidates, refs, sequences)]
        if first.status == "ok":
            twins = _twin_job(family, setter_output, candidates, refs, sequences, expected, job)["episodes"]
        reference_seconds = 0.0
    else:
        expected = reference_runs(family, candidates, sequences, limits, setter_output)
        reference_seconds = (time.perf_counter() - started) / max(1, len(candidates))
        job = _job(family, setter_output, candidates, refs, sequences, expected)
        first = run_job(job, limits, hash_seed=1).settled()  # SandboxError (retried) on a wall_timeout
    # the second process replays what `determinism` compares: the candidates' trajectories
    # (not the fuzz, the twins or the extra θ, which only the first run's gates read; and without
    # the answers or their number digests, which reference_agreement and information_hiding read
    # from the first run: determinism compares each trajectory's digest of every answer); a
    # render's twins, built from its first run, are played there too (one process, not two)
    keys = {c.env_id for c in candidates}
    replay = {**job, "episodes": [{**e, "fuzz": None, "numbers": False, "answers": False}
                                  for e in job["episodes"] if e["key"] in keys] + twins}
    second = (run_job(replay, limits, hash_seed=2).settled() if first.status == "ok"
              else SandboxResult(first.status))
    if twins:  # the twins are the first run's evidence (information_hiding reads them beside it)
        if second.status == "ok":
            first.episodes.update({t["key"]: second.episodes.pop(t["key"]) for t in twins if t["key"] in second.episodes})
        else:  # as when the twins had a process of their own: no complete report, nothing judged
            first = SandboxResult(second.status, message=second.message, seconds=first.seconds)
    # (a render's second run also plays its twins: their seconds are counted under determinism)
    share = {"executes": first.seconds / max(1, len(candidates)), "determinism": second.seconds / max(1, len(candidates)),
             "replay_agreement": simulate_seconds / 2, "dynamics_agreement": simulate_seconds / 2,
             "reference_agreement": reference_seconds}
    extras = [first.episodes.get(f"extra-{k}") for k in range(EXTRA_THETAS)]
    verdicts = {}
    for candidate, ref, (*sequence_runs, idle_run), seqs in zip(candidates, refs, expected, sequences):
        report = first.episodes.get(candidate.env_id)
        failure = "" if first.status == "ok" and report and all(extras) else (first.message or "no report from the sandbox")
        evidence = Evidence(family, candidate, ref, first=report, second=second.episodes.get(candidate.env_id),
                            extras=[e for e in extras if e], failure=failure,
                            twin=first.episodes.get(candidate.env_id + ":twin"), reference_runs=sequence_runs,
                            sequences=seqs, reference_idle=idle_run)
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
            verdict.idle = evidence.trajectory(FINISHED_AT_ONCE)["utility"]
        verdicts[candidate.env_id] = verdict
    return verdicts
