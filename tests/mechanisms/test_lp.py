"""Cross-checks of the LP production-planning family against independent methods.

Written from the module docstring's Model section: the feasible set {usage·x ≤ capacity,
0 ≤ x ≤ demand}, the profit Σ profit·x. The optimum is checked against vertex enumeration
in exact rational arithmetic (every choice of n tight constraints, solved by
Gaussian elimination in Fractions) on tiny instances, and against cvxpy (CLARABEL) on
sampled ones. The policy layout assumed is a float vector of quantities, one per product.
"""

from __future__ import annotations

import itertools
import math
import types
from fractions import Fraction

import cvxpy as cp
import numpy as np
import pytest
from pydantic import ValidationError

from family_kit import PASSAGES, env_of, failed, fit, gated, generated, mutant_verdicts, play
from vhd.mechanisms import lp
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.tasks.setters.lexicon import id_skin
from vhd.tasks.setters.template import render_module
from vhd.tasks.stages.sample import draw

FAM = registry.get("lp")
TOL = 1e-9
ROOMY = 60  # a turn budget for the tests that look at everything (the family's own affords π* and a few probes)


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in plain Python.


def constraints(theta):
    """Every constraint as (coefficients, rhs) meaning coef·x ≤ rhs, in exact integers."""
    n = theta["products"]
    rows = [(list(row), cap) for row, cap in zip(theta["usage"], theta["capacity"])]
    for j in range(n):
        unit = [int(k == j) for k in range(n)]
        rows.append((unit, theta["demand"][j]))
        rows.append(([-u for u in unit], 0))
    return rows


def gauss(a, b):
    """Solve the square system a·x = b exactly, or None if singular."""
    n = len(a)
    m = [[Fraction(v) for v in row] + [Fraction(r)] for row, r in zip(a, b)]
    for col in range(n):
        piv = next((r for r in range(col, n) if m[r][col] != 0), None)
        if piv is None:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    x = [Fraction(0)] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][k] * x[k] for k in range(r + 1, n))) / m[r][r]
    return x


def feasible(theta, x):
    return all(sum(Fraction(c) * v for c, v in zip(coef, x)) <= rhs for coef, rhs in constraints(theta))


def vertex_optimum(theta):
    """max profit·x over every feasible vertex (exact); also the number of vertices found."""
    rows = constraints(theta)
    best, count = None, 0
    for subset in itertools.combinations(range(len(rows)), theta["products"]):
        x = gauss([rows[k][0] for k in subset], [rows[k][1] for k in subset])
        if x is None or not feasible(theta, x):
            continue
        count += 1
        value = sum(p * v for p, v in zip(theta["profit"], x))
        best = value if best is None or value > best else best
    return best, count


def plain_value(theta, plan):
    """Profit of a plan (floats), asserting it is feasible up to the docstring's 1e-9."""
    for coef, rhs in constraints(theta):
        assert sum(c * float(q) for c, q in zip(coef, plan)) <= rhs + 1e-9
    return sum(p * float(q) for p, q in zip(theta["profit"], plan))


def greedy_fill(theta):
    """The default's docstring: index order, each product as much as fits (Fractions)."""
    left = list(theta["capacity"])
    left = [Fraction(c) for c in left]
    plan = []
    for j in range(theta["products"]):
        limits = [Fraction(theta["demand"][j])]
        limits += [left[i] / theta["usage"][i][j] for i in range(theta["resources"]) if theta["usage"][i][j] > 0]
        q = max(Fraction(0), min(limits))
        for i in range(theta["resources"]):
            left[i] -= theta["usage"][i][j] * q
        plan.append(q)
    return plan


def make(profit, usage, capacity, demand):
    return {"products": len(profit), "resources": len(capacity), "profit": profit, "usage": usage,
            "capacity": capacity, "demand": demand}


# ---------------------------------------------------------------------------------------------
# Instances.

HAND = [
    make([3, 5], [[1, 2], [3, 1]], [8, 9], [5, 5]),
    make([4, 4], [[1, 1], [2, 1]], [4, 6], [3, 3]),            # ties along an edge
    make([10, 1], [[5, 1], [0, 1]], [10, 3], [1, 9]),          # demand limit binds
    make([2, 3, 4], [[1, 1, 1], [0, 2, 3]], [5, 6], [4, 4, 4]),
    make([6, 5, 4], [[2, 2, 2], [1, 0, 3], [0, 1, 1]], [6, 3, 2], [2, 2, 2]),  # degenerate vertex
    make([1, 1, 1], [[0, 0, 1], [1, 1, 0]], [0, 1], [5, 5, 5]),  # a zero capacity
]


