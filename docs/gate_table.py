"""Write the admission gates' table into docs/ADDING_A_FAMILY.md and docs/ARCHITECTURE.md (§7),
between their `<!-- gates:begin -->` and `<!-- gates:end -->` markers: one row per gate of
`vhd.tasks.stages.check.GATES`, in the order they run, made from the gate's own docstring (its first
sentence: what it proves; its sentence starting "Fails": what it rejects).

    PYTHONPATH=. python docs/gate_table.py            # rewrite the table in both docs
    PYTHONPATH=. python docs/gate_table.py --check    # exit 1 if either doc's table is stale

`tests/test_docs.py` checks that both docs hold what `render()` gives today, so a new gate, or a
gate whose docstring changed, makes it fail until this is run.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

from vhd.tasks.stages.check import GATES

DOCS = [Path(__file__).resolve().parent / name for name in ("ADDING_A_FAMILY.md", "ARCHITECTURE.md")]
BEGIN, END = "<!-- gates:begin -->", "<!-- gates:end -->"
COMMAND = "PYTHONPATH=. python docs/gate_table.py"
SENTENCE_END = re.compile(r"(?<=\.)\s+")  # a period then a space: no gate docstring abbreviates


def summary(gate) -> tuple[str, str]:
    """(what the gate proves, what it fails on): its docstring's first sentence, and the sentence
    that starts with "Fails" ("" when there is none), each on one line."""
    text = " ".join(inspect.cleandoc(gate.__doc__ or "").split())
    sentences = SENTENCE_END.split(text)
    fails = next((s for s in sentences if s.startswith("Fails")), "")
    return sentences[0], fails


def render() -> str:
    """The table: each gate, what it proves, and when it fails (its "Fails" sentence without the word)."""
    def cell(text: str) -> str:  # markdown: `|` ends a cell, and `*` outside code would start emphasis
        parts = text.replace("|", "\\|").split("`")
        return "`".join(part if k % 2 else part.replace("*", "\\*") for k, part in enumerate(parts))

    rows = ["| gate | proves | fails |", "|---|---|---|"]
    for name, gate in GATES:
        proves, fails = summary(gate)
        rows.append(f"| `{name}` | {cell(proves)} | {cell(fails.removeprefix('Fails ')) or '–'} |")
    return "\n".join(rows) + "\n"


def documented(text: str) -> str:
    """What a doc holds between the markers ("" without them)."""
    if BEGIN not in text or END not in text:
        return ""
    return text.split(BEGIN + "\n", 1)[1].split(END, 1)[0]


def rewritten(text: str) -> str:
    """The doc with today's table between its markers."""
    head, _, rest = text.partition(BEGIN + "\n")
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{render()}{END}{tail}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a doc's gate table is stale")
    args = parser.parse_args()
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        if BEGIN not in text or END not in text:
            sys.exit(f"{doc} has no {BEGIN} … {END} markers")
        if args.check:
            if documented(text) != render():
                sys.exit(f"{doc}'s gate table is stale: run {COMMAND}")
        elif rewritten(text) != text:
            doc.write_text(rewritten(text), encoding="utf-8")
            print(f"wrote {doc}")


if __name__ == "__main__":
    main()
