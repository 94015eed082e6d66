"""Cross-checks of the Pandora's-box family against plain-Python brute force.

Everything here is written from the module docstring's Model section, not from `_Process`:
expectimax over (opened set, best so far) in exact Fractions, the exact expectation of a policy
over every joint prize vector, Weitzman's reservation values by bisection, and the replay of a
prize draw. The only layout assumption is the policy table's: [opened bitmask, level] → box to
open or −1, levels being the sorted distinct values of max(fallback, v) over all prizes v.
"""

from __future__ import annotations

import itertools
import math
import types
from fractions import Fraction

import numpy as np
import pytest
from pydantic import ValidationError

from family_kit import PASSAGES, env_of, failed, gated, generated, mutant_verdicts, named, refused
from vhd.mechanisms import registry
from vhd.mechanisms import pandora as pan
from vhd.schemas.errors import InvalidParams
from vhd.tasks.setters.lexicon import id_skin
from vhd.tasks.setters.template import render_module
from vhd.tasks.stages.sample import draw
from theta_cases import bumped, smallest_theta

FAM = registry.get("pandora")
ROOMY = 40  # a turn budget for the tests that look at everything (the family's own affords the openings and a probe)
TOL = 1e-9


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in plain Python.


def dist(theta, i):
    total = sum(theta["prize_weights"][i])
    return [(v, Fraction(w, total)) for v, w in zip(theta["prize_values"][i], theta["prize_weights"][i])]


def expectimax(theta, opened=frozenset(), best=None):
    """max(stop, open any unopened box) over the whole scenario tree, exact; utility to go with
    fees counted as they are paid."""
    if best is None:
        best = theta["fallback"]
    value = Fraction(best)
    if len(opened) < theta["max_open"]:
        for i in range(theta["n_boxes"]):
            if i not in opened:
                q = -theta["costs"][i] + sum(p * expectimax(theta, opened | {i}, max(best, v)) for v, p in dist(theta, i))
                value = max(value, q)
    return value


def levels_of(theta):
    fb = theta["fallback"]
    return sorted({fb} | {max(fb, v) for row in theta["prize_values"] for v in row})


def play(theta, policy, prizes):
    """Replay a policy table on one prize vector: (utility, boxes opened in order)."""
    index = {v: k for k, v in enumerate(levels_of(theta))}
    mask, best, paid, opened = 0, theta["fallback"], 0, []
    while True:
        box = int(policy[mask][index[best]])
        if box < 0:
            return best - paid, opened
        assert not mask >> box & 1 and len(opened) < theta["max_open"]
        opened.append(box)
        paid += theta["costs"][box]
        best = max(best, prizes[box])
        mask |= 1 << box


def expectation(theta, policy):
    """Exact expected utility of a policy table over every joint prize vector."""
    total = Fraction(0)
    for outcome in itertools.product(*[dist(theta, i) for i in range(theta["n_boxes"])]):
        prob = math.prod((p for _, p in outcome), start=Fraction(1))
        total += prob * play(theta, policy, [v for v, _ in outcome])[0]
    return total


def sigma_bisection(theta, i):
    """Weitzman's reservation value by bisection on E[(X − σ)^+] = c (floats)."""
    lo, hi = -1000.0, 1000.0
    for _ in range(200):
        mid = (lo + hi) / 2
        excess = sum(float(p) * max(0.0, v - mid) for v, p in dist(theta, i))
        lo, hi = (mid, hi) if excess > theta["costs"][i] else (lo, mid)
    return lo


def index_rule_value(theta):
    """Expected utility of Weitzman's rule played directly on every prize vector."""
    sigma = [sigma_bisection(theta, i) for i in range(theta["n_boxes"])]
    order = sorted(range(theta["n_boxes"]), key=lambda i: -sigma[i])
    total = Fraction(0)
    for outcome in itertools.product(*[dist(theta, i) for i in range(theta["n_boxes"])]):
        prob = math.prod((p for _, p in outcome), start=Fraction(1))
        best, paid = theta["fallback"], 0
        for i in order:
            if sigma[i] <= best + 1e-9:
                break
            paid += theta["costs"][i]
            best = max(best, outcome[i][0])
        total += prob * (best - paid)
    return total


# ---------------------------------------------------------------------------------------------
# Instances.


def make(fallback, max_open, boxes, stickers=None):
    """boxes: [(fee, [(value, weight), …]), …]; the stickers are the boxes' mean prizes rounded
    half up unless given."""
    means = [math.floor(sum(Fraction(v * w) for v, w in table) / sum(w for _, w in table) + Fraction(1, 2))
             for _, table in boxes]
    return {"n_boxes": len(boxes), "max_open": max_open, "fallback": fallback,
            "costs": [c for c, _ in boxes],
            "prize_values": [[v for v, _ in table] for _, table in boxes],
            "prize_weights": [[w for _, w in table] for _, table in boxes],
            "prize_stickers": means if stickers is None else list(stickers)}


