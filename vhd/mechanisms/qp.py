"""QP allocation: split a budget across a few projects, trading expected return against factor risk.

Model
    A site allocates a budget of `budget` currency units across `assets` = n projects.
    Project i takes an amount x_i with 0 ≤ x_i ≤ caps[i], and Σ x_i ≤ budget
    (money left unallocated earns nothing). Project i returns `returns[i]` per unit (integer).
    Risk comes from `factors` risk factors: `exposures` is an integer factors × assets
    matrix A, and the risk of a plan is
        risk(x) = Σ_f (Σ_i A[f][i] x_i)² + ridge · Σ_i x_i²  =  xᵀ Q x,   Q = AᵀA + ridge · I,
    with an integer `ridge` ≥ 1, so Q is positive definite. A posted return forecast (the
    sticker) `forecast[i]` is returns[i] off by a whole error of at most FORECAST_ERROR = 6 either
    way, never below 0 (drawn with θ; it does not enter the objective). The objective is
        f(x) = Σ_i returns[i] x_i − risk_aversion · risk(x),
    a strictly concave quadratic over a polytope, so the optimum is unique. Decisions are
    continuous. Solved with cvxpy (Clarabel), then polished exactly: the active set of bound
    and budget constraints is read off the solver's point, the KKT linear system on that set is
    solved with numpy, and primal feasibility and dual signs are verified; the certificate
    records the Lagrangian duality gap at the polished multipliers.
    Limits: solve() takes 2 … 8 projects and 1 … 6 risk factors, a whole budget ≥ 0, whole
    returns, caps ≥ 0 and exposures, a whole ridge ≥ 1 and a finite risk aversion > 0; any other
    θ is refused with InvalidParams before anything is allocated (`check_theta`).

State
    the projects (return, cap), the risk factors and their exposure rows, the current amount
    of every project, a journal of every allocation change, and whether the plan is committed.

Tools
    probes (a turn each): the return forecast (the sticker: every project's forecast, noisy, its
    error stated), inspect one project (its exact return), one project's row of the risk model
    (its loading on every factor), one project's position limit (its cap); decisions: allocate an
    amount to a project (sets it), release a project, reset the whole plan; clock: commit the
    allocation (ends the episode); observations: project list, current allocation, budget left,
    current objective, journal. Project numbers are bounded by n − 1, an amount by the budget (in I
    also by the largest cap), plus the rules' tolerance.

    Presentation A hides the returns, the caps, the loadings and the forecast; it tells the
    budget, the risk aversion and the ridge, the ranges the generator draws from (returns 2 … 30,
    caps 2 … 12, loadings −1 … 3) and the forecast's error. The turn budget 3n + 1 fits any
    plan (n allocations and a commit) and leaves 2n turns or more for probing, out of the 3n + 1
    probe calls that show everything: the forecast and part of the projects' files (A
    environments are admitted where that binds: `BUDGET_BINDS`). A
    player's stated guess for what it did not read (`belief`): a return the forecast's (the
    middle of its range, 16, before the forecast is read), a cap and a loading the middle of
    their ranges (7 and 1).

Plan
    a vector of `assets` real numbers: the amount allocated to each project (0 ≤ x[i] ≤ caps[i],
    summing to at most the budget).

Reward
    utility = f(x) of the committed allocation (a float; idle, allocating nothing, scores 0).
    The default reads the sticker: it splits the budget in proportion to the forecast returns
    (each project clipped at its cap) and ignores the risk, so u_default reflects being misled.
    r = clip01((u − u_default) / (u* − u_default)); the family is deterministic, so the
    episode seed is ignored.

Advantages
    The solver's state is (committed, allocation): the state table's flag and the positions
    table's amounts. A* is the change of the potential Φ = the best objective reachable from the
    state: every amount can be set again, released or reset, and every part of a feasible
    allocation is feasible (amounts ≥ 0), so any allocation, x*'s included, can still be made:
    Φ = u* while the allocation is open, whatever it holds, and Φ = f(allocation) once it is
    committed. Turns are ignored: a budget too short to undo a bad allocation still counts as
    u* (the sum telescopes all the same). Allocating, releasing or resetting gets A* = 0;
    `commit_allocation` gets f(allocation) − u*; running out of turns commits the allocation as
    it stands, also f(allocation) − u*. f is computed by the World's own `objective`, so
    Σ A* = u − u* on every trajectory, and π* commits at 0.

Episode end
    after `commit_allocation`, or when the turn budget runs out (the current allocation is
    then committed as it stands, with no further changes).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel

from vhd.mechanisms._advantage import until_committed
from vhd.mechanisms._contract import (
    AgentError, BaseWorld, Episode, Family, Solution, integer, knob, number, register, tool,
)
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

FEASIBILITY_TOL = 1e-9  # the World accepts a plan exceeding a cap or the budget by at most this
KKT_TOL = 1e-9


class Params(BaseModel):
    """Difficulty knobs of an allocation instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = knob(4, 2, 8, sampled=(2, 8), description="number of projects (assets) to allocate across")
    horizon: int = knob(2, 1, 6, sampled=(1, 6), description="number of risk factors (rows of the exposure matrix A)")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: integer returns, caps, budget, exposures and ridge; risk aversion in thousandths.

    The risk aversion is set so that, at an even split s = budget / assets, the risk penalty is a
    random fraction c ∈ [0.25, 0.9] of the expected return (λ = c · Σr / (s · 1ᵀQ1)).
    """
    n, k = params.size, params.horizon
    returns = [int(x) for x in rng.integers(World.RETURNS[0], World.RETURNS[1] + 1, size=n)]
    caps = [int(x) for x in rng.integers(World.CAPS[0], World.CAPS[1] + 1, size=n)]
    total = sum(caps)
    budget = int(rng.integers(math.ceil(0.35 * total), math.floor(0.75 * total) + 1))
    low, high = World.LOADINGS
    exposures = [[int(x) for x in row] for row in rng.integers(low, high + 1, size=(k, n))]
    ridge = int(rng.integers(1, 4))
    a = np.array(exposures, dtype=float)
    q = a.T @ a + ridge * np.eye(n)
    share = budget / n
    c = float(rng.uniform(0.25, 0.9))
    lam = c * sum(returns) / (share * float(q.sum()))
    risk_aversion = max(1, int(round(1000 * lam))) / 1000.0
    # the forecast sticker: each return off by a whole error of at most FORECAST_ERROR either way (never below 0)
    error = World.FORECAST_ERROR
    forecast = [max(0, r + int(e)) for r, e in zip(returns, rng.integers(-error, error + 1, size=n))]
    return {
        "assets": n,
        "factors": k,
        "budget": budget,
        "returns": returns,
        "caps": caps,
        "exposures": exposures,
        "ridge": ridge,
        "risk_aversion": risk_aversion,
        "forecast": forecast,
    }


# ---------------------------------------------------------------------------------------------
# The QP as arrays, its exact KKT polish and the dual bound.


def _arrays(theta: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
    """(Q, returns, caps, budget, risk aversion) as float arrays (Q is integer-valued)."""
    n = theta["assets"]
    a = np.array(theta["exposures"], dtype=float).reshape(theta["factors"], n)
    q = a.T @ a + theta["ridge"] * np.eye(n)
    return (q, np.array(theta["returns"], dtype=float), np.array(theta["caps"], dtype=float),
            float(theta["budget"]), float(theta["risk_aversion"]))


def _kkt_point(theta: dict, lower, upper, budget_active: bool):
    """The KKT point for one active set, or None when it is not primal-dual feasible.

    lower / upper: indices held at 0 / at their cap; budget_active: Σx = budget. Returns
    (x, μ, g) with g = r − 2λQx the gradient, μ the budget multiplier.
    """
    q, r, cap, budget, lam = _arrays(theta)
    n = len(r)
    lower, upper = set(lower), set(upper)
    free = [i for i in range(n) if i not in lower and i not in upper]
    x = np.zeros(n)
    for i in upper:
        x[i] = cap[i]
    fixed = sorted(upper)
    mu = 0.0
    if free:
        h = 2 * lam * q[np.ix_(free, free)]
        rhs = r[free] - 2 * lam * (q[np.ix_(free, fixed)] @ cap[fixed] if fixed else 0.0)
        if budget_active:
            m = len(free)
            kkt = np.zeros((m + 1, m + 1))
            kkt[:m, :m] = h
            kkt[:m, m] = 1.0
            kkt[m, :m] = 1.0
            sol = np.linalg.solve(kkt, np.append(rhs, budget - cap[fixed].sum()))
            x[free], mu = sol[:m], float(sol[m])
        else:
            x[free] = np.linalg.solve(h, rhs)
    g = r - 2 * lam * (q @ x)
    if budget_active and not free:
        low = max([0.0] + [g[i] for i in lower])
        mu = low
    scale = max(1.0, float(np.abs(r).max()), float(cap.max()))
    tol = KKT_TOL * scale
    if (x < -tol).any() or (x > cap + tol).any() or x.sum() > budget + tol:
        return None
    if mu < -tol or any(g[i] - mu > tol for i in lower) or any(g[i] - mu < -tol for i in upper):
        return None
    if budget_active and abs(x.sum() - budget) > tol:
        return None
    return np.clip(x, 0.0, cap), max(mu, 0.0), g


def _dual_bound(theta: dict, mu: float, g: np.ndarray, lower, upper) -> float:
    """Lagrangian dual value at the polished multipliers: an upper bound on u* (weak duality)."""
    q, r, cap, budget, lam = _arrays(theta)
    alpha = np.zeros(len(r))
    beta = np.zeros(len(r))
    for i in lower:
        alpha[i] = max(0.0, mu - g[i])
    for i in upper:
        beta[i] = max(0.0, g[i] - mu)
    c = r - mu + alpha - beta
    x_hat = np.linalg.solve(2 * lam * q, c)
    return float(c @ x_hat - lam * x_hat @ q @ x_hat + mu * budget + beta @ cap)


def _cvxpy_point(theta: dict) -> np.ndarray:
    """Clarabel's (interior-point, approximate) maximiser of f over the polytope."""
    import cvxpy as cp

    q, r, cap, budget, lam = _arrays(theta)
    a = np.array(theta["exposures"], dtype=float).reshape(theta["factors"], theta["assets"])
    x = cp.Variable(theta["assets"])
    risk = cp.sum_squares(a @ x) + theta["ridge"] * cp.sum_squares(x)
    problem = cp.Problem(cp.Maximize(r @ x - lam * risk), [cp.sum(x) <= budget, x >= 0, x <= cap])
    try:
        problem.solve(solver=cp.CLARABEL)
    except cp.error.SolverError as exc:  # translated at the boundary: certified() reports it as our SolverError
        raise ValueError(f"cvxpy/Clarabel failed: {exc}") from exc
    if problem.status != "optimal":
        raise ValueError(f"cvxpy/Clarabel status {problem.status!r}; expected 'optimal'")
    return np.asarray(x.value, dtype=float)


