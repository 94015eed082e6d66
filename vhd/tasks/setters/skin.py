"""A module's skin and its interface: how the player's calls map to the family's canonical ones.

    >>> from vhd.mechanisms import registry
    >>> from vhd.tasks.setters.passages import builtin_passages
    >>> from vhd.tasks.setters.template import render_module
    >>> family = registry.get("knapsack")
    >>> hub = next(p for p in builtin_passages() if p.vocabulary["site"] == "parcel hub")
    >>> interface = Interface.of(family, render_module(family, hub))
    >>> interface.shown({"tool": "add_item", "arguments": {"item": 6}})   # the 7th consignment
    {'tool': 'load_consignment', 'arguments': {'consignment': 'C-07'}}
    >>> interface.canonical({"tool": "load_consignment", "arguments": {"consignment": "C-07"}})
    {'tool': 'add_item', 'arguments': {'item': 6}}
    >>> interface.canonical({"tool": "load_consignment", "arguments": {"consignment": "C-7"}})  # malformed stays so
    {'tool': 'add_item', 'arguments': {'item': 'C-7'}}

A template module ends in `SKIN = json.loads(...)`: the world's tool names, tables, words, and how it
writes ids and names arguments (`vhd.mechanisms._runtime.argument_maps`). Everything outside the
module that replays, grades or exports its calls translates them here, with the same functions
the module's `Env` runs, so a call means the same thing on every side: the gates' canonical call
sequences go in as the world takes them (`shown`), and a player's trajectory is graded on the
family's own World as the canonical calls it means (`canonical`). A module without a readable
SKIN (an LLM setter's own) maps tool names only.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from vhd.mechanisms import Family
from vhd.mechanisms._runtime import argument_maps, canonical_arguments, shown_arguments
from vhd.tasks import AST_LOCK

SKIN_LINE = "\nSKIN = json.loads("
UNKNOWN = "\x00unknown:"  # a name outside the interface: a call every World refuses


def skin_line(skin: dict[str, Any]) -> str:
    """The line a module ends with: `SKIN = json.loads("<the skin's JSON>")`, the JSON text written
    as a JSON string, which is also the Python literal of the same text (the text is ASCII: JSON's
    own escapes), so reading it back needs no Python parser (`ast` is not thread-safe in 3.11)."""
    return SKIN_LINE + json.dumps(json.dumps(skin, sort_keys=True)) + ")\n"


def skin_of(module: str) -> dict[str, Any] | None:
    """The SKIN a module assigns on its last `SKIN = json.loads(...)` line, or None if it has no
    readable one (code after that line, as an LLM setter may write, is left alone). A module of an
    older setter wrote the text as a Python literal in single quotes: read with `ast` under the lock."""
    _, found, tail = module.rpartition(SKIN_LINE)
    if not found:
        return None
    line = tail.split("\n", 1)[0].rstrip()
    if not line.endswith(")"):
        return None
    try:
        if line.startswith('"'):
            text = json.loads(line[:-1])
        else:
            with AST_LOCK:  # ast parses: not thread-safe in CPython 3.11 (check tasks run in threads)
                text = ast.literal_eval(line[:-1])
        skin = json.loads(text) if isinstance(text, str) else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return skin if isinstance(skin, dict) and isinstance(skin.get("tools"), list) else None


def with_skin(module: str, skin: dict[str, Any]) -> str:
    """`module` with its SKIN line replaced by `skin` (its code, which the gates judged, unchanged)."""
    head, found, tail = module.rpartition(SKIN_LINE)
    if not found:
        raise ValueError("the module has no SKIN to replace")
    _, newline, rest = tail.partition("\n")
    return head + skin_line(skin) + (rest if newline else "")


class Interface:
    """One module's tools: {its name: canonical} and each tool's argument names and id styles."""

    def __init__(self, family: Family, names: dict[str, str], skin: dict[str, Any] | None):
        self.names = dict(names)  # module name -> canonical
        self._by_canonical = {canonical: name for name, canonical in self.names.items()}
        ids = getattr(family.world, "IDS", {})
        self._maps = {spec.name: argument_maps(spec.input_schema.get("properties", {}), ids, skin or {})
                      for spec in family.tools}

    @classmethod
    def of(cls, family: Family, output: Any) -> "Interface":
        """The interface of a SetterOutputRecord (its bindings, and its module's SKIN)."""
        return cls(family, {b.name: b.canonical for b in output.interface}, skin_of(output.module))

    @classmethod
    def of_row(cls, family: Family, names: dict[str, str], module: str) -> "Interface":
        """The interface of an export row: its grader's names and its module's SKIN."""
        return cls(family, names, skin_of(module))

    def canonical(self, call: dict[str, Any]) -> dict[str, Any]:
        """A player's call as the family's World takes it; a tool outside the interface becomes
        `UNKNOWN` (refused by every World), its arguments kept."""
        tool, arguments = call.get("tool"), call.get("arguments")
        canonical = self.names.get(tool, UNKNOWN) if isinstance(tool, str) else UNKNOWN
        if canonical in self._maps:
            arguments = canonical_arguments(self._maps[canonical], arguments)
        return {"tool": canonical, "arguments": arguments}

    def shown(self, call: dict[str, Any]) -> dict[str, Any]:
        """A canonical call as the module's player makes it (a tool it does not know stays as it is)."""
        tool, arguments = call["tool"], call["arguments"]
        if tool in self._maps:
            arguments = shown_arguments(self._maps[tool], arguments)
        return {"tool": self._by_canonical.get(tool, tool), "arguments": arguments}


_INTERFACES: dict[str, Interface] = {}


def interface_of(output: Any) -> Interface:
    """`Interface.of` a SetterOutputRecord, kept per setter output (a check batch translates
    thousands of calls of one module)."""
    found = _INTERFACES.get(output.setter_output_id)
    if found is None:
        from vhd.mechanisms import registry

        if len(_INTERFACES) >= 512:
            _INTERFACES.pop(next(iter(_INTERFACES)))
        found = _INTERFACES[output.setter_output_id] = Interface.of(registry.get(output.family), output)
    return found


def shown_calls(output: Any, canonical: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Canonical tool calls as the module's player makes them: its tool names, argument names and ids."""
    interface = interface_of(output)
    return [interface.shown(call) for call in canonical]
