"""Cross-checks of the QP allocation family against exact enumeration and an independent solver.

Everything here is written from the module docstring's Model section, not from the solver:
the objective f(x) = Σ r_i x_i − λ(Σ_f (Σ_i A_fi x_i)² + ridge Σ x_i²) in Fractions, and the
exact optimum by active-set enumeration (every pattern of bounds at 0 / at cap / free and
the budget tight or not; solve the KKT linear system exactly, keep the feasible points, take
the best). Then scipy's SLSQP as a loose second opinion, the reference simulator, the rendered
module in-process, and the real admission gates.
"""

from __future__ import annotations

import itertools
import math
import types
from fractions import Fraction

import numpy as np
import pytest
from pydantic import ValidationError
from scipy.optimize import minimize

from family_kit import PASSAGES, env_of, failed, gated, generated, mutant_verdicts, refused
from vhd.mechanisms import qp as QP
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.tasks.setters.lexicon import id_skin
from vhd.tasks.setters.template import render_module
from theta_cases import bumped, smallest_theta

FAM = registry.get("qp")
TOL = 1e-9
ROOMY = 60  # a turn budget for the tests that play long (the family's own affords any plan and part of the probing)


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in exact arithmetic.


def objective(theta, x):
    """f(x) in Fractions (λ is the exact binary value of the float in θ)."""
    x = [Fraction(v) for v in x]
    lam = Fraction(theta["risk_aversion"])
    ret = sum(r * v for r, v in zip(theta["returns"], x))
    risk = sum(sum(a * v for a, v in zip(row, x)) ** 2 for row in theta["exposures"])
    risk += theta["ridge"] * sum(v * v for v in x)
    return ret - lam * risk


def q_matrix(theta):
    n = theta["assets"]
    return [[sum(row[i] * row[j] for row in theta["exposures"]) + (theta["ridge"] if i == j else 0)
             for j in range(n)] for i in range(n)]


def solve_exact(matrix, rhs):
    """Gaussian elimination over Fractions; None when singular."""
    m = len(rhs)
    aug = [list(row) + [b] for row, b in zip(matrix, rhs)]
    for col in range(m):
        pivot = next((r for r in range(col, m) if aug[r][col] != 0), None)
        if pivot is None:
            return None
        aug[col], aug[pivot] = aug[pivot], aug[col]
        for r in range(m):
            if r != col and aug[r][col] != 0:
                factor = aug[r][col] / aug[col][col]
                aug[r] = [a - factor * b for a, b in zip(aug[r], aug[col])]
    return [aug[r][m] / aug[r][r] for r in range(m)]


def feasible(theta, x):
    return all(0 <= v <= c for v, c in zip(x, theta["caps"])) and sum(x) <= theta["budget"]


def enumerate_optimum(theta):
    """max f over the stationary points of every face of the polytope (exact)."""
    n, q = theta["assets"], q_matrix(theta)
    lam, r, caps = Fraction(theta["risk_aversion"]), theta["returns"], theta["caps"]
    best, best_x = Fraction(0), [Fraction(0)] * n  # x = 0 is feasible
    for pattern in itertools.product(("low", "cap", "free"), repeat=n):
        for tight in (False, True):
            fixed = {i: (0 if s == "low" else caps[i]) for i, s in enumerate(pattern) if s != "free"}
            free = [i for i in range(n) if pattern[i] == "free"]
            rows, rhs = [], []
            for i in free:  # ∂f/∂x_i = r_i − 2λ (Qx)_i = μ on free coordinates
                rows.append([2 * lam * q[i][j] for j in free] + ([1] if tight else []))
                rhs.append(r[i] - 2 * lam * sum(q[i][j] * v for j, v in fixed.items()))
            if tight:
                rows.append([1] * len(free) + [0])
                rhs.append(theta["budget"] - sum(fixed.values()))
            if not rows:
                x = [Fraction(fixed[i]) for i in range(n)]
                if tight and sum(x) != theta["budget"]:
                    continue
            else:
                sol = solve_exact(rows, rhs)
                if sol is None:
                    continue
                x = [Fraction(fixed[i]) if i in fixed else None for i in range(n)]
                for k, i in enumerate(free):
                    x[i] = sol[k]
            if feasible(theta, x):
                value = objective(theta, x)
                if value > best:
                    best, best_x = value, x
    return best, best_x


# ---------------------------------------------------------------------------------------------
# Instances.


def theta_of(returns, caps, budget, exposures, ridge, lam, forecast=None):
    """θ of these numbers; the forecast sticker is exact unless given."""
    return {"assets": len(returns), "factors": len(exposures), "budget": budget, "returns": returns,
            "caps": caps, "exposures": exposures, "ridge": ridge, "risk_aversion": lam,
            "forecast": list(returns) if forecast is None else forecast}


HAND = [
    theta_of([10, 5], [4, 4], 5, [[1, 1]], 1, 0.1),            # budget binds
    theta_of([10, 5], [4, 4], 20, [[1, 1]], 1, 0.01),          # both caps bind, budget slack
    theta_of([3, 2], [20, 20], 40, [[1, 0]], 2, 0.5),          # interior: nothing binds
    theta_of([20, 1], [5, 5], 8, [[0, 2]], 1, 0.05),           # one at cap, one at zero
    theta_of([6, 6, 6], [3, 3, 3], 9, [[1, 1, 1]], 1, 0.001),  # everything at cap = budget (degenerate)
    theta_of([12, 9, 4], [5, 6, 7], 10, [[2, -1, 0], [0, 1, 3]], 2, 0.07),
    theta_of([8, 15, 11], [10, 2, 10], 12, [[-1, 3, 1]], 3, 0.033),
]