SAFE = (1, [(50, 1)])
LOTTERY = (1, [(0, 9), (100, 1)])
HAND = [
    make(0, 1, [SAFE, LOTTERY]),   # the cap binds: the index rule opens the lottery (σ 90) for 9, DP takes 49
    make(0, 2, [SAFE, LOTTERY]),
    make(10, 2, [(5, [(0, 1), (30, 1)]), (3, [(12, 3), (20, 1)]), (8, [(5, 1), (60, 1)])]),
    make(0, 3, [(2, [(10, 1), (20, 1)]), (6, [(0, 3), (40, 1)]), (1, [(5, 1), (7, 1), (9, 2)])]),
    make(40, 2, [(1, [(0, 1), (30, 1)]), (2, [(10, 1)])]),  # nothing beats the fallback: u* = idle
    make(3, 4, [(4, [(0, 2), (25, 3)]), (2, [(8, 1), (14, 1)]), (9, [(0, 4), (70, 1)]), (1, [(6, 1), (9, 1)])]),
]


def random_instances(seed, count):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(rng.integers(2, 5))
        boxes = []
        for _ in range(n):
            k = int(rng.integers(1, 4))
            values = sorted(int(v) for v in rng.choice(60, size=k, replace=False))
            boxes.append((int(rng.integers(1, 15)), [(v, int(rng.integers(1, 6))) for v in values]))
        out.append(make(int(rng.integers(0, 20)), int(rng.integers(1, n + 1)), boxes,
                        stickers=[int(x) for x in rng.integers(0, 60, size=n)]))
    return out


def sampled_tiny(seed, size, horizon):
    return FAM.sample(FAM.Params(size=size, horizon=horizon), np.random.default_rng(seed))


TINY = HAND + random_instances(2024, 16) + [sampled_tiny(s, n, h) for s, n, h in
                                             ((1, 2, 1), (2, 3, 3), (3, 3, 2), (4, 4, 4), (5, 4, 2))]


def _id(theta):
    return "n%d-cap%d-fb%d-c%s" % (theta["n_boxes"], theta["max_open"], theta["fallback"],
                                    ".".join(map(str, theta["costs"])))


# ---------------------------------------------------------------------------------------------
# The solver against brute force.


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_u_star_equals_expectimax_and_pi_star_attains_it(theta):
    sol = FAM.solve(theta)
    exact = expectimax(theta)
    assert abs(sol.u_star - float(exact)) <= TOL, (sol.u_star, float(exact))
    assert sol.policy.shape == (2 ** theta["n_boxes"], len(levels_of(theta)))
    assert np.issubdtype(sol.policy.dtype, np.integer)
    assert abs(float(expectation(theta, sol.policy)) - float(exact)) <= TOL
    assert abs(FAM.evaluate(theta, sol.policy) - sol.u_star) <= TOL
    assert sol.certificate.status == "optimal"
    assert sol.certificate.state_space == sol.policy.size
    # the reference values are the plain expectations, and never beat u*
    assert abs(sol.u_default - float(expectation(theta, FAM.default_policy(theta)))) <= TOL
    assert sol.u_idle == theta["fallback"] == float(expectation(theta, FAM.idle_policy(theta)))
    rng = np.random.default_rng(len(theta["costs"]))
    for _ in range(5):
        plan = FAM.random_policy(theta, rng)
        value = FAM.evaluate(theta, plan)
        assert abs(value - float(expectation(theta, plan))) <= TOL
        assert value <= sol.u_star + TOL
    assert sol.u_default <= sol.u_star + TOL


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_weitzman_equals_dp_when_the_cap_is_slack(theta):
    slack = dict(theta, max_open=theta["n_boxes"])
    exact = expectimax(slack)
    assert abs(float(index_rule_value(slack)) - float(exact)) <= 1e-6
    assert abs(FAM.solve(slack).u_star - float(exact)) <= TOL
    sigma = pan.reservation_values(slack)
    for i, s in enumerate(sigma):  # exact σ agrees with bisection and solves E[(X − σ)^+] = c
        assert abs(float(s) - sigma_bisection(slack, i)) <= 1e-6
        assert sum(p * max(Fraction(0), v - s) for v, p in dist(slack, i)) == slack["costs"][i]


def test_a_binding_cap_defeats_the_index_rule_but_not_the_dp():
    theta = HAND[0]
    assert [float(s) for s in pan.reservation_values(theta)] == [49.0, 90.0]
    assert float(index_rule_value(dict(theta, max_open=2))) == FAM.solve(HAND[1]).u_star
    sol = FAM.solve(theta)
    assert sol.u_star == 49.0 == float(expectimax(theta))
    assert FAM.evaluate(theta, pan.weitzman_policy(theta)) == 9.0  # open the lottery: 0.1·100 − 1
    assert int(sol.policy[0, 0]) == 0


