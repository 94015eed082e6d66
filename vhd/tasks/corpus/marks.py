"""The `superseded` marks, checked against today's code (issue 31): a mark is legitimate only if the
current code makes it. The marks are not sealed: `Warehouse.derived_superseded` derives, from the
rows' own sealed version columns, which rows the current versions (`current_code`) supersede, and
every stored mark is compared with that. A forged mark would drop an environment from the next
corpus version silently: `vhd verify` reports it (`mark_findings`) and publishing refuses it
(`refuse_forged`). `wh` is an open warehouse (tasks compute on what flows and the CLI hand them).
"""

from __future__ import annotations

from typing import Any

from vhd.schemas.errors import IntegrityError
from vhd.tasks.corpus.publish import finding


def current_code() -> tuple[dict[str, str], str, dict[str, str]]:
    """What `flows.refresh.run_batch` marks superseded with: every registered family's version,
    the annotator/checker version, the template setter's version."""
    from vhd.mechanisms import registry
    from vhd.tasks.stages.annotate import CODE_VERSION
    from vhd.tasks.setters.template import SETTER, SETTER_VERSION

    return {f.name: f.version for f in registry.all()}, CODE_VERSION, {SETTER: SETTER_VERSION}


def mark_problems(wh: Any) -> list[tuple[str, str, str]]:
    """(id, what, problem) for every `superseded` row the current code does not derive (`what`:
    "forged", or "kind" when it derives another kind) and every row it supersedes that carries
    no mark ("unmarked"; the next `vhd refresh` marks it). The marks are not sealed: they are
    checked by being derived again from the rows' own sealed version columns
    (`Warehouse.derived_superseded`), so a mark is legitimate only if today's code makes it."""
    derived = wh.derived_superseded(*current_code())
    marks = wh.superseded()
    out = []
    for record_id, mark in sorted(marks.items()):
        kind = derived.get(record_id)
        if kind is None:
            out.append((record_id, "forged", f"marked superseded ({mark['kind']}), but the current code does not "
                                             "supersede it: no stored row of that id was made by another version"))
        elif kind != mark["kind"]:
            out.append((record_id, "kind", f"marked superseded as a {mark['kind']!r}, but it is a superseded {kind!r}"))
    for record_id, kind in sorted(derived.items()):
        if record_id not in marks:
            out.append((record_id, "unmarked", f"a {kind} the current code supersedes carries no superseded mark "
                                               "(`vhd refresh` marks it)"))
    return out


def refuse_forged(wh: Any) -> None:
    """An IntegrityError (one line) when a stored mark is one the current code does not make."""
    forged = [p for p in mark_problems(wh) if p[1] != "unmarked"]
    if forged:
        record_id, _, problem = forged[0]
        raise IntegrityError(f"superseded {record_id} id: {problem}"
                             + (f" (and {len(forged) - 1} more marks)" if len(forged) > 1 else "")
                             + "; run `vhd verify` for every problem")


def mark_findings(wh: Any) -> tuple[list[dict[str, str]], list[str]]:
    """`mark_problems` for `vhd verify`: a finding (table `superseded`) per mark the current code
    does not derive, and a note per kind of the rows it supersedes that carry no mark yet — what
    a warehouse holds between a code upgrade and the next `vhd refresh`, which marks them before
    it publishes, so not a finding."""
    found, unmarked = [], {}
    marks = wh.superseded()
    for record_id, what, problem in mark_problems(wh):
        if what == "unmarked":
            kind = problem.split()[1]
            unmarked.setdefault(kind, []).append(record_id)
        else:
            env_id = record_id if marks[record_id]["kind"] == "environment" else ""
            found.append(finding(env_id, "superseded", record_id, "kind" if what == "kind" else "id", problem))
    notes = [f"{len(ids)} {kind} rows the current code supersedes carry no superseded mark yet (e.g. {ids[0][:12]}…): "
             "`vhd refresh` marks them before it publishes" for kind, ids in sorted(unmarked.items())]
    return found, notes
