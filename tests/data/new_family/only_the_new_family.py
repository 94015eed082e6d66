"""A pytest plugin for tests/test_add_family.py's run in a copy of the tree (`-p only_the_new_family`).

A test parametrised by a registered family's name (or by a family module's name, `vhd.mechanisms.NAME`)
runs only for the new family, `VHD_NEW_FAMILY`; every other test runs as it is, but those deselected:
`VHD_DESELECT` names tests and `VHD_DESELECT_FIXTURES` fixtures whose tests are not run (JSON: {node id
or fixture: reason}). `VHD_EXPECTED_FAILURES` ({node id: reason}) marks a test a strict xfail: a test
that is expected to fail there until what it checks is derived from the registry, and that fails this
run once it passes (the mark is then stale and must go). A name in any of the three that no collected
test has is an error (renamed?).
"""

from __future__ import annotations

import json
import os

import pytest


def _family_in(value, families):
    if not isinstance(value, str):
        return None
    name = value[len("vhd.mechanisms."):] if value.startswith("vhd.mechanisms.") else value
    return name if name in families else None


def pytest_collection_modifyitems(config, items):
    from vhd.mechanisms import registry

    new, families = os.environ["VHD_NEW_FAMILY"], set(registry.names())
    assert new in families, f"the copy does not register {new!r}"
    deselect = json.loads(os.environ.get("VHD_DESELECT", "{}"))
    fixtures = json.loads(os.environ.get("VHD_DESELECT_FIXTURES", "{}"))
    expected = json.loads(os.environ.get("VHD_EXPECTED_FAILURES", "{}"))
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        named = {_family_in(value, families) for value in params.values()} - {None}
        if (named and new not in named) or item.nodeid in deselect or set(fixtures) & set(item.fixturenames):
            drop.append(item)
            continue
        if item.nodeid in expected:
            item.add_marker(pytest.mark.xfail(strict=True, reason=expected[item.nodeid]))
        keep.append(item)
    unknown = (set(deselect) | set(expected)) - {item.nodeid for item in items}
    unknown |= set(fixtures) - {name for item in items for name in item.fixturenames}
    assert not unknown, f"no such tests or fixtures (renamed?): {sorted(unknown)}"
    config.hook.pytest_deselected(items=drop)
    items[:] = keep
