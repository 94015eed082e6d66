"""Cross-checks of the facility-location family against plain-Python brute force, its rendered
module and the real admission gates.

The brute force is written from the module docstring's Model section, not from the solver: a plan
is a non-empty set S of open depots; its cost is the opening costs of S plus, for every town, the
cheapest service cost from a depot in S; u* is minus the least cost over all 2^n − 1 non-empty sets.
The only layout assumption is that of a plan: a 0/1 vector over the depots.
"""

from __future__ import annotations

import statistics
import types

import numpy as np
import pytest
from pydantic import ValidationError

from family_kit import PASSAGES, env_of, failed, gated, generated, mutant_verdicts, named, refused
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.tasks.setters.lexicon import id_skin
from vhd.tasks.setters.template import render_module
from vhd.tasks.stages.sample import draw

FAM = registry.get("facility")
ROOMY = 60  # a turn budget for the tests that look at everything (the family's own affords π* and a few probes)
HIDDEN = ("opening_costs", "service_costs")


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in plain Python.


def cost(theta, chosen):
    return sum(theta["opening_costs"][s] for s in chosen) + sum(
        min(row[s] for s in chosen) for row in theta["service_costs"])


def brute_force(theta):
    """(best utility, best set) over every non-empty set of depots, first best in mask order."""
    n = theta["n_sites"]
    best, arg = None, None
    for mask in range(1, 2 ** n):
        chosen = [s for s in range(n) if mask >> s & 1]
        u = -cost(theta, chosen)
        if best is None or u > best:
            best, arg = u, chosen
    return best, arg


def chosen_of(plan):
    return [s for s, x in enumerate(np.asarray(plan).tolist()) if x == 1]


def plain_default(theta):
    """The default's docstring: lowest total service cost depot + every depot below the median."""
    f = theta["opening_costs"]
    med = statistics.median(f)
    totals = [sum(row[s] for row in theta["service_costs"]) for s in range(theta["n_sites"])]
    best = totals.index(min(totals))
    return sorted({best} | {s for s in range(theta["n_sites"]) if f[s] < med})


def costs(row):
    """A service-cost row of an answer ([{"site": s, "cost": c}, ...], depot by depot) as a list."""
    assert [entry["site"] for entry in row] == list(range(len(row)))
    return [entry["cost"] for entry in row]


def make(opening, service):
    return {"n_sites": len(opening), "n_towns": len(service), "opening_costs": list(opening),
            "service_costs": [list(row) for row in service]}


TINY = [
    make([5, 5, 5], [[0, 9, 9], [9, 0, 9], [9, 9, 0]]),        # open everything
    make([100, 100, 100], [[0, 9, 9], [9, 0, 9], [9, 9, 0]]),  # one depot is enough
    make([1, 10, 1], [[10, 1, 10], [10, 1, 10], [10, 1, 10]]), # the dear central depot wins
    make([0, 0, 0], [[3, 3, 3], [3, 3, 3], [3, 3, 3]]),        # ties everywhere
    make([7, 3, 9, 2], [[4, 8, 1, 6], [2, 2, 9, 7], [5, 1, 3, 8], [9, 9, 9, 0]]),
]


def random_tiny(seed):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    return make([int(x) for x in rng.integers(0, 30, size=n)],
                [[int(x) for x in rng.integers(0, 30, size=n)] for _ in range(m)])


def sampled(k):
    rng = np.random.default_rng(100 + k)
    return FAM.sample(FAM.Params(size=3 + k % 6, horizon=3 + k % 10), rng)


INSTANCES = TINY + [random_tiny(s) for s in range(40)] + [sampled(k) for k in range(20)]


def test_solver_matches_brute_force_and_dominates_every_reference_plan():
    rng = np.random.default_rng(0)
    for theta in INSTANCES:
        sol = FAM.solve(theta)
        best, _ = brute_force(theta)
        assert sol.u_star == best, theta
        assert sol.certificate.status == "optimal" and sol.certificate.gap <= 1e-9
        assert sol.certificate.bound >= sol.u_star - 1e-6
        assert sol.certificate.state_space == 2 ** theta["n_sites"] - 1
        chosen = chosen_of(sol.policy)
        assert chosen and -cost(theta, chosen) == best == FAM.evaluate(theta, sol.policy)
        assert sol.u_default == -cost(theta, plain_default(theta)) <= sol.u_star
        assert sol.u_idle == -cost(theta, [0]) <= sol.u_star
        for _ in range(5):
            plan = FAM.random_policy(theta, rng)
            assert FAM.evaluate(theta, plan) == -cost(theta, chosen_of(plan)) <= sol.u_star