def _active_sets(theta: dict, x0: np.ndarray):
    """Candidate active sets read off the solver's point, loosest guesses last."""
    cap, budget = np.array(theta["caps"], dtype=float), float(theta["budget"])
    for tol in (1e-7, 1e-6, 1e-5, 1e-8, 1e-4, 1e-3):
        lower = tuple(int(i) for i in np.flatnonzero(x0 <= tol))
        upper = tuple(int(i) for i in np.flatnonzero((x0 >= cap - tol) & (x0 > tol)))
        yield lower, upper, bool(x0.sum() >= budget - tol * len(x0))
        yield lower, upper, not bool(x0.sum() >= budget - tol * len(x0))


def _solve_qp(theta: dict) -> tuple[float, np.ndarray, float, float]:
    """(u*, x*, dual bound, gap): Clarabel's point polished to the exact KKT point."""
    x0 = _cvxpy_point(theta)
    for lower, upper, budget_active in _active_sets(theta, x0):
        point = _kkt_point(theta, lower, upper, budget_active)
        if point is not None:
            x, mu, g = point
            u = evaluate(theta, x)
            bound = _dual_bound(theta, mu, g, lower, upper)
            return u, x, bound, max(0.0, bound - u)
    raise ValueError("no active set near the Clarabel point satisfies the KKT conditions")


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 2 … 8 projects and 1 … 6 risk factors, a
    whole budget ≥ 0, whole returns, caps ≥ 0 and exposures, a whole ridge ≥ 1, a finite risk
    aversion > 0 and a whole return forecast ≥ 0 within World.FORECAST_ERROR = 6 of every return."""
    check = ThetaCheck("qp", theta)
    n = check.count("assets", 2, 8)
    f = check.count("factors", 1, 6)
    check.whole("budget", low=0)
    check.whole("returns", (n,))
    check.whole("caps", (n,), low=0)
    check.whole("exposures", (f, n))
    check.whole("ridge", low=1)
    check.real("risk_aversion", low=0)
    check.require(theta["risk_aversion"] > 0, "risk_aversion", "a risk aversion > 0 (a strictly concave objective)")
    check.whole("forecast", (n,), low=0)
    error = World.FORECAST_ERROR
    check.require(all(abs(f - r) <= error for f, r in zip(theta["forecast"], theta["returns"])), "forecast",
                  "a return forecast within %d of every return (the error the instruction states)" % error)


def solve(theta: dict) -> Solution:
    """u* and x* by Clarabel plus an exact KKT polish; values of the default and idle plans."""
    check_theta(theta)
    import cvxpy as cp

    def run():
        u, x, bound, gap = _solve_qp(theta)
        return u, x, {"bound": bound, "gap": gap}

    # the search space: the 3^n bound patterns × 2 budget states an active-set method ranges over
    found = certified(run, method="interior point (Clarabel) + exact KKT active-set polish",
                      solver="cvxpy/Clarabel", solver_version=cp.__version__,
                      state_space=2 * 3 ** theta["assets"])
    return solved(theta, found, evaluate, default_policy, idle_policy)


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: a real amount 0 … caps[i] per project (FEASIBILITY_TOL past a cap still counts)."""
    return PlanSpec(shape=(theta["assets"],), integer=False, low=0, high=np.array(theta["caps"], dtype=float),
                    tolerance=FEASIBILITY_TOL)


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact objective f(x) of an allocation vector x (ValueError when it is infeasible; InvalidPlan first
    when it is not of the declared form: a bool, a string, a wrong length)."""
    x = plan_spec(theta).check(policy)
    n, caps, budget = theta["assets"], theta["caps"], theta["budget"]
    if x.shape != (n,) or not np.isfinite(x).all():
        raise ValueError(f"an allocation is {n} finite amounts, got shape {x.shape}")
    if (x < 0).any() or (x > np.array(caps) + FEASIBILITY_TOL).any():
        raise ValueError("an allocation must satisfy 0 ≤ x_i ≤ cap_i")
    total = World.total([float(v) for v in x])  # the World's own sum and rule: one arithmetic, not two
    if total > budget + World.TOL:
        raise ValueError(f"the allocation {total} exceeds the budget {budget}")
    return float(World.objective(theta, [float(v) for v in x]))


# z = (u0 − u_idle) / (u* − u_idle), u_idle = 0: below −1 idling would score over 0.5 against
# the default (trivial); above 0.95 the equal split is already near-optimal (nothing to learn)
DEFAULT_BAND = (-1.0, 0.95)


def default_policy(theta: dict) -> np.ndarray:
    """Trust the forecast sticker: split the budget in proportion to the forecast returns,
    x_i = min(budget · forecast_i / Σ forecast, cap_i) (equally when every forecast is 0); what the
    caps clip stays unspent, and the risk is ignored."""
    budget, forecast, total = theta["budget"], theta["forecast"], sum(theta["forecast"])
    shares = [budget * f / total if total else budget / theta["assets"] for f in forecast]
    return np.array([min(share, float(c)) for share, c in zip(shares, theta["caps"])], dtype=float)


def idle_policy(theta: dict) -> np.ndarray:
    """Allocate nothing."""
    return np.zeros(theta["assets"], dtype=float)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random feasible allocation (rejection from the box of caps; a scaled draw
    after 200 misses), with each project left out independently with probability 1/4."""
    caps = np.array(theta["caps"], dtype=float)
    budget = float(theta["budget"])
    keep = rng.random(len(caps)) >= 0.25
    for _ in range(200):
        x = rng.random(len(caps)) * caps * keep
        if x.sum() <= budget:
            return x
    return x * (budget / x.sum()) * float(rng.random())


