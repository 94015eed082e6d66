"""LP production planning: products share machine-hours on a few resources; plan one run.

Model
    A plant makes `products` = n products on `resources` = m shared resources, e.g. machines
    or lines. One unit of product j earns
    the integer profit `profit[j]` and uses the integer `usage[i][j]` ≥ 0 hours of resource i
    (a row per resource); resource i offers the integer `capacity[i]` hours; at most the
    integer `demand[j]` units of product j can be sold. The plan is a vector of CONTINUOUS
    quantities x[j] ≥ 0 (any real number, not only whole units) with
        Σ_j usage[i][j] · x[j] ≤ capacity[i]   for every resource i,
        0 ≤ x[j] ≤ demand[j]                    for every product j,
    and earns Σ_j profit[j] · x[j]. A limit counts as exceeded only beyond 1e-9. The optimum
    is the linear programme max{profit·x : usage·x ≤ capacity, 0 ≤ x ≤ demand}, solved with
    HiGHS (scipy.optimize.linprog); its basic optimal vertex is then recomputed exactly in
    rational arithmetic from the tight constraints, so π* is exactly feasible, and the HiGHS
    dual bound is kept in the certificate. Limits: solve() takes 2 … 8 products (MAX_PRODUCTS)
    and 2 … 6 resources (MAX_RESOURCES) with whole profits and whole usage, capacities and
    demands ≥ 0, so producing nothing is always feasible; any other θ (a fraction, a negative
    capacity, a general LP such as netlib's afiro) is refused with InvalidParams.

State
    the product catalog (profit, demand limit), the resources
    (capacity, whether its row of the usage table has been read), the usage table (product ×
    resource → hours per unit), the current plan (a quantity per product) and whether the plan
    has been closed.

Tools
    probes, a turn each: one product's unit profit, one resource's row of the usage table (the
    hours per unit of every product on it, a row per resource as presentation I prints the
    table), the capacity sheet (hours per resource, one row); decisions: set a product's
    quantity, clear one product, reset the whole plan; clock: close the plan (produce and sell
    it); observations: the plan, the resource hours it uses (on the resources whose row has been
    read), the product list with demand limits, the resources. Nothing but the probes shows a
    profit, a usage or a capacity: a decision's answer reports hours used only on resources whose
    row has been read, and a refused plan is told only that it needs more hours of some resource
    than it offers. The schemas take product numbers 0 … n − 1, resource numbers 0 … m − 1 and
    quantities up to the largest demand limit (both presentations tell n, m and the demands).
    Presentation A hides the profits, the usage table and the capacities; n + m + 1 probes reveal
    all of them. The A instruction states how they are drawn, and a number not read is guessed as
    it says: a usage entry at 3 hours (the middle of 0 … 6), a product's profit at 3 per hour of
    its (read or guessed) total hours per unit (margins are 1 … 5 per hour), a capacity at 30 % of
    the (read or guessed) hours that meeting every demand would need on the resource (15 … 45 %).
    No probe is noisy and there are no stickers: the default fill reads the true θ. The budget
    n + m + 3 fits any plan (a quantity per product and the close), so after π*'s own turns (one
    per product it makes, and the close) only n + m + 2 − (products made) of the n + m + 1 probes
    can be paid for: what to find out is a choice. A environments are admitted where that binds
    (`BUDGET_BINDS`: not every probe fits, the ones π* depends on do).

Plan
    a vector of n = products real numbers: x[j] is the quantity of product j (0 ≤ x[j] ≤
    demand[j]; the resource hours usage · x must fit capacity).

Reward
    utility = Σ_j profit[j] · x[j] of the closed plan (a float, in currency). Idle (produce
    nothing) scores 0. r = clip01((u − u_default) / (u* − u_default)), where the default fills
    the products in index order (the catalog lists best sellers first), each as far as the
    resources and its demand allow, ignoring profit per resource hour.

Advantages
    The solver's state is (closed, plan): the state table's flag and the plan table's
    quantities. A* is the change of the potential Φ = the best profit reachable from the state:
    every quantity can be set again, cleared or reset, and every part of a feasible plan is
    feasible (usage ≥ 0), so any plan, π*'s included, can still be built: Φ = u* while the plan
    is open, whatever it holds, and Φ = the plan's profit once it is closed. Turns are ignored:
    a budget too short to undo a bad plan still counts as u* (the sum telescopes all the same).
    Setting, clearing or resetting quantities gets A* = 0; `close_plan` gets profit(plan) − u*;
    running out of turns closes the plan as it stands, also profit(plan) − u*. The profit is
    summed as the World sums it, so Σ A* = u − u* on every trajectory, and π* closes at 0.

Episode end
    after `close_plan`, or when the turn budget runs out: the plan as it stands is then
    closed and produced, with no further decisions.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import scipy
from pydantic import BaseModel

from vhd.mechanisms._advantage import until_committed
from vhd.mechanisms._contract import (
    AgentError, BaseWorld, Episode, Family, Solution, integer, knob, number, register, tool,
)
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, quiet_native_stdout
from vhd.mechanisms._theta import ThetaCheck
from vhd.schemas.errors import SolverError

TOLERANCE = 1e-9  # a limit counts as exceeded only beyond this (World and evaluate alike)
MAX_PRODUCTS = 8  # Params, tool schema and solve() bound
MAX_RESOURCES = 6  # Params and solve() bound


class Params(BaseModel):
    """Difficulty knobs of a production-planning instance."""

    size: int = knob(4, 2, MAX_PRODUCTS, sampled=(3, 8),
                     description="number of products (decision variables), in products; solve() refuses θ outside 2 … "
                                 "MAX_PRODUCTS = 8")
    horizon: int = knob(3, 2, MAX_RESOURCES, sampled=(2, 6),
                        description="number of shared resources / machines (constraints), in resources; not a time "
                                    "horizon: the plan is one run; solve() refuses θ outside 2 … MAX_RESOURCES = 6")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ, all integers. Usage 0..6 hours per unit (about a third of the entries zero, every
    product and every resource used). Each product has a margin per hour e ~ U(1, 5) and earns
    profit = round(e × its total hours per unit) ≥ 1. Demand limits 3..20 go to the products
    in reverse order of margin (plus N(0, 0.5) noise on e): high-volume products have thin
    margins. The catalog lists the best sellers first (demand non-increasing in the index).
    Capacities are 15–45 % of the hours needed to meet every demand, so resources bind."""
    n, m = params.size, params.horizon
    usage = np.where(rng.random((m, n)) < 0.35, 0, rng.integers(1, 7, size=(m, n)))
    for j in range(n):  # every product needs some resource
        if not usage[:, j].any():
            usage[int(rng.integers(0, m)), j] = int(rng.integers(1, 7))
    for i in range(m):  # every resource serves some product
        if not usage[i].any():
            usage[i, int(rng.integers(0, n))] = int(rng.integers(1, 7))
    margin = rng.uniform(1.0, 5.0, size=n)
    profit = np.maximum(1, np.round(margin * usage.sum(axis=0))).astype(int)
    demand = np.sort(rng.integers(3, 21, size=n))[::-1]
    order = np.argsort(margin + rng.normal(0.0, 0.5, size=n), kind="stable")  # thinnest margin first
    profit, usage = profit[order], usage[:, order]
    share = rng.uniform(0.15, 0.45, size=m)
    capacity = np.maximum(1, np.round(share * (usage @ demand))).astype(int)
    return {
        "products": n,
        "resources": m,
        "profit": [int(x) for x in profit],
        "usage": [[int(x) for x in row] for row in usage],
        "capacity": [int(x) for x in capacity],
        "demand": [int(x) for x in demand],
    }