def random_tiny(seed, count):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        n, f = 2 + k % 2, int(rng.integers(1, 4))
        caps = [int(c) for c in rng.integers(1, 9, size=n)]
        out.append(theta_of([int(r) for r in rng.integers(1, 25, size=n)], caps, int(rng.integers(1, sum(caps) + 3)),
                            [[int(a) for a in rng.integers(-2, 4, size=n)] for _ in range(f)],
                            int(rng.integers(1, 4)), int(rng.integers(1, 400)) / 1000.0))
    return out


SAMPLED_TINY = [FAM.sample(FAM.Params(size=n, horizon=h), np.random.default_rng(seed))
                for seed, n, h in ((1, 2, 1), (2, 2, 3), (3, 3, 1), (4, 3, 2), (5, 3, 6), (6, 2, 6))]
TINY = HAND + random_tiny(2025, 24) + SAMPLED_TINY


def _id(theta):
    return "n%d-k%d-B%d-l%g" % (theta["assets"], theta["factors"], theta["budget"], theta["risk_aversion"])


def _pattern(theta, x):
    caps = theta["caps"]
    return (tuple("low" if v == 0 else "cap" if v == c else "free" for v, c in zip(x, caps)),
            sum(x) == theta["budget"])


def test_tiny_instances_cover_every_structural_case():
    patterns = [_pattern(t, enumerate_optimum(t)[1]) for t in TINY]
    assert any(tight for _, tight in patterns)
    assert any(not tight for _, tight in patterns)
    assert any("cap" in p for p, _ in patterns) and any("low" in p for p, _ in patterns)
    assert any(set(p) == {"free"} and not tight for p, tight in patterns)  # an interior optimum


# ---------------------------------------------------------------------------------------------
# The solver against enumeration.


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_u_star_equals_active_set_enumeration(theta):
    sol = FAM.solve(theta)
    best, best_x = enumerate_optimum(theta)
    assert abs(sol.u_star - float(best)) <= TOL * max(1.0, abs(float(best))), (sol.u_star, float(best))
    x = sol.policy
    assert x.shape == (theta["assets"],) and x.dtype == np.float64
    assert np.abs(x - np.array([float(v) for v in best_x])).max() <= 1e-8  # the optimum is unique
    assert all(0 <= v <= c for v, c in zip(x, theta["caps"])) and x.sum() <= theta["budget"] + 1e-9
    assert abs(float(objective(theta, x)) - float(best)) <= TOL * max(1.0, abs(float(best)))
    assert FAM.evaluate(theta, x) == sol.u_star
    cert = sol.certificate
    assert cert.status == "optimal" and cert.state_space == 2 * 3 ** theta["assets"]
    assert 0.0 <= cert.gap <= 1e-8 and cert.bound >= sol.u_star - TOL


@pytest.mark.parametrize("theta", TINY, ids=[_id(t) for t in TINY])
def test_reference_policies_are_exact_and_dominated(theta):
    sol = FAM.solve(theta)
    default, idle = FAM.default_policy(theta), FAM.idle_policy(theta)
    total = sum(theta["forecast"])  # the default trusts the sticker: the budget in proportion to the forecast
    assert default.tolist() == [min(theta["budget"] * f / total, c) for f, c in zip(theta["forecast"], theta["caps"])]
    assert not idle.any() and sol.u_idle == 0.0
    assert abs(sol.u_default - float(objective(theta, default))) <= TOL * max(1.0, abs(sol.u_default))
    assert sol.u_star >= sol.u_default - TOL and sol.u_star >= 0.0
    rng = np.random.default_rng(len(theta["returns"]) + theta["budget"])
    for _ in range(30):
        x = FAM.random_policy(theta, rng)
        assert (x >= 0).all() and (x <= np.array(theta["caps"])).all() and x.sum() <= theta["budget"]
        assert float(objective(theta, x)) <= sol.u_star + TOL * max(1.0, sol.u_star)


def _slsqp(theta):
    caps = np.array(theta["caps"], dtype=float)
    res = minimize(lambda x: -QP.World.objective(theta, [float(v) for v in x]),
                   FAM.default_policy(theta), method="SLSQP", bounds=[(0, c) for c in caps],
                   constraints=[{"type": "ineq", "fun": lambda x: theta["budget"] - x.sum()}],
                   options={"ftol": 1e-12, "maxiter": 500})
    x = np.clip(res.x, 0, caps)
    return x, x.sum() <= theta["budget"] + 1e-7


SLSQP_THETAS = [FAM.sample(FAM.Params(size=n, horizon=h), np.random.default_rng(100 + seed))
                for seed, (n, h) in enumerate(itertools.product((2, 4, 6, 8), (1, 3, 6)))]


def test_u_star_agrees_with_slsqp_loosely():
    compared = 0
    for theta in SLSQP_THETAS:
        sol = FAM.solve(theta)
        x, ok = _slsqp(theta)
        if not ok:  # SLSQP sometimes stops slightly outside the budget; nothing to compare then
            continue
        value = float(objective(theta, x))
        assert value <= sol.u_star + 1e-6 * max(1.0, sol.u_star)  # no feasible point beats u*
        assert sol.u_star - value <= 1e-4 * max(1.0, sol.u_star), (value, sol.u_star)
        compared += 1
    assert compared >= len(SLSQP_THETAS) // 2


