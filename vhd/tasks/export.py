"""Export rows: what a trainer loads, split into the player's view and the grader's.

    >>> row = export_row(env, model, setter_output, family, solution)
    >>> sorted(row)
    ['env_id', 'family', 'grader', 'module', 'player', 'presentation', 'split']
    >>> sorted(row["grader"])
    ['config', 'expected', 'family', 'interface', 'reference_trajectory', 'u_default', 'u_idle', 'u_star']

The grader view carries what scoring any episode of the environment needs: θ (its config), the
episode's own references (`u_star`, `u_default`, `u_idle` on the stored episode seed: the outcome
reward), the model's expected values (`expected`: the decision reward, for any seed), the family
and the module's tool names with their canonical names (`interface`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vhd.mechanisms import Family, registry
from vhd.schemas.errors import VhdError
from vhd.schemas.records import EnvironmentRecord, ModelRecord, SetterOutputRecord, SolutionRecord

COLUMNS = ("env_id", "family", "presentation", "split", "module", "player", "grader", "digest", "corpus_version",
           "corpus_digest")


def visible_params(presentation: str, theta: dict[str, Any], family: Family) -> dict[str, Any]:
    """θ as the player may see it: whole in F and I, without the hidden fields in A."""
    return theta if presentation in ("F", "I") else {k: v for k, v in theta.items() if k not in family.hidden}


def player_config(env: EnvironmentRecord, theta: dict[str, Any], family: Family) -> dict[str, Any]:
    """What an agent may see of the config: θ without the hidden fields in presentation A."""
    return {"params": visible_params(env.presentation, theta, family), "presentation": env.presentation,
            "turn_budget": env.turn_budget}


def export_row(env: EnvironmentRecord, model: ModelRecord, output: SetterOutputRecord, family: Family,
               solution: SolutionRecord) -> dict[str, Any]:
    return {
        "env_id": env.env_id,
        "family": env.family,
        "presentation": env.presentation,
        "split": env.split,
        "module": output.module,
        "player": {"instruction": env.instruction, "tools": env.tools, "config": player_config(env, model.theta, family)},
        "grader": {"u_star": env.u_star, "u_default": env.u_default, "u_idle": env.u_idle,
                   "expected": {"u_star": solution.u_star, "u_default": solution.u_default, "u_idle": solution.u_idle},
                   "family": family.code_version,
                   "interface": {binding.name: binding.canonical for binding in output.interface},
                   "reference_trajectory": env.reference_trajectory,
                   "config": env.config(model.theta)},
    }


def rows_of(wh: Any, envs: list[EnvironmentRecord], extra: Any = None) -> list[dict[str, Any]]:
    """The export rows of `envs`, their model, module and solution rows verified (`wh`: an open
    Warehouse); `extra(env)` adds columns to each row."""
    models = wh.verified(ModelRecord, [e.model_id for e in envs], complete=True)
    modules = wh.verified(SetterOutputRecord, [e.setter_output_id for e in envs], complete=True)
    solutions = wh.verified(SolutionRecord, [e.solution_id for e in envs], complete=True)
    return [{**export_row(e, models[e.model_id], modules[e.setter_output_id], registry.get(e.family),
                          solutions[e.solution_id]), **(extra(e) if extra else {})} for e in envs]


def write(rows: list[dict[str, Any]], out: Path, format: str) -> Path:
    """`out/environments.{jsonl,parquet}`, written whole or not at all (a partial file is removed,
    and `out` too when this call created it and it stayed empty); VhdError of one line on failure."""
    if format not in ("jsonl", "parquet"):
        raise VhdError(f"--format must be jsonl or parquet, got {format!r}")
    target = out / f"environments.{format}"
    partial = target.with_suffix(target.suffix + ".partial")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        if format == "jsonl":
            partial.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
        else:
            import polars as pl

            flat = [{**r, "player": json.dumps(r["player"], sort_keys=True),
                     "grader": json.dumps(r["grader"], sort_keys=True)} for r in rows]
            pl.DataFrame(flat, schema={k: pl.Utf8 for k in COLUMNS}).write_parquet(partial)
        partial.replace(target)  # never a half-written export
    except OSError as exc:  # a full disk, a read-only directory
        partial.unlink(missing_ok=True)
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise VhdError(f"cannot write {target}: {exc.strerror or exc}; nothing was exported") from None
    return target
