"""The family's own World, rendered by the template setter and executed in this process: trusted
code, the oracle that the gates compare candidate modules with and that decision rewards replay
trajectories on.

    >>> from vhd.mechanisms import registry
    >>> module, output = reference_module(registry.get("stopping"))
    >>> callable(module.create) and output.family
    'stopping'
"""

from __future__ import annotations

import json
import math
from typing import Any

from vhd.mechanisms import Family
from vhd.schemas.records import SetterOutputRecord
from vhd.tasks import AST_LOCK

_REFERENCE: dict[str, tuple[Any, SetterOutputRecord]] = {}
_REFERENCE_LOCK = AST_LOCK  # check tasks run in threads; CPython 3.11's ast.parse is not thread-safe


def reference_module(family: Family) -> tuple[Any, SetterOutputRecord]:
    """The family's own World rendered by the template setter and executed here: trusted code,
    the oracle the reference_agreement gate compares a candidate module with. Its ids and
    arguments are the family's own (`render_module(plain=True)`): canonical calls play on it as
    they are."""
    with _REFERENCE_LOCK:
        return _reference_module(family)


def _reference_module(family: Family) -> tuple[Any, SetterOutputRecord]:
    if family.code_version not in _REFERENCE:
        import types

        from vhd.schemas.errors import SetterError
        from vhd.tasks.setters.passages import builtin_passages
        from vhd.tasks.setters.template import render_module

        output = None
        for passage in builtin_passages():  # the first passage that has the family's vocabulary
            try:
                output = render_module(family, passage, plain=True)
                break
            except SetterError:
                continue
        if output is None:
            raise SetterError(f"no built-in passage can skin {family.name}'s reference World")
        module = types.ModuleType(f"vhd_reference_{family.name}")
        exec(compile(output.module, f"<reference {family.code_version}>", "exec"), module.__dict__)
        _REFERENCE[family.code_version] = (module, output)
    return _REFERENCE[family.code_version]


_IN_SKIN: dict[str, Any] = {}
PRESENTATION = ("tables", "vocab", "narrative", "ids", "renamed")  # what a skin says, not what the world does


def reference_skin(family: Family, setter_output: SetterOutputRecord) -> dict[str, Any] | None:
    """The skin the family's own World wears to be compared with `setter_output`'s module: the
    module's presentation — its tool names (its declared interface), tables, words, narrative,
    id styles and argument names — over the trusted skin's tools (their canonical names, roles,
    turn costs and schemas, which no module may change). None for a module without a readable
    SKIN (it is compared with the reference's own)."""
    from vhd.tasks.setters.skin import skin_of

    theirs = skin_of(setter_output.module)
    if theirs is None:
        return None
    ours = skin_of(_reference_module(family)[1].module)
    names = {b.canonical: b.name for b in setter_output.interface}
    tools = [dict(tool, name=names.get(tool["canonical"], tool["name"])) for tool in ours["tools"]]
    return {**ours, **{key: theirs[key] for key in PRESENTATION if key in theirs}, "tools": tools}


def reference_in_skin(family: Family, setter_output: SetterOutputRecord) -> Any:
    """The family's own World in `reference_skin` (executed here): what a candidate's instruction
    and answers are compared with, word for word and number for number; the plain reference for
    a module without a readable SKIN."""
    import types

    from vhd.tasks.setters.skin import with_skin

    with _REFERENCE_LOCK:
        found = _IN_SKIN.get(setter_output.setter_output_id)
        if found is None:
            skin = reference_skin(family, setter_output)
            if skin is None:
                return _reference_module(family)[0]
            if len(_IN_SKIN) >= 64:
                _IN_SKIN.pop(next(iter(_IN_SKIN)))
            found = types.ModuleType(f"vhd_reference_{family.name}_in_skin")
            code = _skinless_code(family)
            if code is None:  # code after the SKIN line: the skinned text compiled whole
                _, output = _reference_module(family)
                code = compile(with_skin(output.module, skin), f"<reference {family.code_version} in a skin>", "exec")
            exec(code, found.__dict__)
            found.SKIN = json.loads(json.dumps(skin, sort_keys=True))  # what `with_skin`'s SKIN line assigns
            _IN_SKIN[setter_output.setter_output_id] = found
        return found


_SKINLESS: dict[str, Any] = {}


def _skinless_code(family: Family) -> Any:
    """The reference module's code compiled once, for every skin: the module ends with its SKIN line,
    so its code run and SKIN then set to a skin is what `with_skin(module, skin)` runs (nothing before
    that line reads SKIN while the module executes: the name is not yet bound). None when code
    follows the SKIN line. Called under the reference lock."""
    if family.code_version not in _SKINLESS:
        from vhd.tasks.setters.skin import SKIN_LINE

        _, output = _reference_module(family)
        head, found, tail = output.module.rpartition(SKIN_LINE)
        last = found and not tail.partition("\n")[2].strip()
        _SKINLESS[family.code_version] = (compile(head + "\n", f"<reference {family.code_version} in a skin>", "exec")
                                          if last else None)
    return _SKINLESS[family.code_version]


def fitted_schemas(family: Family, theta: dict[str, Any]) -> list[dict[str, Any]]:
    """The input schemas of θ's tools as the family's own World fits them to the instance
    (`World.limits`), in presentation I and then A (one per tool and presentation); the family's
    own schemas for a θ its World refuses to start on."""
    module, _ = reference_module(family)
    schemas = []
    for presentation in ("I", "A"):
        try:
            env = module.create({"params": theta, "presentation": presentation, "episode_seed": 0,
                                 "turn_budget": family.turn_budget(theta)})
        except (ValueError, KeyError, IndexError, TypeError):
            return [spec.input_schema for spec in family.tools]
        schemas += [tool["input_schema"] for tool in env.tools]
    return schemas


def fitted_bounds(family: Family, theta: dict[str, Any]) -> dict[str, dict[str, tuple[float, float]]]:
    """{canonical tool: {argument: (low, high)}}: the widest bounds of θ's fitted schemas over
    presentations I and A (the family's own for a θ its World refuses to start on)."""
    bounds: dict[str, dict[str, tuple[float, float]]] = {}
    names = [spec.name for spec in family.tools]  # a module lists its tools in the family's order
    for name, schema in zip(names * 2, fitted_schemas(family, theta)):
        for argument, prop in schema.get("properties", {}).items():
            low, high = prop.get("minimum", -math.inf), prop.get("maximum", math.inf)
            known = bounds.setdefault(name, {}).get(argument, (low, high))
            bounds[name][argument] = (min(known[0], low), max(known[1], high))
    return bounds
