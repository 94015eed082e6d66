"""The template setter's inventory module, executed in-process, against the reference simulator."""

from __future__ import annotations

import re

import numpy as np
import pytest

from family_kit import PASSAGES, env_of, generated, refused
from vhd.mechanisms import registry

FAM = registry.get("inventory_dp")
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
COSTS = ("unit_cost", "price", "holding_cost", "shortage_penalty", "order_fee", "salvage_value")

def thetas_by_lead(size=6, horizon=10):
    """The first sampled θ of each lead time, searching sample seeds in order."""
    found = {}
    for seed in range(200):
        theta = FAM.sample(FAM.Params(size=size, horizon=horizon), np.random.default_rng(seed))
        found.setdefault(theta["lead_time"], theta)
        if len(found) == 3:
            return [found[lead] for lead in (0, 1, 2)]
    raise AssertionError("sample never covered all three lead times")


BY_LEAD = thetas_by_lead()


def policies(theta, rng):
    sol = FAM.solve(theta)
    return {"star": sol.policy, "default": FAM.default_policy(theta), "idle": FAM.idle_policy(theta),
            "random": FAM.random_policy(theta, rng)}


def replay(env, out, calls, budget):
    """Play canonical calls through the skin's names; every call must succeed and cost one turn."""
    responses = []
    for call in calls:
        before = env.outcome()["turns_used"]
        resp = env.call(out.tool_name(call["tool"]), call["arguments"])
        assert resp["ok"] is True, (call, resp)
        assert resp["turns_left"] == budget - before - 1 == budget - env.outcome()["turns_used"]
        responses.append(resp)
    return responses


# ---------------------------------------------------------------------------------------------


def test_generated_module_is_standard_library_only():
    for k in range(len(PASSAGES)):
        out, _ = generated(FAM, k)
        assert not re.search(r"^\s*(from|import)\s+vhd\b", out.module, flags=re.M)
        imports = set(re.findall(r"^import (\w+)", out.module, flags=re.M))
        assert imports <= {"hashlib", "json", "math", "random", "sqlite3", "threading"}, imports


def test_by_lead_covers_every_lead_time():
    assert [t["lead_time"] for t in BY_LEAD] == [0, 1, 2]


@pytest.mark.parametrize("lead", [0, 1, 2])
def test_canonical_calls_replay_to_simulated_utility(lead):
    theta = BY_LEAD[lead]
    rng = np.random.default_rng(40 + lead)
    for n, (name, policy) in enumerate(policies(theta, rng).items()):
        for seed in (0, 3, 1000 + lead):
            k = (lead * 4 + n + seed) % len(PASSAGES)
            out, _ = generated(FAM, k)
            episode = FAM.simulate(theta, policy, seed)
            env = env_of(FAM, k, theta, seed=seed, presentation="AI"[seed % 2])
            assert not env.done
            responses = replay(env, out, episode.calls, FAM.turn_budget(theta))
            result = env.outcome()
            assert result["terminal"] is True, (name, seed)
            assert result["utility"] == episode.utility, (name, seed, result, episode.utility)
            assert result["turns_used"] == len(episode.calls)
            # end-of-day reports follow the demand path
            demands = [r["demand"] for r in responses if "day_closed" in r]
            assert demands == FAM.world.demand_path(theta, seed)
            assert responses[-1]["cash"] - theta["initial_cash"] == episode.utility
            # and afterwards nothing is accepted
            digest = env.state_digest()
            late = env.call(out.tool_name("view_stock"), {})
            assert set(late) == {"ok", "error"} and late["ok"] is False and isinstance(late["error"], str)
            assert env.state_digest() == digest