def test_tiny_hand_instances_have_the_expected_networks():
    assert chosen_of(FAM.solve(TINY[0]).policy) == [0, 1, 2] and FAM.solve(TINY[0]).u_star == -15
    assert FAM.solve(TINY[1]).u_star == -118
    assert chosen_of(FAM.solve(TINY[2]).policy) == [1] and FAM.solve(TINY[2]).u_star == -13
    assert FAM.solve(TINY[3]).u_star == -9


def test_default_and_idle_follow_their_docstrings():
    for theta in INSTANCES:
        assert chosen_of(FAM.default_policy(theta)) == plain_default(theta)
        assert chosen_of(FAM.idle_policy(theta)) == [0]


def test_random_policy_is_a_valid_varied_plan():
    theta = TINY[4]
    assert (FAM.random_policy(theta, np.random.default_rng(5)) == FAM.random_policy(theta, np.random.default_rng(5))).all()
    rng = np.random.default_rng(5)
    plans = {tuple(FAM.random_policy(theta, rng).tolist()) for _ in range(200)}
    assert len(plans) == 2 ** 4 - 1  # every non-empty set shows up, and the empty one never


@pytest.mark.parametrize("plan", [[0, 0, 0], [1, 0], [1, 0, 2], [1, 1, -1], [[1, 0, 0]]])
def test_evaluate_rejects_invalid_plans(plan):
    with pytest.raises(ValueError):
        FAM.evaluate(TINY[0], np.array(plan))


def test_solver_depends_on_opening_and_service_costs():
    theta = TINY[4]
    u = FAM.solve(theta).u_star
    for changed in (dict(theta, opening_costs=[7, 30, 9, 2]), dict(theta, opening_costs=[7, 3, 9, 20]),
                    dict(theta, service_costs=[[4, 8, 1, 6], [2, 2, 9, 7], [5, 1, 3, 8], [9, 9, 9, 5]])):
        u2 = FAM.solve(changed).u_star
        assert u2 == brute_force(changed)[0] and u2 != u, changed


def test_solve_is_exact_across_knob_ranges():
    for seed in range(12):
        _, theta = draw(FAM, seed)
        sol = FAM.solve(theta)
        assert sol.u_star == brute_force(theta)[0]
        assert FAM.turn_budget(theta) < 300
    big = FAM.sample(FAM.Params(size=8, horizon=12), np.random.default_rng(0))
    assert FAM.solve(big).certificate.gap <= 1e-9  # its time is in bench/solve_scaling.py, not a test
    assert FAM.turn_budget(big) < 300


def test_simulate_opens_the_plan_in_index_order_then_finalizes():
    rng = np.random.default_rng(11)
    for theta in TINY + [sampled(k) for k in range(6)]:
        sol = FAM.solve(theta)
        for plan in (sol.policy, FAM.default_policy(theta), FAM.idle_policy(theta), FAM.random_policy(theta, rng)):
            chosen = chosen_of(plan)
            for seed in (0, 1, 2**31 - 1):
                ep = FAM.simulate(theta, plan, seed)
                assert ep.utility == FAM.evaluate(theta, plan) == -cost(theta, chosen)
                assert ep.decisions == chosen
                assert ep.calls == [{"tool": "open_site", "arguments": {"site": s}} for s in chosen] + [
                    {"tool": "finalize_network", "arguments": {}}]
                assert len(ep.calls) <= FAM.turn_budget(theta)


# ---------------------------------------------------------------------------------------------
# sample and Params.


def test_sample_is_deterministic_per_seed():
    params = FAM.Params(size=6, horizon=7)
    a = FAM.sample(params, np.random.default_rng(5))
    assert a == FAM.sample(params, np.random.default_rng(5))
    others = [FAM.sample(params, np.random.default_rng(s)) for s in (6, 7, 8)]
    assert all(o != a for o in others) and len({repr(o) for o in others}) == 3