def random_tiny(seed, count):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n, m = int(rng.integers(2, 4)), int(rng.integers(2, 4))
        usage = [[int(x) for x in row] for row in rng.integers(0, 5, size=(m, n))]
        out.append(make([int(x) for x in rng.integers(1, 12, size=n)], usage,
                        [int(x) for x in rng.integers(0, 20, size=m)], [int(x) for x in rng.integers(0, 8, size=n)]))
    return out


SAMPLED_TINY = [FAM.sample(FAM.Params(size=n, horizon=m), np.random.default_rng(seed))
                for seed, n, m in ((1, 2, 2), (2, 2, 3), (3, 3, 2), (4, 3, 3), (5, 3, 2), (6, 2, 2))]
TINY = HAND + random_tiny(2024, 40) + SAMPLED_TINY


def _id(theta):
    return "n%d-m%d-p%s" % (theta["products"], theta["resources"], "".join(map(str, theta["profit"])))


# ---------------------------------------------------------------------------------------------
# Solver against brute force and cvxpy.


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_u_star_equals_vertex_enumeration(theta):
    sol = FAM.solve(theta)
    best, count = vertex_optimum(theta)
    assert count >= 1
    assert abs(sol.u_star - float(best)) <= TOL * max(1.0, abs(float(best))), (sol.u_star, best)
    assert sol.policy.shape == (theta["products"],) and sol.policy.dtype == np.float64
    assert abs(plain_value(theta, sol.policy) - sol.u_star) <= TOL
    assert FAM.evaluate(theta, sol.policy) == sol.u_star
    assert sol.certificate.status == "optimal"
    assert abs(sol.certificate.bound - sol.u_star) <= 1e-6 * max(1.0, sol.u_star)
    assert sol.certificate.state_space == math.comb(theta["resources"] + 2 * theta["products"], theta["products"])
    # reference plans never beat the optimum
    assert sol.u_idle == 0.0 and not FAM.idle_policy(theta).any()
    assert sol.u_default <= sol.u_star + TOL
    rng = np.random.default_rng(len(theta["profit"]))
    for _ in range(5):
        assert FAM.evaluate(theta, FAM.random_policy(theta, rng)) <= sol.u_star + TOL


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_default_is_the_index_order_fill(theta):
    expected = greedy_fill(theta)
    default = FAM.default_policy(theta)
    assert default.tolist() == [float(q) for q in expected]
    sol = FAM.solve(theta)
    assert abs(sol.u_default - float(sum(p * q for p, q in zip(theta["profit"], expected)))) <= TOL


SAMPLED = [draw(FAM, seed)[1] for seed in range(25)]


@pytest.mark.parametrize("theta", SAMPLED, ids=[_id(t) for t in SAMPLED])
def test_u_star_equals_cvxpy(theta):
    sol = FAM.solve(theta)
    x = cp.Variable(theta["products"])
    problem = cp.Problem(cp.Maximize(np.array(theta["profit"], dtype=float) @ x),
                         [np.array(theta["usage"], dtype=float) @ x <= np.array(theta["capacity"], dtype=float),
                          x >= 0, x <= np.array(theta["demand"], dtype=float)])
    problem.solve(solver="CLARABEL")
    assert problem.status == "optimal"
    assert abs(sol.u_star - problem.value) <= 1e-6 * max(1.0, abs(problem.value))
    assert FAM.evaluate(theta, sol.policy) == sol.u_star
    assert sol.u_default < sol.u_star or math.isclose(sol.u_default, sol.u_star)
    rng = np.random.default_rng(5)
    randoms = [FAM.evaluate(theta, FAM.random_policy(theta, rng)) for _ in range(10)]
    assert max(randoms) <= sol.u_star + TOL * max(1.0, sol.u_star)
    assert len(set(randoms)) > 1


def test_solver_time_is_small():
    slowest = max(FAM.solve(t).certificate.seconds for t in SAMPLED)
    assert slowest < 0.3


def test_solver_depends_on_profits_and_capacities():
    theta = HAND[0]
    u = FAM.solve(theta).u_star
    for key, index, delta in (("profit", 0, 1), ("profit", 1, 1), ("capacity", 0, 1), ("capacity", 1, -1)):
        changed = {k: (list(v) if isinstance(v, list) else v) for k, v in theta.items()}
        changed[key][index] += delta
        u2 = FAM.solve(changed).u_star
        assert abs(u2 - float(vertex_optimum(changed)[0])) <= TOL
        assert abs(u2 - u) > 1e-6, (key, index)


def test_evaluate_rejects_infeasible_plans():
    theta = HAND[0]
    with pytest.raises(ValueError):
        FAM.evaluate(theta, np.array([6.0, 0.0]))  # over demand
    with pytest.raises(ValueError):
        FAM.evaluate(theta, np.array([3.0, 3.0]))  # resource 1: 9 + 3 > 9
    with pytest.raises(ValueError):
        FAM.evaluate(theta, np.array([-1.0, 0.0]))
    with pytest.raises(ValueError):
        FAM.evaluate(theta, np.array([1.0]))
    assert FAM.evaluate(theta, np.array([3.0 + 1e-10, 0.0])) == pytest.approx(9.0)  # within 1e-9


