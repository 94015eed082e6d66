"""Lineage audit: re-derive θ from its seed (an imported θ: re-parse its source file), re-solve, re-hash
every record on the chain.

    >>> report = verify(chain)
    >>> report["verified"]
    True
"""

from __future__ import annotations

import math
import zlib
from typing import Any

from vhd.mechanisms import registry
from vhd.schemas.errors import UnknownFamily
from vhd.schemas.hashing import sha256_hex
from vhd.schemas.records import Chain
from vhd.tasks.instances import is_imported, verify_import
from vhd.tasks.sample import draw, episode_seed
from vhd.tasks.solve import pack_policy


def _link(kind: str, record: Any, relation: str) -> dict[str, Any]:
    return {"kind": kind, "id": record.id, "relation": relation, "code_version": record.version(),
            "run_id": getattr(record, "run_id", ""), "hash_ok": record.expected_id() == record.id}


def verify(chain: Chain) -> dict[str, Any]:
    problems: list[str] = []
    env = chain.environment
    links = [_link("environment", env, "self")]
    for kind, record, relation in (("model", chain.model, "instance_of"), ("solution", chain.solution, "graded_by"),
                                   ("setter_output", chain.setter_output, "rendered_by"),
                                   ("passage", chain.passage, "skinned_by")):
        if record is None:
            problems.append(f"{kind} of the chain is missing from the warehouse")
        else:
            links.append(_link(kind, record, relation))
    links += [_link("check", c, "checks") for c in chain.checks]
    problems += [f"{link['kind']} {link['id'][:12]} does not hash to its id" for link in links if not link["hash_ok"]]
    problems += _edge_problems(chain)
    if chain.model is not None and chain.solution is not None:
        problems += _recompute(chain)
    if env.admitted and (len(chain.checks) == 0 or not all(c.passed for c in chain.checks)):
        problems.append("an admitted environment must have every gate passed")
    missing_runs = [run_id for run_id, run in chain.runs.items() if run is None]
    problems += [f"run {run_id} is not recorded" for run_id in missing_runs]
    return {
        "env_id": env.env_id, "family": env.family, "verified": not problems, "problems": problems,
        "seed": chain.model.seed if chain.model else None, "knobs": chain.model.knobs if chain.model else None,
        "chain": links, "runs": {rid: (r.model_dump() if r else None) for rid, r in chain.runs.items()},
    }


def _edge_problems(chain: Chain) -> list[str]:
    env = chain.environment
    expected = {
        env.env_id: {(env.model_id, "instance_of"), (env.solution_id, "graded_by"), (env.setter_output_id, "rendered_by")},
    }
    if chain.solution:
        expected[chain.solution.solution_id] = {(chain.solution.model_id, "solves")}
    if chain.setter_output:
        expected[chain.setter_output.setter_output_id] = {(chain.setter_output.passage_id, "skinned_by")}
    problems = []
    for child, wanted in expected.items():
        have = {(e.parent_id, e.relation) for e in chain.edges.get(child, [])}
        if not wanted <= have:
            problems.append(f"lineage edges of {child[:12]} lack {sorted(wanted - have)}")
    if chain.solution and chain.solution.model_id != env.model_id:
        problems.append("the solution grades a different model than the environment's")
    return problems


def _recompute(chain: Chain) -> list[str]:
    model, solution, env = chain.model, chain.solution, chain.environment
    try:
        family = registry.get(model.family)
    except UnknownFamily as exc:
        return [str(exc)]
    if family.version != model.family_version:
        return [f"{model.family} is at version {family.version}; the chain was made by {model.family_version}"]
    problems = []
    if is_imported(model):  # θ came from a public file, not from the seed: check it against the file
        theta = model.theta
        problems += verify_import(family, model, chain.runs.get(model.run_id), solution.u_star)
    else:
        knobs, theta = draw(family, model.seed)
        if knobs != model.knobs or theta != model.theta:
            problems.append(f"θ recomputed from seed {model.seed} differs from the stored θ")
    if episode_seed(model.seed) != env.episode_seed:
        problems.append("the episode seed does not derive from the model seed")
    if sha256_hex(zlib.decompress(solution.policy)) != solution.policy_digest:
        problems.append("the stored policy does not match its digest")
    fresh = family.solve(theta)
    _, digest = pack_policy(fresh.policy)
    if digest != solution.policy_digest or not math.isclose(fresh.u_star, solution.u_star, rel_tol=1e-12, abs_tol=1e-9):
        problems.append("re-solving θ gives a different u* or π* than stored")
    return problems
