"""The passage corpus: coverage, every family x every passage renders, different passages make
different worlds, the user-corpus loader (JSONL and Parquet) and `vhd passages [add]`."""

import json
import os
import re
import subprocess
import sys
import types
from collections import Counter

import pytest

from vhd.mechanisms import registry
from vhd.schemas.errors import PassageFormatError, SetterError
from vhd.schemas.records import PassageRecord
from vhd.tasks.setters.passages import CORE_SYNONYMS, SYNONYM_PARTS, VOCABULARY_KEYS, builtin_passages, load_passages
from vhd.tasks.stages.sample import draw
from vhd.tasks.setters.template import render_module

PASSAGES = builtin_passages()
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _env(family, passage, theta, presentation="I"):
    out = render_module(family, passage)
    module = types.ModuleType("generated_passage")
    exec(compile(out.module, "<generated>", "exec"), module.__dict__)  # the template setter's own output
    env = module.create({"params": theta, "presentation": presentation, "episode_seed": 0,
                         "turn_budget": family.turn_budget(theta)})
    return out, module, env


# -- the corpus ------------------------------------------------------------------------------
def test_corpus_covers_28_domains_three_passages_each_with_unique_ids():
    per_domain = Counter(p.domain for p in PASSAGES)
    assert len(per_domain) >= 28 and min(per_domain.values()) >= 3, per_domain
    assert len(PASSAGES) >= 84
    assert len({p.passage_id for p in PASSAGES}) == len(PASSAGES)
    assert all(p.expected_id() == p.passage_id for p in PASSAGES)
    assert PASSAGES[0].domain == "bakery" and [p.domain for p in PASSAGES[:3]] == ["bakery", "hospital_pharmacy",
                                                                                  "bike_shop"]
    for domain in ("retail", "hospital_pharmacy", "logistics", "agriculture", "energy", "airline", "banking",
                   "manufacturing"):
        assert domain in per_domain


def test_every_row_has_the_vocabulary_and_one_word_synonyms():
    for p in PASSAGES:
        assert p.source == "written for this project"
        assert 2 <= len(re.findall(r"\.(?:\s|$)", p.text)) <= 4, p.text
        assert set(p.vocabulary) == set(VOCABULARY_KEYS) | {"synonyms"}
        assert all(isinstance(p.vocabulary[k], str) and p.vocabulary[k].strip() for k in VOCABULARY_KEYS)
        words = p.vocabulary["synonyms"]
        assert set(CORE_SYNONYMS) <= set(words) <= set(SYNONYM_PARTS)
        assert all(re.fullmatch(r"[a-z]+", w) for w in words.values())
    # the synonyms vary: no two passages rename the core parts the same way
    core = [tuple(p.vocabulary["synonyms"][k] for k in CORE_SYNONYMS) for p in PASSAGES]
    assert len(set(core)) == len(core)
    # the file is loadable by the user loader too, without a single rejection
    assert [p.passage_id for p in load_passages(_builtin_file())[0]] == [p.passage_id for p in PASSAGES]
    assert load_passages(_builtin_file())[1] == []


def _builtin_file():
    from importlib import resources

    return resources.files("vhd.tasks.setters").joinpath("data/passages.jsonl")


@pytest.mark.parametrize("name", registry.names())
def test_every_family_renders_with_every_passage(name):
    family = registry.get(name)
    _, theta = draw(family, 0)
    for p in PASSAGES:
        out = render_module(family, p)  # raises SetterError if two tools map to one name
        names = [b.name for b in out.interface]
        assert len(set(names)) == len(names) == len(family.tools), (p.domain, names)
        assert all(TOOL_NAME.fullmatch(n) for n in names), (p.domain, names)
        for presentation in ("I", "A"):
            _, module, env = _env(family, p, theta, presentation)
            assert [t["name"] for t in env.tools] == names
            assert env.instruction.startswith(p.text.split(". ")[0])
        tables = list(module.SKIN["tables"].values())
        assert len(set(tables)) == len(tables) and all(re.fullmatch(r"[a-z][a-z0-9_]*", t) for t in tables)