def test_default_is_exhaustive_in_sticker_order_and_idle_stops():
    """The default believes the stickers: it opens the highest-stickered boxes (lowest number on
    ties) up to the cap, whatever it finds."""
    for theta in TINY:
        default, idle = FAM.default_policy(theta), FAM.idle_policy(theta)
        assert (idle == -1).all()
        order = sorted(range(theta["n_boxes"]), key=lambda i: (-theta["prize_stickers"][i], i))
        for prizes in itertools.product(*theta["prize_values"]):
            assert play(theta, default, prizes)[1] == order[:theta["max_open"]]
            assert play(theta, idle, prizes) == (theta["fallback"], [])


def test_solver_depends_on_fees_prizes_and_cap():
    theta = HAND[5]
    u = FAM.solve(theta).u_star
    for changed in (dict(theta, costs=[c + 1 for c in theta["costs"]]),
                    dict(theta, prize_values=[[v + 3 for v in row] for row in theta["prize_values"]]),
                    dict(theta, max_open=1), dict(theta, fallback=12)):
        value = FAM.solve(changed).u_star
        assert abs(value - float(expectimax(changed))) <= TOL
        assert abs(value - u) > 1e-6


@pytest.mark.parametrize("bad", ["shape", "reopen", "cap", "range", "float"])
def test_evaluate_rejects_invalid_policies(bad):
    theta = HAND[2]  # n = 2 … 3 boxes, cap 2
    table = FAM.idle_policy(theta).copy()
    if bad == "shape":
        table = table[:-1]
    elif bad == "reopen":
        table[1, 0] = 0  # box 0 is already open in mask 1
    elif bad == "cap":
        table[3, 0] = 2  # two boxes open, cap 2
    elif bad == "range":
        table[0, 0] = 5
    else:
        table = table.astype(float)
    with pytest.raises(ValueError):
        FAM.evaluate(theta, table)


# ---------------------------------------------------------------------------------------------
# The reference simulator and the shared draw.

SIM = [FAM.sample(FAM.Params(size=n, horizon=h), np.random.default_rng(s))
       for s, n, h in ((11, 5, 3), (12, 7, 7), (13, 4, 2), (14, 6, 6))]


def _plans(theta, rng):
    return {"star": FAM.solve(theta).policy, "default": FAM.default_policy(theta),
            "idle": FAM.idle_policy(theta), "random": FAM.random_policy(theta, rng)}


@pytest.mark.parametrize("theta", SIM + HAND[:3], ids=[_id(t) for t in SIM + HAND[:3]])
def test_simulate_matches_plain_replay(theta):
    rng = np.random.default_rng(99)
    for name, plan in _plans(theta, rng).items():
        for seed in (0, 1, 7, 12345, 2**31 - 1):
            prizes = pan.World.draw(theta, seed)
            utility, opened = play(theta, plan, prizes)
            episode = FAM.simulate(theta, plan, seed)
            assert episode.utility == utility and episode.decisions == opened, (name, seed)
            assert episode.calls == [{"tool": "open_box", "arguments": {"box": b}} for b in opened] + \
                [{"tool": "stop_and_take", "arguments": {}}]
            assert len(episode.calls) <= FAM.turn_budget(theta)


def test_draw_is_deterministic_in_support_and_varies():
    theta = SIM[1]
    assert pan.World.draw(theta, 5) == pan.World.draw(theta, 5)
    draws = {tuple(pan.World.draw(theta, s)) for s in range(40)}
    assert len(draws) > 30
    for prizes in draws:
        assert all(v in theta["prize_values"][i] for i, v in enumerate(prizes))


@pytest.mark.parametrize("which", [0, 2])
def test_simulate_average_is_close_to_evaluate(which):
    theta = SIM[which]
    rng = np.random.default_rng(314 + which)
    seeds = [int(s) for s in rng.integers(0, 2**31 - 1, size=1500)]
    for name, plan in _plans(theta, rng).items():
        values = np.array([FAM.simulate(theta, plan, s).utility for s in seeds])
        expected = FAM.evaluate(theta, plan)
        se = values.std(ddof=1) / math.sqrt(len(values))
        assert abs(values.mean() - expected) <= 4 * se + 1e-9, (name, values.mean(), expected, se)


def test_random_policy_is_seeded_valid_and_differs_between_calls():
    theta = SIM[0]
    a = FAM.random_policy(theta, np.random.default_rng(3))
    assert (a == FAM.random_policy(theta, np.random.default_rng(3))).all()
    rng = np.random.default_rng(4)
    assert not (FAM.random_policy(theta, rng) == FAM.random_policy(theta, rng)).all()
    FAM.evaluate(theta, a)  # valid: raises otherwise
    assert (a[0] >= 0).any() and (a[0] == -1).any()


# ---------------------------------------------------------------------------------------------
# sample and Params.


def test_sample_is_deterministic_per_seed():
    params = FAM.Params(size=6, horizon=4)
    a = FAM.sample(params, np.random.default_rng(5))
    assert a == FAM.sample(params, np.random.default_rng(5))
    assert all(FAM.sample(params, np.random.default_rng(s)) != a for s in (6, 7, 8))


