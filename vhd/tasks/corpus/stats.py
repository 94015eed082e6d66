"""How varied a corpus's interfaces are (issue 29 item 4): what `vhd stats` prints.

    >>> tools = [{"name": "weigh_parcel", "input_schema": {"properties": {"parcel": {}}}}]
    >>> env = SimpleNamespace(family="knapsack", presentation="A", tools=tools)
    >>> interface_stats([env, env])["tool_names"], interface_stats([env])["tool_sets"]
    (1, {'knapsack': 1})
    >>> tools[0]["input_schema"]["properties"]["parcel"] = {"type": "string", "description": "a lot (a code, P-01 for the first)"}
    >>> interface_stats([env])["id_styles"]
    {'knapsack': ['code']}

Over the environments a trainer plays (presentations I and A: F has one written-answer tool): the
distinct tool names, the distinct tool sets (a set of names) of each family, the distinct
argument names, and the styles each family's ids are written in (0-based and 1-based numbers,
codes such as P-07: `vhd.mechanisms._runtime.style_of`). A family with one tool set exposes one
API in every passage: a policy can learn it by heart.
"""

from __future__ import annotations

from types import SimpleNamespace  # noqa: F401  (the example)
from typing import Any, Iterable

from vhd.mechanisms._runtime import style_of


def interface_stats(environments: Iterable[Any]) -> dict[str, Any]:
    """{"environments", "families", "tool_names", "argument_names", "tool_sets": {family: count},
    "one_tool_set": [families with a single tool set], "id_styles": {family: [styles]} (families
    whose tools take ids)} of environments with `family`, `presentation` and `tools` (the player's:
    name and input_schema)."""
    names: set[str] = set()
    styles: dict[str, set[str]] = {}
    arguments: set[str] = set()
    sets: dict[str, set[frozenset[str]]] = {}
    count = 0
    for env in environments:
        if env.presentation == "F":
            continue
        count += 1
        tools = [t["name"] for t in env.tools]
        names.update(tools)
        for tool in env.tools:
            for argument, spec in tool.get("input_schema", {}).get("properties", {}).items():
                arguments.add(argument)
                style = style_of(spec)
                if style:
                    styles.setdefault(env.family, set()).add(style)
        sets.setdefault(env.family, set()).add(frozenset(tools))
    per_family = {family: len(found) for family, found in sorted(sets.items())}
    return {"environments": count, "families": len(per_family), "tool_names": len(names),
            "argument_names": len(arguments), "tool_sets": per_family,
            "one_tool_set": [family for family, n in per_family.items() if n == 1],
            "id_styles": {family: sorted(found) for family, found in sorted(styles.items())}}