# ---------------------------------------------------------------------------------------------
# simulate and the reference plans.


def _plans(theta, rng):
    return {"star": FAM.solve(theta).policy, "default": FAM.default_policy(theta), "idle": FAM.idle_policy(theta),
            "random": FAM.random_policy(theta, rng)}


@pytest.mark.parametrize("theta", SAMPLED[:8] + HAND, ids=[_id(t) for t in SAMPLED[:8] + HAND])
def test_simulate_matches_evaluate_and_emits_the_plan(theta):
    rng = np.random.default_rng(3)
    for name, plan in _plans(theta, rng).items():
        for seed in (0, 17):
            episode = FAM.simulate(theta, plan, seed)
            assert episode.utility == FAM.evaluate(theta, plan)
            assert abs(episode.utility - plain_value(theta, plan)) <= TOL
            expected = [{"tool": "set_production", "arguments": {"product": j, "quantity": float(q)}}
                        for j, q in enumerate(plan) if q > 0]
            expected.append({"tool": "close_plan", "arguments": {}})
            assert episode.calls == expected, name
            assert len(episode.calls) <= FAM.turn_budget(theta)


def test_random_policy_is_seeded_valid_and_varied():
    theta = SAMPLED[3]
    a = FAM.random_policy(theta, np.random.default_rng(3))
    b = FAM.random_policy(theta, np.random.default_rng(3))
    assert (a == b).all()
    rng = np.random.default_rng(4)
    plans = [FAM.random_policy(theta, rng) for _ in range(30)]
    assert len({tuple(p) for p in plans}) == 30
    for plan in plans:
        assert (plan >= 0).all()
        plain_value(theta, plan)
    assert any((p == 0).any() for p in plans)


# ---------------------------------------------------------------------------------------------
# sample and Params.


def test_sample_is_deterministic_per_seed():
    params = FAM.Params(size=5, horizon=4)
    a = FAM.sample(params, np.random.default_rng(5))
    assert a == FAM.sample(params, np.random.default_rng(5))
    others = [FAM.sample(params, np.random.default_rng(s)) for s in (6, 7, 8)]
    assert all(o != a for o in others)


@pytest.mark.parametrize("size,horizon", [(2, 2), (3, 6), (8, 2), (8, 6), (5, 3)])
def test_sample_respects_params(size, horizon):
    rng = np.random.default_rng(size * 10 + horizon)
    for _ in range(10):
        theta = FAM.sample(FAM.Params(size=size, horizon=horizon), rng)
        assert set(theta) == set(lp.World.PARAMS)
        assert theta["products"] == size and theta["resources"] == horizon
        assert len(theta["usage"]) == horizon and all(len(r) == size for r in theta["usage"])
        for key in ("profit", "demand", "capacity"):
            assert all(type(v) is int and v >= 1 for v in theta[key]), key
        assert all(type(v) is int and 0 <= v <= 6 for row in theta["usage"] for v in row)
        assert all(3 <= d <= 20 for d in theta["demand"])
        assert theta["demand"] == sorted(theta["demand"], reverse=True)  # best sellers first
        assert all(any(row[j] for row in theta["usage"]) for j in range(size))
        assert all(any(row) for row in theta["usage"])
        needed = [sum(a * d for a, d in zip(row, theta["demand"])) for row in theta["usage"]]
        assert all(c <= math.ceil(0.45 * h) + 1 for c, h in zip(theta["capacity"], needed))


@pytest.mark.parametrize("knobs", [dict(size=1), dict(size=9), dict(horizon=1), dict(horizon=7), dict(size="x")])
def test_params_out_of_bounds_raise(knobs):
    with pytest.raises(ValidationError):
        FAM.Params(**knobs)
    with pytest.raises(InvalidParams):
        FAM.params(knobs)


def test_params_edges_and_knob_ranges():
    for knobs in (dict(size=2, horizon=2), dict(size=8, horizon=6)):
        p = FAM.params(knobs)
        assert (p.size, p.horizon) == (knobs["size"], knobs["horizon"])
    for name, (lo, hi) in FAM.knob_ranges.items():
        field = FAM.Params.model_fields[name]
        bounds = {type(m).__name__: m for m in field.metadata}
        assert bounds["Ge"].ge <= lo <= hi <= bounds["Le"].le


# ---------------------------------------------------------------------------------------------
# The generated module, in-process (tests/test_contract.py replays the reference plans of sampled θ
# in every family's modules; here: the hand instances, refusals, observations, what A hides).


REPLAYED = HAND + SAMPLED[:6]