def test_solver_depends_on_every_parameter():
    theta = HAND[5]
    base = FAM.solve(theta).u_star
    changes = {"risk_aversion": 0.09, "ridge": 3, "returns": [13, 9, 4], "caps": [4, 6, 7], "budget": 11,
               "exposures": [[2, 1, 0], [0, 1, 3]]}
    for key, value in changes.items():
        changed = dict(theta, **{key: value})
        u = FAM.solve(changed).u_star
        assert abs(u - float(enumerate_optimum(changed)[0])) <= TOL * max(1.0, u), key
        assert abs(u - base) > 1e-6, key


def test_evaluate_rejects_infeasible_plans():
    theta = HAND[0]
    for bad in ([5.0, 0.0], [-1e-6, 1.0], [3.0, 2.5], [1.0], [float("nan"), 0.0]):
        with pytest.raises(ValueError):
            FAM.evaluate(theta, np.array(bad))
    assert FAM.evaluate(theta, np.array([4.0, 1.0])) == float(objective(theta, [4, 1]))


# ---------------------------------------------------------------------------------------------
# The reference simulator, sampling, random plans, Params.


SIM_THETAS = [FAM.sample(FAM.Params(size=n, horizon=h), np.random.default_rng(seed))
              for seed, n, h in ((11, 2, 1), (12, 5, 3), (13, 8, 6), (14, 3, 4), (15, 7, 2))]


def _policies(theta, rng):
    return {"star": FAM.solve(theta).policy, "default": FAM.default_policy(theta), "idle": FAM.idle_policy(theta),
            "random": FAM.random_policy(theta, rng)}


@pytest.mark.parametrize("theta", SIM_THETAS + HAND[:3], ids=[_id(t) for t in SIM_THETAS + HAND[:3]])
def test_simulate_matches_evaluate_and_plain_calls(theta):
    rng = np.random.default_rng(5)
    for name, policy in _policies(theta, rng).items():
        for seed in (0, 1, 2**31 - 1):
            episode = FAM.simulate(theta, policy, seed)
            assert episode.utility == FAM.evaluate(theta, policy), name
            assert abs(episode.utility - float(objective(theta, policy))) <= TOL * max(1.0, abs(episode.utility))
            expected = [{"tool": "allocate", "arguments": {"project": i, "amount": float(v)}}
                        for i, v in enumerate(policy) if v > 0]
            assert episode.calls == expected + [{"tool": "commit_allocation", "arguments": {}}]
            assert all(type(c["arguments"]["amount"]) is float for c in expected)
            assert episode.decisions == [float(v) for v in policy]
            assert len(episode.calls) <= FAM.turn_budget(theta)


def test_sample_is_deterministic_per_seed():
    params = FAM.Params(size=5, horizon=3)
    a = FAM.sample(params, np.random.default_rng(5))
    assert a == FAM.sample(params, np.random.default_rng(5))
    others = [FAM.sample(params, np.random.default_rng(s)) for s in (6, 7, 8)]
    assert all(o != a for o in others)


@pytest.mark.parametrize("size,horizon", [(2, 1), (3, 6), (5, 2), (8, 1), (8, 6)])
def test_sample_respects_params(size, horizon):
    rng = np.random.default_rng(size * 10 + horizon)
    for _ in range(10):
        theta = FAM.sample(FAM.Params(size=size, horizon=horizon), rng)
        assert set(theta) == set(QP.World.PARAMS)
        assert theta["assets"] == size and theta["factors"] == horizon
        assert len(theta["returns"]) == len(theta["caps"]) == size
        assert len(theta["exposures"]) == horizon and all(len(row) == size for row in theta["exposures"])
        for key in ("assets", "factors", "budget", "ridge"):
            assert type(theta[key]) is int
        assert type(theta["risk_aversion"]) is float and theta["risk_aversion"] > 0
        assert all(type(v) is int and v > 0 for v in theta["returns"] + theta["caps"])
        assert all(type(a) is int for row in theta["exposures"] for a in row)
        assert theta["ridge"] >= 1 and 0 < theta["budget"] < sum(theta["caps"])
        assert math.isclose(theta["risk_aversion"] * 1000, round(theta["risk_aversion"] * 1000))


def test_random_policy_is_seeded_valid_and_varied():
    theta = SIM_THETAS[2]
    a = FAM.random_policy(theta, np.random.default_rng(3))
    assert (a == FAM.random_policy(theta, np.random.default_rng(3))).all()
    rng = np.random.default_rng(4)
    draws = [FAM.random_policy(theta, rng) for _ in range(50)]
    assert len({tuple(d) for d in draws}) == 50
    for x in draws:
        assert (x >= 0).all() and (x <= np.array(theta["caps"])).all() and x.sum() <= theta["budget"]
    assert any((d == 0).any() for d in draws) and any((d > 0).all() for d in draws)


@pytest.mark.parametrize("knobs", [dict(size=1), dict(size=9), dict(horizon=0), dict(horizon=7), dict(size="x")])
def test_params_out_of_bounds_raise(knobs):
    with pytest.raises(ValidationError):
        FAM.Params(**knobs)
    with pytest.raises(InvalidParams):
        FAM.params(knobs)


