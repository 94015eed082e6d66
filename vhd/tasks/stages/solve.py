"""Stage 2, solve: the exact solution of every θ, with its certificate.

    >>> from vhd.tasks.stages.sample import sample_models
    >>> models = sample_models(family, count=3, seed=7, batch="2026-12-02")    # family: inventory_dp
    >>> solutions = solve_models(family, models)
    >>> [s.model_id for s in solutions] == [m.model_id for m in models]
    True
    >>> solutions[0].certificate["status"], solutions[0].certificate["method"]
    ('optimal', 'backward Bellman recursion')
    >>> bool((unpack_policy(solutions[0].policy) == family.solve(models[0].theta).policy).all())   # π*, packed
    True
"""

from __future__ import annotations

import io
import zlib

import numpy as np

from vhd.mechanisms import Family, Solution
from vhd.schemas.hashing import sha256_hex
from vhd.schemas.records import ModelRecord, SolutionRecord


def pack_policy(policy: np.ndarray) -> tuple[bytes, str]:
    """(zlib-compressed .npy bytes, sha256 of the raw .npy bytes)."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(policy), allow_pickle=False)
    raw = buffer.getvalue()
    return zlib.compress(raw, 6), sha256_hex(raw)


def unpack_policy(blob: bytes) -> np.ndarray:
    from vhd.tasks import AST_LOCK

    with AST_LOCK:  # np.load parses the .npy header with ast.literal_eval
        return np.load(io.BytesIO(zlib.decompress(blob)), allow_pickle=False)


def solution_record(model: ModelRecord, solution: Solution) -> SolutionRecord:
    blob, digest = pack_policy(solution.policy)
    return SolutionRecord.build(
        model_id=model.model_id, family=model.family, family_version=model.family_version,
        u_star=solution.u_star, u_default=solution.u_default, u_idle=solution.u_idle,
        certificate=solution.certificate.content(), policy_digest=digest, policy=blob,
        seconds=solution.certificate.seconds,
    )


def solve_models(family: Family, models: list[ModelRecord]) -> list[SolutionRecord]:
    return [solution_record(model, family.solve(model.theta)) for model in models]