@pytest.mark.parametrize("k", range(len(REPLAYED)), ids=[_id(t) for t in REPLAYED])
def test_generated_module_replays_the_reference_plans_exactly(k):
    """The hand instances (the degenerate vertex, the zero capacity, the ties) and sampled ones:
    π*, default, idle and random plans played in the module score exactly what evaluate says."""
    theta = REPLAYED[k]
    rng = np.random.default_rng(k)
    for name, plan in _plans(theta, rng).items():
        env = env_of(FAM, k, theta)
        for result in play(FAM, k, env, FAM.simulate(theta, plan, k).calls):
            assert result["ok"], (name, result)
        outcome = env.outcome()
        assert outcome["terminal"] and env.done
        assert outcome["utility"] == FAM.evaluate(theta, plan), name


@pytest.mark.parametrize("k", range(len(PASSAGES)))
def test_invalid_calls_are_refused_and_leave_state_unchanged(k):
    out, _ = generated(FAM, k)
    theta = HAND[0]  # products 0, 1; capacities 8, 9; demand 5, 5
    env = env_of(FAM, k, theta, budget=ROOMY)
    n = out.tool_name
    assert env.call(n("set_production"), {"product": 0, "quantity": 2.5})["ok"]
    digest = env.state_digest()
    bad = [
        ("set_production", {"product": 0, "quantity": 5.5}),         # over demand
        ("set_production", {"product": 1, "quantity": 4.0}),         # resource 1: 7.5 + 4 > 9
        ("set_production", {"product": 5, "quantity": 1.0}),         # no such product
        ("set_production", {"product": 0, "quantity": -1.0}),        # schema minimum
        ("set_production", {"product": 0, "quantity": "many"}),      # schema type
        ("set_production", {"product": 0}),                          # missing argument
        ("set_production", {"product": 0, "quantity": 1, "x": 1}),   # unknown argument
        ("clear_production", {"product": 1}),                        # not in the plan
        ("view_plan", {"limit": 3}),
        ("no_such_tool", {}),
    ]
    for canonical, arguments in bad:
        name = n(canonical) if canonical != "no_such_tool" else canonical
        result = env.call(name, arguments)
        assert result["ok"] is False and isinstance(result["error"], str) and result["error"], canonical
        assert env.state_digest() == digest, canonical
    assert env.call(n("reset_plan"), {})["ok"]
    digest = env.state_digest()
    assert env.call(n("reset_plan"), {})["ok"] is False  # already empty
    assert env.state_digest() == digest
    # a plan that uses a resource exactly is accepted, observations report it (once the usage is read)
    assert env.call(n("set_production"), {"product": 0, "quantity": 3})["ok"]
    assert env.call(n("view_resource_use"), {})["ok"] is False
    assert env.call(n("get_usage_table"), {"resource": 1})["ok"]
    assert [u["hours"] for u in env.call(n("view_resource_use"), {})["hours_used"]] == [None, 9.0]
    assert env.call(n("get_usage_table"), {"resource": 0})["ok"]
    use = env.call(n("view_resource_use"), {})
    assert [u["hours"] for u in use["hours_used"]] == [3.0, 9.0]
    assert env.call(n("set_production"), {"product": 1, "quantity": 1e-10})["ok"]  # within 1e-9
    assert env.call(n("set_production"), {"product": 1, "quantity": 1e-6})["ok"] is False
    plan = env.call(n("view_plan"), {})["plan"]
    assert [p["quantity"] for p in plan] == [3.0, 1e-10]
    closed = env.call(n("close_plan"), {})
    assert closed["ok"] and closed["profit"] == 3 * 3.0 + 5 * 1e-10
    assert env.call(n("view_plan"), {})["ok"] is False  # the episode is over


def test_budget_run_out_produces_the_plan_as_it_stands():
    out, _ = generated(FAM, 0)
    theta = HAND[0]
    env = env_of(FAM, 0, theta, budget=3)
    assert env.call(out.tool_name("set_production"), {"product": 1, "quantity": 2})["ok"]
    assert env.call(out.tool_name("view_plan"), {})["ok"]
    assert env.call(out.tool_name("set_production"), {"product": 0, "quantity": 1})["ok"]
    assert env.done and env.outcome().items() >= {"utility": 13.0, "terminal": True, "turns_used": 3}.items()