@pytest.mark.parametrize("lead", [0, 1, 2])
def test_observations_track_the_simulated_state(lead):
    """view_stock after every end of day shows the state the reference simulator is in."""
    theta = BY_LEAD[lead]
    out, _ = generated(FAM, lead)
    policy = FAM.solve(theta).policy
    episode = FAM.simulate(theta, policy, 17)
    env = env_of(FAM, lead, theta, seed=17, budget=10 * theta["horizon"])
    on_hand, transit = theta["initial_stock"], 0
    demands = FAM.world.demand_path(theta, 17)
    for day, q in enumerate(episode.decisions):
        stock = env.call(out.tool_name("view_stock"), {})
        assert (stock["on_hand"], stock["in_transit"], stock["ordered_today"]) == (on_hand, transit, 0)
        cal = env.call(out.tool_name("view_calendar"), {})
        assert cal["day"] == day and cal["days_left"] == theta["horizon"] - day
        if q:
            assert env.call(out.tool_name("place_order"), {"quantity": q})["ordered_today"] == q
        closed = env.call(out.tool_name("end_day"), {})
        assert closed["day_closed"] == day and closed["demand"] == demands[day]
        available = on_hand + (q if lead == 0 else 0)
        left = available - min(available, demands[day])
        on_hand, transit = {0: (left, 0), 1: (left + q, 0), 2: (left + transit, q)}[lead]
    calls = 3 * theta["horizon"] + sum(1 for q in episode.decisions if q)  # every call accepted, one turn each
    assert env.outcome() == {"utility": episode.utility, "terminal": True, "turns_used": calls, "calls_used": calls}


def test_probes_reveal_theta():
    for lead, theta in enumerate(BY_LEAD):
        out, _ = generated(FAM, 5)
        env = env_of(FAM, 5, theta, seed=1, presentation="A")
        sheet = [env.call(out.tool_name("get_cost_sheet"), {"line": line}) for line in range(len(COSTS))]
        assert [line["amount"] for line in sheet] == [theta[key] for key in COSTS]
        terms = env.call(out.tool_name("get_supplier_terms"), {})
        assert terms["lead_time_days"] == lead and terms["capacity"] == theta["capacity"]
        forecast = env.call(out.tool_name("get_demand_forecast"), {"weekday": 6, "demand": 1})
        assert forecast["probability"] == pytest.approx(theta["demand_weights"][6][1] / 1000, abs=1e-12)
        assert forecast["turns_left"] == FAM.turn_budget(theta) - 8


def test_same_calls_same_digest():
    theta = BY_LEAD[2]
    out, _ = generated(FAM, 3)
    episode = FAM.simulate(theta, FAM.default_policy(theta), 8)
    a, b = env_of(FAM, 3, theta, seed=8), env_of(FAM, 3, theta, seed=8)
    assert a.state_digest() == b.state_digest()
    replay(a, out, episode.calls[:7], FAM.turn_budget(theta))
    replay(b, out, episode.calls[:7], FAM.turn_budget(theta))
    assert a.state_digest() == b.state_digest()
    c = env_of(FAM, 3, theta, seed=9)
    replay(c, out, [{"tool": "end_day", "arguments": {}}] * 3, FAM.turn_budget(theta))
    d = env_of(FAM, 3, theta, seed=8)
    replay(d, out, [{"tool": "end_day", "arguments": {}}] * 3, FAM.turn_budget(theta))
    assert c.outcome()["turns_used"] == d.outcome()["turns_used"] == 3
    assert FAM.world.demand_path(theta, 9)[:3] != FAM.world.demand_path(theta, 8)[:3]
    assert c.state_digest() != d.state_digest()
    assert d.state_digest() != a.state_digest()


# ---------------------------------------------------------------------------------------------
# Invalid calls: reported, never raised, and the world does not move.


def _assert_rejected(env, name, arguments):
    """A refusal by the rules of play (`family_kit.refused`): the world unchanged, its turn used when
    the world refused it, none when the call was malformed."""
    resp = refused(env, name, arguments)
    assert set(resp) <= {"ok", "error", "turns_left"}, (name, arguments, resp)
    return resp["error"]


