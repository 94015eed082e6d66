"""The template setter: offline, deterministic, zero cost.

    >>> from vhd.tasks.setters.passages import builtin_passages
    >>> out = render_module(registry.get("inventory_dp"), builtin_passages()[0])    # the bakery
    >>> out.tool_name("place_order"), out.tool_name("view_stock"), out.tool_name("end_day")
    ('order_loaves', 'view_stock', 'end_day')
    >>> singular("loaves"), singular("splice kits"), singular("boxes"), singular("tonnes")
    ('loaf', 'splice kit', 'box', 'tonne')

It renders the contract module of DESIGN §5 from three parts: the generic runtime
(`vhd/mechanisms/_runtime.py`, standard library only), the family's `World` class without its
`@tool` declarations, and a skin made from a passage's vocabulary (tool names, table names, descriptions, narrative).

A tool's name is a verb of its role and a noun of the passage's world (`lexicon.py`: each family's
tools as slots, `PATTERNS`; `vhd/tasks/setters/data/lexicon.json`: each domain's verbs and nouns), with the
passage's own unit, staff and supplier in their slots (`order_loaves`, `list_bakers`). A passage's
`synonyms` name only the SQLite tables, which the player does not see. A family without patterns
keeps its canonical names (`view_stock`, `cancel_order`, `end_day`).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path

from vhd.mechanisms import Family
from vhd.schemas.errors import SetterError
from vhd.schemas.records import VOCABULARY_KEYS, PassageRecord, SetterOutputRecord, ToolBinding
from vhd.tasks import AST_LOCK
from vhd.tasks.setters.lexicon import id_skin, singular, tool_names  # noqa: F401  (singular: the setter's own too)
from vhd.tasks.setters.skin import skin_line

SETTER = "template"
SETTER_VERSION = "7"
_RUNTIME = Path(__file__).parents[2] / "mechanisms" / "_runtime.py"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


_SOURCE_LOCK = AST_LOCK
_WORLD_SOURCE: dict[str, str] = {}


def world_source(family: Family) -> str:
    """The source of `family.world` without its `@tool(...)` lines (the skin carries the tools,
    and their arguments may name the family module's constants), once per family and under a
    lock: it runs `ast.parse`, which CPython 3.11 does not make safe to call from several threads
    at once (Prefect runs tasks in threads; the race shows up as "AST constructor recursion depth
    mismatch")."""
    with _SOURCE_LOCK:
        if family.code_version not in _WORLD_SOURCE:
            _WORLD_SOURCE[family.code_version] = _without_declarations(inspect.getsource(family.world))
        return _WORLD_SOURCE[family.code_version]


def _without_declarations(source: str) -> str:
    lines = source.splitlines(keepends=True)
    cut: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and getattr(decorator.func, "id", "") == "tool":
                    cut.update(range(decorator.lineno - 1, decorator.end_lineno))
    return "".join(line for k, line in enumerate(lines) if k not in cut)


def narrative(passage: PassageRecord) -> str:
    """The passage's first sentence: the opening line of every instruction skinned by it."""
    return passage.text.split(". ")[0].rstrip(".") + "."


# "one {unit}", "a {unit}", "per {unit}"...: the family's text asks for the singular.
_ONE_UNIT = re.compile(r"\b(one|a|an|per|each|every) \{unit\}")
def fill(text: str, vocab: dict) -> str:
    """A family text in the passage's words: every `{key}` of the vocabulary filled, the singular
    of the unit where the text counts one."""
    return _ONE_UNIT.sub(r"\1 {unit_one}", text).format(**vocab) if "{" in text else text


def tool_name(family: Family, canonical: str, passage: PassageRecord) -> str:
    """The name of a family's tool in the world of a passage (`lexicon.tool_names`)."""
    return tool_names(family, passage)[canonical]


def _skin(family: Family, passage: PassageRecord, plain: bool = False) -> dict:
    vocab = dict(passage.vocabulary)
    words = vocab.pop("synonyms", {})
    vocab.pop("lexicon", None)  # the passage's own verbs and nouns: they made the names
    missing = [key for key in VOCABULARY_KEYS if key not in vocab]
    if missing:  # a passage loaded from a file is checked on load; one built in code may not be
        raise SetterError(f"passage {passage.passage_id[:12]} lacks vocabulary {missing}; every passage names "
                          f"all of {', '.join(VOCABULARY_KEYS)}")
    vocab["unit_one"] = singular(vocab["unit"])
    site = _slug(vocab["site"])

    names = tool_names(family, passage)
    tools = []
    for spec in family.tools:
        schema = json.loads(json.dumps(spec.input_schema))
        for argument in schema.get("properties", {}).values():
            if isinstance(argument.get("description"), str):
                argument["description"] = fill(argument["description"], vocab)
        tools.append({
            "name": names[spec.name],
            "canonical": spec.name,
            "role": spec.role,
            "turn_cost": spec.turn_cost,
            "description": fill(spec.description, vocab),
            "input_schema": schema,
        })
    names = [tool["name"] for tool in tools]
    if len(set(names)) != len(names):
        raise SetterError(f"passage {passage.passage_id} maps two tools of {family.name} to one name: {names}")
    tables = {part: f"{site}_{_slug(words.get(part, part))}" for part in family.tables}
    if len(set(tables.values())) != len(tables):
        raise SetterError(f"passage {passage.passage_id} maps two tables of {family.name} to one name: {tables}")
    ids, renamed = ({}, {}) if plain else id_skin(family, passage)
    return {"family": family.name, "tools": tools, "tables": tables, "vocab": vocab, "narrative": narrative(passage),
            "ids": ids, "renamed": renamed}


def render_module(family: Family, passage: PassageRecord, plain: bool = False) -> SetterOutputRecord:
    """One self-contained module for `family` in the world of `passage` (`plain`: its ids written
    as the World counts them, its arguments named as the family names them)."""
    skin = _skin(family, passage, plain)
    runtime = _RUNTIME.read_text(encoding="utf-8")
    runtime = runtime.split('"""', 2)[2].lstrip()  # drop the runtime's own docstring
    header = (
        f'"""{family.name} environment in the world of a {passage.domain} (passage {passage.passage_id[:12]}).\n\n'
        f"Generated by the vhd {SETTER} setter v{SETTER_VERSION} from {family.code_version}; standard library only.\n"
        '"""\n\n'
    )
    module = (
        header
        + runtime
        + "\n\n"
        + world_source(family)
        + "\n"
        + skin_line(skin)
    )
    interface = tuple(
        ToolBinding(canonical=t["canonical"], name=t["name"], role=t["role"], turn_cost=t["turn_cost"],
                    reveals=family.tool(t["canonical"]).reveals)
        for t in skin["tools"]
    )
    return SetterOutputRecord.build(
        family=family.name,
        family_version=family.version,
        setter=SETTER,
        setter_version=SETTER_VERSION,
        passage_id=passage.passage_id,
        module=module,
        interface=interface,
    )