@pytest.mark.parametrize("size,horizon", [(2, 1), (3, 7), (5, 5), (7, 2), (7, 7)])
def test_sample_respects_params(size, horizon):
    rng = np.random.default_rng(size * 10 + horizon)
    for _ in range(10):
        theta = FAM.sample(FAM.Params(size=size, horizon=horizon), rng)
        assert set(theta) == set(pan.World.PARAMS)
        assert theta["n_boxes"] == size and theta["max_open"] == min(horizon, size - 1)
        assert 1 <= theta["max_open"] < theta["n_boxes"]  # the cap binds: a rule the player meets
        assert type(theta["fallback"]) is int and 0 <= theta["fallback"] <= 15
        for i in range(size):
            values, weights = theta["prize_values"][i], theta["prize_weights"][i]
            assert values == sorted(set(values)) and len(values) == len(weights) >= 2
            assert all(type(v) is int and v >= 0 for v in values)
            assert all(type(w) is int and w >= 1 for w in weights) and sum(weights) == pan.WEIGHT_TOTAL
            assert type(theta["costs"][i]) is int and theta["costs"][i] >= 1
            # every box alone is worth opening over the fallback (σ_i > fallback)
            assert pan.reservation_values(theta)[i] > theta["fallback"]


def test_solve_across_knob_ranges():
    for seed in range(30):
        _, theta = draw(FAM, seed)
        sol = FAM.solve(theta)
        assert sol.u_star > sol.u_idle  # some box is worth opening
        assert len(FAM.simulate(theta, sol.policy, seed).calls) <= theta["max_open"] + 1


@pytest.mark.parametrize("knobs", [dict(size=1), dict(size=8), dict(horizon=0), dict(horizon=8), dict(size="many")])
def test_params_out_of_bounds_raise(knobs):
    with pytest.raises(ValidationError):
        FAM.Params(**knobs)


def test_params_edges_and_family_translates_errors():
    for knobs in (dict(size=2, horizon=1), dict(size=7, horizon=7)):
        params = FAM.params(knobs)
        assert (params.size, params.horizon) == (knobs["size"], knobs["horizon"])
    with pytest.raises(InvalidParams):
        FAM.params({"size": 9})
    for knob, (lo, hi) in FAM.knob_ranges.items():
        FAM.params({knob: lo}), FAM.params({knob: hi})
    assert FAM.stochastic and FAM.group == "far_ood" and set(FAM.hidden) == set(pan.HIDDEN)


# ---------------------------------------------------------------------------------------------
# The rendered module, in process.

def certain(theta):
    """The same boxes with one sure prize each (the top value): realized = expected utility."""
    return dict(theta, prize_values=[[row[-1]] for row in theta["prize_values"]],
                prize_weights=[[1] for _ in theta["prize_weights"]])


@pytest.mark.parametrize("k", range(len(PASSAGES)))
def test_the_module_takes_one_turn_a_call_and_reproduces_evaluate_on_certain_prizes(k):
    """Beyond the generic replay (tests/test_contract.py): every call of a plan costs one turn, and
    with one sure prize per box the module's utility is `evaluate`'s exactly."""
    out, _ = generated(FAM, k)
    theta = SIM[k % len(SIM)]
    rng = np.random.default_rng(k)
    for which in (theta, certain(theta)):
        for name, plan in _plans(which, rng).items():
            for presentation, seed in (("I", k), ("A", 1000 + k)):
                env = env_of(FAM, k, which, presentation, seed=seed)
                episode = FAM.simulate(which, plan, seed)
                for call in episode.calls:
                    assert not env.done
                    result = env.call(out.tool_name(call["tool"]), call["arguments"])
                    assert result["ok"], result
                outcome = env.outcome()
                assert outcome["terminal"] and env.done
                assert outcome["utility"] == episode.utility
                assert outcome["turns_used"] == len(episode.calls)
                if which is not theta:  # no randomness left: the module reproduces evaluate exactly
                    assert outcome["utility"] == FAM.evaluate(which, plan), name


def test_best_box_names_the_best_opened_box_whether_or_not_it_beats_the_fallback():
    """A prize equal to the fallback (a tie) needs no rule: best_prize is the higher value, best_box
    the opened box with the highest prize (the first opened on ties)."""
    theta = make(10, 3, [(1, [(10, 1)]), (1, [(4, 1)]), (1, [(20, 1)]), (1, [(10, 1)])])
    out, _ = generated(FAM, 0)
    env = env_of(FAM, 0, theta, budget=ROOMY)
    call = lambda tool, **args: env.call(out.tool_name(tool), args)
    assert (call("view_best")["best_prize"], call("view_best")["best_box"]) == (10, None)
    call("open_box", box=1)  # 4 < fallback 10
    assert (call("view_best")["best_prize"], call("view_best")["best_box"]) == (10, 1)
    call("open_box", box=3)  # 10 = fallback
    assert (call("view_best")["best_prize"], call("view_best")["best_box"]) == (10, 3)
    call("open_box", box=2)  # 20
    taken = call("stop_and_take")
    assert (taken["prize_taken"], taken["best_box"], taken["net"]) == (20, 2, 17)


