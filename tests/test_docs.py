"""The docs that describe the registry say what it holds, without naming a family here: every
row of docs/FAMILIES.md's tables is what `vhd families --markdown` prints for that family or
group today. A family that is not listed yet breaks nothing (adding one is one file and one
test); a listed one whose facts changed, or that no longer exists, does."""

from pathlib import Path

from vhd.cli import _families_markdown, _family_row
from vhd.mechanisms import registry

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _table(text: str) -> tuple[list[str], dict[str, str]]:
    """A markdown table's two header lines and its rows by their first cell."""
    lines = [line for line in text.strip().splitlines() if line.startswith("|")]
    return lines[:2], {line.split("|")[1].strip(): line for line in lines[2:]}


def _documented(marker: str) -> str:
    text = (DOCS / "FAMILIES.md").read_text(encoding="utf-8")
    return text.split(f"<!-- {marker}:begin -->\n", 1)[1].split(f"<!-- {marker}:end -->", 1)[0]


def test_every_row_of_the_families_table_is_the_registrys():
    header, documented = _table(_documented("families"))
    rendered_header, rendered = _table(_families_markdown([_family_row(f) for f in registry.all()]))
    assert header == rendered_header and documented
    for name, row in documented.items():
        assert row == rendered.get(name), \
            f"docs/FAMILIES.md's row of {name} is stale: regenerate the table with `vhd families --markdown`"


def test_the_group_table_lists_each_family_in_its_own_group():
    _, groups = _table(_documented("groups"))
    assert groups, "docs/FAMILIES.md has no group table between <!-- groups:begin/end --> markers"
    for group, row in groups.items():
        listed = [name.strip() for name in row.split("|")[3].split(",")]
        assert all(registry.get(name.strip("`")).group == group.strip("`") for name in listed), row