@pytest.mark.parametrize("size,horizon", [(3, 3), (5, 4), (8, 12), (3, 12), (8, 3)])
def test_sample_respects_params(size, horizon):
    rng = np.random.default_rng(size * 100 + horizon)
    for _ in range(10):
        theta = FAM.sample(FAM.Params(size=size, horizon=horizon), rng)
        assert set(theta) == {"n_sites", "n_towns", "opening_costs", "service_costs"}
        assert theta["n_sites"] == size and theta["n_towns"] == horizon
        assert len(theta["opening_costs"]) == size and len(theta["service_costs"]) == horizon
        assert all(type(f) is int and 20 <= f <= 30 * horizon + 20 for f in theta["opening_costs"])
        assert all(len(row) == size for row in theta["service_costs"])
        assert all(type(c) is int and 0 <= c <= 5 * 142 for row in theta["service_costs"] for c in row)


@pytest.mark.parametrize("knobs", [dict(size=2), dict(size=9), dict(horizon=2), dict(horizon=13), dict(size="many")])
def test_params_out_of_bounds_raise(knobs):
    with pytest.raises(ValidationError):
        FAM.Params(**knobs)
    with pytest.raises(InvalidParams):
        FAM.params(knobs)


def test_params_edges_and_knob_ranges():
    for knobs in (dict(size=3, horizon=3), dict(size=8, horizon=12)):
        params = FAM.params(knobs)
        assert (params.size, params.horizon) == (knobs["size"], knobs["horizon"])
    for name, (lo, hi) in FAM.knob_ranges.items():
        field = FAM.Params.model_fields[name]
        assert 3 <= lo <= hi and hi <= {"size": 8, "horizon": 12}[name], field
    assert FAM.stochastic is False and FAM.group == "probe_budgeted" and set(FAM.hidden) == set(HIDDEN)


@pytest.mark.parametrize("theta,field", [
    # truncated to [1, 1] and [[0, 0], [0, 0]] it would open one depot for 1; the true optimum opens depot 1: 2.1
    (make([1.5, 1.9], [[0.9, 0.2], [0.1, 0.0]]), "opening_costs"),
    (make([1, 1], [[0.9, 0.2], [0.1, 0.0]]), "service_costs"),
    (make([1, -1], [[1, 1], [1, 1]]), "opening_costs"),
    (make([1, 1], [[1, float("inf")], [1, 1]]), "service_costs"),
    (make([1, "2"], [[1, 1], [1, 1]]), "opening_costs"),
])
def test_solve_refuses_costs_that_are_not_whole_and_non_negative(theta, field):
    """Issue 14: cast to int64, cap71's decimal costs give 932,597 instead of the published 932,615.75."""
    with pytest.raises(InvalidParams, match=r"facility θ\['%s'\].*whole number" % field):
        FAM.solve(theta)


def test_solve_refuses_sizes_past_its_limits():
    rng = np.random.default_rng(71)
    cap71_shaped = make([7500.0] * 16, (rng.integers(0, 40000, size=(50, 16)) / 4).tolist())  # 16 × 50, quarters
    with pytest.raises(InvalidParams, match=r"n_sites.*1 … 8"):
        FAM.solve(cap71_shaped)
    with pytest.raises(InvalidParams, match=r"n_towns.*1 … 12"):
        FAM.solve(make([1, 2], [[1, 2]] * 13))
    with pytest.raises(InvalidParams, match=r"service_costs.*2 entries"):
        FAM.solve(make([1, 2], [[1, 2], [1]]))
    assert FAM.solve(make([2.0, 3], [[1, 5.0], [4, 1]])).u_star == -(2 + 1 + 4)  # whole floats are the numbers


# ---------------------------------------------------------------------------------------------
# The rendered module, in process.

MODULE_THETAS = [FAM.sample(FAM.Params(size=n, horizon=m), np.random.default_rng(s))
                 for s, n, m in ((1, 5, 6), (2, 8, 12), (3, 3, 3), (4, 7, 9))]