def test_params_edges_and_knob_ranges():
    for knobs in (dict(size=2, horizon=1), dict(size=8, horizon=6)):
        params = FAM.params(knobs)
        assert (params.size, params.horizon) == (knobs["size"], knobs["horizon"])
    for name, (lo, hi) in FAM.knob_ranges.items():
        field = FAM.Params.model_fields[name]
        assert field.description
        FAM.Params(**{name: lo}), FAM.Params(**{name: hi})


# ---------------------------------------------------------------------------------------------
# The rendered module, in-process (tests/test_contract.py renders every passage and replays the
# reference plans on sampled θ).


@pytest.mark.parametrize("k", range(len(SIM_THETAS)))
def test_module_replays_reference_plans_exactly(k):
    out, _ = generated(FAM, k)
    theta = SIM_THETAS[k]
    rng = np.random.default_rng(k)
    for (name, policy), presentation in itertools.product(_policies(theta, rng).items(), "IA"):
        env = env_of(FAM, k, theta, presentation)
        for call in FAM.simulate(theta, policy, k).calls:
            resp = env.call(out.tool_name(call["tool"]), call["arguments"])
            assert resp["ok"] is True, (name, call, resp)
        outcome = env.outcome()
        assert outcome["terminal"] is True and env.done
        assert outcome["utility"] == FAM.evaluate(theta, policy), name
        assert env.call(out.tool_name("view_budget"), {})["ok"] is False  # the episode is over


def test_module_observations_track_the_plan():
    out, _ = generated(FAM, 0)
    theta = HAND[5]
    env = env_of(FAM, 0, theta, "A", budget=ROOMY)
    call = lambda tool, **args: env.call(out.tool_name(tool), args)  # noqa: E731
    assert call("get_return_forecast")["forecast_return_per_unit"] == [  # exact here
        {"project": 0, "forecast": 12}, {"project": 1, "forecast": 9}, {"project": 2, "forecast": 4}]
    assert [call("inspect_project", project=i)["expected_return_per_unit"] for i in range(3)] == [12, 9, 4]
    assert [call("get_position_limits", project=i)["cap"] for i in range(3)] == [5, 6, 7]
    risk = call("get_risk_model", project=2)
    assert risk["loadings"] == {"factor 0": 0, "factor 1": 3} and risk["ridge"] == 2
    assert call("allocate", project=0, amount=4.5)["left"] == 5.5
    assert call("allocate", project=2, amount=2)["allocated"] == 6.5
    assert call("allocate", project=0, amount=3.0)["allocated"] == 5.0  # replaces, does not add
    assert call("view_allocation")["allocation"] == [{"project": 0, "amount": 3.0}, {"project": 1, "amount": 0.0},
                                                     {"project": 2, "amount": 2.0}]
    assert call("view_budget")["left"] == 5.0
    # presentation A, no side channel (issue 26): the objective shows once project 0's risk row is read too
    assert call("view_objective")["objective"] is None and call("get_risk_model", project=0)["ok"]
    obj = call("view_objective")
    assert abs(obj["objective"] - float(objective(theta, [3, 0, 2]))) <= 1e-12
    assert obj["expected_return"] == 44.0
    assert call("release_asset", project=2)["allocated"] == 3.0
    assert [e["action"] for e in call("view_journal", limit=5)["entries"]] == ["release", "allocate", "allocate",
                                                                               "allocate"]
    assert call("reset_allocation")["allocated"] == 0.0
    assert env.outcome()["utility"] == 0.0 and not env.done
    assert len(call("list_assets")["projects"]) == 3


def test_projects_and_factors_are_numbered_from_0_like_every_family():
    """Issue 16: qp numbered from 1 and called a project an `asset`. Now the instruction, the
    tools' argument (`project`, 0 … n − 1) and every answer number projects and factors from 0,
    and one risk factor is "1 risk factor"."""
    out, module = generated(FAM, 0)
    theta = HAND[0]  # two projects, one risk factor
    schema = {t["canonical"]: t["input_schema"] for t in module.SKIN["tools"]}
    for tool in ("allocate", "release_asset"):
        assert schema[tool]["properties"]["project"]["minimum"] == 0 and "asset" not in schema[tool]["properties"]
    text_i, text_a = (env_of(FAM, 0, theta, p).instruction for p in "IA")
    for text in (text_i, text_a):
        assert "across 2 projects (numbered 0 to 1) whose returns move with 1 risk factor (numbered 0 to 0)." in text
    assert "by project: 0: 10, 1: 5." in text_i and "(projects 0 to 1):" in text_i and "  factor 0: 1, 1" in text_i
    env = env_of(FAM, 0, theta, "A")
    call = lambda tool, **args: env.call(out.tool_name(tool), args)  # noqa: E731
    assert call("list_assets")["projects"] == [{"project": 0}, {"project": 1}]
    assert call("get_risk_model", project=1)["loadings"] == {"factor 0": 1}
    assert call("allocate", project=0, amount=1.0)["project"] == 0
    assert "'project' must be <= 1" in call("allocate", project=2, amount=1.0)["error"]  # the fitted schema
    assert call("view_journal")["entries"][0]["project"] == 0
    assert call("release_asset", project=0) == {"project": 0, "amount": 0.0, "allocated": 0.0, "ok": True,
                                                "turns_left": FAM.turn_budget(theta) - 5}
    assert call("commit_allocation")["committed"] == [{"project": 0, "amount": 0.0}, {"project": 1, "amount": 0.0}]


