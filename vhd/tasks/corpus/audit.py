"""Lineage audit: every row an environment depends on re-hashed and its field digests recomputed,
its lineage edges and its verdict checked against its check rows, θ re-derived from its seed, the
environment's u*, u₀, u_idle and trajectories replayed from the stored solution, π* re-solved.

    >>> verify(chain)["verified"]       # one environment's chain (`vhd audit`; warehouse.lineage.load_chain)
    True
    >>> from dataclasses import replace
    >>> report = verify(replace(chain, environment=env.model_copy(update={"u_star": env.u_star + 1})))
    >>> report["verified"], [(f["table"], f["field"]) for f in report["findings"]][:1]
    (False, [('environments', 'u_star')])
    >>> Auditor(resolve=False).chains({env.env_id: chain})   # many: the publish gate, `vhd verify` (tasks/corpus/publish_audit.py)
    []

A finding names the environment, the table, the row and the field. Rows shared by several
environments (a module, a solution, a passage) are checked once per audit and reported for each
environment that depends on them (docs/RELIABILITY.md, "What is verified where").
"""

from __future__ import annotations

import math
import zlib
from typing import Any, Iterable

from vhd.mechanisms import Family, registry
from vhd.schemas.errors import UnknownFamily
from vhd.schemas.hashing import digest_problems, sha256_hex
from vhd.schemas.records import Chain, CheckRecord, EnvironmentRecord, ModelRecord, SolutionRecord
from vhd.tasks.corpus.instances import is_imported, verify_import
from vhd.tasks.corpus.publish import finding, grading_digest, grading_digest_of_row
from vhd.tasks.corpus.recompute import close as _close, replayed, theta_problems
from vhd.tasks.stages.sample import episode_seed

DIGESTS = "field_digests"
TABLE = {"environment": "environments", "model": "models", "solution": "solutions", "setter_output": "setter_outputs",
         "passage": "passages", "check": "checks"}
F_GATES = ("interface", "default_band", "plan_grader", "plan_validation")  # tasks/written.gates, in their order


def line(f: dict[str, str]) -> str:
    """One finding as one line: `table id… field: problem`."""
    return f"{f['table']} {f['id'][:12]} {f['field']}: {f['problem']}"


def expected_gates(presentation: str) -> tuple[str, ...]:
    from vhd.tasks.stages.check import GATES

    return F_GATES if presentation == "F" else tuple(name for name, _ in GATES)


def derived_reason(checks: list[CheckRecord], order: tuple[str, ...]) -> str:
    """The reason `Verdict.reason` gives for these check rows: the first failed gate that ran, in
    the checker's order (else the first failed one), as "name: message"; "" when all passed."""
    from vhd.tasks.stages.check import NOT_RUN

    rank = {name: k for k, name in enumerate(order)}
    failed = sorted((c for c in checks if not c.passed), key=lambda c: (rank.get(c.gate, len(rank)), c.gate))
    ran = [c for c in failed if not str(c.message).startswith(NOT_RUN)]
    first = (ran or failed or [None])[0]
    return f"{first.gate}: {first.message}" if first is not None else ""


