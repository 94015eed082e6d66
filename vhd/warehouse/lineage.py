"""Lineage queries: the chain of records from an environment back to its θ and passage.

    >>> chain = load_chain(Warehouse.open(path, read_only=True), env_id)
"""

from __future__ import annotations

from vhd.schemas.errors import UnknownEnvironment
from vhd.schemas.records import (
    Chain, EnvironmentRecord, ModelRecord, PassageRecord, RunRecord, SetterOutputRecord, SolutionRecord,
)
from vhd.warehouse.store import Warehouse


def load_chain(wh: Warehouse, env_id: str) -> Chain:
    env = wh.get(EnvironmentRecord, env_id)
    if env is None:
        raise UnknownEnvironment(f"no environment {env_id!r} in {wh.path}; list them with `vhd envs`")
    solution = wh.get(SolutionRecord, env.solution_id)
    output = wh.get(SetterOutputRecord, env.setter_output_id)
    run_ids = {env.run_id}
    chain = Chain(
        environment=env,
        model=wh.get(ModelRecord, env.model_id),
        solution=solution,
        setter_output=output,
        passage=wh.get(PassageRecord, output.passage_id) if output else None,
        checks=wh.checks_for(env_id),
        edges={record_id: wh.parents(record_id) for record_id in (env_id, env.solution_id, env.setter_output_id)},
        runs={},
    )
    run_ids |= {r.run_id for r in (chain.model, chain.solution, chain.setter_output) if r is not None}
    chain.runs = {run_id: wh.get(RunRecord, run_id) for run_id in sorted(run_ids)}
    return chain