CODED = 2  # a bike shop: its projects are product lines L-01, L-02, ...


def test_a_coded_world_takes_and_writes_its_codes():
    """Issue 29: a world that writes projects as codes refuses an unknown code as malformed (no
    turn used), takes L-01 for project 0 and writes its codes in its answers and its instruction
    (risk factors are no argument of any tool: they stay numbered from 0)."""
    passage = PASSAGES[CODED]
    assert id_skin(FAM, passage) == ({"project": "code:L"}, {"project": "line"})
    out = render_module(FAM, passage)
    module = types.ModuleType("coded_qp")
    exec(compile(out.module, "<coded qp>", "exec"), module.__dict__)
    theta = HAND[5]  # three projects, two risk factors
    texts = {}
    for presentation in ("I", "A"):
        env = module.create({"params": theta, "presentation": presentation, "episode_seed": 0, "turn_budget": ROOMY})
        texts[presentation] = env.instruction
        assert "across 3 projects (numbered L-01 to L-03) whose returns move with 2 risk factors (numbered 0 to 1)." \
            in env.instruction
    assert "by project: L-01: 12, L-02: 9, L-03: 4." in texts["I"] and "(projects L-01 to L-03):" in texts["I"]
    schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
    assert schemas[out.tool_name("allocate")]["line"]["enum"] == ["L-01", "L-02", "L-03"]
    before = env.state_digest()
    for wrong in ("L-04", "L-1", "l-01", "P-01", 0, 1):
        answer = env.call(out.tool_name("allocate"), {"line": wrong, "amount": 1.0})
        assert answer["ok"] is False and env.state_digest() == before, (wrong, answer)
    assert env.call(out.tool_name("allocate"), {"project": 0, "amount": 1.0})["ok"] is False  # renamed here
    assert env.outcome()["turns_used"] == 0
    assert env.call(out.tool_name("allocate"), {"line": "L-01", "amount": 2.0})["line"] == "L-01"
    assert "project L-02 has nothing allocated" in env.call(out.tool_name("release_asset"), {"line": "L-02"})["error"]
    assert env.call(out.tool_name("get_return_forecast"), {})["forecast_return_per_unit"] == [
        {"line": "L-01", "forecast": 12}, {"line": "L-02", "forecast": 9}, {"line": "L-03", "forecast": 4}]
    assert env.call(out.tool_name("view_allocation"), {})["allocation"][0] == {"line": "L-01", "amount": 2.0}
    assert env.call(out.tool_name("list_assets"), {})["projects"][2]["line"] == "L-03"
    assert env.call(out.tool_name("view_journal"), {})["entries"][0]["line"] == "L-01"
    committed = env.call(out.tool_name("commit_allocation"), {})["committed"]
    assert committed == [{"line": "L-01", "amount": 2.0}, {"line": "L-02", "amount": 0.0},
                         {"line": "L-03", "amount": 0.0}]
    assert env.done and env.outcome()["turns_used"] == 7


@pytest.mark.parametrize("k", range(len(PASSAGES)))
def test_invalid_calls_are_reported_and_change_nothing(k):
    out, _ = generated(FAM, k)
    theta = HAND[5]  # caps 5, 6, 7; budget 10; three projects
    env = env_of(FAM, k, theta)
    assert env.call(out.tool_name("allocate"), {"project": 0, "amount": 4.0})["ok"]
    before = env.state_digest()
    bad = [
        ("allocate", {"project": 0, "amount": 5.000001}),   # over its cap
        ("allocate", {"project": 1, "amount": 6.5}),        # over its cap
        ("allocate", {"project": 2, "amount": 6.01}),       # over the budget with project 0's 4
        ("allocate", {"project": 3, "amount": 1.0}),        # no such project
        ("allocate", {"project": 8, "amount": 1.0}),        # schema maximum
        ("allocate", {"project": 1, "amount": -1.0}),       # schema minimum
        ("allocate", {"project": 1, "amount": "3"}),        # schema type
        ("allocate", {"project": 1}),                       # missing argument
        ("allocate", {"project": 1, "amount": 1.0, "x": 1}),
        ("release_asset", {"project": 1}),                  # nothing on it
        ("view_journal", {"limit": 0}),
    ]
    for tool, args in bad:  # the world's refusals use their turn, malformed calls none (`refused`)
        refused(env, out.tool_name(tool), args)
    refused(env, "no_such_tool", {})
    assert env.state_digest() == before
    # within 1e-9 of a cap or of the budget is accepted
    assert env.call(out.tool_name("allocate"), {"project": 2, "amount": 6.0 + 5e-10})["ok"]


def test_turn_budget_running_out_commits_the_plan_as_it_stands():
    out, _ = generated(FAM, 1)
    theta = HAND[5]
    env = env_of(FAM, 1, theta, "A", budget=3)
    assert env.call(out.tool_name("allocate"), {"project": 0, "amount": 2.0})["ok"]
    assert env.call(out.tool_name("allocate"), {"project": 1, "amount": 1.0})["ok"]
    assert env.call(out.tool_name("view_objective"), {})["ok"]
    assert env.done and env.outcome()["terminal"]
    assert env.outcome()["utility"] == FAM.evaluate(theta, np.array([2.0, 1.0, 0.0]))