@pytest.mark.parametrize("k", range(len(PASSAGES)))
def test_presentation_a_hides_what_i_states(k):
    out, _ = generated(FAM, k)
    theta = make([17, 23, 29], [[4, 1, 6], [2, 5, 3]], [41, 37], [9, 8, 7])
    inst_i, inst_a = env_of(FAM, k, theta, "I").instruction, env_of(FAM, k, theta, "A").instruction
    hidden = ["product 0: 17", "product 1: 23", "product 2: 29", "resource 0: 41", "resource 1: 37",
              "resource 0: 4 1 6", "resource 1: 2 5 3"]
    for text in hidden:
        assert text in inst_i, text
        assert text not in inst_a, text
    for number in ("17", "23", "29", "41", "37"):
        assert number not in inst_a
    for probe in ("get_profit_sheet", "get_usage_table", "get_capacity_sheet"):
        assert out.tool_name(probe) in inst_a
    assert "product 0: 9" in inst_a and "product 0: 9" in inst_i  # demand limits are public
    env = env_of(FAM, k, theta, "A", budget=ROOMY)
    assert [env.call(out.tool_name("get_profit_sheet"), {"product": j})["profit"] for j in range(3)] == [17, 23, 29]
    table = [{"resource": answer["resource"], "hours_by_product": hours(answer["hours_by_product"])}
             for answer in (env.call(out.tool_name("get_usage_table"), {"resource": i}) for i in range(2))]
    # the orientation of I's table (issue 16: A answered a row per product): a row per resource
    assert table == [{"resource": 0, "hours_by_product": [4, 1, 6]}, {"resource": 1, "hours_by_product": [2, 5, 3]}]
    assert "Hours per unit (a row per resource, a column per product, products 0 to 2):" in inst_i
    for row in table:
        assert "resource %d: %s" % (row["resource"], " ".join(map(str, row["hours_by_product"]))) in inst_i
    caps = env.call(out.tool_name("get_capacity_sheet"), {})["capacity_hours"]
    assert [c["capacity"] for c in caps] == [41, 37]


def hours(row):
    """A usage row of an answer ([{"product": j, "hours": h}, ...], product by product) as a list."""
    assert [entry["product"] for entry in row] == list(range(len(row)))
    return [entry["hours"] for entry in row]


def _twins():
    """Two θ that differ only in the hidden fields (profit, usage, capacity); demand is public."""
    mine = make([3, 5], [[6, 3], [2, 1]], [54, 9], [9, 9])
    other = make([4, 7], [[8, 5], [1, 2]], [40, 11], [9, 9])
    return mine, other


def test_a_refused_plan_never_shows_hidden_hours():
    """A refusal names the broken rule, never the hours the plan would need (usage × quantity
    against the capacity, both hidden): worlds that differ only in hidden θ refuse in one text."""
    out, _ = generated(FAM, 0)
    texts = []
    for theta in _twins():
        env = env_of(FAM, 0, theta, "A")
        refused = env.call(out.tool_name("set_production"), {"product": 0, "quantity": 9})
        assert refused["ok"] is False
        texts.append(refused["error"])
    assert texts[0] == texts[1] and "hours" in texts[0]
    assert not any(ch.isdigit() for ch in texts[0]), texts[0]


def test_before_a_probe_decisions_and_observations_show_no_hidden_number():
    out, _ = generated(FAM, 1)
    answers = []
    for theta in _twins():
        env = env_of(FAM, 1, theta, "A", budget=ROOMY)
        call = lambda tool, **args: env.call(out.tool_name(tool), args)
        seen = [call("set_production", product=1, quantity=2), call("view_plan"), call("view_resource_use")]
        assert seen[0]["ok"] and "hours_used" not in seen[0] and seen[2]["ok"] is False
        assert call("get_usage_table", resource=1)["ok"]
        after = call("set_production", product=1, quantity=3)  # the hours of the row read, not the other
        assert after["hours_used"] == [{"resource": 1, "hours": 3.0 * theta["usage"][1][1]}]
        assert call("get_usage_table", resource=0)["ok"]
        after = call("set_production", product=1, quantity=3)
        assert [u["hours"] for u in after["hours_used"]] == [3.0 * row[1] for row in theta["usage"]]
        answers.append([{k: v for k, v in a.items() if k != "turns_left"} for a in seen])
    assert answers[0] == answers[1]


@pytest.mark.parametrize("theta,field", [
    (make([3, 5], [[1, 2], [3, 1]], [8.5, 9], [5, 5]), "capacity"),
    (make([3, 5], [[1, 2.5], [3, 1]], [8, 9], [5, 5]), "usage"),
    (make([3.25, 5], [[1, 2], [3, 1]], [8, 9], [5, 5]), "profit"),
    (make([3, 5], [[1, 2], [3, 1]], [8, 9], [5, 0.5]), "demand"),
    (make([3, 5], [[1, 2], [3, 1]], [8, -1], [5, 5]), "capacity"),
    # afiro-like: negative usage and capacity make producing nothing infeasible
    (make([3, 5], [[-1, 1], [3, 1]], [-1, 9], [5, 5]), "usage"),
])
def test_solve_refuses_theta_that_is_not_of_the_declared_form(theta, field):
    with pytest.raises(InvalidParams, match=r"lp θ\['%s'\].*whole number" % field):
        FAM.solve(theta)