def test_probes_and_observations_report_theta_and_state():
    theta = SIM[0]
    out, _ = generated(FAM, 0)
    env = env_of(FAM, 0, theta, "A", seed=3, budget=ROOMY)
    call = lambda tool, **args: env.call(out.tool_name(tool), args)
    box = call("inspect_box", box=2)
    assert box["fee"] == theta["costs"][2] and box["prizes"] == theta["prize_values"][2]
    assert box["weights"] == theta["prize_weights"][2]
    assert [f["fee"] for f in call("read_fee_schedule")["fees"]] == theta["costs"]
    assert call("view_best")["best_prize"] == theta["fallback"]
    prizes = pan.World.draw(theta, 3)
    opened = call("open_box", box=1)
    assert opened["prize"] == prizes[1] and opened["fee"] == theta["costs"][1]
    assert call("view_best")["best_prize"] == max(theta["fallback"], prizes[1])
    assert call("view_fees_paid")["fees_paid"] == theta["costs"][1]
    openings = call("view_openings")
    assert (openings["opened"], openings["left"]) == (1, theta["max_open"] - 1)
    assert openings["turns_left"] == ROOMY - 7  # 2 probes, 4 looks, 1 opening
    assert call("view_net")["net_if_stopped_now"] == max(theta["fallback"], prizes[1]) - theta["costs"][1]
    listed = call("list_boxes")["boxes"]
    assert [b["opened"] for b in listed] == [i == 1 for i in range(theta["n_boxes"])]
    assert listed[1]["prize"] == prizes[1] and listed[0]["prize"] is None
    assert call("view_log", limit=1)["openings"][0]["box"] == 1
    taken = call("stop_and_take")
    assert taken["net"] == env.outcome()["utility"] == max(theta["fallback"], prizes[1]) - theta["costs"][1]


def test_invalid_calls_are_reported_and_leave_state_unchanged():
    theta = make(0, 2, [(3, [(10, 1), (20, 1)]), (2, [(5, 1)]), (4, [(0, 1), (40, 1)])])
    out, _ = generated(FAM, 1)
    env = env_of(FAM, 1, theta, "I", budget=30)
    tools = {t.name for t in FAM.tools}
    call = lambda tool, args: env.call(out.tool_name(tool) if tool in tools else tool, args)
    assert call("open_box", {"box": 0})["ok"]
    bad = [
        ("open_box", {"box": 0}),          # already open
        ("open_box", {"box": 3}),          # no box 3 (n = 3): the fitted schema refuses
        ("open_box", {"box": 7}),          # beyond the schema maximum
        ("open_box", {"box": -1}),
        ("open_box", {"box": "1"}),
        ("open_box", {"box": 1.5}),
        ("open_box", {}),
        ("open_box", {"box": 1, "extra": 1}),
        ("inspect_box", {"box": 5}),
        ("view_log", {"limit": 0}),
        ("stop_and_take", {"now": True}),
        ("no_such_tool", {}),
    ]
    for tool, args in bad:  # the world's refusals use a turn each, the malformed calls none
        refused(env, named(FAM, out, tool), args)
    assert call("open_box", {"box": 1})["ok"]
    before = env.state_digest()
    result = call("open_box", {"box": 2})  # the cap of 2 is reached
    assert result["ok"] is False and "at most 2" in result["error"] and env.state_digest() == before
    assert call("stop_and_take", {})["ok"] and env.done
    before = env.state_digest()
    assert call("open_box", {"box": 2})["ok"] is False and env.state_digest() == before
    prize0 = pan.World.draw(theta, 0)[0]
    assert env.outcome().items() >= {"utility": float(max(prize0, 5) - 5), "terminal": True, "turns_used": 5}.items()


def test_running_out_of_turns_keeps_the_best_prize_so_far():
    theta = SIM[1]
    out, _ = generated(FAM, 2)
    env = env_of(FAM, 2, theta, "I", seed=8, budget=3)
    prizes = pan.World.draw(theta, 8)
    assert env.call(out.tool_name("open_box"), {"box": 4})["ok"]
    assert env.call(out.tool_name("view_best"), {})["ok"]
    assert env.call(out.tool_name("open_box"), {"box": 0})["ok"]
    assert env.done
    expected = max(theta["fallback"], prizes[4], prizes[0]) - theta["costs"][4] - theta["costs"][0]
    assert env.outcome().items() >= {"utility": float(expected), "terminal": True, "turns_used": 3}.items()
    assert env.call(out.tool_name("open_box"), {"box": 1})["ok"] is False