@pytest.mark.parametrize("k", range(len(PASSAGES)))
def test_presentation_a_hides_what_i_states(k):
    out, _ = generated(FAM, k)
    theta = SIM_THETAS[1]
    text_i, text_a = env_of(FAM, k, theta, "I").instruction, env_of(FAM, k, theta, "A").instruction
    returns = "Expected return per %s, by project: %s." % (
        PASSAGES[k].vocabulary["currency"], ", ".join("%d: %d" % (i, r) for i, r in enumerate(theta["returns"])))
    caps = ", ".join("%d: %d" % (i, c) for i, c in enumerate(theta["caps"]))
    rows = ["factor %d: %s" % (f, ", ".join(str(a) for a in row)) for f, row in enumerate(theta["exposures"])]
    for secret in [returns, caps] + rows:
        assert secret in text_i and secret not in text_a, secret
    for probe in ("get_return_forecast", "inspect_project", "get_position_limits", "get_risk_model"):
        assert out.tool_name(probe) in text_a
    assert str(theta["budget"]) in text_a  # the budget itself is public, and so are the risk aversion and the ridge
    assert "Risk aversion %r; ridge %d." % (theta["risk_aversion"], theta["ridge"]) in text_a
    assert "each within 6 of the true expected return" in text_a  # the sticker's error, stated
    assert "from 2 to 30" in text_a and "from 2 to 12" in text_a and "from -1 to 3" in text_a  # the ranges guessed from


# ---------------------------------------------------------------------------------------------
# The real admission gates.


def test_gates_admit_both_presentations_of_most_models():
    run = gated(FAM)
    admitted = {(v.candidate.model.model_id, v.candidate.presentation) for v in run.verdicts if v.admitted}
    both = [m for m in run.models if (m.model_id, "I") in admitted and (m.model_id, "A") in admitted]
    assert len(both) >= 5, [v.reason for v in run.verdicts if not v.admitted]
    assert len(FAM.tools) >= 10


def test_a_halved_risk_penalty_is_rejected():
    verdicts = mutant_verdicts(FAM, gated(FAM), 'return ret - params["risk_aversion"] * risk',
                               'return ret - 0.5 * params["risk_aversion"] * risk')
    assert not any(v.admitted for v in verdicts)
    assert {"replay_agreement", "dynamics_agreement"} <= failed(verdicts)


def test_a_budget_check_that_rejects_valid_plans_is_rejected():
    verdicts = mutant_verdicts(FAM, gated(FAM), 'if total > self.p["budget"] + self.TOL:',
                               'if total > 0.5 * self.p["budget"]:')
    assert not any(v.admitted for v in verdicts)
    assert failed(verdicts) & {"replay_agreement", "dynamics_agreement"}


def test_the_world_and_evaluate_share_one_budget_sum():
    """The World and `evaluate` add the amounts in project order (`World.total`) under one rule:
    on every amount around budget + TOL, where two sums in different orders disagree, they accept
    and refuse alike, and agree on the utility of what they accept."""
    out, _ = generated(FAM, 0)
    theta = theta_of([12, 9, 4], [15, 15, 15], 15, [[1, 0, 2]], 1, 0.05)
    a1, a2 = 5.029683110202227, 4.853921336806875  # amounts on projects 1 and 2 where the two sums differed
    edge = theta["budget"] + TOL - ((0.0 + a1) + a2)  # the largest project-0 amount of a sum of the others first
    amounts, x = [], edge
    for _ in range(6):
        x = float(np.nextafter(x, -np.inf))
    for _ in range(12):
        amounts.append(x)
        x = float(np.nextafter(x, np.inf))
    verdicts = set()
    for x in amounts:
        env = env_of(FAM, 0, theta)
        assert env.call(out.tool_name("allocate"), {"project": 1, "amount": a1})["ok"]
        assert env.call(out.tool_name("allocate"), {"project": 2, "amount": a2})["ok"]
        accepted = env.call(out.tool_name("allocate"), {"project": 0, "amount": x})["ok"]
        plan = np.array([x, a1, a2]) if accepted else np.array([0.0, a1, a2])
        try:
            value = FAM.evaluate(theta, np.array([x, a1, a2]))
        except ValueError:
            value = None
        assert accepted == (value is not None), (x, accepted, value)
        verdicts.add(accepted)
        assert env.call(out.tool_name("commit_allocation"), {})["ok"]
        assert env.outcome()["utility"] == FAM.evaluate(theta, plan)
    assert verdicts == {True, False}  # the amounts straddle the boundary


# ---------------------------------------------------------------------------------------------
# θ that solve() refuses (issue 14: solvers refuse what they cannot solve exactly).


@pytest.mark.parametrize("key,change", [
    pytest.param("assets", lambda t: t["assets"] + 0.5, id="assets-fraction"),
    pytest.param("budget", lambda t: t["budget"] + 0.5, id="budget-fraction"),
    pytest.param("exposures", lambda t: bumped(t["exposures"], (0, 0), 0.5), id="exposures-fraction"),
    pytest.param("assets", lambda t: 9, id="assets-size"),
])
def test_solve_refuses_theta_not_of_the_declared_form(key, change):
    """A fraction where an integer is declared, or a size past the documented limit, is InvalidParams
    naming the field, raised before anything is allocated."""
    theta = smallest_theta(FAM)
    with pytest.raises(InvalidParams, match=r"qp θ\['%s'\]" % key):
        FAM.solve(dict(theta, **{key: change(theta)}))