def test_solve_refuses_sizes_past_its_limits():
    with pytest.raises(InvalidParams, match=r"products.*2 … 8"):
        FAM.solve(make([1] * 9, [[1] * 9, [1] * 9], [5, 5], [1] * 9))
    with pytest.raises(InvalidParams, match=r"resources.*2 … 6"):
        FAM.solve(make([1, 1], [[1, 1]] * 7, [5] * 7, [1, 1]))
    with pytest.raises(InvalidParams, match=r"usage.*2 entries"):
        FAM.solve(dict(make([1, 1], [[1, 1], [1, 1]], [5, 5], [1, 1]), usage=[[1, 1], [1]]))


def test_a_solver_failure_is_a_solver_error_with_a_reason(monkeypatch):
    from vhd.schemas.errors import SolverError

    monkeypatch.setattr(lp, "_highs", lambda theta: (_ for _ in ()).throw(ValueError("HiGHS status 2: infeasible")))
    with pytest.raises(SolverError, match="infeasible"):
        FAM.solve(HAND[0])


# ---------------------------------------------------------------------------------------------
# Through the real gates.


def test_gates_admit_every_model_in_both_presentations():
    """Beyond the contract's three of six per presentation: at least five of the six models are
    admitted in both presentations (on seed 0, all six are)."""
    run = gated(FAM)
    admitted = {}
    for v in run.verdicts:
        admitted.setdefault(v.candidate.model.model_id, set())
        if fit(v):
            admitted[v.candidate.model.model_id].add(v.candidate.presentation)
    both = [m for m, pres in admitted.items() if pres == {"I", "A"}]
    assert len(admitted) == 6 and len(both) >= 5, [v.reason for v in run.verdicts]


def test_a_mutated_profit_is_rejected():
    run = gated(FAM)
    assert all(v.admitted for v in run.verdicts
               if v.candidate.setter_output.setter_output_id == run.outputs[0].setter_output_id)
    verdicts = mutant_verdicts(FAM, run, "total += profit * quantity", "total += 1.01 * profit * quantity")
    assert verdicts and not any(v.admitted for v in verdicts)
    assert failed(verdicts) & {"replay_agreement", "dynamics_agreement", "no_policy_beats_optimum"}


# ---------------------------------------------------------------------------------------------
# Decision rewards (exact advantages), from the Model: every quantity can be set again, cleared
# or reset, and every part of a feasible plan is feasible (usage ≥ 0), so the best profit
# reachable from an open plan is the LP optimum (vertex enumeration); a closed plan is worth its
# profit.


def _advantage_config(theta, budget=None):
    return {"params": theta, "presentation": "I", "episode_seed": 0,
            "turn_budget": FAM.turn_budget(theta) if budget is None else budget}


def _accepted(theta, plan, call):
    """The plan after one call under the Model's rules (a refused call leaves it as it is)."""
    tool, args, new = call["tool"], call["arguments"], list(plan)
    if tool == "set_production" and args["product"] < theta["products"]:
        new[args["product"]] = args["quantity"]
    elif tool == "clear_production" and args["product"] < theta["products"] and plan[args["product"]] != 0:
        new[args["product"]] = 0.0
    elif tool == "reset_plan" and any(plan):
        new = [0.0] * theta["products"]
    fits = all(sum(c * q for c, q in zip(coef, new)) <= rhs + TOL for coef, rhs in constraints(theta))
    return new if fits else plan


def _random_lp_calls(theta, rng, length):
    n, calls = theta["products"], []
    for _ in range(length):
        tool = str(rng.choice(["set_production", "set_production", "clear_production", "reset_plan",
                               "get_profit_sheet", "view_plan", "close_plan"], p=[.35, .15, .15, .05, .1, .1, .1]))
        j = int(rng.integers(0, n + 1))  # product n does not exist: refused
        args = {"product": j, "quantity": float(rng.choice([0.0, 1.0, 2.5, 3.0, 4.0, 7.0]))} \
            if tool == "set_production" else {"product": j} if tool in ("clear_production", "get_profit_sheet") else {}
        calls.append({"tool": tool, "arguments": args})
    return calls


