"""How varied a corpus's interfaces are (issue 29 item 4): what `vhd stats` prints.

    >>> tools = [{"name": "weigh_parcel", "input_schema": {"properties": {"parcel": {}}}}]
    >>> env = SimpleNamespace(family="knapsack", presentation="A", tools=tools)
    >>> interface_stats([env, env])["tool_names"], interface_stats([env])["tool_sets"]
    (1, {'knapsack': 1})

Over the environments a trainer plays (presentations I and A: F has one written-answer tool): the
distinct tool names, the distinct tool sets (a set of names) of each family, and the distinct
argument names. A family with one tool set exposes one API in every passage: a policy can learn
it by heart.
"""

from __future__ import annotations

from types import SimpleNamespace  # noqa: F401  (the example)
from typing import Any, Iterable


def interface_stats(environments: Iterable[Any]) -> dict[str, Any]:
    """{"environments", "families", "tool_names", "argument_names", "tool_sets": {family: count},
    "one_tool_set": [families with a single tool set]} of environments with `family`,
    `presentation` and `tools` (the player's: name and input_schema)."""
    names: set[str] = set()
    arguments: set[str] = set()
    sets: dict[str, set[frozenset[str]]] = {}
    count = 0
    for env in environments:
        if env.presentation == "F":
            continue
        count += 1
        tools = [t["name"] for t in env.tools]
        names.update(tools)
        arguments.update(a for t in env.tools for a in t.get("input_schema", {}).get("properties", {}))
        sets.setdefault(env.family, set()).add(frozenset(tools))
    per_family = {family: len(found) for family, found in sorted(sets.items())}
    return {"environments": count, "families": len(per_family), "tool_names": len(names),
            "argument_names": len(arguments), "tool_sets": per_family,
            "one_tool_set": [family for family, n in per_family.items() if n == 1]}