# -- different passages, different worlds ----------------------------------------------------
def _world(family, passage, theta):
    out, module, env = _env(family, passage, theta)
    return {"tools": tuple(t["name"] for t in env.tools), "tables": tuple(sorted(module.SKIN["tables"].values())),
            "instruction": env.instruction}


def _first(domain):
    return next(p for p in PASSAGES if p.domain == domain)


@pytest.mark.parametrize("name", ["inventory_dp", "knapsack", "rostering"])
def test_passages_of_different_domains_give_different_tool_names_tables_and_instructions(name):
    """Tables, instructions and tool names differ between passages of different domains: each
    domain names its world's tools in its own verbs and nouns (issue 29; `vhd/tasks/setters/data/lexicon.json`),
    and the passage adds its unit and staff (`order_loaves`, `list_bakers`); a name still says what the
    tool does (tests/test_tool_names.py)."""
    family = registry.get(name)
    _, theta = draw(family, 0)
    pairs = [(PASSAGES[0], _first("banking")), (_first("retail"), _first("logistics")),
             (_first("energy"), _first("airline"))]
    for a, b in pairs:
        assert a.domain != b.domain
        wa, wb = _world(family, a, theta), _world(family, b, theta)
        assert set(wa["tools"]) != set(wb["tools"]), (a.domain, b.domain, wa["tools"])
        assert not set(wa["tables"]) & set(wb["tables"]), (a.domain, b.domain)
        assert wa["instruction"] != wb["instruction"]
    # every passage that gives all eleven words gives these families tables and an instruction of
    # its own, and many tool sets (two passages of a domain may pick the same words)
    full = [p for p in PASSAGES if set(p.vocabulary["synonyms"]) == set(SYNONYM_PARTS)]
    assert len(full) >= 80
    worlds = [_world(family, p, theta) for p in full]
    for key in ("tables", "instruction"):
        assert len({w[key] for w in worlds}) == len(worlds), key
    assert len({w["tools"] for w in worlds}) >= 45


# -- the loader ------------------------------------------------------------------------------
ZOO = {"domain": "zoo", "source": "written for a test", "text": "A city zoo feeds its penguins herring. The fish "
       "supplier delivers frozen blocks.",
       "vocabulary": {"site": "zoo", "item": "herring blocks", "sku": "HER-10", "unit": "blocks",
                      "supplier": "fish supplier", "currency": "EUR",
                      "synonyms": {"order": "feed", "orders": "feeds", "stock": "freezer", "cash": "grant",
                                   "day": "feeding", "sales": "meals"}}}


def _variant(**changes):
    row = json.loads(json.dumps(ZOO))
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".", 1)
            if "." in inner:
                mid, leaf = inner.split(".")
                row[outer][mid][leaf] = value
            elif value is None:
                row[outer].pop(inner)
            else:
                row[outer][inner] = value
        elif value is None:
            row.pop(key)
        else:
            row[key] = value
    return row


def test_a_passage_built_in_code_without_a_word_is_refused_by_name():
    """The loader refuses a row without every vocabulary word; a PassageRecord built in code
    skips the loader, so the setter checks again and names what is missing."""
    good = PASSAGES[0]
    vocabulary = {k: v for k, v in good.vocabulary.items() if k != "unit"}
    bare = PassageRecord.build(domain=good.domain, source=good.source, text=good.text, vocabulary=vocabulary)
    with pytest.raises(SetterError, match=r"lacks vocabulary \['unit'\]"):
        render_module(registry.get("stopping"), bare)