# ---------------------------------------------------------------------------------------------
# The LP and its exact vertex.


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 2 … MAX_PRODUCTS products, 2 …
    MAX_RESOURCES resources, whole profits, whole usage, capacities and demands ≥ 0. Then producing
    nothing is always feasible (netlib's afiro, with negative right-hand sides, is not of this form)."""
    check = ThetaCheck("lp", theta)
    n = check.count("products", 2, MAX_PRODUCTS)
    m = check.count("resources", 2, MAX_RESOURCES)
    check.whole("profit", (n,))
    check.whole("usage", (m, n), low=0)
    check.whole("capacity", (m,), low=0)
    check.whole("demand", (n,), low=0)


def _check_theta(theta: dict) -> tuple[int, int]:
    n, m = theta["products"], theta["resources"]
    if len(theta["profit"]) != n or len(theta["demand"]) != n or len(theta["capacity"]) != m:
        raise ValueError(f"θ has inconsistent sizes for {n} products and {m} resources")
    if len(theta["usage"]) != m or any(len(row) != n for row in theta["usage"]):
        raise ValueError(f"usage must be {m} rows of {n} entries")
    return n, m


def _exact_vertex(theta: dict, x: np.ndarray) -> list[Fraction]:
    """The vertex of {usage·x ≤ capacity, 0 ≤ x ≤ demand} where HiGHS's basic solution `x` sits:
    the n linearly independent constraints with the smallest slack, solved in Fractions."""
    n, m = _check_theta(theta)
    rows: list[tuple[float, list[Fraction], Fraction]] = []
    for i in range(m):
        slack = theta["capacity"][i] - float(np.dot(theta["usage"][i], x))
        rows.append((abs(slack) / max(1.0, theta["capacity"][i]),
                     [Fraction(a) for a in theta["usage"][i]], Fraction(theta["capacity"][i])))
    for j in range(n):
        unit = [Fraction(int(k == j)) for k in range(n)]
        rows.append((abs(float(x[j])), [-u for u in unit], Fraction(0)))  # x_j ≥ 0
        rows.append((abs(theta["demand"][j] - float(x[j])) / max(1.0, theta["demand"][j]), unit,
                     Fraction(theta["demand"][j])))  # x_j ≤ d_j
    rows.sort(key=lambda r: r[0])  # stable: ties keep the fixed constraint order
    chosen: list[tuple[list[Fraction], Fraction]] = []
    reduced: list[list[Fraction]] = []  # echelon copy to test independence
    pivots: list[int] = []
    for _, coef, rhs in rows:
        vec = list(coef)
        for r, p in zip(reduced, pivots):
            if vec[p] != 0:
                f = vec[p] / r[p]
                vec = [a - f * b for a, b in zip(vec, r)]
        lead = next((k for k, a in enumerate(vec) if a != 0), None)
        if lead is None:
            continue
        reduced.append(vec)
        pivots.append(lead)
        chosen.append((coef, rhs))
        if len(chosen) == n:
            break
    if len(chosen) < n:
        raise ValueError("the HiGHS solution is not a vertex")
    return _solve_fraction([c for c, _ in chosen], [r for _, r in chosen])


def _solve_fraction(a: list[list[Fraction]], b: list[Fraction]) -> list[Fraction]:
    """Gauss–Jordan elimination in exact arithmetic for a square nonsingular system."""
    n = len(a)
    aug = [list(row) + [rhs] for row, rhs in zip(a, b)]
    for col in range(n):
        piv = next((r for r in range(col, n) if aug[r][col] != 0), None)
        if piv is None:
            raise ValueError("singular basis")
        aug[col], aug[piv] = aug[piv], aug[col]
        for r in range(n):
            if r != col and aug[r][col] != 0:
                f = aug[r][col] / aug[col][col]
                aug[r] = [u - f * v for u, v in zip(aug[r], aug[col])]
    return [aug[k][n] / aug[k][k] for k in range(n)]


def _exactly_feasible(theta: dict, x: list[Fraction]) -> bool:
    return (all(0 <= q <= d for q, d in zip(x, theta["demand"]))
            and all(sum(a * q for a, q in zip(row, x)) <= c for row, c in zip(theta["usage"], theta["capacity"])))


def _highs(theta: dict) -> tuple[float, np.ndarray, float]:
    """(u*, π* as exact-vertex floats, HiGHS dual bound)."""
    from scipy.optimize import linprog  # lazily: registry discovery stays fast

    n, m = _check_theta(theta)
    with quiet_native_stdout():  # HiGHS may printf past Python's stdout
        res = linprog(-np.array(theta["profit"], dtype=float), A_ub=np.array(theta["usage"], dtype=float),
                      b_ub=np.array(theta["capacity"], dtype=float),
                      bounds=[(0.0, float(d)) for d in theta["demand"]], method="highs")
    if res.status != 0:
        raise ValueError(f"HiGHS status {res.status}: {res.message}")
    # dual bound: capacity·y + demand·z with y, z ≥ 0 the duals of the ≤ rows and upper bounds
    dual = float(-(np.dot(theta["capacity"], res.ineqlin.marginals) + np.dot(theta["demand"], res.upper.marginals)))
    vertex = _exact_vertex(theta, res.x)
    if not _exactly_feasible(theta, vertex):
        raise ValueError("the recovered vertex is infeasible")
    exact = sum(p * q for p, q in zip(theta["profit"], vertex))
    if abs(float(exact) - (-res.fun)) > 1e-7 * max(1.0, abs(res.fun)):
        raise ValueError(f"exact vertex value {float(exact)} differs from HiGHS {-res.fun}")
    policy = np.array([float(q) for q in vertex], dtype=np.float64)
    return evaluate(theta, policy), policy, dual


def solve(theta: dict) -> Solution:
    """u* and π* by HiGHS plus exact vertex recovery; values of the default and idle plans.
    InvalidParams first if θ is not of the declared form (`check_theta`); SolverError for any
    failure after that."""
    check_theta(theta)
    n, m = theta["products"], theta["resources"]

    def run():
        value, policy, dual = _highs(theta)
        return value, policy, {"bound": dual, "gap": max(0.0, float(dual) - value)}

    # state space: the bases that can define a vertex (n tight constraints out of m + 2n)
    u_star, policy, cert = certified(run, method="HiGHS LP + exact vertex recovery", solver="scipy.optimize.linprog "
                                     "(HiGHS)", solver_version=scipy.__version__, state_space=math.comb(m + 2 * n, n))
    try:
        u_default, u_idle = evaluate(theta, default_policy(theta)), evaluate(theta, idle_policy(theta))
    except ValueError as exc:  # cannot happen for a checked θ; never let it out raw
        raise SolverError(f"the default or idle plan of this θ is infeasible: {exc}") from exc
    return Solution(u_star=u_star, policy=policy, u_default=u_default, u_idle=u_idle, certificate=cert)


# ---------------------------------------------------------------------------------------------
# Plans: default, idle, random; the exact evaluator and the simulator.


def plan_problem(theta: dict, policy) -> str | None:
    """Why a plan breaks a limit (beyond TOLERANCE), or None; computed as the World computes it."""
    quantities = [float(q) for q in policy]
    if len(quantities) != theta["products"]:
        return f"a plan has {theta['products']} quantities, got {len(quantities)}"
    for j, (q, d) in enumerate(zip(quantities, theta["demand"])):
        if not math.isfinite(q) or q < 0:
            return f"product {j}: quantity {q} is not a non-negative number"
        if q > d + TOLERANCE:
            return f"product {j}: {q} exceeds the demand limit {d}"
    for i, (row, cap) in enumerate(zip(theta["usage"], theta["capacity"])):
        used = 0.0
        for a, q in zip(row, quantities):
            used += a * q
        if used > cap + TOLERANCE:
            return f"resource {i}: the plan uses {used} of {cap} hours"
    return None


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: a real quantity 0 … demand[j] per product (TOLERANCE past the demand still counts)."""
    return PlanSpec(shape=(theta["products"],), integer=False, low=0, high=np.array(theta["demand"], dtype=float),
                    tolerance=TOLERANCE)


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact utility of a plan: Σ profit·x in index order (as the World sums it); ValueError (InvalidPlan
    first, for a plan not of the declared form: a bool, a string, a wrong length) if it is no plan."""
    policy = plan_spec(theta).check(policy)
    problem = plan_problem(theta, policy)
    if problem:
        raise ValueError(problem)
    return _profit(theta, policy)


def _profit(theta: dict, quantities) -> float:
    """Σ profit·x added in product order: the World's own sum (its utility)."""
    total = 0.0
    for p, q in zip(theta["profit"], quantities):
        total += p * float(q)
    return float(total)


# z = (u0 − u_idle) / (u* − u_idle) with u_idle = 0: the greedy fill is never worse than idling
# (z ≥ 0 always); above 0.95 the index-order fill already nearly solves the LP (nothing to learn)
DEFAULT_BAND = (0.0, 0.95)


def default_policy(theta: dict) -> np.ndarray:
    """Fill the products in index order, each as much as fits: x_j = min(demand_j, min over
    resources i with usage[i][j] > 0 of (hours left on i) / usage[i][j]), ignoring profits.
    Computed in Fractions, returned as floats."""
    left = [Fraction(c) for c in theta["capacity"]]
    plan = []
    for j in range(theta["products"]):
        q = Fraction(theta["demand"][j])
        for i, row in enumerate(theta["usage"]):
            if row[j] > 0:
                q = min(q, left[i] / row[j])
        q = max(Fraction(0), q)
        for i, row in enumerate(theta["usage"]):
            left[i] -= row[j] * q
        plan.append(float(q))
    return np.array(plan, dtype=np.float64)


def idle_policy(theta: dict) -> np.ndarray:
    """Produce nothing."""
    return np.zeros(theta["products"], dtype=np.float64)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """A random feasible plan: x_j uniform on [0, demand_j] (zero with probability 1/4), scaled
    down uniformly until every resource fits, then rounded down to thousandths."""
    n = theta["products"]
    x = rng.random(n) * np.array(theta["demand"], dtype=float)
    x = np.where(rng.random(n) < 0.25, 0.0, x)
    used = np.array(theta["usage"], dtype=float) @ x
    ratios = [c / u for c, u in zip(theta["capacity"], used) if u > 0]
    scale = min([1.0] + ratios)
    return np.floor(x * scale * 1000.0) / 1000.0


def boundary_calls(theta: dict, rng: np.random.Generator) -> list[list[dict]]:
    """Near-boundary calls for the reference_agreement gate: each probe's id at its first and last
    valid number (resource 0 and m − 1, product 0 and n − 1), then the hours the plan uses, read
    before and after a quantity is set, and every product set exactly at its demand plus TOLERANCE
    (the largest quantity the World accepts, which the gate's edge amounts step over). The rng is
    not used."""
    def call(tool, **arguments):
        return {"tool": tool, "arguments": arguments}

    last_resource, last_product = theta["resources"] - 1, theta["products"] - 1
    return [
        [call("get_usage_table", resource=0), call("get_usage_table", resource=last_resource),
         call("view_resource_use"), call("set_production", product=0, quantity=1.0), call("view_resource_use")],
        [call("get_profit_sheet", product=0), call("get_profit_sheet", product=last_product),
         call("get_usage_table", resource=last_resource), call("view_resource_use")],
        [call("set_production", product=j, quantity=d + TOLERANCE) for j, d in enumerate(theta["demand"])]
        + [call("view_resource_use")],
    ]


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Set every product with a positive quantity in index order, then close the plan.
    Deterministic: `episode_seed` is ignored."""
    utility = evaluate(theta, policy)
    calls = [{"tool": "set_production", "arguments": {"product": j, "quantity": float(q)}}
             for j, q in enumerate(policy) if float(q) > 0]
    calls.append({"tool": "close_plan", "arguments": {}})
    return Episode(utility=utility, calls=calls, decisions=[float(q) for q in policy])


# ---------------------------------------------------------------------------------------------
# Decision rewards: the potential of a state is the best profit still reachable from it: u* while
# the plan is open (every quantity can be changed again), the plan's profit once it is closed.


decision_values, decision_state, advantage = until_committed(solve)


BUDGET_BINDS = True  # A admits θ only where the budget binds (vhd/tasks/stages/check/budget.py)


def turn_budget(theta: dict) -> int:
    """n + m + 3 turns: π*'s plan (a call per product it makes and the close) with the profits,
    usage rows and capacities it depends on read, but in presentation A not every one of the
    n + m + 1 probes as well: what to find out is a choice (`vhd/tasks/stages/check/budget.py` measures both)."""
    return theta["products"] + theta["resources"] + 3


# ---------------------------------------------------------------------------------------------
# Presentation A: what the probes show, and the guess for what they did not, as the A instruction
# states how θ is drawn: a usage entry not read is USAGE_GUESS hours; a profit not read is
# MARGIN_GUESS per hour of the product's total hours per unit; a capacity not read is
# SHARE_GUESS of the hours meeting every demand would need (demands are told).

USAGE_GUESS = 3  # the middle of the hours per unit 0 … 6 the instruction states
MARGIN_GUESS = 3  # the middle of the margins 1 … 5 per hour
SHARE_GUESS = Fraction(3, 10)  # the middle of the capacity shares 15 … 45 %


def probe_calls(theta: dict) -> list[dict]:
    """Read the capacity sheet, then the usage rows in resource order, then the profits in product order."""
    return ([{"tool": "get_capacity_sheet", "arguments": {}}]
            + [{"tool": "get_usage_table", "arguments": {"resource": i}} for i in range(theta["resources"])]
            + [{"tool": "get_profit_sheet", "arguments": {"product": j}} for j in range(theta["products"])])


def belief(theta: dict, read: list[dict]) -> dict:
    """θ as known after the probe calls `read`: what they showed exact, the rest the stated guess."""
    n, m = theta["products"], theta["resources"]
    rows = {call["arguments"]["resource"] for call in read if call["tool"] == "get_usage_table"}
    profits = {call["arguments"]["product"] for call in read if call["tool"] == "get_profit_sheet"}
    usage = [list(theta["usage"][i]) if i in rows else [USAGE_GUESS] * n for i in range(m)]
    hours = [sum(row[j] for row in usage) for j in range(n)]
    profit = [theta["profit"][j] if j in profits else max(1, MARGIN_GUESS * hours[j]) for j in range(n)]
    if any(call["tool"] == "get_capacity_sheet" for call in read):
        capacity = list(theta["capacity"])
    else:
        capacity = [max(1, round(SHARE_GUESS * sum(a * d for a, d in zip(row, theta["demand"])))) for row in usage]
    return {**theta, "products": n, "resources": m, "profit": profit, "usage": usage, "capacity": capacity}


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only.


_PRODUCT = integer(0, MAX_PRODUCTS - 1, "the product")
_RESOURCE = integer(0, MAX_RESOURCES - 1, "the resource")


TABLES = ("catalog", "resources", "usage", "plan", "state")


class World(BaseWorld):
    """The plant: catalog, resources, usage table, plan and a state table, all in SQLite."""

    PARAMS = ("products", "resources", "profit", "usage", "capacity", "demand")
    STATE = (("closed", 0), ("changes", 0))
    IDS = {"product": "product", "resource": "resource"}
    TOLERANCE = 1e-9

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        n, m = params["products"], params["resources"]
        if (len(params["profit"]) != n or len(params["demand"]) != n or len(params["capacity"]) != m
                or len(params["usage"]) != m or any(len(row) != n for row in params["usage"])):
            raise ValueError("params have inconsistent sizes for %d products and %d resources" % (n, m))
        t = self.t
        db.execute("CREATE TABLE %s (product INTEGER PRIMARY KEY, profit INTEGER, demand INTEGER)" % t["catalog"])
        db.execute("CREATE TABLE %s (resource INTEGER PRIMARY KEY, capacity INTEGER, usage_read INTEGER)"
                   % t["resources"])
        db.execute("CREATE TABLE %s (product INTEGER REFERENCES %s(product), resource INTEGER REFERENCES %s(resource), "
                   "hours INTEGER, PRIMARY KEY (product, resource))" % (t["usage"], t["catalog"], t["resources"]))
        db.execute("CREATE TABLE %s (product INTEGER PRIMARY KEY REFERENCES %s(product), quantity REAL)"
                   % (t["plan"], t["catalog"]))
        for j in range(n):
            db.execute("INSERT INTO %s VALUES (?, ?, ?)" % t["catalog"], (j, params["profit"][j], params["demand"][j]))
            db.execute("INSERT INTO %s VALUES (?, ?)" % t["plan"], (j, 0.0))
        for i in range(m):
            db.execute("INSERT INTO %s VALUES (?, ?, 0)" % t["resources"], (i, params["capacity"][i]))
            for j in range(n):
                db.execute("INSERT INTO %s VALUES (?, ?, ?)" % t["usage"], (j, i, params["usage"][i][j]))

    # -- state helpers --------------------------------------------------------------------
    def _plan(self):
        return [row[0] for row in self.db.execute("SELECT quantity FROM %s ORDER BY product" % self.t["plan"])]

    def _used(self, plan):
        """Hours used on each resource by `plan` (a list of quantities), summed in product order."""
        used = [0.0] * self.p["resources"]
        rows = self.db.execute("SELECT resource, product, hours FROM %s ORDER BY resource, product" % self.t["usage"])
        for resource, product, hours in rows:
            used[resource] += hours * plan[product]
        return used

    def _rows_read(self):
        """The resources whose row of the usage table has been read."""
        return {row[0] for row in self.db.execute("SELECT resource FROM %s WHERE usage_read = 1"
                                                  % self.t["resources"])}

    def _product(self, product):
        if product >= self.p["products"]:
            raise AgentError("there is no product %s; products are numbered %s to %s"
                             % (self.ref("product", product), self.ref("product", 0),
                                self.ref("product", self.p["products"] - 1)))
        return product

    def _write(self, product, quantity):
        plan = self._plan()
        plan[product] = float(quantity)
        demand = self.db.execute("SELECT demand FROM %s WHERE product = ?" % self.t["catalog"], (product,)).fetchone()[0]
        if plan[product] > demand + self.TOLERANCE:
            raise AgentError("at most %d %s of product %s can be sold; asked for %r"
                             % (demand, self.v["unit"], self.ref("product", product), quantity))
        used = self._used(plan)
        caps = self.db.execute("SELECT resource, capacity FROM %s ORDER BY resource" % self.t["resources"]).fetchall()
        for (resource, capacity), hours in zip(caps, used):
            if hours > capacity + self.TOLERANCE:
                # the rule only: the hours needed reveal the usage table and the capacity (hidden θ)
                raise AgentError("this plan would need more hours of some resource than it offers")
        self.db.execute("UPDATE %s SET quantity = ? WHERE product = ?" % self.t["plan"], (plan[product], product))
        self._set("changes", self._get("changes") + 1)
        answer = {"product": product, "quantity": plan[product]}
        read = self._rows_read()
        if read:  # hours used follow from the usage table: shown on the resources whose row is read
            answer["hours_used"] = [{"resource": r, "hours": h} for (r, _), h in zip(caps, used) if r in read]
        return answer

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("closed") == 1

    def utility(self):
        total = 0.0
        rows = self.db.execute("SELECT c.profit, p.quantity FROM %s c JOIN %s p ON c.product = p.product "
                               "ORDER BY c.product" % (self.t["catalog"], self.t["plan"]))
        for profit, quantity in rows:
            total += profit * quantity
        return total

    def run_out(self):
        self._set("closed", 1)

    def limits(self, presentation):
        """Product numbers run 0 … n − 1, resource numbers 0 … m − 1, and no quantity can exceed the
        largest demand limit (the instruction tells n, m and every demand in both presentations)."""
        product = (0, self.p["products"] - 1)
        return {"set_production": {"product": product, "quantity": (0, max(self.p["demand"]))},
                "clear_production": {"product": product}, "get_profit_sheet": {"product": product},
                "get_usage_table": {"resource": (0, self.p["resources"] - 1)}}

    # -- tools ------------------------------------------------------------------------------
    @tool("probe", "Read the {site}'s profit per unit of one product, in {currency}.", reveals=("profit",),
          product=_PRODUCT)
    def tool_get_profit_sheet(self, product):
        product = self._product(product)
        profit = self.db.execute("SELECT profit FROM %s WHERE product = ?" % self.t["catalog"],
                                 (product,)).fetchone()[0]
        return {"product": product, "profit": profit, "currency": self.v["currency"]}

    @tool("probe", "Read one resource's row of the usage table: how many hours one unit of each product needs on "
          "it.", reveals=("usage",), resource=_RESOURCE)
    def tool_get_usage_table(self, resource):
        if resource >= self.p["resources"]:
            raise AgentError("there is no resource %s; resources are numbered %s to %s"
                             % (self.ref("resource", resource), self.ref("resource", 0),
                                self.ref("resource", self.p["resources"] - 1)))
        self.db.execute("UPDATE %s SET usage_read = 1 WHERE resource = ?" % self.t["resources"], (resource,))
        row = [{"product": j, "hours": h} for j, h in self.db.execute(
            "SELECT product, hours FROM %s WHERE resource = ? ORDER BY product" % self.t["usage"], (resource,))]
        return {"resource": resource, "hours_by_product": row}

    @tool("probe", "Read how many hours each resource of the {site} offers in this run.", reveals=("capacity",))
    def tool_get_capacity_sheet(self):
        rows = self.db.execute("SELECT resource, capacity FROM %s ORDER BY resource" % self.t["resources"])
        return {"capacity_hours": [{"resource": i, "capacity": c} for i, c in rows]}

    @tool("observe", "List the products ({item}) with their demand limits in {unit}.")
    def tool_view_products(self):
        rows = self.db.execute("SELECT product, demand FROM %s ORDER BY product" % self.t["catalog"])
        return {"products": [{"product": j, "max_demand": d} for j, d in rows], "unit": self.v["unit"]}

    @tool("observe", "List the shared resources (machines, lines) of the {site}.")
    def tool_view_resources(self):
        rows = self.db.execute("SELECT resource FROM %s ORDER BY resource" % self.t["resources"])
        return {"resources": [{"resource": i} for i, in rows]}

    @tool("observe", "Show the quantity currently planned for each product.")
    def tool_view_plan(self):
        return {"plan": [{"product": j, "quantity": q} for j, q in enumerate(self._plan())],
                "changes": self._get("changes"), "closed": bool(self._get("closed"))}

    @tool("observe", "Show the hours the current plan uses on each resource whose row of the usage table has been "
          "read (none for the others).")
    def tool_view_resource_use(self):
        read = self._rows_read()
        if not read:
            raise AgentError("no resource's hours per unit have been read yet; call %s first"
                             % self.name["get_usage_table"])
        used = self._used(self._plan())
        return {"hours_used": [{"resource": i, "hours": h if i in read else None} for i, h in enumerate(used)]}

    @tool("decision", "Set the quantity of one product in the plan (replaces its previous quantity; fractions "
          "allowed). Refused if a resource or the demand limit would be exceeded.",
          product=_PRODUCT, quantity=number(0, 1000000, "quantity to make, in {unit} (may be fractional)"))
    def tool_set_production(self, product, quantity):
        return self._write(self._product(product), quantity)

    @tool("decision", "Take one product out of the plan (quantity 0).", product=_PRODUCT)
    def tool_clear_production(self, product):
        self._product(product)
        if self._plan()[product] == 0:
            raise AgentError("product %s is not in the plan" % self.ref("product", product))
        return self._write(product, 0.0)

    @tool("decision", "Set every product's quantity back to 0.")
    def tool_reset_plan(self):
        if not any(q != 0 for q in self._plan()):
            raise AgentError("the plan is already empty")
        self.db.execute("UPDATE %s SET quantity = 0.0" % self.t["plan"])
        self._set("changes", self._get("changes") + 1)
        return {"plan": [{"product": j, "quantity": 0.0} for j in range(self.p["products"])]}

    @tool("clock", "Close the plan: produce and sell it, and end the episode.")
    def tool_close_plan(self):
        self._set("closed", 1)
        return {"plan": [{"product": j, "quantity": q} for j, q in enumerate(self._plan())],
                "profit": self.utility(), "currency": self.v["currency"]}

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        lines = [
            self.skin["narrative"],
            "",
            "You plan one production run of %d products of %s (%s), numbered %s to %s, at the %s. "
            "They share %d resources (numbered %s to %s), each offering a fixed number of hours." % (
                p["products"], v["item"], v["sku"], self.ref("product", 0), self.ref("product", p["products"] - 1),
                v["site"], p["resources"], self.ref("resource", 0), self.ref("resource", p["resources"] - 1)),
            "Set a quantity for each product with %s (any non-negative number of %s, fractions allowed; "
            "setting a product again replaces its quantity; %s and %s undo). A plan that needs more hours "
            "of some resource than it offers, or more of a product than can be sold, is refused." % (
                n["set_production"], v["unit"], n["clear_production"], n["reset_plan"]),
            "When the plan is ready, %s produces and sells it. Your score is the total profit, the sum of "
            "unit profit times quantity, in %s." % (n["close_plan"], v["currency"]),
            "Demand limits (at most this many %s can be sold): %s." % (
                v["unit"], ", ".join("product %s: %d" % (self.ref("product", j), d)
                                     for j, d in enumerate(p["demand"]))),
            "You have %d turns: every tool call the world answers uses its turn cost; when they run out, the plan "
            "as it stands is produced." % turn_budget,
        ]
        told = self._theta_lines() if presentation == "I" else self._probe_lines()
        return "\n".join(lines + [""] + told)

    def _theta_lines(self):
        """Presentation I: the unit profits, the capacities and the usage table (a row per resource, as
        the usage probe answers in A)."""
        p = self.p
        return [
            "Unit profits (%s): %s." % (self.v["currency"], ", ".join(
                "product %s: %d" % (self.ref("product", j), x) for j, x in enumerate(p["profit"]))),
            "Capacities (hours): %s." % ", ".join("resource %s: %d" % (self.ref("resource", i), c)
                                                  for i, c in enumerate(p["capacity"])),
            "Hours per unit (a row per resource, a column per product, products %s to %s):"
            % (self.ref("product", 0), self.ref("product", p["products"] - 1)),
        ] + ["  resource %s: %s" % (self.ref("resource", i), " ".join(str(a) for a in row))
             for i, row in enumerate(p["usage"])]

    def _probe_lines(self):
        """Presentation A: what is hidden, the probes that reveal it, and how it is drawn."""
        n = self.name
        return ["Unit profits, the hours each product needs on each resource and the resources' capacities are not "
                "given: %s reveals one product's unit profit, %s one resource's hours per unit of every product, "
                "and %s every resource's capacity, each at the cost of a turn from the same budget. Each product "
                "needs 0 to 6 hours per unit on each resource and earns 1 to 5 %s per hour it needs in all; each "
                "capacity is 15 to 45 %% of the hours that making every product up to its demand limit would need "
                "on that resource." % (n["get_profit_sheet"], n["get_usage_table"], n["get_capacity_sheet"],
                                        self.v["currency"])]


register(Family.of(
    globals(),
    name="lp",
    version="6",
    group="near_ood",
    model_class="linear programme (continuous production planning)",
    solver="HiGHS (scipy.optimize.linprog method='highs') + exact rational vertex recovery",
    hidden=("profit", "usage", "capacity"),
    stochastic=False,
))
