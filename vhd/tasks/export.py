"""Export rows: what a trainer loads, split into the player's view and the grader's.

    >>> row = export_row(env, model, setter_output, family)
    >>> sorted(row)
    ['env_id', 'family', 'grader', 'module', 'player', 'presentation', 'split']
"""

from __future__ import annotations

from typing import Any

from vhd.mechanisms import Family
from vhd.schemas.records import EnvironmentRecord, ModelRecord, SetterOutputRecord


def visible_params(presentation: str, theta: dict[str, Any], family: Family) -> dict[str, Any]:
    """θ as the player may see it: whole in F and I, without the hidden fields in A."""
    return theta if presentation in ("F", "I") else {k: v for k, v in theta.items() if k not in family.hidden}


def player_config(env: EnvironmentRecord, theta: dict[str, Any], family: Family) -> dict[str, Any]:
    """What an agent may see of the config: θ without the hidden fields in presentation A."""
    return {"params": visible_params(env.presentation, theta, family), "presentation": env.presentation,
            "turn_budget": env.turn_budget}


def export_row(env: EnvironmentRecord, model: ModelRecord, output: SetterOutputRecord, family: Family) -> dict[str, Any]:
    return {
        "env_id": env.env_id,
        "family": env.family,
        "presentation": env.presentation,
        "split": env.split,
        "module": output.module,
        "player": {"instruction": env.instruction, "tools": env.tools, "config": player_config(env, model.theta, family)},
        "grader": {"u_star": env.u_star, "u_default": env.u_default, "u_idle": env.u_idle,
                   "reference_trajectory": env.reference_trajectory,
                   "config": env.config(model.theta)},
    }