def test_presentation_a_hides_the_numbers_that_i_states():
    theta = SIM[0]
    other = dict(theta, costs=[c + 1000 for c in theta["costs"]],
                 prize_values=[[v + 500 for v in row] for row in theta["prize_values"]],
                 prize_weights=[[w + 1 for w in row] for row in theta["prize_weights"]])
    for k in range(len(PASSAGES)):
        out, _ = generated(FAM, k)
        i_text, a_text = env_of(FAM, k, theta, "I").instruction, env_of(FAM, k, theta, "A").instruction
        assert env_of(FAM, k, other, "A").instruction == a_text
        assert env_of(FAM, k, other, "I").instruction != i_text
        for i, fee in enumerate(theta["costs"]):
            assert "box %d: fee %d;" % (i, fee) in i_text and "fee %d" % fee not in a_text
            for v in theta["prize_values"][i]:
                assert " %d %s with chance" % (v, PASSAGES[k].vocabulary["currency"]) in i_text
        assert "with chance" not in a_text and "box 0: fee" not in a_text
        for tool in ("inspect_box", "read_fee_schedule"):
            assert out.tool_name(tool) in a_text
        assert "fallback prize of %d" % theta["fallback"] in a_text  # public
        # the stickers with their stated error, and the fees' stated range
        assert ", ".join("box %d: %d" % (i, s) for i, s in enumerate(theta["prize_stickers"])) in a_text
        assert "by at most 12 either way" in a_text and "between 15 % and 50 %" in a_text


CODED = 2  # a bike shop: its boxes are cartons C-01, C-02, ...


def test_a_coded_world_takes_and_writes_its_codes():
    """Issue 29: a world that writes boxes as codes refuses an unknown code as malformed (no turn
    used), takes C-01 for box 0 and writes its codes in its answers and its instruction."""
    passage = PASSAGES[CODED]
    assert id_skin(FAM, passage) == ({"box": "code:C"}, {"box": "carton", "best_box": "best_carton"})
    out = render_module(FAM, passage)
    module = types.ModuleType("coded_pandora")
    exec(compile(out.module, "<coded pandora>", "exec"), module.__dict__)
    theta = SIM[0]
    n = theta["n_boxes"]
    codes = ["C-%02d" % (i + 1) for i in range(n)]
    texts = {}
    for presentation in ("I", "A"):
        env = module.create({"params": theta, "presentation": presentation, "episode_seed": 3, "turn_budget": ROOMY})
        texts[presentation] = env.instruction
        assert "numbered C-01 to %s" % codes[-1] in env.instruction
    assert "  box C-01: fee %d;" % theta["costs"][0] in texts["I"]
    assert ", ".join("box %s: %d" % (c, s) for c, s in zip(codes, theta["prize_stickers"])) in texts["A"]
    schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
    assert schemas[out.tool_name("open_box")]["carton"]["enum"] == codes
    before = env.state_digest()
    for wrong in ("C-%02d" % (n + 1), "C-1", "c-01", "B-01", 0, 1):
        answer = env.call(out.tool_name("open_box"), {"carton": wrong})
        assert answer["ok"] is False and env.state_digest() == before, (wrong, answer)
    assert env.call(out.tool_name("open_box"), {"box": 0})["ok"] is False  # the canonical name is unknown here
    assert env.outcome()["turns_used"] == 0
    prizes = pan.World.draw(theta, 3)
    answer = env.call(out.tool_name("open_box"), {"carton": "C-01"})
    assert answer["ok"] and answer["carton"] == "C-01" and answer["prize"] == prizes[0]
    assert "box C-01 is already open" in env.call(out.tool_name("open_box"), {"carton": "C-01"})["error"]
    assert env.call(out.tool_name("view_best"), {})["best_carton"] == "C-01"
    assert [b["carton"] for b in env.call(out.tool_name("list_boxes"), {})["boxes"]] == codes
    assert env.call(out.tool_name("view_log"), {})["openings"][0]["carton"] == "C-01"
    assert [f["carton"] for f in env.call(out.tool_name("read_fee_schedule"), {})["fees"]] == codes
    taken = env.call(out.tool_name("stop_and_take"), {})
    assert taken["best_carton"] == "C-01" and env.done and env.outcome()["turns_used"] == 7


# ---------------------------------------------------------------------------------------------
# Through the real gates.


def test_the_gates_admit_five_of_six_models_in_each_presentation():
    """Stricter than the generic admission test (three of six): the sampled fees rarely put the
    fee-blind default outside its band."""
    for presentation in ("I", "A"):
        mine = [v for v in gated(FAM).verdicts if v.candidate.presentation == presentation]
        assert sum(v.admitted for v in mine) >= 5, [v.reason for v in mine]


def test_doubled_fees_in_the_world_are_rejected():
    verdicts = mutant_verdicts(FAM, gated(FAM), "return self._best()[0] - self._paid()",
                               "return self._best()[0] - 2 * self._paid()")
    assert not any(v.admitted for v in verdicts)
    assert {"replay_agreement", "dynamics_agreement"} <= failed(verdicts)


