"""The data-quality gate: a Great Expectations suite over the admitted corpus, before publishing.

    >>> frame = derived(wh.quality_frame(), registry, wh.quality_texts())  # wh: a Warehouse; the columns the suite reads
    >>> frame[["lineage_complete", "reference_reward", "default_reward", "hides_theta"]].to_dict("records")
    [{'lineage_complete': True, 'reference_reward': 1.0, 'default_reward': 0.0, 'hides_theta': True}]

The suite itself, on a corpus of at least 2200 train environments (not a doctest: Great
Expectations takes ~4 s to import):

    report = validate(wh.quality_frame(), registry, expected_splits={"train": 2200}, texts=wh.quality_texts())
    report["passed"], [e["expectation"] for e in report["expectations"] if not e["passed"]]  # (True, [])

The warehouse hands over one pandas row per admitted environment (`Warehouse.quality_frame`;
Great Expectations takes pandas, not polars, and its DuckDB SQL path is not used), and streams
the texts of presentation A (θ and the instruction, `Warehouse.quality_texts`), which decide
`hides_theta` one row at a time and are never held together. This module
adds the derived columns, runs the suite in an ephemeral context and names the failing rows
by `env_id`. A failed expectation blocks publication of a corpus version (flows/refresh).

| expectation | column(s) |
|---|---|
| ids unique and non-null | `env_id` |
| the whole lineage chain (model, solution, module, passage, five edges) | `lineage_complete` |
| reference reward exactly 1.0, default exactly 0.0 (`score.reward` on u*, u₀) | `reference_reward`, `default_reward` |
| u* ≥ u₀ in the solution | `solution_gap` ≥ −1e-9 |
| no hidden θ in player-facing fields: in A, no hidden key in the player config and no hidden
  list or table written out in the instruction | `hides_theta` |
| split counts as configured (when a preset says) | per split, admitted ≥ configured |
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable

SUITE_VERSION = "1"


def _hides_theta(family_name: str, theta_text: Any, instruction: str, registry: Any) -> bool:
    """Whether an environment of presentation A keeps its family's hidden θ out of its player config
    and its instruction."""
    from vhd.tasks.corpus.export import visible_params

    family = registry.get(family_name)
    theta = json.loads(theta_text) if isinstance(theta_text, str) else {}
    if set(visible_params("A", theta, family)) & set(family.hidden):
        return False
    for key in family.hidden:  # a hidden table or list written out whole in the instruction
        value = theta.get(key)
        if isinstance(value, (list, dict)) and len(json.dumps(value)) > 8 and json.dumps(value) in instruction:
            return False
    return True


def derived(frame: Any, registry: Any, texts: Iterable[tuple[str, str, Any, str]] = ()) -> Any:
    """The frame with the columns the suite reads. `texts`: (env_id, family, θ as stored,
    instruction) of its presentation-A rows (`Warehouse.quality_texts`), each judged as it is read
    and dropped; an A row whose texts are not among them does not count as hiding θ."""
    from vhd.tasks.grading.score import reward

    judged = {env_id: _hides_theta(family, theta, instruction, registry)
              for env_id, family, theta, instruction in texts}
    frame = frame.copy()
    frame["hides_theta"] = [judged.get(env_id, False) if presentation == "A" else True
                            for env_id, presentation in zip(frame["env_id"], frame["presentation"])]
    frame["reference_reward"] = [reward(u, u, d) for u, d in zip(frame["u_star"], frame["u_default"])]
    frame["default_reward"] = [reward(d, u, d) for u, d in zip(frame["u_star"], frame["u_default"])]
    frame["solution_gap"] = frame["solution_u_star"].fillna(float("-inf")) - frame["solution_u_default"].fillna(0.0)
    frame["lineage_complete"] = frame["lineage_complete"].fillna(False).astype(bool)
    return frame


def validate(frame: Any, registry: Any, expected_splits: dict[str, int] | None = None,
             texts: Iterable[tuple[str, str, Any, str]] = ()) -> dict[str, Any]:
    """Run the suite on `frame` and the A rows' `texts` (`derived`); {"passed", "rows",
    "expectations": [{expectation, column, passed, unexpected, env_ids}]}."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    import pandas as pd
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_pandas("vhd")
    frame = derived(frame, registry, texts)
    E = gx.expectations
    checks = [
        ("environments", E.ExpectColumnValuesToNotBeNull(column="env_id")),
        ("environments", E.ExpectColumnValuesToBeUnique(column="env_id")),
        ("environments", E.ExpectColumnValuesToBeInSet(column="lineage_complete", value_set=[True])),
        ("environments", E.ExpectColumnValuesToBeInSet(column="reference_reward", value_set=[1.0])),
        ("environments", E.ExpectColumnValuesToBeInSet(column="default_reward", value_set=[0.0])),
        ("environments", E.ExpectColumnValuesToBeBetween(column="solution_gap", min_value=-1e-9)),
        ("environments", E.ExpectColumnValuesToBeInSet(column="hides_theta", value_set=[True])),
    ]
    frames = {"environments": frame}
    if expected_splits:
        counts = frame["split"].value_counts().to_dict()
        frames["splits"] = pd.DataFrame({"split": list(expected_splits),
                                         "admitted": [int(counts.get(s, 0)) for s in expected_splits],
                                         "configured": list(expected_splits.values())})
        checks.append(("splits", E.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="admitted", column_B="configured", or_equal=True)))
    batches = {name: source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")
               .get_batch(batch_parameters={"dataframe": data}) for name, data in frames.items()}
    results = []
    for table, expectation in checks:
        data = frames[table]
        if data.empty:
            results.append({"expectation": expectation.expectation_type, "table": table, "passed": True,
                            "unexpected": 0, "rows": []})
            continue
        outcome = batches[table].validate(expectation, result_format="COMPLETE")
        index = outcome.result.get("unexpected_index_list") or []
        key = "env_id" if table == "environments" else "split"
        rows = [str(data.iloc[i][key]) if isinstance(i, int) else str(i) for i in index]
        results.append({"expectation": expectation.expectation_type, "table": table,
                        "column": getattr(expectation, "column", None) or "admitted ≥ configured",
                        "passed": bool(outcome.success), "unexpected": len(rows), "rows": rows[:20]})
    return {"passed": all(r["passed"] for r in results), "rows": len(frame), "suite_version": SUITE_VERSION,
            "expectations": results}
