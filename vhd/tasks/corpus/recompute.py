"""What decides a verdict, recomputed by trusted code instead of read from the warehouse (issue 31):
the audit (`audit.Auditor`, hence the publish gate and `vhd verify`) and every reader of a published
version (`publish.open_version`: export, eval, score) call these, so no row is accepted because a
stored manifest lists its digest or because its check rows say it passed.

    >>> module_problem(family, setter_output) is None        # the module the template setter renders
    True
    >>> changed = setter_output.model_copy(update={"module": setter_output.module.replace("def ", "def  ", 1)})
    >>> module_problem(family, changed)[0]
    'module'
    >>> [f for _, _, f, _ in replayed(family, env, model, solution, setter_output, None, model.theta)]
    []
    >>> [f for _, _, f, _ in replayed(family, env.model_copy(update={"u_star": env.u_star + 29}), model, solution,
    ...                                setter_output, None, model.theta)]
    ['u_star']

What is recomputed, per environment: θ re-drawn from its seed; u*, u₀, u_idle, both trajectories,
the turn budget and the split replayed from the stored π* on the episode seed (F: also the
instruction and the tool); the module compared with what the template setter renders for its
family and passage (a template module that is not the trusted render is a finding: it must be
checked again, `vhd check ENV --code`), and a module no trusted code renders (another setter's)
put through every gate again (`regated_problem`, the sandbox); and the verdict's θ-dependent
gates: `default_band` and, for I and A, `instruction_agreement` against the family's own World in
the module's skin (`vhd verify` and `vhd audit` also the binding turn budget of A). The other
gates run the module in the sandbox; for a module equal to the trusted render their verdict is
the one the render earned when it was checked (docs/RELIABILITY.md, "What is trusted").
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from vhd.mechanisms import Family
from vhd.schemas.records import EnvironmentRecord, ModelRecord, SetterOutputRecord, SolutionRecord
from vhd.tasks.corpus.regrade import expected_budget, realized
from vhd.tasks.setters.renders import rendered_id

REL = 1e-9  # u*, u₀ replayed by the same simulator: equal but for the last bits


def close(a: Any, b: Any, rel: float = REL) -> bool:
    if a is None or b is None:
        return a is b
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return False
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def module_problem(family: Family, output: SetterOutputRecord) -> tuple[str, str] | None:
    """(field, problem) when a module of the current template setter is not what that setter
    renders for its family in its (built-in) passage: its content id — module text, interface,
    family version, passage — must be the render's. Modules of other setters (an LLM's): None
    here; `replayed` runs the gates on them again (`regated_problem`)."""
    if not rendered_by_template(family, output):
        return None
    expected = rendered_id(family, output.passage_id)
    if expected is None:
        return ("passage_id", f"the template setter renders no module for {family.name} in passage "
                              f"{output.passage_id[:12]}… (not a built-in passage that can skin it)")
    try:
        content = output.expected_id()
    except (TypeError, ValueError, AttributeError):
        content = ""
    if content != expected:
        return ("module", f"is not the module the template setter renders for {family.name} in passage "
                          f"{output.passage_id[:12]}… (its id would be {expected[:12]}…): a changed module is "
                          "admitted only by the gates (`vhd check ENV --code FILE`)")
    return None


def rendered_by_template(family: Family, output: SetterOutputRecord) -> bool:
    """Whether the module claims to be the current template setter's render of the family's current
    version (what `module_problem` can hold to the render)."""
    from vhd.tasks.setters.template import SETTER, SETTER_VERSION

    return output.setter == SETTER and output.setter_version == SETTER_VERSION and output.family_version == family.version


_REGATED: dict[tuple[str, str], tuple[bool, str]] = {}  # (env id, module content id) -> (admitted, reason)


def regated_problem(family: Family, env: EnvironmentRecord, model: ModelRecord, solution: SolutionRecord,
                    output: SetterOutputRecord) -> tuple[str, str] | None:
    """A module no trusted code renders (another setter's, or one relabelled as such) keeps its
    verdict only by passing every gate again here (`check_batch`, the sandbox: ~0.5–2 s an
    environment, once a process): its check rows are bound to its text by ids alone, which a
    forger recomputes. (field, problem) when the gates now reject it."""
    from vhd.tasks.stages.check import candidate_from, check_batch

    key = (env.env_id, output.expected_id())  # the module's content, whatever id the row claims
    if key not in _REGATED:
        verdict = check_batch(family, output, [candidate_from(env, model, solution, output)])[0]
        _REGATED[key] = (verdict.admitted, verdict.reason)
    admitted, reason = _REGATED[key]
    if not admitted:
        return ("admitted", f"stored True, but its module ({output.setter}@{output.setter_version}, not the "
                            f"template setter's render) fails the gates run again: {reason}")
    return None


def verdict_problem(family: Family, env: EnvironmentRecord, model: ModelRecord, solution: SolutionRecord,
                    output: SetterOutputRecord, theta: dict[str, Any], optimal: float, default: float,
                    thorough: bool = False) -> tuple[str, str] | None:
    """(field, problem) when an admitted environment fails a gate recomputed here: `default_band`
    (θ and its solution; `optimal`/`default`: π*'s and the default's utilities replayed on the
    episode seed) and `instruction_agreement` (I, A: the stored instruction's numbers against the
    family's own World in the module's skin); `thorough` (`vhd verify`, `vhd audit`): also the
    binding turn budget of A, which solves θ on partial readings (~0.4 s a model)."""
    if not env.admitted:
        return None
    from vhd.tasks.grading import written
    from vhd.tasks.stages.check.planning import budget_binds, default_band

    if env.presentation == "F":
        passed, why = written.gate_default_band(family, solution.u_star, solution.u_default, solution.u_idle)
    else:
        passed, why = default_band(family, solution, optimal, default)
        if passed and thorough:
            from vhd.tasks.stages.check.candidates import candidate_from

            candidate = candidate_from(env, model.model_copy(update={"theta": theta}), solution, output)
            passed, why = budget_binds(family, candidate)
    if not passed:
        return ("admitted", f"stored True, but default_band recomputed from θ and its solution fails: {why}")
    if env.presentation != "F":
        problem = _instruction_problem(family, env, output, theta)
        if problem:
            return ("admitted", f"stored True, but instruction_agreement recomputed fails: {problem}")
    return None


def _instruction_problem(family: Family, env: EnvironmentRecord, output: SetterOutputRecord,
                         theta: dict[str, Any]) -> str:
    """The `instruction_agreement` gate on the stored instruction ("" when it passes)."""
    from vhd.tasks.grading.oracle import reference_in_skin
    from vhd.tasks.sandbox.runner import MAX_TEXT
    from vhd.tasks.stages.check.reading import _stated

    text = env.instruction if isinstance(env.instruction, str) else ""
    told = _stated(reference_in_skin(family, output).create(env.config(theta)).instruction)
    stated = _stated(text)
    if len(text) > MAX_TEXT:
        stated = stated[:-1]
        return "" if stated == told[:len(stated)] else "the instruction's numbers differ from the reference World's"
    extra, missing = Counter(stated) - Counter(told), Counter(told) - Counter(stated)
    if extra or missing:
        return (f"the instruction states numbers the family's World does not ({', '.join(sorted(extra)[:5]) or 'none'})"
                f" and leaves out ones it does ({', '.join(sorted(missing)[:5]) or 'none'})")
    return ""


def replayed(family: Family, env: EnvironmentRecord, model: ModelRecord, solution: SolutionRecord,
             output: SetterOutputRecord, passage: Any, theta: dict[str, Any], thorough: bool = False
             ) -> list[tuple[str, str, str, str]]:
    """(table, id, field, problem) of one current environment against what trusted code computes:
    its grading fields replayed from θ, the stored π* and the episode seed, its turn budget and
    split, its module against the template setter's render, its verdict's θ-dependent gates."""
    try:
        expected = realized(family, env, solution, output, theta, passage)
    except Exception as exc:  # the stored π*, θ or module cannot be played: its rows are wrong
        return [("environments", env.env_id, "u_star", f"cannot be replayed: {type(exc).__name__}: "
                                                      f"{str(exc).splitlines()[0][:160] if str(exc) else ''}")]
    found = []
    for field, value in expected.items():
        stored = getattr(env, field, None)
        if field in ("u_star", "u_default"):
            ok = close(stored, value)
        elif field == "u_idle":
            ok = close(stored, value, 1e-6)  # the module's own finish, which idle_floor held to 1e-6
        else:
            ok = stored == value
        if not ok:
            shown = f"{stored!r}"[:40]
            found.append(("environments", env.env_id, field, f"stored {shown} differs from the value "
                                                             f"replayed from its solution and θ"))
    turn_budget = expected_budget(family, env, theta)
    if env.turn_budget != turn_budget:
        found.append(("environments", env.env_id, "turn_budget", f"{env.turn_budget!r} is not the family's "
                                                                 f"budget for θ ({turn_budget})"))
    from vhd.tasks.corpus.presets import HELDOUT_SUFFIX

    if not (env.split == family.split or (env.split == "heldout" and str(model.batch).endswith(HELDOUT_SUFFIX))):
        found.append(("environments", env.env_id, "split", f"{env.split!r} is neither the family's split "
                                                           f"({family.split!r}) nor a held-out batch's"))
    if env.admitted:
        problem = module_problem(family, output)
        if problem:
            found.append(("setter_outputs", output.setter_output_id, *problem))
        elif not rendered_by_template(family, output) and env.presentation != "F":
            problem = regated_problem(family, env, model.model_copy(update={"theta": theta}), solution, output)
            if problem:
                found.append(("environments", env.env_id, *problem))
        try:
            problem = verdict_problem(family, env, model, solution, output, theta, expected["u_star"],
                                      expected["u_default"], thorough)
        except Exception as exc:  # θ or the module's skin the gate's code cannot read: not admissible
            problem = ("admitted", f"stored True, but its gates cannot be recomputed: {type(exc).__name__}")
        if problem:
            found.append(("environments", env.env_id, *problem))
    return found


def is_imported(model: ModelRecord) -> bool:
    """θ came from a public instance file (`vhd import-instances`), not from a seed."""
    from vhd.tasks.corpus.instances_formats import BATCH_PREFIX

    return str(model.batch).startswith(BATCH_PREFIX)


def theta_problems(family: Family, model: ModelRecord, run: Any = None, u_star: float | None = None,
                   verify_import: Any = None) -> tuple[list[tuple[str, str, str]], dict[str, Any] | None]:
    """(problems as (id, field, problem), θ to replay with) for a model: θ re-drawn from its seed;
    an imported θ is checked against its source file by `verify_import` (`instances.verify_import`,
    which the audit passes; a reader, which cannot import it, takes the stored θ)."""
    from vhd.tasks.stages.sample import cell_knobs, draw

    problems: list[tuple[str, str, str]] = []
    theta: dict[str, Any] | None = model.theta if isinstance(model.theta, dict) else None
    try:
        if is_imported(model):
            if verify_import is not None:
                problems += [(model.model_id, "theta", p) for p in verify_import(family, model, run, u_star)]
        else:
            knobs, fresh = draw(family, model.seed, cell_knobs(model.batch))
            if knobs != model.knobs:
                problems.append((model.model_id, "knobs", f"differ from the knobs drawn from seed {model.seed}"))
            if fresh != model.theta:
                problems.append((model.model_id, "theta", f"differs from the θ drawn from seed {model.seed}"))
            theta = fresh if problems else theta
    except Exception as exc:  # a seed or knobs the family cannot draw from: the row is wrong
        problems.append((model.model_id, "seed", f"θ cannot be drawn from it: {type(exc).__name__}: "
                                                 f"{str(exc).splitlines()[0][:120] if str(exc) else ''}"))
        theta = None
    return problems, theta


def environment_problems(env: EnvironmentRecord, model: ModelRecord, solution: SolutionRecord,
                         output: SetterOutputRecord, passage: Any = None) -> list[tuple[str, str, str, str]]:
    """What a reader of a published environment recomputes before use (`publish.open_version`):
    its parents agree with it (family, model, episode seed), θ from its seed, and `replayed`.
    Rows another version of the code made (a family, annotator or template setter no longer
    current) are not recomputed: they are in no version today's publish makes."""
    from vhd.mechanisms import registry
    from vhd.schemas.errors import UnknownFamily
    from vhd.tasks.stages.annotate import CODE_VERSION
    from vhd.tasks.stages.sample import episode_seed

    try:
        family = registry.get(env.family)
    except UnknownFamily:
        return []
    if family.version != model.family_version or env.annotator_version != CODE_VERSION:
        return []
    found = []
    for table, row_id, field, value, expected in (
            ("environments", env.env_id, "family", env.family, model.family),
            ("environments", env.env_id, "model_id", env.model_id, model.model_id),
            ("solutions", solution.solution_id, "model_id", solution.model_id, model.model_id),
            ("setter_outputs", output.setter_output_id, "family", output.family, model.family)):
        if value != expected:
            found.append((table, row_id, field, f"{value!r} differs from its model's ({expected!r})"))
    if not is_imported(model) and isinstance(model.seed, int) and env.episode_seed != episode_seed(model.seed):
        found.append(("environments", env.env_id, "episode_seed",
                      "differs from the episode seed its model's seed derives"))
    problems, theta = theta_problems(family, model)
    found += [("models", *p) for p in problems]
    if theta is not None and not found:
        found += replayed(family, env, model, solution, output, passage, theta)
    return found