def _over_budget_by_tol(theta: dict, amounts: list[float], project: int) -> float | None:
    """An amount for `project` that makes the World's total (`World.total`: the amounts in project
    order, this one in its place) equal to budget + TOL to the last bit: the largest plan
    `total > budget + TOL` accepts. None when no float near it does."""
    target = theta["budget"] + World.TOL
    trial = list(amounts)
    x = target - (World.total(amounts) - amounts[project])
    for _ in range(64):
        trial[project] = x
        total = World.total(trial)
        if total == target:
            return x
        x = float(np.nextafter(x, np.inf if total < target else -np.inf))
    return None


def boundary_calls(theta: dict, rng: np.random.Generator) -> list[list[dict]]:
    """Near-boundary decisions for the reference_agreement gate: each project at exactly its cap
    (and a hair above: refused), in a random order, until the budget is spent to the unit; then
    the last project's amount raised until the total is budget + TOL exactly (accepted: the
    budget check is `>`, not `>=`), and raised by one (refused: over budget); then a project with
    room under its cap raised halfway to it, at most by one (refused only by the budget: a World
    that misread the budget would accept it, and the cap check cannot hide that)."""
    left, calls = float(theta["budget"]), []
    amounts = [0.0] * theta["assets"]
    order = [int(a) for a in rng.permutation(theta["assets"])]
    for project in order:
        cap = float(theta["caps"][project])
        calls.append({"tool": "allocate", "arguments": {"project": project, "amount": cap + 1e-6}})
        amount = min(cap, left)
        calls.append({"tool": "allocate", "arguments": {"project": project, "amount": amount}})
        amounts[project] = amount
        left -= amount
        if left <= 0:
            hair = _over_budget_by_tol(theta, amounts, project)
            if hair is not None:
                calls.append({"tool": "allocate", "arguments": {"project": project, "amount": hair}})
            calls.append({"tool": "allocate", "arguments": {"project": project, "amount": amount + 1}})
            room = next((q for q in order if theta["caps"][q] - amounts[q] > 2e-6), None)
            if room is not None:
                raised = amounts[room] + min(1.0, (theta["caps"][room] - amounts[room]) / 2)
                calls.append({"tool": "allocate", "arguments": {"project": room, "amount": raised}})
            break
    return [calls + [{"tool": "commit_allocation", "arguments": {}}]]


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Allocate every positive amount (projects numbered from 0), then commit; the seed is ignored."""
    x = [float(v) for v in np.asarray(policy, dtype=float)]
    utility = evaluate(theta, np.array(x))
    calls = [{"tool": "allocate", "arguments": {"project": i, "amount": v}} for i, v in enumerate(x) if v > 0]
    calls.append({"tool": "commit_allocation", "arguments": {}})
    return Episode(utility=utility, calls=calls, decisions=x)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the potential of a state is the best objective still reachable from it: u*
# while the allocation is open (every amount can be changed again), f(x) once it is committed.


decision_values, decision_state, advantage = until_committed(solve)


BUDGET_BINDS = True  # A admits θ only where the budget binds (vhd/tasks/stages/check/budget.py)


def turn_budget(theta: dict) -> int:
    """3n + 1 turns: π*'s plan (an allocation per project it funds and a commit) with what it
    depends on read, but in presentation A not the forecast and all 3n per-project probes as well,
    so what to find out is a choice (`vhd/tasks/stages/check/budget.py` measures both)."""
    return 3 * theta["assets"] + 1


# ---------------------------------------------------------------------------------------------
# Presentation A: what the probes show, and the guess for what they did not. The A instruction
# states the ranges and the forecast's error: an unread return is the forecast's (the middle of
# the returns' range before the forecast is read), an unread cap or loading the middle of its range.

PER_PROJECT = ("get_position_limits", "get_risk_model", "inspect_project")  # the per-project probes, in reading order


def probe_calls(theta: dict) -> list[dict]:
    """Read the forecast sticker, then what it does not estimate — every project's cap, every project's
    loadings — and last the exact returns that correct it, projects in number order."""
    return [{"tool": "get_return_forecast", "arguments": {}}] + [
        {"tool": tool, "arguments": {"project": i}} for tool in PER_PROJECT for i in range(theta["assets"])]


def belief(theta: dict, read: list[dict]) -> dict:
    """θ as known after the probe calls `read`: what they showed exact, the rest the stated guess."""
    n, middle = theta["assets"], lambda bounds: sum(bounds) // 2
    seen = {tool: {call["arguments"]["project"] for call in read if call["tool"] == tool} for tool in PER_PROJECT}
    stickered = any(call["tool"] == "get_return_forecast" for call in read)
    guess = theta["forecast"] if stickered else [middle(World.RETURNS)] * n
    returns = [theta["returns"][i] if i in seen["inspect_project"] else guess[i] for i in range(n)]
    forecast = list(theta["forecast"]) if stickered else returns  # unread, the sticker is guessed to be right
    caps = [theta["caps"][i] if i in seen["get_position_limits"] else middle(World.CAPS) for i in range(n)]
    exposures = [[row[i] if i in seen["get_risk_model"] else middle(World.LOADINGS) for i in range(n)]
                 for row in theta["exposures"]]
    return {**theta, "returns": returns, "caps": caps, "exposures": exposures, "forecast": forecast}


_PROJECT = integer(0, 7, "the project")  # the argument of the tools on one project


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


class World(BaseWorld):
    """The site's allocation desk: projects, risk factors, exposures, positions, a journal, state."""

    PARAMS = ("assets", "factors", "budget", "returns", "caps", "exposures", "ridge", "risk_aversion", "forecast")
    STATE = (("committed", 0), ("changes", 0))
    IDS = {"project": "project"}
    TOL = 1e-9
    # the generator's ranges, which the A instruction states (whole returns per unit, caps, loadings), and the
    # error of the return forecast (the sticker): within FORECAST_ERROR of every true return, never below 0
    RETURNS, CAPS, LOADINGS = (2, 30), (2, 12), (-1, 3)
    FORECAST_ERROR = 6
    # the World's tables and their columns, other tables named by their canonical names
    SCHEMA = (
        ("assets", "project_id INTEGER PRIMARY KEY, expected_return INTEGER, cap INTEGER, forecast INTEGER"),
        ("factors", "factor_id INTEGER PRIMARY KEY, name TEXT NOT NULL"),
        ("exposures", "factor_id INTEGER REFERENCES %(factors)s(factor_id), project_id INTEGER REFERENCES "
                      "%(assets)s(project_id), loading INTEGER, PRIMARY KEY (factor_id, project_id)"),
        ("positions", "project_id INTEGER PRIMARY KEY REFERENCES %(assets)s(project_id), amount REAL NOT NULL"),
        ("journal", "entry_id INTEGER PRIMARY KEY, action TEXT, project_id INTEGER, amount REAL"),
    )

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        n, k = params["assets"], params["factors"]
        if len(params["returns"]) != n or len(params["caps"]) != n or len(params["forecast"]) != n \
                or len(params["exposures"]) != k:
            raise ValueError("returns, caps and the forecast need %d entries and exposures %d rows" % (n, k))
        t = self.t
        for table, columns in World.SCHEMA:
            db.execute("CREATE TABLE %s (%s)" % (t[table], columns % t))
        db.executemany("INSERT INTO %s VALUES (?, ?, ?, ?)" % t["assets"],
                       [(i, params["returns"][i], params["caps"][i], params["forecast"][i]) for i in range(n)])
        db.executemany("INSERT INTO %s VALUES (?, ?)" % t["factors"],
                       [(f, "risk factor %d" % f) for f in range(k)])
        db.executemany("INSERT INTO %s VALUES (?, ?, ?)" % t["exposures"],
                       [(f, i, params["exposures"][f][i]) for f in range(k) for i in range(n)])
        db.executemany("INSERT INTO %s VALUES (?, 0.0)" % t["positions"], [(i,) for i in range(n)])

    @staticmethod
    def total(amounts):
        """Σ x_i added in project order: the one sum of the budget rule (the World's and evaluate's)."""
        total = 0.0
        for x in amounts:
            total += x
        return total

    @staticmethod
    def objective(params, amounts):
        """f(x) = Σ r_i x_i − λ (Σ_f (Σ_i A_fi x_i)² + ridge Σ x_i²), amounts in project order."""
        ret = 0.0
        for r, x in zip(params["returns"], amounts):
            ret += r * x
        risk = 0.0
        for row in params["exposures"]:
            exposure = 0.0
            for a, x in zip(row, amounts):
                exposure += a * x
            risk += exposure * exposure
        own = 0.0
        for x in amounts:
            own += x * x
        risk += params["ridge"] * own
        return ret - params["risk_aversion"] * risk

    # -- state helpers --------------------------------------------------------------------
    def _amounts(self):
        rows = self.db.execute("SELECT amount FROM %s ORDER BY project_id" % self.t["positions"]).fetchall()
        return [row[0] for row in rows]

    def _allocated(self):
        return World.total(self._amounts())

    def _check_project(self, project):
        if not 0 <= project < self.p["assets"]:
            raise AgentError("there is no project %s; projects are numbered %s to %s"
                             % (self.ref("project", project), self.ref("project", 0),
                                self.ref("project", self.p["assets"] - 1)))

    def _write(self, action, project, amount):
        self.db.execute("UPDATE %s SET amount = ? WHERE project_id = ?" % self.t["positions"], (amount, project))
        self.db.execute("INSERT INTO %s (action, project_id, amount) VALUES (?, ?, ?)" % self.t["journal"],
                        (action, project, amount))
        self._set("changes", self._get("changes") + 1)

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("committed") == 1

    def utility(self):
        return World.objective(self.p, self._amounts())

    def run_out(self):
        self._set("committed", 1)

    def limits(self, presentation):
        """Projects run 0 … n − 1; an amount is at most what the World accepts on one project: the
        budget (and in I the largest cap), plus the tolerance of the rules. The instruction tells n
        and the budget in both presentations, the caps only in I."""
        project = {"project": (0, self.p["assets"] - 1)}
        most = self.p["budget"] if presentation == "A" else min(self.p["budget"], max(self.p["caps"]))
        bounds = {tool: project for tool in ("inspect_project", "get_risk_model", "get_position_limits",
                                             "release_asset")}
        bounds["allocate"] = dict(project, amount=(0, most + self.TOL))
        return bounds

    # -- tools ------------------------------------------------------------------------------
    @tool("probe", "Read the return forecast posted for every project of the {site}: an estimate of each expected "
          "return per {currency}, off by up to %d either way (never below 0)." % FORECAST_ERROR,
          reveals=("forecast",), noisy=True)
    def tool_get_return_forecast(self):
        rows = self.db.execute("SELECT project_id, forecast FROM %s ORDER BY project_id" % self.t["assets"]).fetchall()
        return {"forecast_return_per_unit": [{"project": i, "forecast": f} for i, f in rows],
                "error": "each forecast is within %d of the true expected return" % self.FORECAST_ERROR}

    @tool("probe", "Inspect one project: its exact expected return per {currency}.", reveals=("returns",),
          project=_PROJECT)
    def tool_inspect_project(self, project):
        self._check_project(project)
        self._mark_read("inspect_project", project)
        return {"project": project, "expected_return_per_unit": self.p["returns"][project]}

    @tool("probe", "Read one project's row of the risk model: its loading on every risk factor.",
          reveals=("exposures",), project=_PROJECT)
    def tool_get_risk_model(self, project):
        self._check_project(project)
        self._mark_read("get_risk_model", project)
        p = self.p
        return {"project": project, "loadings": {"factor %d" % f: row[project] for f, row in enumerate(p["exposures"])},
                "ridge": p["ridge"], "risk_aversion": p["risk_aversion"],
                "risk": "sum over factors of (sum_i loading_i * x_i)^2 + ridge * sum_i x_i^2"}

    @tool("probe", "Read the most one project may take, in {currency}, and the budget.", reveals=("caps",),
          project=_PROJECT)
    def tool_get_position_limits(self, project):
        self._check_project(project)
        return {"project": project, "cap": self.p["caps"][project], "budget": self.p["budget"]}

    @tool("observe", "List the {site}'s projects and the number of risk factors.")
    def tool_list_assets(self):
        rows = self.db.execute("SELECT project_id FROM %s ORDER BY project_id" % self.t["assets"]).fetchall()
        return {"projects": [{"project": j} for j, in rows], "risk_factors": self.p["factors"]}

    @tool("observe", "Show the amount currently set on every project.")
    def tool_view_allocation(self):
        rows = self.db.execute("SELECT project_id, amount FROM %s ORDER BY project_id" % self.t["positions"]).fetchall()
        return {"allocation": [{"project": j, "amount": x} for j, x in rows], "allocated": self._allocated(),
                "currency": self.v["currency"]}

    @tool("observe", "Show the budget, the amount allocated and what is left, in {currency}.")
    def tool_view_budget(self):
        allocated = self._allocated()
        return {"budget": self.p["budget"], "allocated": allocated, "left": self.p["budget"] - allocated,
                "currency": self.v["currency"]}

    @tool("observe", "Show the objective of the current plan: expected return minus the risk penalty (in "
          "presentation A once every project with an amount on it is inspected and its risk row read).")
    def tool_view_objective(self):
        amounts = self._amounts()
        if self.presentation == "A" and not all(self._was_read("inspect_project", i) and self._was_read("get_risk_model", i)
                                                for i, x in enumerate(amounts) if x > 0):
            return {"objective": None, "expected_return": None, "risk_penalty": None,
                    "note": "shown once every project with an amount is inspected and its risk row read"}
        ret = 0.0
        for r, x in zip(self.p["returns"], amounts):
            ret += r * x
        value = World.objective(self.p, amounts)
        return {"objective": value, "expected_return": ret, "risk_penalty": ret - value}

    @tool("observe", "List the most recent allocation changes.", limit=integer(1, 100, "how many entries to list"))
    def tool_view_journal(self, limit=10):
        rows = self.db.execute("SELECT entry_id, action, project_id, amount FROM %s ORDER BY entry_id DESC LIMIT ?"
                               % self.t["journal"], (limit,)).fetchall()
        keys = ("entry", "action", "project", "amount")
        return {"entries": [dict(zip(keys, row)) for row in rows]}

    @tool("decision", "Set the amount of {currency} on one project (replaces its previous amount; must stay within "
          "the project's cap and the budget).", project=_PROJECT,
          amount=number(0, 1000000, "amount to put on the project"))
    def tool_allocate(self, project, amount):
        self._check_project(project)
        amount = float(amount)
        amounts = self._amounts()
        amounts[project] = amount
        total = World.total(amounts)
        # the rule the player can check comes first; the cap's refusal names the rule, never the cap
        if total > self.p["budget"] + self.TOL:
            raise AgentError("the budget is %d %s; with %r on project %s the plan would use %r"
                             % (self.p["budget"], self.v["currency"], amount, self.ref("project", project), total))
        cap = self.p["caps"][project]
        if amount > cap + self.TOL:
            raise AgentError("%r %s is over project %s's cap (%s lists the caps)"
                             % (amount, self.v["currency"], self.ref("project", project),
                                self.name["get_position_limits"]))
        self._write("allocate", project, amount)
        return {"project": project, "amount": amount, "allocated": self._allocated(),
                "left": self.p["budget"] - self._allocated()}

    @tool("decision", "Take everything off one project.", project=_PROJECT)
    def tool_release_asset(self, project):
        self._check_project(project)
        if self._amounts()[project] == 0:
            raise AgentError("project %s has nothing allocated" % self.ref("project", project))
        self._write("release", project, 0.0)
        return {"project": project, "amount": 0.0, "allocated": self._allocated()}

    @tool("decision", "Take everything off every project.")
    def tool_reset_allocation(self):
        if self._allocated() == 0:
            raise AgentError("nothing is allocated")
        for i, x in enumerate(self._amounts()):
            if x != 0:
                self._write("release", i, 0.0)
        return {"allocated": 0.0, "left": self.p["budget"]}

    @tool("clock", "Commit the current allocation; this ends the episode and scores it.")
    def tool_commit_allocation(self):
        self._set("committed", 1)
        amounts = self._amounts()
        return {"committed": [{"project": i, "amount": x} for i, x in enumerate(amounts)],
                "objective": self.utility()}

    # -- what the player reads --------------------------------------------------------------
    @staticmethod
    def counted(n, noun):
        """n and its noun in the right number: "1 risk factor", "3 risk factors"."""
        return "%d %s%s" % (n, noun, "" if n == 1 else "s")

    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        lines = [
            self.skin["narrative"],
            "",
            "The %s has a budget of %d %s to allocate across %d projects (numbered %s to %s) whose returns "
            "move with %s (numbered 0 to %d)." % (v["site"], p["budget"], v["currency"], p["assets"],
                                                 self.ref("project", 0), self.ref("project", p["assets"] - 1),
                                                 World.counted(p["factors"], "risk factor"), p["factors"] - 1),
            "Set a project's amount with %s (any non-negative number up to its cap; it replaces the previous "
            "amount), undo with %s or %s, and end with %s. The amounts together may not exceed the budget; "
            "money left unallocated earns nothing." % (n["allocate"], n["release_asset"], n["reset_allocation"],
                                                       n["commit_allocation"]),
            "Your score is the objective of the committed plan: sum_i r_i x_i - risk_aversion * (sum over "
            "factors f of (sum_i a_fi x_i)^2 + ridge * sum_i x_i^2), where x_i is the amount on project i, r_i "
            "its expected return per %s and a_fi its loading on factor f." % v["currency"],
            "You have %d turns: every tool call the world answers uses its turn cost; when they run out, the current "
            "allocation is committed as it stands." % turn_budget,
        ]
        told = self._theta_lines() if presentation == "I" else self._probe_lines()
        return "\n".join(lines + [""] + told)

    def _theta_lines(self):
        """Presentation I: the returns, the caps and the risk model, by project number."""
        p, cur = self.p, self.v["currency"]
        by_project = lambda values: ", ".join("%s: %d" % (self.ref("project", i), x) for i, x in enumerate(values))
        return [
            "Expected return per %s, by project: %s." % (cur, by_project(p["returns"])),
            "Cap per project (%s): %s." % (cur, by_project(p["caps"])),
            "Risk aversion %r; ridge %d. Factor loadings, one row per factor (projects %s to %s):" % (
                p["risk_aversion"], p["ridge"], self.ref("project", 0), self.ref("project", p["assets"] - 1)),
        ] + ["  factor %d: %s" % (f, ", ".join("%d" % a for a in row)) for f, row in enumerate(p["exposures"])]

    def _probe_lines(self):
        """Presentation A: what is hidden, what each probe shows, and the ranges the hidden numbers lie in."""
        p, n, cur = self.p, self.name, self.v["currency"]
        return [
            "Risk aversion %r; ridge %d." % (p["risk_aversion"], p["ridge"]),
            "The projects' expected returns, their caps and their loadings are not given. %s shows the return "
            "forecast posted for every project, each within %d of the true expected return; %s shows one project's "
            "exact expected return, %s one project's cap and %s one project's loadings on every factor. Each costs "
            "a turn from the same budget." % (n["get_return_forecast"], self.FORECAST_ERROR, n["inspect_project"],
                                              n["get_position_limits"], n["get_risk_model"]),
            "Expected returns per %s are whole numbers from %d to %d, caps whole numbers of %s from %d to %d, "
            "loadings whole numbers from %d to %d." % ((cur,) + self.RETURNS + (cur,) + self.CAPS + self.LOADINGS),
        ]


register(Family.of(
    globals(),
    name="qp",
    version="8",
    group="near_ood",
    model_class="convex quadratic program (continuous allocation)",
    solver="cvxpy/Clarabel interior point + exact KKT active-set polish (numpy)",
    hidden=("returns", "caps", "exposures", "forecast"),
    stochastic=False,
))