def test_load_passages_keeps_good_rows_and_names_each_bad_row(tmp_path):
    rows = [
        ZOO,                                                             # 1 ok
        _variant(domain=""),                                             # 2
        "{not json",                                                     # 3
        "",                                                              # 4 blank: skipped, still counted
        _variant(text=None),                                             # 5
        _variant(**{"vocabulary.currency": None}),                       # 6
        _variant(**{"vocabulary.synonyms.stock": "Two Words"}),          # 7
        _variant(**{"vocabulary.synonyms.stock": "meals"}),              # 8 table zoo_meals twice in ecommerce
        _variant(domain="zoo2", extra=1),                                # 9
        ZOO,                                                             # 10 duplicate of row 1
        [1, 2],                                                          # 11
        _variant(domain="aquarium", **{"vocabulary.site": "7 seas"}),    # 12
        _variant(**{"vocabulary.synonyms.basket": "tub"}),               # 13
        _variant(domain="aquarium", **{"vocabulary.synonyms.item": "fish", "vocabulary.synonyms.items": "fishes"}),
        _variant(domain="zoo3", passage_id="0" * 64),                    # 15
    ]
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    records, errors = load_passages(path)
    assert [r.domain for r in records] == ["zoo", "aquarium"]
    assert records[1].vocabulary["synonyms"]["items"] == "fishes"
    assert [e.split(":")[0] for e in errors] == [f"row {n}" for n in (2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15)]
    reasons = dict(e.split(": ", 1) for e in errors)
    assert "domain must be a non-empty string" in reasons["row 2"]
    assert "not valid JSON" in reasons["row 3"]
    assert "missing text" in reasons["row 5"]
    assert "lacks currency" in reasons["row 6"]
    assert "[a-z]+" in reasons["row 7"]
    assert "same name" in reasons["row 8"]
    assert "unknown fields ['extra']" in reasons["row 9"]
    assert "same passage as row 1" in reasons["row 10"]
    assert "expected an object" in reasons["row 11"]
    assert "start with a letter" in reasons["row 12"]
    assert "unknown parts ['basket']" in reasons["row 13"]
    assert "does not match its content" in reasons["row 15"]


def test_a_passage_may_carry_its_own_lexicon(tmp_path):
    """A passage of a domain the lexicon file does not know names its world through its own
    `vocabulary.lexicon` (verbs by class, nouns; `family:key` for one family); without one it
    takes the families' own words. A bad lexicon is a rejected row that names the problem."""
    own = {"verbs": {"knapsack:add": "feed", "view": "watch"}, "nouns": {"lot": "herring block"}}
    rows = [_variant(**{"vocabulary.lexicon": own}), _variant(domain="aquarium"),
            _variant(domain="zoo2", **{"vocabulary.lexicon": {"verbs": {"fly": "soar"}}}),
            _variant(domain="zoo3", **{"vocabulary.lexicon": {"verbs": {"view": "look at"}}}),
            _variant(domain="zoo4", **{"vocabulary.lexicon": {"nouns": {"lot": "Herring"}}})]
    path = tmp_path / "lexicons.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    records, errors = load_passages(path)
    assert [r.domain for r in records] == ["zoo", "aquarium"]
    assert [e.split(": ", 1)[0] for e in errors] == ["row 3", "row 4", "row 5"]
    assert "vocabulary.lexicon: unknown verb 'fly'" in errors[0] and "expected one word" in errors[1]
    assert "expected lowercase words" in errors[2]
    knapsack = registry.get("knapsack")
    mine, plain = (render_module(knapsack, r) for r in records)
    assert [mine.tool_name(t) for t in ("add_item", "list_items", "view_selection", "remove_item")] == [
        "feed_herring_block", "list_herring_blocks", "watch_selection", "remove_herring_block"]
    assert [plain.tool_name(t) for t in ("add_item", "list_items")] == ["add_lot", "list_lots"]  # the family's words
    _, theta = draw(knapsack, 0)
    _, module, env = _env(knapsack, records[0], theta)
    assert "lexicon" not in module.SKIN["vocab"] and "feed_herring_block" in env.instruction


def test_parquet_round_trip_gives_the_same_ids(tmp_path):
    import polars as pl

    rows = [{"domain": p.domain, "source": p.source, "text": p.text, "vocabulary": p.vocabulary} for p in PASSAGES]
    struct = tmp_path / "struct.parquet"
    pl.DataFrame(rows).write_parquet(struct)  # vocabulary as a nested struct (missing synonyms read back as null)
    as_text = tmp_path / "text.parquet"
    pl.DataFrame([{**r, "vocabulary": json.dumps(r["vocabulary"])} for r in rows]).write_parquet(as_text)
    for path in (struct, as_text):
        records, errors = load_passages(path)
        assert errors == []
        assert [r.passage_id for r in records] == [p.passage_id for p in PASSAGES]
    bad = tmp_path / "bad.parquet"
    pl.DataFrame([{"domain": "zoo", "source": "", "text": "x", "vocabulary": "{}"}, dict(
        domain="a", source="b", text="c", vocabulary="not json")]).write_parquet(bad)
    records, errors = load_passages(bad)
    assert records == [] and errors == ["row 1: source must be a non-empty string",
                                        "row 2: vocabulary is a string that is not JSON"]