class Auditor:
    """One audit over any number of chains. `replay`: recompute the environment's u*, u₀, u_idle
    and trajectories from the stored solution (and, in F, its instruction and tools); `resolve`:
    also re-solve θ and compare the solution row (the costly part, skipped by the publish gate,
    whose solution rows are covered by their ids and digests)."""

    def __init__(self, *, replay: bool = True, resolve: bool = True, measure: bool = True):
        # no environment is taken as replayed because a stored manifest lists its grading digest: a
        # forger rewrites the manifest and its digests with this code (issue 31), so every current
        # environment is recomputed on every audit (`recompute.replayed`); `measure`: also what
        # decides no verdict and costs tens of ms an environment (an admitted one's difficulty, the
        # binding budget of A), which `vhd verify` and `vhd audit` measure and the publish gate does not
        self.replay, self.resolve, self.measure = replay, resolve, measure
        self.digests: dict[str, str] = {}
        self.replayed = 0
        self._rows: dict[str, list[tuple[str, str, str]]] = {}
        self._models: dict[str, tuple[list[tuple[str, str, str]], dict[str, Any] | None]] = {}
        self._solutions: dict[str, list[tuple[str, str, str]]] = {}
        self.notes: list[str] = []
        # family name -> its module, where rows of the family's current version are intact (they
        # hash to their ids, their digests hold) yet the current code re-derives them differently:
        # the family's code changed without a bump of its `version` (`version_hint`)
        self.unbumped: dict[str, str] = {}

    def chains(self, chains: dict[str, Chain]) -> list[dict[str, str]]:
        """Findings of every chain, each named by the env id the chain was asked for (a row whose
        env_id was changed is reported under the id its referrers name)."""
        return [f for env_id, chain in chains.items() for f in self.chain(chain, env_id)]

    def forget(self, chains: dict[str, Chain]) -> None:
        """Drop what this audit remembers of the rows only `chains` hold (environments, θ,
        solutions, checks), keeping the rows many chains share (modules, passages): an audit in
        batches then holds one batch's worth, whatever the corpus's size. A row met again in a
        later batch (the same θ in I and A) is checked again, to the same findings."""
        for chain in chains.values():
            for record in (chain.environment, chain.model, chain.solution, *chain.checks):
                if record is not None:
                    self._rows.pop(record.id, None)
            if chain.model is not None:
                self._models.pop(chain.model.model_id, None)
            if chain.solution is not None:
                self._solutions.pop(chain.solution.solution_id, None)

    def rows(self, table: str, rows: Iterable[tuple[Any, dict[str, Any], dict[str, str]]]) -> list[dict[str, str]]:
        """Findings on the rows of `table` that no chain of this audit reached (a passage no module
        skins, a check moved off its environment): (record, row as stored, invalid) each."""
        found = []
        for record, row, invalid in rows:
            if record.id not in self._rows:
                found += [finding("", *f) for f in self._row(table, record, row, invalid)]
        return found

    def chain(self, chain: Chain, env_id: str | None = None) -> list[dict[str, str]]:
        env = chain.environment
        found: list[tuple[str, str, str, str]] = []  # table, id, field, problem
        members = [("environment", env), ("model", chain.model), ("solution", chain.solution),
                   ("setter_output", chain.setter_output), ("passage", chain.passage)]
        references = {"model": ("environments", env.env_id, "model_id", env.model_id),
                      "solution": ("environments", env.env_id, "solution_id", env.solution_id),
                      "setter_output": ("environments", env.env_id, "setter_output_id", env.setter_output_id),
                      "passage": ("setter_outputs", env.setter_output_id, "passage_id",
                                  chain.setter_output.passage_id if chain.setter_output else "")}
        for kind, record in members:
            if record is None:
                if kind == "passage" and chain.setter_output is None:
                    continue
                table, row_id, field, missing = references[kind]
                found.append((table, row_id, field, f"names {TABLE[kind]} row {str(missing)[:12]}…, which is not stored"))
            else:
                found += self._row(TABLE[kind], record, chain.stored.get(record.id), chain.invalid.get(record.id, {}))
        for check in chain.checks:
            found += self._row("checks", check, chain.stored.get(check.id), chain.invalid.get(check.id, {}))
        found += self._edges(chain)
        found += self._runs(chain)
        if chain.model is not None and chain.solution is not None and chain.setter_output is not None:
            found += self._consistency(chain)
            found += self._verdict(chain)
            family = self._family(chain.model)
            if family is not None:
                model_found, theta = self._model(family, chain)
                recomputed = model_found + self._solution(family, chain, theta)
                if self.replay and theta is not None and self._current(chain.environment):
                    recomputed += self._replayed(family, chain, theta)
                found += recomputed
                if recomputed and not any(self._rows.get(record.id) for _, record in members if record is not None):
                    self.unbumped[family.name] = family.sample.__module__.replace(".", "/") + ".py"
        elif chain.model is not None or chain.solution is not None:
            found += self._verdict(chain)
        seen, out = set(), []
        for table, row_id, field, problem in found:
            if (table, row_id, field, problem) not in seen:
                seen.add((table, row_id, field, problem))
                out.append(finding(env_id or env.env_id, table, row_id, field, problem))
        return out

    def _row(self, table: str, record: Any, row: dict[str, Any] | None,
             invalid: dict[str, str]) -> list[tuple[str, str, str, str]]:
        """(table, id, field, problem) of one stored row: invalid values, fields whose digest no
        longer matches, an id its content does not hash to. Checked once per audit."""
        key = record.id
        if key not in self._rows:
            problems: list[tuple[str, str, str]] = []
            for field, why in invalid.items():
                problems.append((key, field, f"invalid value: {why}"))
            if row is not None:
                problems += [(key, field, why) for field, why in digest_problems(row)]
            try:
                expected = record.expected_id()
            except (TypeError, ValueError, AttributeError) as exc:
                expected = f"unhashable ({type(exc).__name__})"
            if expected != key:
                problems.append((key, record.id_field, f"does not hash to its id (its content hashes to {expected[:12]}…)"))
            self._rows[key] = problems
        return [(table, *p) for p in self._rows[key]]

    def _edges(self, chain: Chain) -> list[tuple[str, str, str, str]]:
        env = chain.environment
        expected = {env.env_id: {(env.model_id, "instance_of"), (env.solution_id, "graded_by"),
                                 (env.setter_output_id, "rendered_by")}}
        if chain.solution is not None:
            expected[chain.solution.solution_id] = {(chain.solution.model_id, "solves")}
        if chain.setter_output is not None:
            expected[chain.setter_output.setter_output_id] = {(chain.setter_output.passage_id, "skinned_by")}
        for check in chain.checks:
            expected[check.check_id] = {(check.env_id, "checks")}
        found = []
        for child, wanted in expected.items():
            have = {(e.parent_id, e.relation) for e in chain.edges.get(child, [])}
            for parent, relation in sorted(wanted - have):
                found.append(("lineage_edges", f"{child[:12]}→{parent[:12]}", relation,
                              f"the {relation} edge from {child[:12]}… to {parent[:12]}… is missing"))
            for parent, relation in sorted(have - wanted):
                found.append(("lineage_edges", f"{child[:12]}→{parent[:12]}", relation,
                              f"an edge {child[:12]}… {relation} {parent[:12]}… that the chain does not have"))
        return found

    def _runs(self, chain: Chain) -> list[tuple[str, str, str, str]]:
        found = []
        for kind, record in (("environment", chain.environment), ("model", chain.model), ("solution", chain.solution),
                             ("setter_output", chain.setter_output), *(("check", c) for c in chain.checks)):
            if record is not None and record.run_id and chain.runs.get(record.run_id) is None:
                found.append((TABLE[kind], record.id, "run_id", f"names run {record.run_id}, which is not recorded"))
        return found

    # -- the environment against its parents and its checks -------------------------------------
    def _consistency(self, chain: Chain) -> list[tuple[str, str, str, str]]:
        env, model, solution, output = chain.environment, chain.model, chain.solution, chain.setter_output
        found = []

        def same(table: str, row_id: str, field: str, value: Any, expected: Any, what: str) -> None:
            if value != expected:
                found.append((table, row_id, field, f"{value!r} differs from {what} ({expected!r})"))

        same("environments", env.env_id, "family", env.family, model.family, "its model's family")
        same("solutions", solution.solution_id, "family", solution.family, model.family, "its model's family")
        same("setter_outputs", output.setter_output_id, "family", output.family, model.family, "its model's family")
        same("solutions", solution.solution_id, "family_version", solution.family_version, model.family_version,
             "its model's family version")
        same("setter_outputs", output.setter_output_id, "family_version", output.family_version, model.family_version,
             "its model's family version")
        same("solutions", solution.solution_id, "model_id", solution.model_id, env.model_id,
             "the environment's model")
        same("environments", env.env_id, "knobs", env.knobs, model.knobs, "its model's knobs")
        if not is_imported(model) and isinstance(model.seed, int) and model.seed >= 0:
            same("environments", env.env_id, "episode_seed", env.episode_seed, episode_seed(model.seed),
                 "the episode seed its model's seed derives")
        return found

    def _verdict(self, chain: Chain) -> list[tuple[str, str, str, str]]:
        from vhd.tasks.stages.check import CHECKER_VERSION

        env, checks = chain.environment, chain.checks
        order = expected_gates(env.presentation)
        found = []
        checker = str(env.annotator_version).rpartition("checker")[2]
        for check in checks:
            if check.checker_version != checker:
                found.append(("checks", check.check_id, "checker_version",
                              f"{check.checker_version!r} is not the environment's checker ({checker!r})"))
        gates = sorted(c.gate for c in checks)
        if checker == CHECKER_VERSION and gates != sorted(order):
            missing = sorted(set(order) - set(gates))
            extra = sorted(set(gates) - set(order)) + sorted({g for g in gates if gates.count(g) > 1})
            found.append(("checks", env.env_id, "gate", f"the stored checks lack {missing} and have {extra} "
                                                        "beyond the checker's gates"))
        admitted = bool(checks) and all(c.passed for c in checks)
        if env.admitted != admitted:
            failed = [c.gate for c in checks if not c.passed]
            why = f"its checks failed {failed}" if failed else ("it has no checks" if not checks
                                                               else "every one of its checks passed")
            found.append(("environments", env.env_id, "admitted", f"stored {env.admitted!r}, but {why}"))
        reason = derived_reason(checks, order)
        if env.reason != reason:
            found.append(("environments", env.env_id, "reason",
                          f"{str(env.reason)[:60]!r} is not what its checks give ({reason[:60]!r})"))
        return found

    # -- recomputation ---------------------------------------------------------------------------
    def _family(self, model: ModelRecord) -> Family | None:
        try:
            family = registry.get(model.family)
        except UnknownFamily as exc:
            self.notes.append(str(exc))
            return None
        if family.version != model.family_version:
            self.notes.append(f"{model.family} is at version {family.version}; rows of version "
                              f"{model.family_version} are not recomputed")
            return None
        return family

    def grading(self, env: EnvironmentRecord, row: dict[str, Any] | None = None, env_id: str | None = None) -> str:
        """The environment's grading digest, computed once per audit (from its stored row, if given),
        kept under `env_id` (the id its chain was asked for; default its own)."""
        env_id = env_id or env.env_id
        if env_id not in self.digests:
            try:
                self.digests[env_id] = grading_digest_of_row(row) if row is not None else grading_digest(env)
            except (TypeError, ValueError):  # an edited row that no longer serialises: flagged by its digests
                self.digests[env_id] = ""
        return self.digests[env_id]

    def _current(self, env: EnvironmentRecord) -> bool:
        """Replay only what today's annotator and checker made: an environment of an older
        version (superseded) was rendered by other code, so only its hashes and digests hold."""
        from vhd.tasks.stages.annotate import CODE_VERSION

        if env.annotator_version != CODE_VERSION:
            self.notes.append(f"environments of annotator {env.annotator_version} (now {CODE_VERSION}) are hashed "
                              "and digested, not replayed")
            return False
        return True

    def _model(self, family: Family, chain: Chain) -> tuple[list[tuple[str, str, str, str]], dict[str, Any] | None]:
        model = chain.model
        if model.model_id not in self._models:
            self._models[model.model_id] = theta_problems(family, model, chain.runs.get(model.run_id),
                                                          chain.solution.u_star, verify_import)
        problems, theta = self._models[model.model_id]
        return [("models", *p) for p in problems], theta

    def _solution(self, family: Family, chain: Chain, theta: dict[str, Any] | None) -> list[tuple[str, str, str, str]]:
        solution = chain.solution
        if solution.solution_id not in self._solutions:
            problems: list[tuple[str, str, str]] = []
            try:
                raw = zlib.decompress(solution.policy)
                if sha256_hex(raw) != solution.policy_digest:
                    problems.append((solution.solution_id, "policy", "the stored policy does not match its digest"))
            except (zlib.error, TypeError):
                problems.append((solution.solution_id, "policy", "not a zlib-compressed .npy array"))
            if self.resolve and theta is not None:
                problems += self._resolved(family, solution, theta)
            self._solutions[solution.solution_id] = problems
        return [("solutions", *p) for p in self._solutions[solution.solution_id]]

    def _resolved(self, family: Family, solution: SolutionRecord, theta: dict[str, Any]) -> list[tuple[str, str, str]]:
        from vhd.tasks.stages.solve import pack_policy

        fresh = family.solve(theta)
        _, digest = pack_policy(fresh.policy)
        problems = []
        for field in ("u_star", "u_default", "u_idle"):
            if not math.isclose(getattr(fresh, field), getattr(solution, field), rel_tol=1e-12, abs_tol=1e-9):
                problems.append((solution.solution_id, field, f"re-solving θ gives {getattr(fresh, field)!r}, "
                                                              f"not the stored {getattr(solution, field)!r}"))
        if digest != solution.policy_digest:
            problems.append((solution.solution_id, "policy_digest", "re-solving θ gives a different π*"))
        return problems

    def _replayed(self, family: Family, chain: Chain, theta: dict[str, Any]) -> list[tuple[str, str, str, str]]:
        """The environment recomputed by trusted code (`recompute.replayed`): its grading fields from
        θ, the stored π* and the episode seed, turn budget, split, module (the template setter's
        render) and verdict (its θ-dependent gates); with `measure` (`vhd verify`, `vhd audit`) also
        the binding budget of A and an admitted one's difficulty, measured again."""
        env = chain.environment
        found = replayed(family, env, chain.model, chain.solution, chain.setter_output, chain.passage, theta,
                         thorough=self.measure)
        if found and found[0][2] == "u_star" and found[0][3].startswith("cannot be replayed"):
            return found
        self.replayed += 1
        if env.admitted and self.measure:  # ~50 ms an environment; decides no verdict: `vhd verify`, `vhd audit`
            found += self._difficulty(family, chain, theta)
        elif env.admitted and not env.difficulty and '"difficulty"' in str((chain.stored.get(env.env_id) or {})
                                                                             .get(DIGESTS) or ""):
            found += [("environments", env.env_id, "difficulty", "is empty, but the environment is admitted and "
                                                                 "its row was written with a difficulty")]
        return found

    def _difficulty(self, family: Family, chain: Chain, theta: dict[str, Any]) -> list[tuple[str, str, str, str]]:
        """An admitted environment's difficulty measured again from θ and its solution; a row sealed
        with a difficulty digest (written since migration 007) must carry one."""
        from vhd.tasks.stages.difficulty import measure

        env, row = chain.environment, chain.stored.get(chain.environment.env_id) or {}
        if not env.difficulty:
            sealed = '"difficulty"' in str(row.get(DIGESTS) or "")
            return [("environments", env.env_id, "difficulty", "is empty, but the environment is admitted and "
                                                               "its row was written with a difficulty")] if sealed else []
        try:
            fresh = measure(family, chain.model.model_copy(update={"theta": theta}), chain.solution, env.presentation)
        except Exception as exc:
            return [("environments", env.env_id, "difficulty", f"cannot be measured again: {type(exc).__name__}")]
        differs = sorted(k for k in set(fresh) | set(env.difficulty) if not _same(env.difficulty.get(k), fresh.get(k)))
        if differs:
            return [("environments", env.env_id, "difficulty", f"stored {', '.join(differs)} differ from the "
                                                               "difficulty measured again from θ and its solution")]
        return []


