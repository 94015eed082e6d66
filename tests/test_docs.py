"""The docs that describe the registry say what it holds, without naming a family here: every
row of docs/FAMILIES.md's tables is what `vhd families --markdown` prints for that family or
group today. A family that is not listed yet breaks nothing (adding one is one file and one
test); a listed one whose facts changed, or that no longer exists, does."""

import importlib.util
import re
from pathlib import Path

import pytest

from vhd.cli import _families_markdown, _family_row
from vhd.mechanisms import registry
from vhd.tasks.stages.check import GATES

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _table(text: str) -> tuple[list[str], dict[str, str]]:
    """A markdown table's two header lines and its rows by their first cell."""
    lines = [line for line in text.strip().splitlines() if line.startswith("|")]
    return lines[:2], {line.split("|")[1].strip(): line for line in lines[2:]}


def _documented(marker: str) -> str:
    text = (DOCS / "FAMILIES.md").read_text(encoding="utf-8")
    return text.split(f"<!-- {marker}:begin -->\n", 1)[1].split(f"<!-- {marker}:end -->", 1)[0]


@pytest.mark.registry
def test_every_row_of_the_families_table_is_the_registrys():
    header, documented = _table(_documented("families"))
    rendered_header, rendered = _table(_families_markdown([_family_row(f) for f in registry.all()]))
    assert header == rendered_header and documented
    for name, row in documented.items():
        assert row == rendered.get(name), \
            f"docs/FAMILIES.md's row of {name} is stale: regenerate the table with `vhd families --markdown`"


@pytest.mark.registry
def test_the_group_table_lists_each_family_in_its_own_group():
    _, groups = _table(_documented("groups"))
    assert groups, "docs/FAMILIES.md has no group table between <!-- groups:begin/end --> markers"
    for group, row in groups.items():
        listed = [name.strip() for name in row.split("|")[3].split(",")]
        assert all(registry.get(name.strip("`")).group == group.strip("`") for name in listed), row



# -- the admission gates: a table generated from their docstrings (docs/gate_table.py) ------------
ROOT = DOCS.parent


def _gate_table():
    """docs/gate_table.py, loaded from its file (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("gate_table", DOCS / "gate_table.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    return generator


@pytest.mark.parametrize("doc", ["ADDING_A_FAMILY.md", "ARCHITECTURE.md"])
def test_the_gate_table_is_generated_from_the_gates_docstrings(doc):
    generator = _gate_table()
    table = generator.render()
    assert [row.split("`")[1] for row in table.splitlines()[2:]] == [name for name, _ in GATES]
    assert all(" | – |" not in row for row in table.splitlines()), "every gate's docstring says when it fails"
    text = (DOCS / doc).read_text(encoding="utf-8")
    assert generator.BEGIN in text and generator.END in text, f"docs/{doc} lost its gate-table markers"
    assert generator.documented(text) == table, f"docs/{doc}'s gate table is stale: run {generator.COMMAND}"
    row = next(line for line in table.splitlines() if line.startswith("| `decision_reward` |"))
    stale = text.replace(row + "\n", "")  # control: a table without a gate is caught
    assert generator.documented(stale) != table and generator.documented(generator.rewritten(stale)) == table


def test_architecture_details_every_gate_in_the_order_they_run():
    text = (DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## 7. ", 1)[1].split("\n## 8. ", 1)[0]
    generator = _gate_table()
    details = section.replace(generator.documented(section), "")  # the hand-written table after the generated one
    detailed = [line.split("`")[1] for line in details.splitlines() if line.startswith("| `")]
    assert detailed == [name for name, _ in GATES], \
        "docs/ARCHITECTURE.md §7's detailed table must have one row per gate of GATES, in their order"


# -- counts of families: none in the docs, so a new family leaves them true -----------------------
# tests/test_add_family.py runs this file on a copy of the tree with one family more, and adding a
# family is one file and one test: a doc that said "sixteen families" would then be false (or, were
# it checked against the registry, fail that test). So the docs say which families, never how many.
UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
        "seventeen eighteen nineteen".split()
TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
# a number right before "families", or before group names in backticks or the word "paper" (the paper's
# N families, N `beyond` families, the N `near_ood` and `far_ood` families); not "the five diagnostic
# families" (a preset's fixed list) nor "a 16-family corpus" (a past measurement)
COUNT = re.compile(r"\b(?:\d+|(?:%s)(?:-(?:%s))?)\s+(?:`\w+`(?:-group)?|paper|and|,|\s)*?families\b"
                   % ("|".join(UNITS + TENS), "|".join(UNITS[1:10])), re.IGNORECASE)
COUNTED = ("README.md", "docs/ARCHITECTURE.md", "docs/FAMILIES.md", "docs/ADDING_A_FAMILY.md")


def family_counts(text: str) -> list[tuple[int, str]]:
    """(line number, phrase) of every count of the registry's families in a doc's text."""
    return [(number, match[0]) for number, line in enumerate(text.splitlines(), 1) for match in COUNT.finditer(line)]


def test_no_doc_counts_the_registrys_families():
    assert all((ROOT / doc).exists() for doc in COUNTED)  # test_add_family's copy of the tree has them too
    found = [f"{doc}:{line} says {phrase!r}" for doc in COUNTED
             for line, phrase in family_counts((ROOT / doc).read_text(encoding="utf-8"))]
    assert not found, ("; ".join(found) + ": the next family makes that false; name the families or their groups "
                       "(docs/FAMILIES.md lists them), not how many")


def test_counts_of_families_are_recognised():
    text = ("Sixteen families are registered: eleven paper families, and five `beyond` families.\n"
            "over the three `train`-group families; the eight `near_ood`, `far_ood` and `probe_budgeted` families\n"
            "in the paper's twenty-one families; all 16 families\n"
            "2,200 spread over the `train`-group families; the five diagnostic families; a 16-family corpus")
    assert family_counts(text) == [
        (1, "Sixteen families"), (1, "eleven paper families"), (1, "five `beyond` families"),
        (2, "three `train`-group families"), (2, "eight `near_ood`, `far_ood` and `probe_budgeted` families"),
        (3, "twenty-one families"), (3, "16 families")]