@pytest.mark.parametrize("k", range(len(MODULE_THETAS)))
def test_the_module_replays_every_plan_one_turn_a_depot(k):
    """Every plan of MODULE_THETAS (up to 8 depots × 12 towns) scores exactly its evaluation, in
    one turn per opened depot and one to finalize."""
    out, _ = generated(FAM, k)
    assert len(FAM.tools) >= 10
    theta = MODULE_THETAS[k]
    sol = FAM.solve(theta)
    rng = np.random.default_rng(k)
    for plan in (sol.policy, FAM.default_policy(theta), FAM.idle_policy(theta), FAM.random_policy(theta, rng)):
        for presentation in ("I", "A"):
            env = env_of(FAM, k, theta, presentation)
            for call in FAM.simulate(theta, plan, k).calls:
                assert not env.done
                result = env.call(out.tool_name(call["tool"]), call["arguments"])
                assert result["ok"], result
            outcome = env.outcome()
            assert outcome["terminal"] and env.done
            assert outcome["utility"] == FAM.evaluate(theta, plan)
            assert outcome["turns_used"] == len(chosen_of(plan)) + 1


def test_probes_and_observations_report_theta():
    theta = MODULE_THETAS[0]
    out, _ = generated(FAM, 0)
    env = env_of(FAM, 0, theta, "A", budget=ROOMY)
    call = lambda tool, **args: env.call(out.tool_name(tool), args)
    assert call("view_network")["total_cost"] is None
    assert [d["opening_cost"] for d in call("list_sites")["depots"]] == [None] * theta["n_sites"]
    assert call("get_site_costs", site=3)["opening_cost"] == theta["opening_costs"][3]
    shown = [d["opening_cost"] for d in call("list_sites")["depots"]]
    assert shown == [theta["opening_costs"][3] if s == 3 else None for s in range(theta["n_sites"])]
    for s in range(theta["n_sites"]):
        assert call("get_site_costs", site=s)["opening_cost"] == theta["opening_costs"][s]
    assert [d["opening_cost"] for d in call("list_sites")["depots"]] == theta["opening_costs"]
    assert costs(call("survey_town", town=2)["service_costs"]) == theta["service_costs"][2]
    assert [t["town"] for t in call("view_surveys")["surveyed"]] == [2]
    before = env.outcome()["turns_used"]
    for t in range(theta["n_towns"]):
        assert costs(call("survey_town", town=t)["service_costs"]) == theta["service_costs"][t]
    assert env.outcome()["turns_used"] == before + theta["n_towns"]
    assert [costs(t["service_costs"]) for t in call("view_surveys")["surveyed"]] == theta["service_costs"]
    for s in (1, 3):
        assert call("open_site", site=s)["ok"]
    net = call("view_network")
    assert net["open"] == [1, 3] and net["total_cost"] == cost(theta, [1, 3])
    towns = call("view_assignment")["towns"]
    for k, row in enumerate(theta["service_costs"]):
        best = min((row[s], s) for s in (1, 3))
        assert (towns[k]["cost"], towns[k]["site"]) == best
    assert call("close_site", site=1)["ok"] and call("view_network")["total_cost"] == cost(theta, [3])
    assert call("view_log", limit=1)["log"][0] == {"entry": 3, "action": "close", "site": 1}
    assert call("finalize_network")["ok"] and env.done and env.outcome()["utility"] == -cost(theta, [3])


def test_invalid_calls_are_reported_and_leave_state_unchanged():
    theta = make([5, 4, 3], [[4, 3, 2], [1, 2, 3]])
    out, _ = generated(FAM, 1)
    env = env_of(FAM, 1, theta, "I", budget=30)
    call = lambda tool, args: env.call(out.tool_name(tool) if tool in [t.name for t in FAM.tools] else tool, args)
    assert call("open_site", {"site": 0})["ok"]
    bad = [
        ("open_site", {"site": 0}),          # already open
        ("close_site", {"site": 1}),         # not open
        ("open_site", {"site": 3}),          # no depot 3 (n = 3): the World refuses
        ("open_site", {"site": 99}),         # beyond the schema maximum
        ("open_site", {"site": -1}),
        ("open_site", {"site": "0"}),
        ("open_site", {}),
        ("open_site", {"site": 2, "extra": 1}),
        ("survey_town", {"town": 2}),        # n_towns = 2
        ("survey_town", {"town": 1.5}),
        ("view_log", {"limit": 0}),
        ("finalize_network", {"now": True}),
        ("no_such_tool", {}),
    ]
    for tool, args in bad:  # the world's refusals use a turn each, the malformed calls none
        refused(env, named(FAM, out, tool), args)
    assert "already open" in call("open_site", {"site": 0})["error"]
    assert call("close_site", {"site": 0})["ok"] and call("view_network", {})["total_cost"] is None
    assert env.outcome()["utility"] == -cost(theta, [0])  # what finalizing the empty network scores
    assert call("finalize_network", {})["ok"] and env.done
    before = env.state_digest()
    assert call("open_site", {"site": 2})["ok"] is False and env.state_digest() == before
    assert env.outcome().items() >= {"utility": float(-cost(theta, [0])), "terminal": True, "turns_used": 7}.items()