@pytest.mark.parametrize("k", [0, 1, 4])
def test_invalid_calls_are_rejected_without_effect(k):
    out, _ = generated(FAM, k)
    theta = BY_LEAD[k % 3]
    cap = theta["capacity"]
    env = env_of(FAM, k, theta, seed=5)
    place, cancel, stock = out.tool_name("place_order"), out.tool_name("cancel_order"), out.tool_name("view_stock")
    bad = [
        ("no_such_tool", {}),
        (None, {}),
        (7, {}),
        ("", {}),
        (place, {"quantity": "2"}),
        (place, {"quantity": 2.0}),
        (place, {"quantity": True}),
        (place, {"quantity": None}),
        (place, {}),
        (place, {"quantity": 0}),
        (place, {"quantity": -1}),
        (place, {"quantity": 1001}),
        (place, {"quantity": cap + 1}),  # past the capacity: the schema fitted to the instance refuses it
        (place, {"quantity": 1, "rush": True}),
        (place, [1]),
        (place, None),
        (cancel, {}),  # nothing ordered today
        (cancel, {"all": True}),
        (stock, {"verbose": True}),
        (out.tool_name("view_orders"), {"limit": 0}),
        (out.tool_name("view_orders"), {"limit": "5"}),
        (out.tool_name("view_sales"), {"last_days": 3, "x": 1}),
        (out.tool_name("end_day"), {"now": 1}),
    ]
    if out.tool_name("place_order") != "place_order":
        bad.append(("place_order", {"quantity": 1}))  # the canonical name is not the skin's
    for name, arguments in bad:
        _assert_rejected(env, name, arguments)
    assert "nothing" in _assert_rejected(env, cancel, {})

    # a valid order, then one that would overfill storage: the first stays, the second leaves no trace
    free = cap - theta["initial_stock"]
    assert free >= 1
    ok = env.call(place, {"quantity": 1})
    assert ok["ok"] is True and ok["ordered_today"] == 1 and "turns_left" in ok
    _assert_rejected(env, place, {"quantity": free})
    assert env.call(stock, {})["ordered_today"] == 1
    assert env.call(cancel, {})["ordered_today"] == 0
    _assert_rejected(env, cancel, {})

    # every ok response carries turns_left, counting down by the turn cost
    left = env.call(stock, {})["turns_left"]
    for tool in out.interface:
        if tool.canonical in ("end_day", "place_order", "cancel_order"):
            continue
        resp = env.call(tool.name, {"get_cost_sheet": {"line": 0}, "get_demand_forecast": {"weekday": 0, "demand": 0}}
                        .get(tool.canonical, {}))
        assert resp["ok"] is True and resp["turns_left"] == left - tool.turn_cost, tool.name
        left = resp["turns_left"]


def test_calls_after_the_end_are_rejected():
    theta = BY_LEAD[1]
    out, _ = generated(FAM, 2)
    env = env_of(FAM, 2, theta, seed=4)
    replay(env, out, [{"tool": "end_day", "arguments": {}}] * theta["horizon"], FAM.turn_budget(theta))
    assert env.done and env.outcome()["terminal"] is True
    for tool in out.interface:
        args = {"quantity": 1} if tool.canonical == "place_order" else {}
        _assert_rejected(env, tool.name, args)
    _assert_rejected(env, "no_such_tool", {})


# ---------------------------------------------------------------------------------------------
# Running out of turns.


def _star_with_orders():
    """A θ (and episode seed) whose optimal play orders on several days, so cut-offs fall anywhere."""
    for seed in range(100):
        theta = FAM.sample(FAM.Params(size=8, horizon=12), np.random.default_rng(500 + seed))
        policy = FAM.solve(theta).policy
        episode = FAM.simulate(theta, policy, seed)
        if sum(1 for q in episode.decisions[:-2] if q) >= 3:
            return theta, policy, episode, seed
    raise AssertionError("no sampled θ with three optimal orders")


