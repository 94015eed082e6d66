"""The `superseded` marks, checked against today's code (issue 31): a mark is legitimate only if the
current code makes it. The marks are not sealed: `Warehouse.derived_superseded` derives, from the
rows' own sealed version columns, which rows the current versions (`current_code`) supersede, and
every stored mark is compared with that. A forged mark would drop an environment from the next
corpus version silently: `vhd verify` reports it (`mark_findings`) and publishing refuses it
(`refuse_forged`). `wh` is an open warehouse (tasks compute on what flows and the CLI hand them).
"""

from __future__ import annotations

from typing import Any

from vhd.tasks.corpus.publish import (  # noqa: F401
    current_code, finding, mark_problems, refuse_stored_twice, refuse_tampered_marks, stored_twice_findings,
)


def refuse_forged(wh: Any) -> None:
    """An IntegrityError (one line) when a stored mark is one the current code does not make (every
    reader of a version checks the same, `publish.open_version`), or a key of checks or
    lineage_edges is stored twice (`refuse_stored_twice`): the first step of every publish."""
    refuse_tampered_marks(wh)
    refuse_stored_twice(wh)


def mark_findings(wh: Any) -> tuple[list[dict[str, str]], list[str]]:
    """`mark_problems` for `vhd verify`: a finding (table `superseded`) per mark the current code
    does not derive, and a note per kind of the rows it supersedes that carry no mark yet — what
    a warehouse holds between a code upgrade and the next `vhd refresh`, which marks them before
    it publishes, so not a finding. Also a finding per key of checks or lineage_edges stored twice."""
    found, unmarked = [], {}
    marks = wh.superseded()
    for record_id, what, problem in mark_problems(wh):
        if what == "unmarked":
            kind = problem.split()[1]
            unmarked.setdefault(kind, []).append(record_id)
        else:
            env_id = record_id if marks[record_id]["kind"] == "environment" else ""
            found.append(finding(env_id, "superseded", record_id, "kind" if what == "kind" else "id", problem))
    found += stored_twice_findings(wh)  # not a mark, but an edit no sealed digest covers either
    notes = [f"{len(ids)} {kind} rows the current code supersedes carry no superseded mark yet (e.g. {ids[0][:12]}…): "
             "`vhd refresh` marks them before it publishes" for kind, ids in sorted(unmarked.items())]
    return found, notes