def _same(a: Any, b: Any) -> bool:
    """Equal, with floats equal to REL (what the measure recomputes by the same code)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return _close(a, b)
    return a == b


def version_hint(unbumped: dict[str, str]) -> str:
    """What to do when rows of a family's current version are intact but no longer what its code
    computes (`Auditor.unbumped`): one line, "" when there are none.

        >>> print(version_hint({"knapsack": "vhd/mechanisms/knapsack.py"}))
        knapsack: its stored rows are intact but its code now derives other knobs, θ or values for the
        same version: bump `version` in vhd/mechanisms/knapsack.py (and say why in CHANGELOG.md), then refresh
    """
    if not unbumped:
        return ""
    names, paths = ", ".join(sorted(unbumped)), ", ".join(unbumped[name] for name in sorted(unbumped))
    its = "its" if len(unbumped) == 1 else "their"
    return (f"{names}: {its} stored rows are intact but {its} code now derives other knobs, θ or values for the same "
            f"version: bump `version` in {paths} (and say why in CHANGELOG.md), then refresh")


def verify(chain: Chain, *, resolve: bool = True) -> dict[str, Any]:
    """The audit of one environment's chain, as `vhd audit` prints it."""
    auditor = Auditor(resolve=resolve)
    findings = auditor.chain(chain)
    env = chain.environment
    links = [_link("environment", env, "self")]
    for kind, record, relation in (("model", chain.model, "instance_of"), ("solution", chain.solution, "graded_by"),
                                   ("setter_output", chain.setter_output, "rendered_by"),
                                   ("passage", chain.passage, "skinned_by")):
        if record is not None:
            links.append(_link(kind, record, relation))
    links += [_link("check", c, "checks") for c in chain.checks]
    return {
        "env_id": env.env_id, "family": env.family, "verified": not findings,
        "problems": [f["problem"] for f in findings], "lines": [line(f) for f in findings], "findings": findings,
        "notes": sorted(set(auditor.notes)), "hint": version_hint(auditor.unbumped),
        "seed": chain.model.seed if chain.model else None, "knobs": chain.model.knobs if chain.model else None,
        "chain": links, "runs": {rid: (r.model_dump() if r else None) for rid, r in chain.runs.items()},
        "why": why_made(env, chain.runs.get(env.run_id)),
    }