@pytest.mark.parametrize("probes", [0, 2])
def test_turn_budget_running_out_plays_remaining_days_idle(probes):
    theta, policy, episode, seed = _star_with_orders()
    out, _ = generated(FAM, 6)
    prefix = [{"tool": "get_cost_sheet", "arguments": {"line": 0}}, {"tool": "view_cash", "arguments": {}}][:probes]
    calls = prefix + episode.calls
    cut_kinds = set()
    for budget in range(probes + 1, len(calls) - 1):
        env = env_of(FAM, 6, theta, seed=seed, presentation="A", budget=budget)
        played = calls[:budget]
        responses = replay(env, out, played, budget)
        assert responses[-1]["turns_left"] == 0
        assert env.done and env.outcome()["terminal"] is True and env.outcome()["turns_used"] == budget
        closed = sum(1 for c in played if c["tool"] == "end_day")
        assert closed < theta["horizon"]
        # the same decisions for the days closed, nothing after (today's pending order dropped)
        cut = policy.copy()
        cut[closed:] = 0
        expected = FAM.simulate(theta, cut, seed)
        assert expected.decisions[:closed] == episode.decisions[:closed]
        assert env.outcome()["utility"] == expected.utility, (budget, played[-1])
        cut_kinds.add(played[-1]["tool"])
        _assert_rejected(env, out.tool_name("end_day"), {})
    assert {"place_order", "end_day"} <= cut_kinds


def test_run_out_drops_todays_order_exactly():
    """Hand-made: order on day 0 (paid), order on day 1 is pending when the turns run out."""
    theta = dict(BY_LEAD[0])
    out, _ = generated(FAM, 7)
    env = env_of(FAM, 7, theta, seed=2, budget=3)
    place, end = out.tool_name("place_order"), out.tool_name("end_day")
    assert env.call(place, {"quantity": 2})["ok"]
    assert env.call(end, {})["ok"]
    last = env.call(place, {"quantity": 1})
    assert last["ok"] is True and last["turns_left"] == 0
    table = FAM.idle_policy(theta)
    index = {(i, 0): n for n, i in enumerate(range(theta["capacity"] + 1))}
    table[0, index[(theta["initial_stock"], 0)]] = 2
    assert env.outcome()["utility"] == FAM.simulate(theta, table, 2).utility
    assert env.outcome()["terminal"] is True


# ---------------------------------------------------------------------------------------------
# What the player reads.


@pytest.mark.parametrize("k", range(len(PASSAGES)))
def test_presentations_and_tools(k):
    out, _ = generated(FAM, k)
    theta = BY_LEAD[k % 3]
    a = env_of(FAM, k, theta, seed=1, presentation="A")
    i = env_of(FAM, k, theta, seed=1, presentation="I")
    terms = [line for line in i.instruction.splitlines() if line.startswith("Terms:")]
    assert len(terms) == 1
    for phrase in ("unit cost %d" % theta["unit_cost"], "selling price %d" % theta["price"],
                   "holding cost %d" % theta["holding_cost"], "penalty %d" % theta["shortage_penalty"],
                   "fee %d" % theta["order_fee"], "salvage value %d" % theta["salvage_value"]):
        assert phrase in terms[0]
    assert "day d + %d" % theta["lead_time"] in i.instruction
    assert not [line for line in a.instruction.splitlines() if line.strip().startswith("Terms")]
    assert "selling price" not in a.instruction and "day d + " not in a.instruction
    assert "weekday 0:" not in a.instruction
    for probe in ("get_cost_sheet", "get_supplier_terms", "get_demand_forecast"):
        assert out.tool_name(probe) in a.instruction
    for env in (a, i):
        assert str(FAM.turn_budget(theta)) in env.instruction
        assert len(env.tools) >= 10
        names = [tool["name"] for tool in env.tools]
        assert len(set(names)) == len(names)
        assert names == [binding.name for binding in out.interface]
        for tool in env.tools:
            assert set(tool) == {"name", "description", "input_schema"}
            assert NAME_RE.match(tool["name"]), tool["name"]
            assert isinstance(tool["description"], str) and "{" not in tool["description"]
            assert tool["input_schema"]["type"] == "object"