def test_every_call_has_the_model_advantage_and_they_sum_to_u_less_u_star():
    from vhd.tasks.grading.step_advantages import step_advantages

    theta = HAND[0]  # max 3x + 5y, x + 2y ≤ 8, 3x + y ≤ 9, x, y ≤ 5: u* = 21 at (2, 3)
    best = float(vertex_optimum(theta)[0])
    assert best == 21.0
    # a plan no optimum makes (4 of product 1) can still be undone: Q* = V*, its advantage 0; the
    # close of a worse plan costs what it misses
    bad = [{"tool": "set_production", "arguments": {"product": 1, "quantity": 4.0}},
           {"tool": "close_plan", "arguments": {}}]
    steps = step_advantages(FAM, _advantage_config(theta, budget=ROOMY), bad)
    assert steps.per_call == [0.0, 20.0 - 21.0] and steps.finish == 0.0 and steps.utility == 20.0
    undone = bad[:1] + [{"tool": "reset_plan", "arguments": {}}] + FAM.simulate(theta, FAM.solve(theta).policy, 0).calls
    steps = step_advantages(FAM, _advantage_config(theta, budget=ROOMY), undone)
    assert set(steps.per_call) == {0.0} and steps.utility == 21.0
    rng = np.random.default_rng(19)
    for theta in HAND[:5]:
        best = float(vertex_optimum(theta)[0])
        for _ in range(6):
            calls = _random_lp_calls(theta, rng, 10)
            plan, expected, closed = [0.0] * theta["products"], [], False
            for call in calls:
                if not closed and call["tool"] == "close_plan":
                    expected.append(plain_value(theta, plan) - best)
                    closed = True
                else:
                    plan = plan if closed else _accepted(theta, plan, call)
                    expected.append(0.0)
            steps = step_advantages(FAM, _advantage_config(theta, budget=ROOMY), calls)
            finish = 0.0 if closed else plain_value(theta, plan) - best
            assert steps.per_call == pytest.approx(expected, abs=1e-9) and steps.finish == pytest.approx(finish)
            assert steps.utility == pytest.approx(plain_value(theta, plan), abs=1e-12)
            assert steps.total == pytest.approx(steps.utility - best, abs=1e-9)


def test_running_out_of_turns_adds_the_close_advantage_to_the_last_call():
    from vhd.tasks.grading.step_advantages import step_advantages

    theta = HAND[0]
    calls = [{"tool": "set_production", "arguments": {"product": 1, "quantity": 2}},
             {"tool": "view_plan", "arguments": {}},
             {"tool": "set_production", "arguments": {"product": 0, "quantity": 1}},
             {"tool": "close_plan", "arguments": {}}]
    steps = step_advantages(FAM, _advantage_config(theta, budget=3), calls)
    assert steps.per_call == [0.0, 0.0, 13.0 - 21.0, 0.0] and steps.finish == 0.0 and steps.utility == 13.0


def test_arguments_are_bounded_by_the_instance():
    """Issue 16 (ids and amounts far past the instance): product numbers stop at n − 1, resource
    numbers at m − 1 and quantities at the largest demand limit, in the schemas the module shows
    and checks, in both presentations (both tell n, m and the demands)."""
    out, _ = generated(FAM, 0)
    theta = make([17, 23, 29], [[4, 1, 6], [2, 5, 3]], [41, 37], [9, 8, 7])
    for presentation in ("I", "A"):
        env = env_of(FAM, 0, theta, presentation)
        schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
        for tool in ("set_production", "clear_production", "get_profit_sheet"):
            assert (schemas[out.tool_name(tool)]["product"]["minimum"], schemas[out.tool_name(tool)]["product"]["maximum"]) == (0, 2)
        assert schemas[out.tool_name("get_usage_table")]["resource"]["maximum"] == 1
        assert schemas[out.tool_name("set_production")]["quantity"]["maximum"] == 9
        before = env.state_digest()
        refused = env.call(out.tool_name("set_production"), {"product": 3, "quantity": 1})
        assert refused["ok"] is False and "must be <= 2" in refused["error"]
        refused = env.call(out.tool_name("set_production"), {"product": 0, "quantity": 10})
        assert refused["ok"] is False and "must be <= 9" in refused["error"]
        refused = env.call(out.tool_name("get_usage_table"), {"resource": 2})
        assert refused["ok"] is False and "must be <= 1" in refused["error"]
        assert env.state_digest() == before and env.outcome()["turns_used"] == 0


def test_one_probe_in_a_shows_one_entry_or_one_row():
    """Presentation A as the paper specifies: a profit probe shows one product's profit, a usage
    probe one resource's row, the capacity sheet one row; the budget n + m + 3 leaves π* room for
    only part of the n + m + 1 probes."""
    out, _ = generated(FAM, 0)
    theta = make([17, 23, 29], [[4, 1, 6], [2, 5, 3]], [41, 37], [9, 8, 7])
    env = env_of(FAM, 0, theta, "A")
    shown = lambda answer: {k: v for k, v in answer.items() if k not in ("ok", "turns_left", "currency")}
    assert shown(env.call(out.tool_name("get_profit_sheet"), {"product": 1})) == {"product": 1, "profit": 23}
    assert shown(env.call(out.tool_name("get_usage_table"), {"resource": 1})) == {"resource": 1, "hours_by_product": [
        {"product": 0, "hours": 2}, {"product": 1, "hours": 5}, {"product": 2, "hours": 3}]}
    caps = env.call(out.tool_name("get_capacity_sheet"), {})["capacity_hours"]
    assert [c["capacity"] for c in caps] == [41, 37]
    assert {FAM.tool(name).turn_cost for name in ("get_profit_sheet", "get_usage_table", "get_capacity_sheet")} == {1}
    assert FAM.turn_budget(theta) == 3 + 2 + 3 and len(FAM.probe_calls(theta)) == 3 + 2 + 1
    for candidate in SAMPLED[:8]:
        spare = FAM.turn_budget(candidate) - len(FAM.simulate(candidate, FAM.solve(candidate).policy, 0).calls)
        assert 1 <= spare < len(FAM.probe_calls(candidate)) == candidate["products"] + candidate["resources"] + 1