def why_made(env: EnvironmentRecord, run: Any) -> str:
    """Why the run that wrote `env` made it, from the run's parameters: a `--follow` aim (the
    learner's predicted reward on it), a `--difficulty` band, or an ordinary draw.

    >>> class Run:
    ...     parameters = {"difficulty": [0.4, 0.7]}
    >>> why_made(env, Run())
    'drawn for the difficulty band 0.4–0.7'
    """
    parameters = getattr(run, "parameters", None) or {}
    follow = (parameters.get("follow") or {}) if isinstance(parameters, dict) else {}
    aim = (follow.get("plan") or {}).get(env.family) if isinstance(follow, dict) else None
    if isinstance(aim, dict) and aim.get("coefficients"):
        from vhd.tasks.corpus.follow import features

        x = features(env.difficulty)
        b0, b1, b2 = aim["coefficients"]
        predicted = "?" if x is None else f"{min(1.0, max(0.0, b0 + b1 * x[0] + b2 * x[1])):.3f}"
        return (f"made for a learner (--follow {follow.get('results')}, results digest "
                f"{str(follow.get('results_digest'))[:12]}…): its predicted reward here is {predicted}, aimed at "
                f"{aim['aim'][0]:g}–{aim['aim'][1]:g} of the band {follow['band'][0]:g}–{follow['band'][1]:g}")
    band = parameters.get("difficulty") if isinstance(parameters, dict) else None
    if isinstance(band, list) and len(band) == 2:
        return f"drawn for the difficulty band {band[0]:g}–{band[1]:g}"
    return "an ordinary draw of its batch"


def _link(kind: str, record: Any, relation: str) -> dict[str, Any]:
    try:
        ok = record.expected_id() == record.id
    except (TypeError, ValueError, AttributeError):
        ok = False
    return {"kind": kind, "id": record.id, "relation": relation, "code_version": record.version(),
            "run_id": getattr(record, "run_id", ""), "hash_ok": ok}
