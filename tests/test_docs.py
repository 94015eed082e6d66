"""The docs that describe the registry match it."""

from pathlib import Path

from vhd.cli import _families_markdown, _family_row
from vhd.mechanisms import registry

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_families_md_table_is_the_registry():
    text = (DOCS / "FAMILIES.md").read_text(encoding="utf-8")
    section = text.split("<!-- families:begin -->\n", 1)[1].split("<!-- families:end -->", 1)[0]
    assert section == _families_markdown([_family_row(f) for f in registry.all()]), \
        "docs/FAMILIES.md is stale: regenerate the table with `vhd families --markdown`"


def test_every_family_is_named_in_the_group_table():
    text = (DOCS / "FAMILIES.md").read_text(encoding="utf-8")
    groups = text.split("<!-- families:begin -->", 1)[0]
    assert all(name in groups for name in registry.names())