def test_a_world_that_books_each_fee_one_unit_short_is_rejected():
    # π* opens at least one box on every admitted model (u* > u_idle), so its replay is off by one
    old = """VALUES (?, 'fee', ?)" % self.t["ledger"], (used, -fee))"""
    verdicts = mutant_verdicts(FAM, gated(FAM), old, old.replace("-fee", "-fee + 1"), which=-1)
    assert not any(v.admitted for v in verdicts)
    assert {"replay_agreement", "dynamics_agreement"} <= failed(verdicts)


def test_a_world_with_a_different_draw_is_rejected():
    verdicts = mutant_verdicts(FAM, gated(FAM), "values[World.draw_index(rng, weights)]",
                               "values[World.pick(weights, rng.randrange(sum(weights)) // 2)]", which=1)
    assert not any(v.admitted for v in verdicts)
    assert {"replay_agreement", "dynamics_agreement"} & failed(verdicts)


# ---------------------------------------------------------------------------------------------
# θ that solve() refuses (issue 14: solvers refuse what they cannot solve exactly).


@pytest.mark.parametrize("key,change", [
    pytest.param("n_boxes", lambda t: t["n_boxes"] + 0.5, id="n_boxes-fraction"),
    pytest.param("costs", lambda t: bumped(t["costs"], (0,), 0.5), id="costs-fraction"),
    pytest.param("prize_weights", lambda t: bumped(t["prize_weights"], (0, 0), 0.5), id="prize_weights-fraction"),
    pytest.param("n_boxes", lambda t: 8, id="n_boxes-size"),
])
def test_solve_refuses_theta_not_of_the_declared_form(key, change):
    """A fraction where an integer is declared, or a size past the documented limit, is InvalidParams
    naming the field, raised before anything is allocated."""
    theta = smallest_theta(FAM)
    with pytest.raises(InvalidParams, match=r"pandora θ\['%s'\]" % key):
        FAM.solve(dict(theta, **{key: change(theta)}))


# ---------------------------------------------------------------------------------------------
# Decision rewards: A* = Q* − V* of every call, from the expectimax above.


def q_open(theta, opened, best, box):
    """Q*(opened, best, open box): its fee, then the expectimax of every prize it may hold."""
    return -theta["costs"][box] + sum(p * expectimax(theta, opened | {box}, max(best, v)) for v, p in dist(theta, box))


def expected_advantages(theta, prizes, calls, budget):
    """A* of every call by the Model: open_box Q* − V*, stop (or the turns running out: the best is
    taken) best − V*; refused calls 0 and no turn; nothing after the end."""
    opened, best, turns, out, over = frozenset(), theta["fallback"], 0, [], False
    for call in calls:
        box = call["arguments"].get("box")
        if over or (call["tool"] == "open_box" and (box in opened or len(opened) >= theta["max_open"])):
            out.append(Fraction(0))
            continue
        value = expectimax(theta, opened, best)
        if call["tool"] == "stop_and_take":
            out.append(best - value)
            over = True
            continue
        out.append(q_open(theta, opened, best, box) - value)
        opened, best, turns = opened | {box}, max(best, prizes[box]), turns + 1
        if turns == budget:  # the last turn: the best so far is taken
            out[-1] += best - expectimax(theta, opened, best)
            over = True
    return out, (Fraction(0) if over else best - expectimax(theta, opened, best))


@pytest.mark.parametrize("theta", HAND[2:4] + [HAND[5], SIM[2]], ids=_id)
def test_every_call_has_the_advantage_of_the_expectimax(theta):
    from vhd.tasks.grading.step_advantages import step_advantages

    rng = np.random.default_rng(19)
    star = FAM.solve(theta).policy
    for seed in range(6):
        prizes = pan.World.draw(theta, seed)
        boxes = [{"tool": "open_box", "arguments": {"box": int(b)}} for b in rng.permutation(theta["n_boxes"])]
        stop = {"tool": "stop_and_take", "arguments": {}}
        for calls, budget in ((FAM.simulate(theta, star, seed).calls, 30), (boxes + [stop], 30),
                              (boxes[:1] + [stop], 30), (boxes[:2], 30), (boxes, 2)):
            config = {"params": theta, "presentation": "I", "episode_seed": seed, "turn_budget": budget}
            steps = step_advantages(FAM, config, calls)
            per_call, finish = expected_advantages(theta, prizes, calls, budget)
            assert steps.per_call == pytest.approx([float(a) for a in per_call], abs=1e-9), (seed, calls)
            assert steps.finish == pytest.approx(float(finish), abs=1e-9)
    # a worse first box: its regret is exactly what the expectimax says it costs
    first = min(range(theta["n_boxes"]), key=lambda i: q_open(theta, frozenset(), theta["fallback"], i))
    regret = q_open(theta, frozenset(), theta["fallback"], first) - expectimax(theta)
    config = {"params": theta, "presentation": "I", "episode_seed": 0, "turn_budget": 30}
    assert regret < 0
    assert step_advantages(FAM, config, [{"tool": "open_box", "arguments": {"box": first}}]).per_call[0] == \
        pytest.approx(float(regret), abs=1e-9)