def test_running_out_of_turns_finalizes_the_network_as_it_stands():
    theta = MODULE_THETAS[1]
    out, _ = generated(FAM, 2)
    env = env_of(FAM, 2, theta, "I", budget=3)
    assert env.call(out.tool_name("open_site"), {"site": 4})["ok"]
    assert env.call(out.tool_name("view_network"), {})["ok"]
    assert env.call(out.tool_name("open_site"), {"site": 6})["ok"]
    assert env.done and env.outcome().items() >= {"utility": float(-cost(theta, [4, 6])), "terminal": True, "turns_used": 3}.items()
    env = env_of(FAM, 2, theta, "I", budget=2)  # nothing open when the turns run out: depot 0 alone
    assert env.call(out.tool_name("get_site_costs"), {"site": 1})["ok"] and env.call(out.tool_name("view_log"), {})["ok"]
    assert env.done and env.outcome()["utility"] == -cost(theta, [0])


def test_presentation_a_hides_the_numbers_that_i_states():
    theta = MODULE_THETAS[0]
    other = dict(theta, opening_costs=[f + 1000 for f in theta["opening_costs"]],
                 service_costs=[[c + 500 for c in row] for row in theta["service_costs"]])
    for k in range(len(PASSAGES)):
        out, _ = generated(FAM, k)
        i_text, a_text = env_of(FAM, k, theta, "I").instruction, env_of(FAM, k, theta, "A").instruction
        assert env_of(FAM, k, other, "A").instruction == a_text
        assert env_of(FAM, k, other, "I").instruction != i_text
        for s, f in enumerate(theta["opening_costs"]):
            assert "depot %d %d" % (s, f) in i_text and "depot %d %d" % (s, f) not in a_text
        for t, row in enumerate(theta["service_costs"]):
            line = "town %d: %s" % (t, ", ".join(str(c) for c in row))
            assert line in i_text and line not in a_text
        for tool in ("get_site_costs", "survey_town"):
            assert out.tool_name(tool) in a_text
        assert "between 20 and %d" % (30 * theta["n_towns"] + 20) in a_text and "between 0 and 705" in a_text


def test_arguments_are_bounded_by_the_instance():
    """Issue 16 ("item maximum 49 for 6 lots"): depot numbers stop at n − 1 and town numbers at
    m − 1 in the schemas the module shows and checks, in both presentations (A tells n and m)."""
    theta = MODULE_THETAS[0]  # 5 depots, 6 towns: the family's schemas allow 8 and 12
    out, _ = generated(FAM, 0)
    for presentation in ("I", "A"):
        env = env_of(FAM, 0, theta, presentation)
        schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
        for tool in ("get_site_costs", "open_site", "close_site"):
            assert schemas[out.tool_name(tool)]["site"]["minimum"] == 0
            assert schemas[out.tool_name(tool)]["site"]["maximum"] == theta["n_sites"] - 1
        assert schemas[out.tool_name("survey_town")]["town"]["maximum"] == theta["n_towns"] - 1
        before = env.state_digest()
        refused = env.call(out.tool_name("open_site"), {"site": theta["n_sites"]})
        assert refused["ok"] is False and f"must be <= {theta['n_sites'] - 1}" in refused["error"]
        refused = env.call(out.tool_name("survey_town"), {"town": theta["n_towns"]})
        assert refused["ok"] is False and f"must be <= {theta['n_towns'] - 1}" in refused["error"]
        assert env.state_digest() == before and env.outcome()["turns_used"] == 0