def test_belief_is_what_was_read_and_the_stated_guess_elsewhere():
    theta = make([17, 23, 29], [[4, 1, 6], [2, 5, 3]], [41, 37], [9, 8, 7])
    blind = FAM.belief(theta, [])
    assert blind["usage"] == [[3, 3, 3], [3, 3, 3]] and blind["profit"] == [18, 18, 18]
    assert blind["capacity"] == [round(Fraction(3, 10) * 3 * 24)] * 2 == [22, 22]
    read = [{"tool": "get_usage_table", "arguments": {"resource": 1}},
            {"tool": "get_profit_sheet", "arguments": {"product": 2}}]
    guess = FAM.belief(theta, read)
    assert guess["usage"] == [[3, 3, 3], [2, 5, 3]] and guess["profit"] == [15, 24, 29]
    assert guess["capacity"] == [22, round(Fraction(3, 10) * (18 + 40 + 21))] == [22, 24]
    assert FAM.belief(theta, FAM.probe_calls(theta)) == theta


CODED = 5  # a catering unit: its products are menus M-01, M-02, ... and its resources prep lines PL-01, ...


def test_a_coded_world_takes_and_writes_its_codes():
    """Issue 29: a world that writes products and resources as codes refuses an unknown code as
    malformed (no turn used), takes M-01 for product 0 and writes its codes in its answers and its
    instruction."""
    passage = PASSAGES[CODED]
    assert id_skin(FAM, passage) == ({"product": "code:M", "resource": "code:PL"},
                                     {"product": "menu", "resource": "prep_line"})
    out = render_module(FAM, passage)
    module = types.ModuleType("coded_lp")
    exec(compile(out.module, "<coded lp>", "exec"), module.__dict__)
    theta = make([17, 23, 29], [[4, 1, 6], [2, 5, 3]], [41, 37], [9, 8, 7])
    env = module.create({"params": theta, "presentation": "I", "episode_seed": 0, "turn_budget": ROOMY})
    for text in ("numbered M-01 to M-03", "numbered PL-01 to PL-02", "product M-01: 17", "resource PL-02: 37",
                 "products M-01 to M-03):", "  resource PL-01: 4 1 6"):
        assert text in env.instruction, text
    schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
    assert schemas[out.tool_name("set_production")]["menu"]["enum"] == ["M-01", "M-02", "M-03"]
    assert schemas[out.tool_name("get_usage_table")]["prep_line"]["enum"] == ["PL-01", "PL-02"]
    before = env.state_digest()
    for wrong in ("M-04", "M-1", "m-01", "PL-01", 0, 1):
        refused = env.call(out.tool_name("set_production"), {"menu": wrong, "quantity": 1})
        assert refused["ok"] is False and env.state_digest() == before, (wrong, refused)
    assert env.call(out.tool_name("set_production"), {"product": 0, "quantity": 1})["ok"] is False  # renamed
    assert env.outcome()["turns_used"] == 0
    assert env.call(out.tool_name("get_usage_table"), {"prep_line": "PL-01"}) == {
        "prep_line": "PL-01", "hours_by_product": [{"menu": "M-01", "hours": 4}, {"menu": "M-02", "hours": 1},
                                                   {"menu": "M-03", "hours": 6}], "ok": True, "turns_left": ROOMY - 1}
    answer = env.call(out.tool_name("set_production"), {"menu": "M-01", "quantity": 2})
    assert answer["ok"] and answer["menu"] == "M-01" and answer["hours_used"] == [{"prep_line": "PL-01", "hours": 8.0}]
    assert "product M-02 is not in the plan" in env.call(out.tool_name("clear_production"), {"menu": "M-02"})["error"]
    plan = env.call(out.tool_name("view_plan"), {})["plan"]
    assert plan == [{"menu": "M-01", "quantity": 2.0}, {"menu": "M-02", "quantity": 0.0},
                    {"menu": "M-03", "quantity": 0.0}]
    assert env.outcome()["turns_used"] == 4 and env.outcome()["utility"] == 34.0