def test_a_solver_that_fails_is_a_solver_error_with_a_reason():
    """Clarabel fails on a budget of 2^50: a SolverError that names it, not cvxpy's own error."""
    from vhd.schemas.errors import SolverError

    theta = dict(smallest_theta(FAM), budget=2 ** 50)
    with pytest.raises(SolverError, match="Clarabel"):
        FAM.solve(theta)


# ---------------------------------------------------------------------------------------------
# Decision rewards (exact advantages), from the Model: every amount can be set again, released
# or reset, and every part of a feasible allocation is feasible (amounts ≥ 0), so the best
# objective reachable from an open allocation is the QP optimum (face enumeration); a committed
# allocation is worth f(x).


def _advantage_config(theta, budget=None):
    return {"params": theta, "presentation": "I", "episode_seed": 0,
            "turn_budget": FAM.turn_budget(theta) if budget is None else budget}


def _accepted(theta, amounts, call):
    """The allocation after one call under the Model's rules (a refused call leaves it as it is)."""
    tool, args, new = call["tool"], call["arguments"], list(amounts)
    project = args.get("project", -1)
    if tool == "allocate" and 0 <= project < theta["assets"]:
        new[project] = args["amount"]
    elif tool == "release_asset" and 0 <= project < theta["assets"] and amounts[project] != 0:
        new[project] = 0.0
    elif tool == "reset_allocation" and any(amounts):
        new = [0.0] * theta["assets"]
    fits = all(v <= c + TOL for v, c in zip(new, theta["caps"])) and sum(new) <= theta["budget"] + TOL
    return new if fits else amounts


def _random_qp_calls(theta, rng, length):
    calls = []
    for _ in range(length):
        tool = str(rng.choice(["allocate", "allocate", "release_asset", "reset_allocation", "get_risk_model",
                               "view_objective", "commit_allocation"], p=[.35, .15, .15, .05, .1, .1, .1]))
        project = int(rng.integers(0, theta["assets"] + 1))  # one past the last project: refused
        args = {"project": project, "amount": float(rng.choice([0.0, 0.5, 1.25, 2.0, 3.0, 4.0, 9.0]))} \
            if tool == "allocate" else {"project": project} if tool in ("release_asset", "get_risk_model") else {}
        calls.append({"tool": tool, "arguments": args})
    return calls


def test_every_call_has_the_model_advantage_and_they_sum_to_u_less_u_star():
    from vhd.tasks.grading.step_advantages import step_advantages

    theta = HAND[0]  # 10x + 5y − 0.1((x + y)² + x² + y²), x, y ≤ 4, x + y ≤ 5
    best, best_x = enumerate_optimum(theta)
    assert best_x == [4, 1] and float(best) == pytest.approx(45 - 0.1 * 42, abs=1e-12)
    # a plan no optimum makes (everything on project 1) can still be undone: Q* = V*, advantage 0;
    # committing it costs what it misses
    bad = [{"tool": "allocate", "arguments": {"project": 1, "amount": 4.0}},
           {"tool": "commit_allocation", "arguments": {}}]
    steps = step_advantages(FAM, _advantage_config(theta), bad)
    assert steps.per_call[0] == 0.0 and steps.finish == 0.0
    assert steps.per_call[1] == pytest.approx(float(objective(theta, [0, 4]) - best), abs=1e-12)
    undone = bad[:1] + [{"tool": "reset_allocation", "arguments": {}}] + FAM.simulate(theta, FAM.solve(theta).policy, 0).calls
    steps = step_advantages(FAM, _advantage_config(theta), undone)
    assert set(steps.per_call) == {0.0} and steps.utility == pytest.approx(float(best), abs=1e-12)
    rng = np.random.default_rng(19)
    for theta in HAND[:6]:
        best = float(enumerate_optimum(theta)[0])
        for _ in range(6):
            calls = _random_qp_calls(theta, rng, 10)
            amounts, expected, committed = [0.0] * theta["assets"], [], False
            for call in calls:
                if not committed and call["tool"] == "commit_allocation":
                    expected.append(float(objective(theta, amounts)) - best)
                    committed = True
                else:
                    amounts = amounts if committed else _accepted(theta, amounts, call)
                    expected.append(0.0)
            steps = step_advantages(FAM, _advantage_config(theta, budget=ROOMY), calls)
            finish = 0.0 if committed else float(objective(theta, amounts)) - best
            assert steps.per_call == pytest.approx(expected, abs=1e-9) and steps.finish == pytest.approx(finish, abs=1e-9)
            assert steps.utility == pytest.approx(float(objective(theta, amounts)), abs=1e-9)
            assert steps.total == pytest.approx(steps.utility - best, abs=1e-9)