def test_one_probe_in_a_shows_one_entry_or_one_row():
    """Presentation A as the paper specifies: a depot's probe shows that depot's opening cost and
    nothing else, a town's survey that town's row; the budget n + 2 leaves π* room for only part
    of the n + m probes."""
    theta = MODULE_THETAS[0]
    out, _ = generated(FAM, 0)
    env = env_of(FAM, 0, theta, "A")
    answer = env.call(out.tool_name("get_site_costs"), {"site": 2})
    assert {k: v for k, v in answer.items() if k not in ("ok", "turns_left")} == {
        "site": 2, "opening_cost": theta["opening_costs"][2], "currency": answer["currency"]}
    assert [d["opening_cost"] is not None for d in env.call(out.tool_name("list_sites"), {})["depots"]] == [
        s == 2 for s in range(theta["n_sites"])]
    row = env.call(out.tool_name("survey_town"), {"town": 4})
    assert row["town"] == 4 and costs(row["service_costs"]) == theta["service_costs"][4]
    assert env.outcome()["turns_used"] == 3  # two probes and a look, a turn each
    assert {FAM.tool(name).turn_cost for name in ("get_site_costs", "survey_town")} == {1}
    assert [spec.name for spec in FAM.tools_with_role("probe")] == ["get_site_costs", "survey_town"]
    optimum = FAM.solve(theta)
    spare = FAM.turn_budget(theta) - len(FAM.simulate(theta, optimum.policy, 0).calls)
    assert 1 <= spare < theta["n_sites"] + theta["n_towns"] == len(FAM.probe_calls(theta))


CODED = 27  # a parcel hub: its depots are warehouses W-01, W-02, ... and its towns postcodes P-01, P-02, ...


def test_a_coded_world_takes_and_writes_its_codes():
    """Issue 29: a world that writes depots as codes refuses an unknown code as malformed (no turn
    used), takes W-01 for depot 0 and writes its codes in its answers and its instruction."""
    family, passage = FAM, PASSAGES[CODED]
    assert id_skin(family, passage) == ({"site": "code:W", "town": "code:P"},
                                        {"site": "warehouse", "town": "postcode"})
    out = render_module(family, passage)
    module = types.ModuleType("coded_facility")
    exec(compile(out.module, "<coded facility>", "exec"), module.__dict__)
    theta = MODULE_THETAS[0]
    env = module.create({"params": theta, "presentation": "I", "episode_seed": 0, "turn_budget": ROOMY})
    assert "numbered W-01 to W-05" in env.instruction and "numbered P-01 to P-06" in env.instruction
    assert "depot W-03 %d" % theta["opening_costs"][2] in env.instruction and "  town P-02: " in env.instruction
    schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
    assert schemas[out.tool_name("open_site")]["warehouse"]["enum"] == ["W-0%d" % k for k in range(1, 6)]
    before = env.state_digest()
    for wrong in ("W-06", "W-1", "w-01", "D-01", 0, 1):
        refused = env.call(out.tool_name("open_site"), {"warehouse": wrong})
        assert refused["ok"] is False and env.state_digest() == before, (wrong, refused)
    assert env.call(out.tool_name("open_site"), {"site": 0})["ok"] is False  # the canonical name is unknown here
    assert env.outcome()["turns_used"] == 0
    answer = env.call(out.tool_name("open_site"), {"warehouse": "W-01"})
    assert answer["ok"] and answer["opened"] == "W-01" and answer["open"] == ["W-01"]
    assert "W-01 is already open" in env.call(out.tool_name("open_site"), {"warehouse": "W-01"})["error"]
    row = env.call(out.tool_name("survey_town"), {"postcode": "P-02"})
    assert row["postcode"] == "P-02"
    assert row["service_costs"] == [{"warehouse": "W-0%d" % (s + 1), "cost": c}
                                    for s, c in enumerate(theta["service_costs"][1])]
    towns = env.call(out.tool_name("view_assignment"), {})["towns"]
    assert [t["postcode"] for t in towns] == ["P-0%d" % (k + 1) for k in range(theta["n_towns"])]
    assert {t["warehouse"] for t in towns} == {"W-01"}
    assert env.call(out.tool_name("view_log"), {})["log"][0] == {"entry": 1, "action": "open", "warehouse": "W-01"}
    assert env.outcome()["turns_used"] == 5  # the open, the refused open, the survey, the view and the log


def test_belief_is_what_was_read_and_the_stated_middle_elsewhere():
    theta = MODULE_THETAS[0]
    n, m = theta["n_sites"], theta["n_towns"]
    read = [{"tool": "survey_town", "arguments": {"town": 1}}, {"tool": "get_site_costs", "arguments": {"site": 4}}]
    guess = FAM.belief(theta, read)
    assert guess["opening_costs"] == [theta["opening_costs"][4] if s == 4 else 15 * m + 20 for s in range(n)]
    assert guess["service_costs"] == [theta["service_costs"][1] if t == 1 else [352] * n for t in range(m)]
    assert FAM.belief(theta, FAM.probe_calls(theta)) == theta


