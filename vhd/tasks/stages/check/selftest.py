"""Checker self-test: mutate admitted modules, run every gate on each mutant, count survivors.

The mutants are `vhd/tasks/stages/check/mutants.py`'s (its docstring lists the operators); every mutant is
checked in the sandbox (a second each: not a doctest), e.g. one inventory_dp module:

    report = selftest(selftest_groups(wh, ["inventory_dp"], modules=1, envs=1), {"inventory_dp": family})
    report["rejected"], report["mutants"], report["rejection_rate"]   # (9, 9, 1.0): no A candidate here

A mutant is *rejected* when no candidate it serves is admitted (`leak_hidden`, `free_probe`: no
A candidate, as I gives θ anyway; a mutant that changes some candidates' instructions: none of
those); a *survivor* is reported with its operator, the method it changed and a unified diff.
Every unmutated module is re-checked too: a rejection there is a *false rejection*. Sites whose
mutant would provably be the module itself are skipped and reported as `equivalent_skipped`
(`mutants.py` says which).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from vhd.mechanisms import Family
from vhd.schemas.records import ModelRecord, SetterOutputRecord, SolutionRecord
from vhd.tasks.stages.check import Candidate, candidate_from, check_batch
from vhd.tasks.stages.check.mutants import A_ONLY, diff, mutants


def selftest(groups: dict[str, list[tuple[SetterOutputRecord, list[Candidate]]]], families: dict[str, Family],
             seed: int = 0, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`groups`: family → [(admitted module, the admitted candidates it serves)]."""
    per: dict[str, dict[str, Any]] = {}
    rng = np.random.default_rng(seed)
    for name, modules in groups.items():
        family = families[name]
        row = {"modules": len(modules), "mutants": 0, "rejected": 0, "survivors": [], "false_rejections": 0,
               "by_operator": {}, "equivalent_skipped": 0, "equivalent": []}
        for output, candidates in modules:
            if not candidates:
                continue
            original = check_batch(family, output, candidates)
            instructions = {v.candidate.env_id: v.instruction for v in original}
            row["false_rejections"] += sum(not v.admitted for v in original)
            constant = original[0].references.optimal.utility if original[0].references else 0.0
            equivalent: list[str] = []
            made = mutants(family, output, candidates[0].model.theta, constant, rng,
                           [c.model.theta for c in candidates], equivalent)
            row["equivalent_skipped"] += len(equivalent)
            row["equivalent"] += [{"setter_output_id": output.setter_output_id, "site": e} for e in equivalent]
            in_a = any(c.presentation == "A" for c in candidates)
            for mutant in [m for m in made if m.operator not in A_ONLY or in_a]:
                judged = [c for c in candidates if c.presentation == "A"] if mutant.operator in A_ONLY else candidates
                verdicts = check_batch(family, output.model_copy(update={"module": mutant.module}), judged)
                told = [v for v in verdicts if v.instruction != instructions[v.candidate.env_id]]
                rejected = not any(v.admitted for v in told or verdicts)
                for tally in (row["by_operator"].setdefault(mutant.operator, {"mutants": 0, "rejected": 0}), row):
                    tally["mutants"] += 1
                    tally["rejected"] += rejected
                if not rejected:
                    row["survivors"].append({"operator": mutant.operator, "where": mutant.where,
                                             "setter_output_id": output.setter_output_id,
                                             "diff": diff(output.module, mutant.module)})
        per[name] = row
        if progress:
            progress(name)
    total = {key: sum(row[key] for row in per.values()) for key in ("modules", "mutants", "rejected",
                                                                     "false_rejections", "equivalent_skipped")}
    total["survivors"] = sum(len(row["survivors"]) for row in per.values())
    for row in (total, *per.values()):
        row["rejection_rate"] = row["rejected"] / row["mutants"] if row["mutants"] else None
    return {**total, "families": per}


def selftest_groups(wh: Any, families: list[str], modules: int, envs: int) -> dict[str, list[tuple]]:
    """`selftest`'s `groups` from an open warehouse `wh`: per family (`families`, or all with admitted environments)
    up to `modules` admitted modules by id, each with up to `envs` admitted I/A environments it serves (A first)."""
    by_module: dict[tuple[str, str], list[Any]] = {}
    for env in wh.environments(admitted=True):
        if env.presentation != "F" and (not families or env.family in families):
            by_module.setdefault((env.family, env.setter_output_id), []).append(env)
    groups: dict[str, list[tuple]] = {}
    for (name, output_id), stored in sorted(by_module.items()):
        if len(groups.setdefault(name, [])) < modules:
            output = wh.get(SetterOutputRecord, output_id)
            chosen = sorted(stored, key=lambda e: (e.presentation != "A", e.env_id))[:envs]
            groups[name].append((output, [candidate_from(e, wh.get(ModelRecord, e.model_id),
                                                         wh.get(SolutionRecord, e.solution_id), output)
                                          for e in chosen]))
    return groups
