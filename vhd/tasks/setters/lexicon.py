"""The passage's lexicon: the verbs and nouns of a world, from which the template setter names tools.

    >>> from vhd.mechanisms import registry
    >>> from vhd.tasks.setters.passages import builtin_passages
    >>> yard = next(p for p in builtin_passages() if p.vocabulary["site"] == "forwarding yard")
    >>> names = tool_names(registry.get("knapsack"), yard)
    >>> [names[c] for c in ("inspect_item", "add_item", "remove_item", "read_capacities", "submit_selection")]
    ['weigh_parcel', 'load_parcel', 'unload_parcel', 'request_bay_limits', 'dispatch_truck']
    >>> plural("bay limit"), plural("safe deposit box"), plural("battery"), plural("species")
    ('bay limits', 'safe deposit boxes', 'batteries', 'species')

A tool's name is a verb and a noun. `PATTERNS` gives each family's tools as slots: a verb class
(`{add}`: put a candidate into the selection, a decision), a noun of the world (`{lot}`, `{lot*}` its
plural) or one of the passage's own words (`{units}`, what is ordered; `{staff}`, who is rostered;
`{supplier}`). Each verb class has one role (`VERBS`: probe, observe, decision, clock or
annotation), so a name says what kind of thing its tool does; the words come from the passage's
domain in `vhd/tasks/setters/data/lexicon.json` (a freight hub `load`s and `weigh`s `parcel`s, a bank
`approve`s `loan application`s), with `family:class` and `family:noun` keys for a word that
fits one family's tools only. A class or noun the domain does not name takes the family's own
word (`DEFAULTS`): the bakery, the reference world of every example, has no words of its own.

Where a domain gives two words (`"load|stow"`), each passage picks one by its content hash
(`choose`), so the three passages of a domain need not share one API.

A family with no entry in `PATTERNS` keeps its canonical tool names in every world: adding a
family never needs this file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from importlib import resources
from typing import Any

from vhd.schemas.errors import SetterError

ROLES = ("probe", "observe", "decision", "clock", "annotation")

# verb class -> (its role, the family's own word). A class is what the tool does, not a word: the
# domain says it in its words (`add` is load, stow, approve, admit...).
VERBS: dict[str, tuple[str, str]] = {
    # observe: show what the world already told
    "view": ("observe", "view"), "list": ("observe", "list"),
    # probe: pay a turn to learn something
    "read": ("probe", "get"), "inspect": ("probe", "inspect"), "estimate": ("probe", "estimate"),
    "commission": ("probe", "run"), "survey": ("probe", "survey"),
    # decision: change what will happen
    "post": ("decision", "set"), "set": ("decision", "set"), "halt": ("decision", "close"),
    "order": ("decision", "order"), "cancel": ("decision", "cancel"), "add": ("decision", "add"),
    "remove": ("decision", "remove"), "clear": ("decision", "clear"), "open": ("decision", "open"),
    "shut": ("decision", "close"), "assign": ("decision", "assign"), "unassign": ("decision", "unassign"),
    "schedule": ("decision", "schedule"), "replace": ("decision", "replace"), "charge": ("decision", "charge"),
    "discharge": ("decision", "discharge"), "offer": ("decision", "offer"), "fund": ("decision", "fund"),
    "defund": ("decision", "release"), "drive": ("decision", "drive"), "accept": ("decision", "accept"),
    "queue": ("decision", "queue"), "pop": ("decision", "drop"), "unseal": ("decision", "open"),
    # clock: move time on, or end the episode
    "end": ("clock", "end"), "submit": ("clock", "submit"), "finalize": ("clock", "finalize"),
    "wait": ("clock", "pass"), "quit": ("clock", "quit"), "cease": ("clock", "stop"),
    "publish": ("clock", "publish"), "dispatch": ("clock", "dispatch"), "decline": ("clock", "decline"),
    "return": ("clock", "return"),
    # annotation: the player's own notes (they change nothing else)
    "write": ("annotation", "write"), "erase": ("annotation", "delete"),
}
# noun -> the family's own word (singular)
NOUNS: dict[str, str] = {
    "lot": "lot", "selection": "selection", "limit": "capacity", "depot": "depot", "town": "town", "stop": "stop",
    "base": "depot", "job": "job", "machine": "machine", "box": "box", "project": "project", "product": "product",
    "resource": "resource", "plan": "plan", "roster": "roster", "battery": "battery", "service": "maintenance",
}
PASSAGE_SLOTS = ("units", "staff", "supplier")  # the passage's own words (its vocabulary)

# family -> canonical tool -> its name as slots. Roles: every tool's leading verb class has the
# tool's role (stopping's notes are annotations, observe tools in the family's table).
PATTERNS: dict[str, dict[str, str]] = {
    "dynamic_pricing": {
        "get_demand_study": "{read}_demand_study", "run_market_survey": "{commission}_market_survey",
        "get_buyback_terms": "{read}_buyback_terms", "view_stock": "{view}_stock", "view_price": "{view}_price",
        "view_price_menu": "{view}_price_menu", "view_calendar": "{view}_calendar", "view_sales": "{view}_sales",
        "view_revenue": "{view}_revenue", "set_price": "{post}_price", "close_sales": "{halt}_sales",
        "end_period": "{end}_period"},
    "ecommerce": {
        "get_price_list": "{read}_price_list", "get_supplier_terms": "{read}_{supplier}_terms",
        "get_cost_sheet": "{read}_cost_sheet", "get_ad_rates": "{read}_ad_rates",
        "get_traffic_calendar": "{read}_traffic_calendar", "get_demand_forecast": "{read}_demand_forecast",
        "estimate_demand": "{estimate}_demand", "view_stock": "{view}_stock", "view_cash": "{view}_cash",
        "view_storefront": "{view}_storefront", "view_calendar": "{view}_calendar", "view_orders": "{view}_orders",
        "view_sales": "{view}_sales", "view_ledger": "{view}_ledger", "set_price": "{post}_price",
        "set_ads": "{set}_ads", "place_order": "{order}_{units}", "cancel_order": "{cancel}_order",
        "end_day": "{end}_day"},
    "energy_storage": {
        "get_tariff_sheet": "{read}_tariff_sheet", "read_price_sticker": "{read}_price_sticker",
        "get_market_outlook": "{read}_market_outlook", "get_battery_spec": "{read}_{battery}_spec",
        "view_battery": "{view}_{battery}", "view_cash": "{view}_cash", "view_trades": "{view}_trades",
        "view_clock": "{view}_clock", "view_price": "{view}_price", "view_price_history": "{view}_price_history",
        "charge": "{charge}_{battery}", "discharge": "{discharge}_{battery}", "cancel_schedule": "{cancel}_schedule",
        "end_hour": "{end}_hour"},
    "facility": {
        "get_site_costs": "{read}_{depot}_costs", "survey_town": "{survey}_{town}", "list_sites": "{list}_{depot*}",
        "view_network": "{view}_network", "view_assignment": "{view}_assignment", "view_surveys": "{view}_surveys",
        "view_log": "{view}_log", "open_site": "{open}_{depot}", "close_site": "{shut}_{depot}",
        "finalize_network": "{finalize}_network"},
    "inventory_dp": {
        "get_cost_sheet": "{read}_cost_sheet", "get_demand_forecast": "{read}_demand_forecast",
        "get_supplier_terms": "{read}_{supplier}_terms", "view_stock": "{view}_stock", "view_cash": "{view}_cash",
        "view_orders": "{view}_orders", "view_sales": "{view}_sales", "view_calendar": "{view}_calendar",
        "place_order": "{order}_{units}", "cancel_order": "{cancel}_order", "end_day": "{end}_day"},
    "knapsack": {
        "inspect_item": "{inspect}_{lot}", "read_capacities": "{read}_{limit*}", "list_items": "{list}_{lot*}",
        "view_selection": "{view}_{selection}", "view_headroom": "{view}_headroom",
        "view_inspected": "{view}_inspected", "view_log": "{view}_log", "add_item": "{add}_{lot}",
        "remove_item": "{remove}_{lot}", "clear_selection": "{clear}_{selection}",
        "submit_selection": "{submit}_{selection}"},
    "lp": {
        "get_profit_sheet": "{read}_profit_sheet", "get_usage_table": "{read}_usage_table",
        "get_capacity_sheet": "{read}_capacity_sheet", "view_products": "{view}_{product*}",
        "view_resources": "{view}_{resource*}", "view_plan": "{view}_{plan}", "view_resource_use": "{view}_{resource}_use",
        "set_production": "{set}_production", "clear_production": "{clear}_production", "reset_plan": "{clear}_{plan}",
        "close_plan": "{submit}_{plan}"},
    "maintenance": {
        "get_cost_sheet": "{read}_cost_sheet", "get_revenue_table": "{read}_revenue_table",
        "inspect_machine": "{inspect}_{machine}", "get_reliability_report": "{read}_reliability_report",
        "view_machine": "{view}_{machine}", "view_cash": "{view}_cash", "view_work_log": "{view}_work_log",
        "view_calendar": "{view}_calendar", "schedule_maintenance": "{schedule}_{service}",
        "replace_machine": "{replace}_{machine}", "cancel_work": "{cancel}_work", "end_day": "{end}_day"},
    "negotiation": {
        "read_buyer_survey": "{read}_buyer_survey", "read_carrying_terms": "{read}_carrying_terms",
        "read_outside_bid": "{read}_outside_bid", "view_round": "{view}_round", "view_offers": "{view}_offers",
        "view_costs": "{view}_costs", "view_item": "{view}_{lot}", "view_deal": "{view}_deal",
        "view_ledger": "{view}_ledger", "make_offer": "{offer}_price", "pass_round": "{wait}_round",
        "walk_away": "{quit}_talks"},
    "pandora": {
        "inspect_box": "{inspect}_{box}", "read_fee_schedule": "{read}_fee_schedule", "list_boxes": "{list}_{box*}",
        "view_best": "{view}_best", "view_fees_paid": "{view}_fees_paid", "view_openings": "{view}_openings",
        "view_net": "{view}_net", "view_log": "{view}_log", "open_box": "{unseal}_{box}",
        "stop_and_take": "{cease}_search"},
    "qp": {
        "get_return_forecast": "{read}_return_forecast", "inspect_project": "{inspect}_{project}",
        "get_risk_model": "{read}_risk_model", "get_position_limits": "{read}_position_limits",
        "list_assets": "{list}_{project*}", "view_allocation": "{view}_allocation", "view_budget": "{view}_budget",
        "view_objective": "{view}_objective", "view_journal": "{view}_journal", "allocate": "{fund}_{project}",
        "release_asset": "{defund}_{project}", "reset_allocation": "{clear}_allocation",
        "commit_allocation": "{submit}_allocation"},
    "rostering": {
        "get_coverage_sheet": "{read}_coverage_sheet", "get_demand_forecast": "{read}_demand_forecast",
        "get_wage_sheet": "{read}_wage_sheet", "read_availability": "{read}_availability",
        "get_work_rules": "{read}_work_rules", "get_shortage_terms": "{read}_shortage_terms",
        "list_staff": "{list}_{staff}", "view_roster": "{view}_{roster}", "view_date": "{view}_day",
        "view_coverage": "{view}_coverage", "view_costs": "{view}_costs", "view_log": "{view}_log",
        "assign_shift": "{assign}_shift", "unassign_shift": "{unassign}_shift", "clear_date": "{clear}_day",
        "publish_roster": "{publish}_{roster}"},
    "routing": {
        "get_manifest": "{read}_manifest", "inspect_stop": "{inspect}_{stop}", "get_travel_matrix": "{read}_travel_matrix",
        "get_travel_time": "{read}_travel_time", "get_rate_card": "{read}_rate_card", "drive_to": "{drive}_to_{stop}",
        "return_to_depot": "{return}_to_{base}", "view_position": "{view}_position", "view_clock": "{view}_clock",
        "view_visited": "{view}_visited", "view_legs": "{view}_legs", "view_earnings": "{view}_earnings"},
    "scheduling": {
        "inspect_job": "{inspect}_{job}", "get_job_list": "{read}_{job}_list", "assign_job": "{assign}_{job}",
        "unassign_job": "{unassign}_{job}", "clear_assignments": "{clear}_assignments", "dispatch": "{dispatch}_{job*}",
        "view_machine_loads": "{view}_{machine}_loads", "list_unassigned": "{list}_unassigned",
        "view_makespan": "{view}_makespan", "view_assignments": "{view}_assignments",
        "view_inspected": "{view}_inspected", "view_log": "{view}_log"},
    "stopping": {
        "get_offer_forecast": "{read}_offer_forecast", "get_fee_schedule": "{read}_fee_schedule",
        "view_offer": "{view}_offer", "view_offer_history": "{view}_offer_history", "view_calendar": "{view}_calendar",
        "view_ledger": "{view}_ledger", "view_notes": "{view}_notes", "write_note": "{write}_note",
        "delete_note": "{erase}_note", "accept_offer": "{accept}_offer", "decline_offer": "{decline}_offer"},
    "tardiness": {
        "inspect_job": "{inspect}_{job}", "get_job_sheet": "{read}_{job}_sheet", "schedule_next": "{queue}_{job}",
        "unschedule_last": "{pop}_last_{job}", "clear_schedule": "{clear}_sequence",
        "release_schedule": "{dispatch}_sequence", "view_sequence": "{view}_sequence",
        "view_completion_time": "{view}_completion_time", "list_unscheduled": "{list}_unscheduled",
        "view_tardiness": "{view}_tardiness", "view_inspected": "{view}_inspected", "view_log": "{view}_log"},
}
SLOT = re.compile(r"\{(\w+)(\*?)\}")
_IRREGULAR_PLURALS = {"person": "people", "child": "children", "foot": "feet", "tooth": "teeth", "mouse": "mice",
                      "loaf": "loaves", "knife": "knives", "half": "halves", "leaf": "leaves", "shelf": "shelves",
                      "series": "series", "species": "species", "sheep": "sheep", "fish": "fish"}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


_IRREGULAR = {"loaves": "loaf", "knives": "knife", "halves": "half", "leaves": "leaf", "shelves": "shelf",
              "people": "person", "children": "child", "feet": "foot", "teeth": "tooth", "mice": "mouse",
              "boluses": "bolus", "buses": "bus", "lenses": "lens", "series": "series", "species": "species",
              "menus": "menu", "sheep": "sheep", "fish": "fish"}


def singular(unit: str) -> str:
    """The singular of a plural unit ("loaves" -> "loaf", "splice kits" -> "splice kit"); a word
    that does not look plural ("kg", "ice") is kept."""
    head, _, last = unit.rpartition(" ")
    word = last.lower()
    if word in _IRREGULAR:
        one = _IRREGULAR[word]
    elif word.endswith("men") and len(word) > 4:  # storemen, yardmen
        one = word[:-3] + "man"
    elif word.endswith("ies") and len(word) > 4:
        one = word[:-3] + "y"
    elif word.endswith(("ches", "shes", "xes", "sses", "zzes")):
        one = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 2:
        one = word[:-1]
    else:
        return unit
    if last != word and word.startswith(one):  # "SIMs" -> "SIM": keep the passage's capitals
        one = last[:len(one)]
    return f"{head} {one}" if head else one


def plural(noun: str) -> str:
    """The plural of a singular noun phrase (its last word): "bay limit" → "bay limits"."""
    head, _, last = noun.rpartition(" ")
    if last in _IRREGULAR_PLURALS:
        many = _IRREGULAR_PLURALS[last]
    elif re.search(r"[^aeiou]y$", last):
        many = last[:-1] + "ies"
    elif re.search(r"(s|x|z|ch|sh)$", last):
        many = last + "es"
    else:
        many = last + "s"
    return f"{head} {many}" if head else many


def entry_problem(entry: Any) -> str | None:
    """What is wrong with one lexicon entry ({"verbs": {...}, "nouns": {...}}: a domain's in
    lexicon.json, or a passage's own `vocabulary.lexicon`), or None."""
    if not isinstance(entry, dict) or set(entry) - {"verbs", "nouns"}:
        return "must be an object with only verbs and nouns"
    for kind, known in (("verbs", VERBS), ("nouns", NOUNS)):
        given = entry.get(kind, {})
        if not isinstance(given, dict):
            return f"{kind} must be an object"
        for key, words in given.items():
            if key.split(":")[-1] not in known:
                return f"unknown {kind[:-1]} {key!r}; expected one of {sorted(known)} (optionally as family:{kind[:-1]})"
            if not isinstance(words, str) or not all(re.fullmatch(r"[a-z][a-z ]*[a-z]", w) for w in words.split("|")):
                return f"{kind[:-1]} {key!r} is {words!r}; expected lowercase words, alternatives separated by |"
            if kind == "verbs" and " " in words:
                return f"verb {key!r} is {words!r}; expected one word"
    return None


@functools.lru_cache(maxsize=1)
def domain_lexicons() -> dict[str, dict[str, dict[str, str]]]:
    """{domain: {"verbs": {class or family:class: words}, "nouns": {noun or family:noun: words}}}:
    vhd/tasks/setters/data/lexicon.json, checked (a class or noun it does not know is a one-line error)."""
    text = resources.files("vhd.tasks.setters").joinpath("data/lexicon.json").read_text(encoding="utf-8")
    lexicons = json.loads(text)
    for domain, entry in lexicons.items():
        problem = entry_problem(entry)
        if problem:
            raise SetterError(f"lexicon.json: {domain}: {problem}")
    return lexicons


def choose(words: str, passage_id: str) -> str:
    """One of a domain's alternatives (`a|b`) for a passage: picked by its content hash, so the same
    passage always names its tools alike, and by the same index in every class of the domain (its
    paired classes, `assign|unassign` as `book|unbook`, stay paired)."""
    options = words.split("|")
    if len(options) == 1:
        return options[0]
    try:
        index = int(passage_id[:8], 16)  # a content hash (PassageRecord.build)
    except ValueError:
        index = int(hashlib.sha256(passage_id.encode("utf-8")).hexdigest()[:8], 16)
    return options[index % len(options)]


def lexicon(family: str, passage: Any, keys: Any = None) -> dict[str, str]:
    """The words of `family`'s world in `passage`: every verb class and noun (as the passage's own
    `vocabulary.lexicon` says it, else its domain's, a family's own key first in each, else the
    family's word) and the passage's slots; only `keys` if given."""
    vocabulary = passage.vocabulary
    entries = [vocabulary.get("lexicon") or {}, domain_lexicons().get(passage.domain, {})]
    words: dict[str, str] = {}
    for key in (VERBS.keys() | NOUNS.keys()) if keys is None else keys:
        if key in VERBS or key in NOUNS:
            kind = "verbs" if key in VERBS else "nouns"
            found = next((e[kind].get(k) for e in entries for k in (f"{family}:{key}", key)
                          if e.get(kind, {}).get(k)), None)
            words[key] = choose(found, passage.passage_id) if found else (VERBS[key][1] if key in VERBS else NOUNS[key])
    words["units"] = slug(vocabulary.get("unit", ""))
    words["staff"] = slug(vocabulary.get("synonyms", {}).get("staff", "staff"))
    words["supplier"] = slug(vocabulary.get("supplier", ""))
    return words


@functools.lru_cache(maxsize=1024)
def _parts(pattern: str) -> tuple[tuple[str, str, bool], ...]:
    """A pattern as (literal text before a slot, slot key, plural?) parts; the last part's key is ''."""
    parts, at = [], 0
    for match in SLOT.finditer(pattern):
        parts.append((pattern[at:match.start()], match.group(1), bool(match.group(2))))
        at = match.end()
    return tuple(parts) + ((pattern[at:], "", False),)


@functools.lru_cache(maxsize=8192)
def _slot_word(word: str, many: bool) -> str:
    return slug(plural(word) if many else word)


def fill_pattern(pattern: str, words: dict[str, str]) -> str:
    """A pattern with its slots filled by `words` (plural where the slot has `*`), slugged."""
    return "".join(text + (_slot_word(words[key], many) if key else "") for text, key, many in _parts(pattern))


def slots(pattern: str) -> list[str]:
    return [key for _, key, _ in _parts(pattern) if key]


def tool_names(family: Any, passage: Any) -> dict[str, str]:
    """{canonical: name} of `family`'s tools in the world of `passage`. A family without
    `PATTERNS`, or a tool whose pattern a passage's word leaves empty, keeps the canonical name."""
    patterns = PATTERNS.get(family.name, {})
    words = lexicon(family.name, passage, {key for pattern in patterns.values() for key in slots(pattern)})
    names = {}
    for spec in family.tools:
        pattern = patterns.get(spec.name)
        if pattern is None or any(not words.get(key) for key in slots(pattern)):
            names[spec.name] = spec.name
        else:
            names[spec.name] = fill_pattern(pattern, words)[:64]
    return names


def world_words(family: Any, passage: Any) -> dict[str, Any]:
    """The lexicon of `family`'s tools in `passage`'s world, as the LLM setter's prompt gives it:
    {"verbs": {role: [verbs]}, "nouns": {noun: word}} over the slots its patterns use (empty for a
    family without patterns)."""
    words = lexicon(family.name, passage)
    verbs: dict[str, list[str]] = {}
    nouns: dict[str, str] = {}
    for pattern in PATTERNS.get(family.name, {}).values():
        for key, many in SLOT.findall(pattern):
            if key in VERBS:
                role = VERBS[key][0]
                if words[key] not in verbs.setdefault(role, []):
                    verbs[role].append(words[key])
            elif key in NOUNS:
                nouns[key + ("*" if many else "")] = plural(words[key]) if many else words[key]
    return {"verbs": {role: verbs[role] for role in ROLES if role in verbs}, "nouns": dict(sorted(nouns.items()))}


# family -> a kind of id its World counts (`World.IDS`'s values) -> the noun that names it: a
# world calls the argument by its word for that noun (knapsack's `item` is a `parcel` in a freight
# depot) and writes its codes with the word's initials (`P-07`). A kind not listed keeps its name.
ID_NOUNS: dict[str, dict[str, str]] = {
    "facility": {"site": "depot", "town": "town"},
    "knapsack": {"item": "lot"},
    "lp": {"product": "product", "resource": "resource"},
    "pandora": {"box": "box"},
    "qp": {"project": "project"},
    "rostering": {"staff": "staff"},
    "routing": {"stop": "stop"},
    "scheduling": {"job": "job", "machine": "machine"},
    "tardiness": {"job": "job"},
}


def id_style(passage_id: str, kind: str, prefix: str) -> str:
    """How a world writes the ids of one kind (`_runtime.ID_STYLES`): by a hash of the passage and
    the kind, so the same passage always writes them alike and its kinds need not agree."""
    index = int(hashlib.sha256(f"{passage_id}:{kind}".encode("utf-8")).hexdigest()[:8], 16)
    style = ("number", "ordinal", "code")[index % 3]
    return f"code:{prefix}" if style == "code" else style


def _initials(word: str, taken: set[str]) -> str:
    """A code prefix for a noun: its initials ("loan application" → "LA"), longer if taken."""
    letters = re.sub(r"[^a-z ]", "", word.lower()).split() or ["x"]
    for prefix in ("".join(w[0] for w in letters), letters[0][:2], letters[0][:3]):
        if prefix.upper() not in taken:
            return prefix.upper()
    return letters[0][:3].upper() + str(len(taken))


def id_skin(family: Any, passage: Any) -> tuple[dict[str, str], dict[str, str]]:
    """({kind: id style}, {canonical key: its name in the world}) of `family`'s World in the world
    of `passage`: every kind of id its `IDS` declares gets a style; an argument or answer key of a
    kind `ID_NOUNS` names is renamed to the world's word (`from_stop` to `from_<word>`), unless
    the new name is one the family already uses."""
    ids = dict(getattr(family.world, "IDS", {}))
    nouns = ID_NOUNS.get(family.name, {})
    words = lexicon(family.name, passage, set(nouns.values())) if nouns else {}
    styles: dict[str, str] = {}
    for kind in sorted(set(ids.values())):
        word = words.get(nouns[kind], kind) if kind in nouns else kind
        styles[kind] = id_style(passage.passage_id, kind, _initials(word, {s[5:] for s in styles.values()
                                                                             if s.startswith("code:")}))
    used = set(ids) | {key for spec in family.tools for key in spec.input_schema.get("properties", {})}
    renamed: dict[str, str] = {}
    for key, kind in sorted(ids.items()):
        if kind not in nouns:
            continue
        word = slug(words[nouns[kind]])
        if nouns[kind] in PASSAGE_SLOTS:  # the passage's staff are plural ("cashiers"): one of them
            word = singular(word)
        new = word if key == kind else key[: -len(kind)] + word if key.endswith("_" + kind) else None
        if new and new != key and new not in used and new not in renamed.values():
            renamed[key] = new
    return styles, renamed