def test_running_out_of_turns_adds_the_commit_advantage_to_the_last_call():
    from vhd.tasks.grading.step_advantages import step_advantages

    theta = HAND[5]
    best = float(enumerate_optimum(theta)[0])
    calls = [{"tool": "allocate", "arguments": {"project": 0, "amount": 2.0}},
             {"tool": "view_objective", "arguments": {}},
             {"tool": "allocate", "arguments": {"project": 1, "amount": 1.0}},
             {"tool": "commit_allocation", "arguments": {}}]
    steps = step_advantages(FAM, _advantage_config(theta, budget=3), calls)
    u = float(objective(theta, [2, 1, 0]))
    assert steps.per_call[:2] == [0.0, 0.0] and steps.per_call[3] == 0.0 and steps.finish == 0.0
    assert steps.per_call[2] == pytest.approx(u - best, abs=1e-9) and steps.utility == pytest.approx(u, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# Issue 16: schemas fitted to the instance, and presentation A's probes (one project per call, or
# the forecast sticker, whose error the instruction states).


def test_project_and_amount_arguments_are_bounded_by_the_instance():
    """Projects stop at n − 1; an amount at the budget in A (the instruction tells it) and at the
    largest cap in I (when it is below the budget), plus the rules' tolerance; past that the schema
    refuses, with its message."""
    out, _ = generated(FAM, 0)
    theta = HAND[5]  # caps 5, 6, 7; budget 10; three projects
    for presentation, most in (("I", 7 + TOL), ("A", 10 + TOL)):
        env = env_of(FAM, 0, theta, presentation)
        schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
        for tool in ("allocate", "release_asset", "inspect_project", "get_risk_model", "get_position_limits"):
            assert schemas[out.tool_name(tool)]["project"]["maximum"] == 2, (presentation, tool)
        assert schemas[out.tool_name("allocate")]["amount"] == {**schemas[out.tool_name("allocate")]["amount"],
                                                                "minimum": 0, "maximum": most}
        refused = env.call(out.tool_name("inspect_project"), {"project": 3})
        assert refused["ok"] is False and "argument 'project' must be <= 2, got 3" in refused["error"]
        refused = env.call(out.tool_name("allocate"), {"project": 2, "amount": most + 1})
        assert refused["ok"] is False and "argument 'amount' must be <= %s" % most in refused["error"]
        assert env.call(out.tool_name("allocate"), {"project": 2, "amount": 7.0})["ok"]  # the largest cap fits


def test_a_probe_shows_one_project_or_the_forecast_sticker():
    """In A, each per-project probe shows that project only; the forecast shows every project's
    estimate, off by at most the error the instruction states; the default trusts it."""
    out, _ = generated(FAM, 0)
    theta = theta_of([12, 9, 4], [5, 6, 7], 10, [[2, -1, 0], [0, 1, 3]], 2, 0.07, forecast=[6, 15, 4])
    env = env_of(FAM, 0, theta, "A")
    call = lambda tool, **args: env.call(out.tool_name(tool), args)  # noqa: E731
    assert call("get_risk_model", project=1)["loadings"] == {"factor 0": -1, "factor 1": 1}
    assert {k: v for k, v in call("get_position_limits", project=1).items() if k not in ("ok", "turns_left")} == {
        "project": 1, "cap": 6, "budget": 10}
    assert call("inspect_project", project=0)["expected_return_per_unit"] == 12
    sticker = call("get_return_forecast")
    assert sticker["forecast_return_per_unit"] == [{"project": 0, "forecast": 6}, {"project": 1, "forecast": 15},
                                                   {"project": 2, "forecast": 4}]
    assert sticker["error"] == "each forecast is within 6 of the true expected return"
    assert "each within 6 of the true expected return" in env.instruction
    assert FAM.tool("get_return_forecast").noisy and not FAM.tool("inspect_project").noisy
    assert FAM.default_policy(theta).tolist() == [min(10 * f / 25, c) for f, c in zip([6, 15, 4], [5, 6, 7])]
    with pytest.raises(InvalidParams, match="forecast"):  # a sticker off by more than it says is not this family's
        FAM.solve(dict(theta, forecast=[5, 15, 4]))


def test_belief_is_what_was_read_and_the_stated_guess_for_the_rest():
    theta = theta_of([12, 9, 4], [5, 6, 9], 10, [[2, -1, 0], [0, 1, 3]], 2, 0.07, forecast=[6, 15, 4])
    blind = FAM.belief(theta, [])
    assert blind["returns"] == blind["forecast"] == [16] * 3 and blind["caps"] == [7] * 3
    assert blind["exposures"] == [[1] * 3] * 2 and blind["risk_aversion"] == 0.07 and blind["ridge"] == 2
    read = [{"tool": "get_return_forecast", "arguments": {}}, {"tool": "get_position_limits", "arguments": {"project": 2}},
            {"tool": "get_risk_model", "arguments": {"project": 0}}, {"tool": "inspect_project", "arguments": {"project": 1}}]
    known = FAM.belief(theta, read)
    assert known["returns"] == [6, 9, 4] and known["forecast"] == [6, 15, 4] and known["caps"] == [7, 7, 9]
    assert known["exposures"] == [[2, 1, 1], [0, 1, 1]]
    assert FAM.belief(theta, FAM.probe_calls(theta)) == theta and len(FAM.probe_calls(theta)) == 1 + 3 * 3


def test_a_world_that_doubles_the_budget_is_rejected():
    """The self-test found this surviving: `boundary_calls` spent the budget and then raised the
    last project past it, which its cap refused anyway. A project with room under its cap, raised
    past the budget, is refused by the budget rule alone (wherever the caps leave such room)."""
    run = gated(FAM)
    verdicts = [v for which in range(len(run.outputs))
                for v in mutant_verdicts(FAM, run, 'if total > self.p["budget"] + self.TOL:',
                                         'if total > 2 * self.p["budget"] + self.TOL:', which)]
    room = [v for v in verdicts if sum(v.candidate.model.theta["caps"]) > v.candidate.model.theta["budget"] + 1e-6]
    assert len(room) >= len(verdicts) // 2 and not any(v.admitted for v in room)
    assert "reference_agreement" in failed(room)