# ---------------------------------------------------------------------------------------------
# Text (issue 16): a cap of one box is singular.


def test_a_cap_of_one_box_is_singular():
    from family_kit import play
    theta = dict(draw(FAM, 0)[1], max_open=1)
    env = env_of(FAM, 0, theta)
    assert "(at most 1 box in all, each once)" in env.instruction
    opened, refused = play(FAM, 0, env, [{"tool": "open_box", "arguments": {"box": 0}},
                                         {"tool": "open_box", "arguments": {"box": 1}}])
    assert opened["ok"] and "at most 1 box may be opened and 1 already is" in refused["error"]


# ---------------------------------------------------------------------------------------------
# Presentation A as the paper specifies it, and schemas fitted to the instance (issue 16).


def test_box_arguments_are_bounded_by_the_instance():
    """The schemas the module shows and checks stop at box n − 1 in both presentations (n is told),
    and a box past it is refused with the schema's message, changing nothing."""
    theta = SIM[2]  # 4 boxes
    out, _ = generated(FAM, 0)
    n = theta["n_boxes"]
    for presentation in ("I", "A"):
        env = env_of(FAM, 0, theta, presentation)
        schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
        for tool in ("inspect_box", "open_box"):
            assert (schemas[out.tool_name(tool)]["box"]["minimum"], schemas[out.tool_name(tool)]["box"]["maximum"]) \
                == (0, n - 1)
            before = env.state_digest()
            refused = env.call(out.tool_name(tool), {"box": n})
            assert refused["ok"] is False and f"must be <= {n - 1}" in refused["error"], refused
            assert env.state_digest() == before
    twin = dict(theta, costs=[c + 3 for c in theta["costs"]], prize_weights=[[w + 1 for w in row]
                                                                           for row in theta["prize_weights"]])
    assert env_of(FAM, 0, twin, "A").tools == env_of(FAM, 0, theta, "A").tools


def test_one_inspection_shows_one_box_and_the_budget_leaves_part_of_the_probing():
    """In A an inspection shows one box's fee and prize table (a turn); no probe shows every prize
    table; the budget max_open + 2 fits every opening, the stop and one probe, never all n + 1."""
    theta = SIM[0]
    out, _ = generated(FAM, 1)
    env = env_of(FAM, 1, theta, "A")
    assert FAM.turn_budget(theta) == theta["max_open"] + 2
    answer = env.call(out.tool_name("inspect_box"), {"box": 1})
    assert answer["ok"] and answer["turns_left"] == theta["max_open"] + 1
    assert (answer["box"], answer["fee"], answer["prizes"], answer["weights"]) == (
        1, theta["costs"][1], theta["prize_values"][1], theta["prize_weights"][1])
    assert [t.name for t in FAM.tools_with_role("probe")] == ["inspect_box", "read_fee_schedule"]
    assert all(t.turn_cost == 1 and not t.noisy for t in FAM.tools_with_role("probe"))
    assert len(FAM.probe_calls(theta)) == theta["n_boxes"] + 1 > FAM.turn_budget(theta) - 1


def test_belief_is_the_sticker_and_the_stated_fee_until_read():
    theta = make(10, 2, [(5, [(0, 1), (30, 1)]), (3, [(12, 3), (20, 1)]), (8, [(5, 1), (60, 1)])],
                 stickers=[25, 9, 40])
    blind = FAM.belief(theta, [])
    # each box pays its sticker; fee 32.5 % of (sticker − 10)^+ rounded half up, at least 1
    assert blind["prize_values"] == [[25], [9], [40]] and blind["prize_weights"] == [[1], [1], [1]]
    assert blind["costs"] == [5, 1, 10]
    fees = FAM.belief(theta, [{"tool": "read_fee_schedule", "arguments": {}}])
    assert fees["costs"] == theta["costs"] and fees["prize_values"] == blind["prize_values"]
    one = FAM.belief(theta, [{"tool": "inspect_box", "arguments": {"box": 2}}])
    assert one["costs"] == [5, 1, 8] and one["prize_values"] == [[25], [9], [5, 60]]
    assert FAM.belief(theta, FAM.probe_calls(theta)) == theta


def test_the_default_reads_the_stickers_so_misleading_ones_cost_it():
    """A sticker that oversells a poor box sends the default there; the solver never reads them."""
    boxes = [(3, [(0, 3), (20, 1)]), (4, [(30, 1), (40, 1)]), (2, [(5, 1), (10, 1)])]
    honest, misled = make(0, 1, boxes), make(0, 1, boxes, stickers=[5, 20, 45])
    assert play(honest, FAM.default_policy(honest), [0, 30, 5])[1] == [1]
    assert play(misled, FAM.default_policy(misled), [0, 30, 5])[1] == [2]
    assert FAM.solve(misled).u_star == FAM.solve(honest).u_star
    assert FAM.solve(misled).u_default < FAM.solve(honest).u_default