def test_unreadable_files_raise_one_line_errors(tmp_path):
    (tmp_path / "p.csv").write_text("domain,text\n", encoding="utf-8")
    (tmp_path / "p.parquet").write_bytes(b"this is not parquet")
    (tmp_path / "p.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    for name in ("missing.jsonl", "p.csv", "p.parquet", "p.jsonl"):
        with pytest.raises(PassageFormatError) as caught:
            load_passages(tmp_path / name)
        assert "\n" not in str(caught.value) and name in str(caught.value)


# -- the command line ------------------------------------------------------------------------
def _vhd(*args):
    env = {k: v for k, v in os.environ.items() if k != "VHD_DB"}
    return subprocess.run([sys.executable, "-m", "vhd.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300)


def test_cli_lists_adds_and_rejects(tmp_path):
    db = tmp_path / "vhd.duckdb"
    listed = _vhd("passages", "--json", "--db", db)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [r["passage_id"] for r in rows] == [p.passage_id for p in PASSAGES]
    assert set(rows[0]) >= {"passage_id", "domain", "source"} and not db.exists()

    only_bad = tmp_path / "bad.jsonl"
    only_bad.write_text(json.dumps(_variant(domain="")) + "\n{oops\n", encoding="utf-8")
    failed = _vhd("passages", "add", only_bad, "--db", db)
    assert failed.returncode == 1
    assert "row 1: domain must be a non-empty string" in failed.stderr and "row 2: not valid JSON" in failed.stderr
    assert not db.exists()  # nothing written, not even an empty warehouse

    mine = tmp_path / "mine.jsonl"
    mine.write_text("\n".join([json.dumps(ZOO), json.dumps(_variant(text="")), json.dumps(
        {"domain": PASSAGES[0].domain, "source": PASSAGES[0].source, "text": PASSAGES[0].text,
         "vocabulary": PASSAGES[0].vocabulary})]) + "\n", encoding="utf-8")
    added = _vhd("passages", "add", mine, "--db", db, "--json")
    assert added.returncode == 0, added.stderr
    summary = json.loads(added.stdout)
    assert summary["loaded"] == 2 and summary["new"] == 2 and summary["rejected"] == [
        "row 2: text must be a non-empty string"]
    assert "rejected row 2: text must be a non-empty string" in added.stderr
    again = json.loads(_vhd("passages", "add", mine, "--db", db, "--json").stdout)
    assert again["loaded"] == 2 and again["new"] == 0

    rows = json.loads(_vhd("passages", "--json", "--db", db).stdout)
    assert len(rows) == len(PASSAGES) + 1  # the bakery row is built in: listed once
    assert rows[-1]["domain"] == "zoo" and rows[-1]["origin"] == "warehouse"
    assert len({r["passage_id"] for r in rows}) == len(rows)

    from vhd.warehouse import Warehouse

    with Warehouse.open(db, read_only=True) as wh:
        stored = wh.passages()
    assert [p.domain for p in stored] == ["bakery", "zoo"] and all(p.expected_id() == p.passage_id for p in stored)

    table = _vhd("passages", "--db", db)
    assert table.returncode == 0 and "zoo" in table.stdout and f"{len(PASSAGES) + 1} passages" in table.stdout


def test_passage_commands_do_not_import_prefect(tmp_path):
    (tmp_path / "one.jsonl").write_text(json.dumps(ZOO) + "\n", encoding="utf-8")
    code = ("import sys\nfrom vhd.cli import app\n"
            "for args in (['passages', '--json', '--db', sys.argv[1]], ['passages', 'add', sys.argv[2], '--db', "
            "sys.argv[1]]):\n"
            "    try:\n        app(args, standalone_mode=False)\n    except SystemExit:\n        pass\n"
            "print('PREFECT' if any(m == 'prefect' or m.startswith('prefect.') for m in sys.modules) else 'CLEAN')\n")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "w.duckdb"), str(tmp_path / "one.jsonl")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "CLEAN"