# ---------------------------------------------------------------------------------------------
# Through the real gates.


# at seed 0 two of the six sampled models fall outside the default band (four admitted per
# presentation); seed 4 gives the five per presentation asserted below
GATE_SEED = 4


def test_the_gates_admit_the_family_in_both_presentations():
    verdicts = gated(FAM, seed=GATE_SEED).verdicts
    assert len(verdicts) == 12
    for presentation in ("I", "A"):
        mine = [v for v in verdicts if v.candidate.presentation == presentation]
        assert sum(v.admitted for v in mine) >= 5, [v.reason for v in mine]
    for v in verdicts:  # a rejection may only come from the model's own default band
        assert v.admitted or failed([v]) == {"default_band"}, v.reason
        assert v.instruction and len(v.tools) == len(FAM.tools)


def _rejected(which, old, new):
    """Every gate on the candidates of module `which` with `old` (found once) replaced by `new`;
    none may be admitted."""
    verdicts = mutant_verdicts(FAM, gated(FAM, seed=GATE_SEED), old, new, which)
    assert not any(v.admitted for v in verdicts)
    return verdicts


def test_a_world_with_doubled_opening_costs_is_rejected():
    verdicts = _rejected(0, "SELECT COALESCE(SUM(opening_cost), 0)", "SELECT COALESCE(SUM(2 * opening_cost), 0)")
    assert {"replay_agreement", "dynamics_agreement"} <= failed(verdicts)


def test_a_world_that_serves_from_closed_depots_is_rejected():
    verdicts = _rejected(-1, "ON d.site_id = c.site_id AND d.is_open = 1 ", "ON d.site_id = c.site_id ")
    # the assignment view is an observation (the cost is `_cost`): its numbers differ from the reference World's
    assert "reference_agreement" in failed(verdicts)


def test_a_world_whose_cost_serves_from_closed_depots_is_rejected():
    verdicts = _rejected(-1, '"WHERE site_id IN (%s) GROUP BY town_id)"', '"GROUP BY town_id)"')
    assert failed(verdicts) & {"replay_agreement", "dynamics_agreement", "no_policy_beats_optimum"}


# ---------------------------------------------------------------------------------------------
# Decision rewards: Φ = u* until the network is final (every decision can be revised), −C(S) after.


@pytest.mark.parametrize("theta", TINY[2:] + [random_tiny(s) for s in (1, 2, 3)] + [sampled(0)])
def test_only_finalizing_has_an_advantage_and_it_is_the_regret(theta):
    from vhd.tasks.grading.step_advantages import step_advantages

    rng = np.random.default_rng(19)
    u_star = brute_force(theta)[0]
    n = theta["n_sites"]
    for trial in range(8):
        # random openings and closings (some refused, using their turn: already open, not open), then finalize or run out
        calls = [{"tool": "open_site" if rng.random() < 0.6 else "close_site", "arguments": {"site": int(s)}}
                 for s in rng.integers(0, n, size=2 * n + 2)]
        if trial % 2:
            calls.append({"tool": "finalize_network", "arguments": {}})
        budget = 2 + trial if trial % 3 == 2 else 50
        config = {"params": theta, "presentation": "I", "episode_seed": trial, "turn_budget": budget}
        steps = step_advantages(FAM, config, calls)
        chosen, expected, turns, done = set(), [], 0, False
        for call in calls:
            site = call["arguments"].get("site")
            if done:
                expected.append(0)
                continue
            refused = (call["tool"] == "open_site") == (site in chosen) and call["tool"] != "finalize_network"
            if call["tool"] != "finalize_network" and not refused:
                chosen ^= {site}
            turns += 1  # a refused call uses its turn too
            done = call["tool"] == "finalize_network" or turns == budget
            expected.append(-cost(theta, sorted(chosen) or [0]) - u_star if done else 0)
        finish = 0 if done else -cost(theta, sorted(chosen) or [0]) - u_star
        assert steps.per_call == [float(a) for a in expected] and steps.finish == float(finish), (calls, budget)
        assert steps.utility == -cost(theta, sorted(chosen) or [0])
        assert steps.total == steps.utility - u_star  # Σ A* = u − u*, exactly
