"""Which modules are the template setter's own renders: trusted code, the family's World in a skin.

    >>> from vhd.mechanisms import registry
    >>> from vhd.tasks.setters.passages import builtin_passages
    >>> knapsack, passage = registry.get("knapsack"), builtin_passages()[0]
    >>> output = render_module(knapsack, passage)
    >>> is_render(knapsack, output), is_render(knapsack, output.model_copy(update={"module": output.module + "#"}))
    (True, False)
"""

from __future__ import annotations

from vhd.mechanisms import Family
from vhd.schemas.errors import SetterError
from vhd.schemas.records import PassageRecord, SetterOutputRecord
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.setters.template import SETTER, SETTER_VERSION, render_module

_RENDERED: dict[tuple[str, str], str | None] = {}  # (family code version, passage id) -> the render's id
_BUILTIN: dict[str, PassageRecord] = {}  # passage id -> the built-in passage (the template setter skins with these)


def rendered_id(family: Family, passage_id: str) -> str | None:
    """The id of the module the template setter renders for `family` in the built-in passage `passage_id`
    (None: no built-in passage has that id, or it cannot skin the family); once per (family
    version, passage) in a process: at most families × passages renders."""
    key = (family.code_version, passage_id)
    if key not in _RENDERED:
        if not _BUILTIN:
            _BUILTIN.update((p.passage_id, p) for p in builtin_passages())
        passage = _BUILTIN.get(passage_id)
        try:
            _RENDERED[key] = render_module(family, passage).setter_output_id if passage is not None else None
        except SetterError:
            _RENDERED[key] = None
    return _RENDERED[key]


def is_render(family: Family, output: SetterOutputRecord) -> bool:
    """Whether `output` is this setter's render of `family` in its built-in passage: its content
    (module text, interface, setter and family versions, passage) hashes to the render's id. Such
    a module is the family's own World in a skin: trusted code."""
    if output.setter != SETTER or output.setter_version != SETTER_VERSION or output.family_version != family.version:
        return False
    try:
        content = output.expected_id()
    except (TypeError, ValueError, AttributeError):
        return False
    return content == rendered_id(family, output.passage_id)
