"""Staff rostering: cover every shift of a short planning period with a team at least cost.

Model
    A site rosters `n_staff` = S staff members, numbered 0 … S − 1, over
    `horizon` = D days, numbered 0 … D − 1. Each day has `n_shifts` = K
    shifts (K is 2 or 3), numbered 0 … K − 1 in the order of `shift_names`: shift 0 is the early
    shift and shift K − 1 the night shift. Shift k of day d needs `demand[d][k]` ≥ 0 heads.
    A roster says, for every staff member s and day d, which one shift s works that day, or that
    s is off; it is valid when
      (a) s works a shift only if `availability[s][d][k]` = 1 (at most one shift a day is built
          into the roster's form),
      (b) s works at most `max_shifts[s]` shifts over the D days, and
      (c) rest rule: s never works the early shift (0) of day d + 1 after working the night
          shift (K − 1) of day d.
    Working shift k costs staff member s the wage `base_wages[s] + shift_premiums[k]` (whole
    currency units; shift_premiums[0] = 0 and the night premium is the largest). Every head short
    on a shift, max(0, demand[d][k] − number of staff on shift k of day d), costs
    `shortage_penalty` (agency cover), so every valid roster is feasible; extra heads beyond the
    demand are paid and do not help. The cost of a roster is
        C = Σ over worked (s, d, k) of (base_wages[s] + shift_premiums[k])
            + shortage_penalty × Σ_{d,k} max(0, demand[d][k] − heads[d][k]),
    and its utility is −C, an integer. The decision process is deterministic: shifts are
    assigned and unassigned one at a time in any order, and only the published roster counts
    (a subset of a valid roster is valid, so a valid roster can be built in any order).
    Solved exactly as an integer program (x_sdk ∈ {0,1} with x_sdk ≤ availability, Σ_k x_sdk ≤ 1,
    Σ_dk x_sdk ≤ max_shifts[s], x_{s,d,K−1} + x_{s,d+1,0} ≤ 1, shortages y_dk ≥ demand − Σ_s x_sdk,
    y ≥ 0; minimise wages · x + shortage_penalty · Σ y) by HiGHS through scipy.optimize.milp with a
    zero MIP gap; the optimum is re-evaluated in integers and checked against the dual bound.
    Limits: solve() takes 1 … MAX_STAFF = 12 staff, 1 … MAX_HORIZON = 14 days and 2 … 3 shifts,
    with whole demands, wages, premiums, caps and penalty ≥ 0 and availability flags 0 or 1; any
    other θ is refused with InvalidParams before anything is allocated (`check_theta`).

State
    the staff table (label, base wage, shift limit, whether the availability was read), the
    shift table (name, premium), the slot table (required heads per day and shift), the
    availability table, the roster (one row per staff member and working day), an action log and
    a state table (which sheets were read, how many forecasts were issued, whether the roster is
    published).

Tools
    probes: the coverage requirement sheet (exact, costs 2 turns), the demand forecast (a noisy
    estimate of the same numbers, 1 turn), the wage sheet (base wages and shift premiums), one
    staff member's availability, the work rules (shift limits), the shortage terms (penalty per
    uncovered head); decisions: assign a staff member to a shift, unassign a staff member from a
    day, clear a day (every shift of it); clock: publish the roster (ends the episode); observations: list the staff,
    view the roster, view one day, view the coverage (heads per shift, shortfall once the sheet is
    read), view the costs so far (the parts whose terms were read), view the action log.
    The tool schemas are fitted to the instance, in I and A alike (both instructions tell S, D
    and K): staff numbers stop at S − 1, days at D − 1 and shifts at K − 1.

Plan
    an integer array of shape [n_staff, horizon]: entry [s, d] is the shift staff member s works
    on day d (0 … n_shifts − 1, in the order of shift_names) or −1 if s is off that day; every
    worked entry must be available, each row may hold at most max_shifts[s] worked days, and a
    night (n_shifts − 1) may not be followed by an early shift (0) the next day.

Reward
    utility = −(wages of the published roster + shortage_penalty × uncovered heads), higher is
    better. The idle plan publishes an empty roster (every head short). r = clip01((u − u_default)
    / (u* − u_default)), where u_default is the greedy roster: days in order 0 … D − 1, within a
    day shifts in order 0 … K − 1, each shift filled head by head with the cheapest eligible staff
    member (lowest wage for that shift, lowest number on ties) until its demand is met or nobody
    eligible is left; eligible means available, not yet working that day, below the shift limit,
    and (for the early shift) not on the night shift the day before. The greedy ignores the
    shortage penalty (it staffs a shift even when the wage exceeds the penalty).

Advantages
    The solver's state is (published, roster): the state table's flag and the roster table's
    (staff, day, shift) rows. A* is the change of the potential Φ = the best utility reachable
    from the state: every shift can be unassigned (or its day cleared) and a subset of a valid
    roster is valid, so any valid roster, π*'s included, can still be built: Φ = u* while the
    roster is open, whatever it holds, and Φ = −C(roster) once it is published. Turns are
    ignored: a budget too short to undo a bad roster still counts as u* (the sum telescopes all
    the same). Assigning, unassigning or clearing a day gets A* = 0; `publish_roster` gets
    −C(roster) − u*; running out of turns publishes the roster as it stands, also −C(roster) −
    u*. Whole numbers, so Σ A* = u − u* exactly on every trajectory, and π* publishes at 0. The
    demand forecast is a probe (A* = 0): its noise never reaches the utility.

Episode end
    after `publish_roster`, or when the turn budget runs out: the roster is then published as it
    stands (no further shifts are assigned or removed).
"""

from __future__ import annotations

import random

import numpy as np
import scipy
from pydantic import BaseModel

from vhd.mechanisms._advantage import until_committed
from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, exact_milp, integer_mip_bound, solved
from vhd.mechanisms._theta import ThetaCheck

# ruff: noqa: UP031  (printf-style formatting: the house style of every family's World, copied into modules)

MAX_STAFF = 12
MAX_HORIZON = 14
MAX_SHIFTS_PER_DAY = 3
SHEET_COST = 2
HIDDEN = ("demand", "base_wages", "shift_premiums", "availability", "max_shifts", "shortage_penalty")
SHIFT_NAMES = {2: ["early", "night"], 3: ["early", "late", "night"]}


class Params(BaseModel):
    """Difficulty knobs of a rostering instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = knob(6, 1, MAX_STAFF, sampled=(4, 10),
                     description="number of staff members S to roster, in staff members")
    horizon: int = knob(5, 1, MAX_HORIZON, sampled=(3, 10),
                        description="number of days D in the planning period, in days")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: 2 or 3 shifts a day; a core team with base wages 8…15 and a few dearer bank staff
    (base 19…27, about a quarter of the team, at least one when S ≥ 3); shift premiums 0, then 1…3
    for a late shift, and a night premium 3…8; a shortage penalty 18…26 per head; demand per shift
    about S × 0.5…0.8 / K heads (Poisson around it, the night lighter); each staff member off on a
    whole day with probability 0.15 and unavailable for any one shift with probability 0.2; shift
    limits of 40…75 % of the days (at least 1)."""
    n, days = params.size, params.horizon
    k = int(rng.integers(2, 4))
    bank = int(rng.binomial(n, 0.25))
    if n >= 3:
        bank = max(bank, 1)
    base = [int(w) for w in rng.integers(8, 16, size=n - bank)] + [int(w) for w in rng.integers(19, 28, size=bank)]
    order = rng.permutation(n)
    base = [base[int(i)] for i in order]
    premiums = [0] + ([int(rng.integers(1, 4))] if k == 3 else []) + [int(rng.integers(3, 9))]
    load = float(rng.uniform(0.5, 0.8)) * n / k
    shape = np.ones(k)
    shape[-1] = 0.7
    demand = rng.poisson(load * shape, size=(days, k))
    if demand.sum() == 0:
        demand[int(rng.integers(0, days)), 0] = 1
    off_day = rng.random((n, days)) < 0.15
    availability = ((rng.random((n, days, k)) >= 0.2) & ~off_day[:, :, None]).astype(int)
    share = rng.uniform(0.4, 0.75, size=n)
    max_shifts = np.clip(np.rint(share * days), 1, days).astype(int)
    return {
        "n_staff": n,
        "horizon": days,
        "n_shifts": k,
        "shift_names": list(SHIFT_NAMES[k]),
        "demand": [[int(x) for x in row] for row in demand],
        "base_wages": base,
        "shift_premiums": premiums,
        "availability": [[[int(a) for a in day] for day in staff] for staff in availability],
        "max_shifts": [int(m) for m in max_shifts],
        "shortage_penalty": int(rng.integers(18, 27)),
    }


# ---------------------------------------------------------------------------------------------
# Plans: an int matrix [n_staff, horizon], entry = the shift worked that day or −1 (off).


def _wage(theta: dict, s: int, k: int) -> int:
    return int(theta["base_wages"][s]) + int(theta["shift_premiums"][k])


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: [staff, day] → a shift 0 … n_shifts − 1, or −1 (off)."""
    return PlanSpec(shape=(theta["n_staff"], theta["horizon"]), integer=True, low=-1, high=theta["n_shifts"] - 1)


def _check_plan(theta: dict, policy: np.ndarray) -> list[list[int]]:
    """The plan as nested int lists; ValueError (InvalidPlan for one not of the declared form) if it is
    malformed or breaks a rule."""
    x = plan_spec(theta).check(policy)
    n, days, k = theta["n_staff"], theta["horizon"], theta["n_shifts"]
    plan = [[int(v) for v in row] for row in x]
    for s in range(n):
        worked = [d for d in range(days) if plan[s][d] >= 0]
        if len(worked) > theta["max_shifts"][s]:
            raise ValueError(f"staff {s} works {len(worked)} shifts > limit {theta['max_shifts'][s]}")
        for d in worked:
            if not theta["availability"][s][d][plan[s][d]]:
                raise ValueError(f"staff {s} is not available for shift {plan[s][d]} on day {d}")
            if d + 1 < days and plan[s][d] == k - 1 and plan[s][d + 1] == 0:
                raise ValueError(f"staff {s} works the night of day {d} and the early shift of day {d + 1}")
    return plan


def _cost(theta: dict, plan: list[list[int]]) -> int:
    days, k = theta["horizon"], theta["n_shifts"]
    heads = [[0] * k for _ in range(days)]
    wages = 0
    for s, row in enumerate(plan):
        for d, shift in enumerate(row):
            if shift >= 0:
                heads[d][shift] += 1
                wages += _wage(theta, s, shift)
    short = sum(max(0, int(theta["demand"][d][j]) - heads[d][j]) for d in range(days) for j in range(k))
    return wages + int(theta["shortage_penalty"]) * short


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact utility of a roster matrix: −(wages + shortage_penalty × uncovered heads)."""
    return float(-_cost(theta, _check_plan(theta, policy)))


def _milp(theta: dict) -> tuple[float, np.ndarray, dict[str, float]]:
    from scipy.optimize import Bounds, LinearConstraint  # lazily: registry discovery stays fast

    n, days, k = theta["n_staff"], theta["horizon"], theta["n_shifts"]
    nx = n * days * k
    ny = days * k

    def xi(s, d, j):
        return (s * days + d) * k + j

    cost = np.zeros(nx + ny)
    upper = np.zeros(nx + ny)
    for s in range(n):
        for d in range(days):
            for j in range(k):
                cost[xi(s, d, j)] = _wage(theta, s, j)
                upper[xi(s, d, j)] = 1.0 if theta["availability"][s][d][j] else 0.0
    for d in range(days):
        for j in range(k):
            cost[nx + d * k + j] = theta["shortage_penalty"]
            upper[nx + d * k + j] = theta["demand"][d][j]
    rows, lo, hi = [], [], []

    def add(coefs, low, high):
        row = np.zeros(nx + ny)
        for index, value in coefs:
            row[index] = value
        rows.append(row)
        lo.append(low)
        hi.append(high)

    for s in range(n):
        for d in range(days):
            add([(xi(s, d, j), 1.0) for j in range(k)], -np.inf, 1.0)  # one shift a day
            if d + 1 < days:
                add([(xi(s, d, k - 1), 1.0), (xi(s, d + 1, 0), 1.0)], -np.inf, 1.0)  # rest rule
        add([(xi(s, d, j), 1.0) for d in range(days) for j in range(k)], -np.inf, float(theta["max_shifts"][s]))
    for d in range(days):
        for j in range(k):  # coverage: heads + shortage ≥ demand
            add([(xi(s, d, j), 1.0) for s in range(n)] + [(nx + d * k + j, 1.0)], float(theta["demand"][d][j]), np.inf)
    res = exact_milp(
        c=cost,
        constraints=[LinearConstraint(np.array(rows), np.array(lo), np.array(hi))],
        integrality=np.concatenate([np.ones(nx), np.zeros(ny)]),
        bounds=Bounds(np.zeros(nx + ny), upper),
    )
    x = res.x[:nx].reshape(n, days, k)
    xr = np.rint(x)
    if np.abs(x - xr).max(initial=0.0) > 1e-6:
        raise ValueError("HiGHS returned a fractional roster")
    plan = np.full((n, days), -1, dtype=np.int8)
    for s in range(n):
        for d in range(days):
            on = np.flatnonzero(xr[s, d] > 0.5)
            if on.size > 1:
                raise ValueError(f"HiGHS put staff {s} on {on.size} shifts of day {d}")
            if on.size:
                plan[s, d] = int(on[0])
    value = evaluate(theta, plan)  # exact, in integers; also re-checks every rule
    return value, plan, integer_mip_bound(res, value)


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … MAX_STAFF = 12 staff, 1 …
    MAX_HORIZON = 14 days and 2 … 3 shifts, with whole demands, wages, premiums, caps and
    penalty ≥ 0 and availability flags 0 or 1."""
    check = ThetaCheck("rostering", theta)
    staff = check.count("n_staff", 1, MAX_STAFF)
    days = check.count("horizon", 1, MAX_HORIZON)
    shifts = check.count("n_shifts", 2, MAX_SHIFTS_PER_DAY)
    names = theta.get("shift_names")
    check.require(isinstance(names, list) and len(names) == shifts and all(isinstance(x, str) for x in names),
                  "shift_names", "one name per shift")
    check.whole("demand", (days, shifts), low=0)
    check.whole("base_wages", (staff,), low=0)
    check.whole("shift_premiums", (shifts,), low=0)
    check.whole("availability", (staff, days, shifts), low=0, high=1)
    check.whole("max_shifts", (staff,), low=0)
    check.whole("shortage_penalty", low=0)


def solve(theta: dict) -> Solution:
    """u* and π* (the roster matrix, int8) by MILP; values of the default and idle rosters."""
    check_theta(theta)
    found = certified(lambda: _milp(theta), method="staff rostering integer program, branch and bound (zero MIP gap)",
                      solver="scipy.optimize.milp (HiGHS)", solver_version=scipy.__version__,
                      state_space=theta["n_staff"] * theta["horizon"] * theta["n_shifts"])
    return solved(theta, found, evaluate, default_policy, idle_policy)


def _eligible(theta: dict, plan: np.ndarray, s: int, d: int, j: int) -> bool:
    """Can staff s take shift j of day d given the rest of the roster (s is off that day)?"""
    k, days = theta["n_shifts"], theta["horizon"]
    if not theta["availability"][s][d][j] or int((plan[s] >= 0).sum()) >= theta["max_shifts"][s]:
        return False
    if j == 0 and d > 0 and plan[s, d - 1] == k - 1:
        return False
    return not (j == k - 1 and d + 1 < days and plan[s, d + 1] == 0)


# z = (u_default − u_idle) / (u* − u_idle), u_idle = −penalty × total demand (empty roster). The greedy
# staffs shifts even with bank staff dearer than the penalty, so z < 0 happens (about 4 % of draws below
# 0); below −0.5 it is a worse reference than idling by half the room above it. Above 0.97 the greedy
# already nearly solves the instance (about 8 % of draws). About 90 % of sampled θ fall inside.
DEFAULT_BAND = (-0.5, 0.97)


def default_policy(theta: dict) -> np.ndarray:
    """Greedy: days in order, within a day shifts 0 … K − 1, each shift filled head by head with
    the cheapest eligible staff member (lowest wage for that shift, lowest number on ties) until
    its demand is met or nobody eligible is left. Eligible: available for the shift, not yet on
    another shift that day, below the shift limit, and not on the night shift the day before if
    the shift is the early one. The shortage penalty is ignored."""
    n, days, k = theta["n_staff"], theta["horizon"], theta["n_shifts"]
    plan = np.full((n, days), -1, dtype=np.int8)
    for d in range(days):
        for j in range(k):
            by_wage = sorted(range(n), key=lambda s: (_wage(theta, s, j), s))
            need = int(theta["demand"][d][j])
            for s in by_wage:
                if need == 0:
                    break
                if plan[s, d] < 0 and _eligible(theta, plan, s, d, j):
                    plan[s, d] = j
                    need -= 1
    return plan


def idle_policy(theta: dict) -> np.ndarray:
    """Publish an empty roster: everybody off, every head short."""
    return np.full((theta["n_staff"], theta["horizon"]), -1, dtype=np.int8)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """A random valid roster: visit the (staff, day) cells in a random order; each one stays off
    with probability 1/2, else takes a uniformly random shift that is still eligible (if any)."""
    n, days, k = theta["n_staff"], theta["horizon"], theta["n_shifts"]
    plan = np.full((n, days), -1, dtype=np.int8)
    for cell in rng.permutation(n * days):
        s, d = divmod(int(cell), days)
        if rng.random() < 0.5:
            continue
        options = [j for j in range(k) if _eligible(theta, plan, s, d, j)]
        if options:
            plan[s, d] = options[int(rng.integers(0, len(options)))]
    return plan


def boundary_calls(theta: dict, rng: np.random.Generator) -> list[list[dict]]:
    """Near-boundary decisions for the reference_agreement gate. First sequence: for a few staff
    members, a night shift then the early shift of the next day (refused by the rest rule), and
    the other order on another pair of days. Second: a few staff members who are available on
    more days than their shift limit, each assigned one available shift a day (keeping the rest
    rule), in random day order, until one past their limit (the last one refused). Third: staff
    with room for two shifts, one night-early pair each, in alternating orders, the first shift
    of each pair offered twice (the repeat refused)."""
    n, days, k, free = theta["n_staff"], theta["horizon"], theta["n_shifts"], theta["availability"]

    def assign(s, d, j):
        return {"tool": "assign_shift", "arguments": {"staff": int(s), "day": int(d), "shift": int(j)}}

    rest: list[dict] = []
    for s in rng.permutation(n)[:4]:
        pairs = [d for d in range(days - 1) if free[s][d][k - 1] and free[s][d + 1][0]]
        for n_pair, d in enumerate(rng.permutation(pairs)[:2] if pairs else []):
            first, second = (assign(s, d, k - 1), assign(s, d + 1, 0)) if n_pair == 0 else \
                (assign(s, d + 1, 0), assign(s, d, k - 1))
            rest += [first, second]
    # third: staff with room for two shifts, each with one night-early pair in its own order (even
    # staff night first, odd staff early first), the first shift offered twice (refused: already works)
    both: list[dict] = []
    roomy = [s for s in rng.permutation(n) if theta["max_shifts"][s] >= 2]
    for n_staff, s in enumerate(roomy[:6]):
        pairs = [d for d in range(days - 1) if free[s][d][k - 1] and free[s][d + 1][0]]
        if pairs:
            d = int(pairs[int(rng.integers(len(pairs)))])
            first, second = (assign(s, d, k - 1), assign(s, d + 1, 0)) if n_staff % 2 == 0 else \
                (assign(s, d + 1, 0), assign(s, d, k - 1))
            both += [first, first, second]
    limit: list[dict] = []
    room = [s for s in rng.permutation(n) if sum(any(day) for day in free[s]) > theta["max_shifts"][s]]
    for s in room[:3]:  # staff who can be offered one shift past their limit
        placed: dict[int, int] = {}
        for d in rng.permutation(days):
            shifts = [j for j in range(k) if free[s][d][j]
                      and not (j == 0 and placed.get(d - 1) == k - 1) and not (j == k - 1 and placed.get(d + 1) == 0)]
            if shifts and len(placed) <= theta["max_shifts"][s]:
                placed[int(d)] = shifts[int(rng.integers(len(shifts)))]
                limit.append(assign(s, d, placed[int(d)]))
    return [calls + [{"tool": "publish_roster", "arguments": {}}] for calls in (rest, limit, both)]


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a roster: assign its shifts day by day (staff in number order within a day), then
    publish. Deterministic (the episode seed is accepted and ignored)."""
    plan = _check_plan(theta, policy)
    decisions = [(s, d, plan[s][d]) for d in range(theta["horizon"]) for s in range(theta["n_staff"])
                 if plan[s][d] >= 0]
    calls = [{"tool": "assign_shift", "arguments": {"staff": s, "day": d, "shift": j}} for s, d, j in decisions]
    calls.append({"tool": "publish_roster", "arguments": {}})
    return Episode(utility=float(-_cost(theta, plan)), calls=calls, decisions=decisions)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the potential of a state is the best utility still reachable from it: u* while
# the roster is open (every shift can be taken off again), −C(roster) once it is published.


decision_values, decision_state, advantage = until_committed(solve)


def turn_budget(theta: dict) -> int:
    """Every probe (each staff member's availability included), a shift for every staff member
    on every day, publish, and room to spare; it depends on S and D only."""
    n, days = theta["n_staff"], theta["horizon"]
    return n * days + n + 16


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


_STAFF = integer(0, MAX_STAFF - 1, "the staff member")
_DAY = integer(0, MAX_HORIZON - 1, "day number (0-based)")
_SHIFT = integer(0, MAX_SHIFTS_PER_DAY - 1, "shift number of the day (0 = early, the last one = night)")


TABLES = ("staff", "shifts", "slots", "availability", "roster", "log", "state")


class World(BaseWorld):
    """The site's relational world: staff, shifts, slots, availability, roster, log, state."""

    PARAMS = ("n_staff", "horizon", "n_shifts", "shift_names", "demand", "base_wages", "shift_premiums",
              "availability", "max_shifts", "shortage_penalty")
    STATE = (("sheet_read", 0), ("wages_read", 0), ("terms_read", 0), ("forecasts", 0), ("published", 0))
    IDS = {"staff": "staff"}  # days and shifts are not entities: a shift is shown by its name
    STAFF_NAMES = ("Ada", "Bram", "Cleo", "Dev", "Esme", "Farid", "Gwen", "Hugo", "Iris", "Jonas", "Kemi", "Luca",
                   "Mina", "Nils", "Oona", "Pavel")
    FORECAST_SALT = 7919

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        n, days, k = params["n_staff"], params["horizon"], params["n_shifts"]
        if n < 1 or days < 1 or k < 2 or len(params["shift_names"]) != k or len(params["shift_premiums"]) != k \
                or len(params["base_wages"]) != n or len(params["max_shifts"]) != n \
                or len(params["demand"]) != days or any(len(row) != k for row in params["demand"]) \
                or len(params["availability"]) != n or any(len(row) != days for row in params["availability"]) \
                or any(len(cell) != k for row in params["availability"] for cell in row):
            raise ValueError("the parameters do not match n_staff=%r, horizon=%r, n_shifts=%r" % (n, days, k))
        self.cost = {tool["canonical"]: tool.get("turn_cost", 1) for tool in skin["tools"]}
        t = self.t
        db.execute("CREATE TABLE %s (staff_id INTEGER PRIMARY KEY, label TEXT, base_wage INTEGER, max_shifts INTEGER, "
                   "availability_read INTEGER)" % t["staff"])
        db.execute("CREATE TABLE %s (shift_id INTEGER PRIMARY KEY, name TEXT, premium INTEGER)" % t["shifts"])
        db.execute("CREATE TABLE %s (day INTEGER, shift_id INTEGER REFERENCES %s(shift_id), required INTEGER, "
                   "PRIMARY KEY (day, shift_id))" % (t["slots"], t["shifts"]))
        db.execute("CREATE TABLE %s (staff_id INTEGER REFERENCES %s(staff_id), day INTEGER, shift_id INTEGER, "
                   "available INTEGER, PRIMARY KEY (staff_id, day, shift_id))" % (t["availability"], t["staff"]))
        db.execute("CREATE TABLE %s (staff_id INTEGER REFERENCES %s(staff_id), day INTEGER, shift_id INTEGER "
                   "REFERENCES %s(shift_id), PRIMARY KEY (staff_id, day))"
                   % (t["roster"], t["staff"], t["shifts"]))
        db.execute("CREATE TABLE %s (entry_id INTEGER PRIMARY KEY, action TEXT, staff_id INTEGER, day INTEGER, "
                   "shift_id INTEGER)" % t["log"])
        db.executemany("INSERT INTO %s VALUES (?, ?, ?, ?, 0)" % t["staff"],
                       [(s, World.staff_label(s), params["base_wages"][s], params["max_shifts"][s]) for s in range(n)])
        db.executemany("INSERT INTO %s VALUES (?, ?, ?)" % t["shifts"],
                       [(j, params["shift_names"][j], params["shift_premiums"][j]) for j in range(k)])
        db.executemany("INSERT INTO %s VALUES (?, ?, ?)" % t["slots"],
                       [(d, j, params["demand"][d][j]) for d in range(days) for j in range(k)])
        db.executemany("INSERT INTO %s VALUES (?, ?, ?, ?)" % t["availability"],
                       [(s, d, j, 1 if params["availability"][s][d][j] else 0)
                        for s in range(n) for d in range(days) for j in range(k)])
        # θ's shortage penalty sits in the state table: the total cost and view_costs read it there
        db.execute("INSERT INTO %s VALUES ('shortage_penalty', ?)" % t["state"], (params["shortage_penalty"],))

    @staticmethod
    def staff_label(s):
        names = World.STAFF_NAMES
        return names[s] if s < len(names) else "staff %d" % s

    @staticmethod
    def forecast(params, episode_seed, number):
        """The number-th demand forecast (0-based) of an episode: every shift's required heads
        plus a noise of −1, 0 or +1 (probabilities 1/4, 1/2, 1/4), floored at 0, drawn from
        random.Random(episode_seed × 7919 + number). It changes nothing in the world."""
        rng = random.Random(episode_seed * World.FORECAST_SALT + number)
        out = []
        for row in params["demand"]:
            estimates = []
            for required in row:
                noise = (-1, 0, 0, 1)[rng.randrange(4)]
                estimates.append(max(0, required + noise))
            out.append(estimates)
        return out

    # -- state helpers --------------------------------------------------------------------
    def _staff(self, staff):
        n = self.p["n_staff"]
        if not 0 <= staff < n:
            raise AgentError("the staff run from %s to %s; got %s"
                             % (self.ref("staff", 0), self.ref("staff", n - 1), self.ref("staff", staff)))
        return staff

    def _day(self, day):
        days = self.p["horizon"]
        if not 0 <= day < days:
            raise AgentError("the days of the period are numbered 0 to %d; got %d" % (days - 1, day))
        return day

    def _shift(self, shift):
        k = self.p["n_shifts"]
        if not 0 <= shift < k:
            raise AgentError("there are %d shifts a day, numbered 0 to %d (%s); got %d"
                             % (k, k - 1, ", ".join(self.p["shift_names"]), shift))
        return shift

    def _open(self):
        if self._get("published"):
            raise AgentError("the roster is already published")

    def _shift_of(self, staff, day):
        row = self.db.execute("SELECT shift_id FROM %s WHERE staff_id = ? AND day = ?" % self.t["roster"],
                              (staff, day)).fetchone()
        return None if row is None else row[0]

    def _worked(self, staff):
        return self.db.execute("SELECT COUNT(*) FROM %s WHERE staff_id = ?" % self.t["roster"], (staff,)).fetchone()[0]

    def _heads(self):
        """heads[d][k]: staff on shift k of day d in the current roster."""
        heads = [[0] * self.p["n_shifts"] for _ in range(self.p["horizon"])]
        for day, shift, count in self.db.execute("SELECT day, shift_id, COUNT(*) FROM %s GROUP BY day, shift_id"
                                                 % self.t["roster"]):
            heads[day][shift] = count
        return heads

    def _wage_bill(self):
        return self.db.execute(
            "SELECT COALESCE(SUM(w.base_wage + h.premium), 0) FROM %s r JOIN %s w ON w.staff_id = r.staff_id "
            "JOIN %s h ON h.shift_id = r.shift_id" % (self.t["roster"], self.t["staff"], self.t["shifts"])).fetchone()[0]

    def _short_heads(self):
        return self.db.execute(
            "SELECT COALESCE(SUM(MAX(0, q.required - (SELECT COUNT(*) FROM %s r WHERE r.day = q.day AND "
            "r.shift_id = q.shift_id))), 0) FROM %s q" % (self.t["roster"], self.t["slots"])).fetchone()[0]

    def _total_cost(self):
        return self._wage_bill() + self._get("shortage_penalty") * self._short_heads()

    def _grid(self):
        names = self.p["shift_names"]
        grid = []
        for s in range(self.p["n_staff"]):
            row = []
            for d in range(self.p["horizon"]):
                shift = self._shift_of(s, d)
                row.append("off" if shift is None else names[shift])
            grid.append({"staff": s, "label": World.staff_label(s), "days": row})
        return grid

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("published") == 1

    def utility(self):
        return -self._total_cost()

    def run_out(self):
        self._log("published (turns ran out)")
        self._set("published", 1)

    def limits(self, presentation):
        """Staff run 0 … S − 1, days 0 … D − 1 and shifts 0 … K − 1 (both instructions tell S, D and K)."""
        p = self.p
        staff, day, shift = (0, p["n_staff"] - 1), (0, p["horizon"] - 1), (0, p["n_shifts"] - 1)
        return {"read_availability": {"staff": staff}, "view_date": {"day": day},
                "assign_shift": {"staff": staff, "day": day, "shift": shift},
                "unassign_shift": {"staff": staff, "day": day}, "clear_date": {"day": day}}

    # -- probes -----------------------------------------------------------------------------
    @tool("probe", "Read the {site}'s coverage requirement sheet: the exact number of heads every shift of every "
          "day needs (uses %d turns)." % SHEET_COST, reveals=("demand",), turn_cost=SHEET_COST)
    def tool_get_coverage_sheet(self):
        self._set("sheet_read", 1)
        names = self.p["shift_names"]
        rows = self.db.execute("SELECT day, shift_id, required FROM %s ORDER BY day, shift_id"
                               % self.t["slots"]).fetchall()
        sheet = [{} for _ in range(self.p["horizon"])]
        for day, shift, required in rows:
            sheet[day][names[shift]] = required
        return {"required_heads": [{"day": d, "shifts": sheet[d]} for d in range(self.p["horizon"])],
                "exact": True}

    @tool("probe", "Read a quick forecast of the heads every shift of every day needs: an estimate only, each "
          "figure may be off by one head (each call gives a fresh estimate).", reveals=("demand",), noisy=True)
    def tool_get_demand_forecast(self):
        number = self._get("forecasts")
        self._set("forecasts", number + 1)
        names = self.p["shift_names"]
        estimate = World.forecast(self.p, self.episode_seed, number)
        return {"estimated_heads": [{"day": d, "shifts": dict(zip(names, row))} for d, row in enumerate(estimate)],
                "forecast_number": number, "exact": False,
                "note": "an estimate: each figure may be off by one head; the coverage sheet has the exact numbers"}

    @tool("probe", "Read the wage sheet: every staff member's base wage per shift and every shift's premium, in "
          "{currency}.", reveals=("base_wages", "shift_premiums"))
    def tool_get_wage_sheet(self):
        self._set("wages_read", 1)
        names = self.p["shift_names"]
        staff = self.db.execute("SELECT staff_id, label, base_wage FROM %s ORDER BY staff_id" % self.t["staff"]).fetchall()
        premiums = self.db.execute("SELECT name, premium FROM %s ORDER BY shift_id" % self.t["shifts"]).fetchall()
        return {"base_wages": [{"staff": s, "label": label, "base_wage": w} for s, label, w in staff],
                "shift_premiums": dict(premiums),
                "wage_per_shift": [{"staff": s, "wages": {names[j]: w + premiums[j][1] for j in range(len(names))}}
                                   for s, _, w in staff],
                "currency": self.v["currency"]}

    @tool("probe", "Read one staff member's availability: the shifts they can work on each day.",
          reveals=("availability",), staff=_STAFF)
    def tool_read_availability(self, staff):
        staff = self._staff(staff)
        self.db.execute("UPDATE %s SET availability_read = 1 WHERE staff_id = ?" % self.t["staff"], (staff,))
        names = self.p["shift_names"]
        rows = self.db.execute("SELECT day, shift_id FROM %s WHERE staff_id = ? AND available = 1 ORDER BY day, "
                               "shift_id" % self.t["availability"], (staff,)).fetchall()
        days = [[] for _ in range(self.p["horizon"])]
        for day, shift in rows:
            days[day].append(names[shift])
        return {"staff": staff, "label": World.staff_label(staff),
                "available": [{"day": d, "shifts": days[d]} for d in range(self.p["horizon"])]}

    @tool("probe", "Read the {site}'s work rules: every staff member's limit of shifts over the period, and the rest "
          "rules.", reveals=("max_shifts",))
    def tool_get_work_rules(self):
        rows = self.db.execute("SELECT staff_id, label, max_shifts FROM %s ORDER BY staff_id" % self.t["staff"]).fetchall()
        names = self.p["shift_names"]
        return {"max_shifts": [{"staff": s, "label": label, "max_shifts": m} for s, label, m in rows],
                "rules": ["at most one shift per staff member per day",
                          "no %s shift on the day after a %s shift" % (names[0], names[-1]),
                          "a staff member works at most their max_shifts shifts over the period"]}

    @tool("probe", "Read the shortage terms: the penalty in {currency} for every head a shift is short of its "
          "requirement.", reveals=("shortage_penalty",))
    def tool_get_shortage_terms(self):
        self._set("terms_read", 1)
        return {"penalty_per_uncovered_head": self._get("shortage_penalty"), "currency": self.v["currency"],
                "note": "charged for every head a shift is short of its requirement; extra heads are paid, not credited"}

    # -- observations -------------------------------------------------------------------------
    @tool("observe", "List the staff members with their labels, how many shifts each is rostered for and whether "
          "their availability has been read.")
    def tool_list_staff(self):
        rows = self.db.execute("SELECT staff_id, label, availability_read FROM %s ORDER BY staff_id"
                               % self.t["staff"]).fetchall()
        return {"staff": [{"staff": s, "label": label, "availability_read": bool(read), "shifts_assigned": self._worked(s)}
                          for s, label, read in rows],
                "shifts": self.p["shift_names"], "days": self.p["horizon"]}

    @tool("observe", "Show the whole roster: each staff member's shift (or off) on every day.")
    def tool_view_roster(self):
        return {"roster": self._grid(), "assigned_shifts": self.db.execute(
            "SELECT COUNT(*) FROM %s" % self.t["roster"]).fetchone()[0]}

    @tool("observe", "Show one day (by its number): who works each shift and how many heads (and, once the coverage "
          "sheet is read, how many are required).", day=_DAY)
    def tool_view_date(self, day):
        day = self._day(day)
        names = self.p["shift_names"]
        heads = self._heads()[day]
        sheet = self._get("sheet_read")
        out = []
        for j, name in enumerate(names):
            staff = [row[0] for row in self.db.execute("SELECT staff_id FROM %s WHERE day = ? AND shift_id = ? "
                                                       "ORDER BY staff_id" % self.t["roster"], (day, j))]
            entry = {"shift": j, "name": name, "staff": staff, "heads": heads[j]}
            if sheet:
                entry["required"] = self.p["demand"][day][j]
            out.append(entry)
        return {"day": day, "shifts": out}

    @tool("observe", "Show the heads rostered on every shift of every day (and the shortfall once the coverage sheet "
          "is read).")
    def tool_view_coverage(self):
        names = self.p["shift_names"]
        heads = self._heads()
        sheet = self._get("sheet_read")
        out = []
        for d in range(self.p["horizon"]):
            for j, name in enumerate(names):
                entry = {"day": d, "shift": name, "heads": heads[d][j]}
                if sheet:
                    required = self.p["demand"][d][j]
                    entry["required"] = required
                    entry["short"] = max(0, required - heads[d][j])
                out.append(entry)
        return {"coverage": out, "requirements_known": bool(sheet)}

    @tool("observe", "Show the roster's cost so far in {currency}: the wage bill, the uncovered heads and the "
          "shortage cost (each once the sheet it needs has been read).")
    def tool_view_costs(self):
        wages = self._wage_bill() if self._get("wages_read") else None
        short = self._short_heads() if self._get("sheet_read") else None
        penalty = self._get("shortage_penalty") if self._get("terms_read") else None
        shortage_cost = short * penalty if short is not None and penalty is not None else None
        total = wages + shortage_cost if wages is not None and shortage_cost is not None else None
        return {"wage_bill": wages, "short_heads": short, "shortage_cost": shortage_cost, "total_cost": total,
                "currency": self.v["currency"],
                "note": "a figure is null until the sheet it needs has been read"}

    @tool("observe", "List the most recent assignments, removals and clears.",
          limit=integer(1, 500, "how many entries to list"))
    def tool_view_log(self, limit=20):
        rows = self.db.execute("SELECT entry_id, action, staff_id, day, shift_id FROM %s ORDER BY entry_id DESC LIMIT ?"
                               % self.t["log"], (limit,)).fetchall()
        return {"log": [{"entry": e, "action": a, "staff": s, "day": d, "shift": j} for e, a, s, d, j in rows]}

    # -- decisions --------------------------------------------------------------------------
    @tool("decision", "Put one staff member on one shift of one day (refused if it breaks availability, the shift "
          "limit, one shift a day or the rest rule).", staff=_STAFF, day=_DAY, shift=_SHIFT)
    def tool_assign_shift(self, staff, day, shift):
        self._open()
        staff, day, shift = self._staff(staff), self._day(day), self._shift(shift)
        p, names = self.p, self.p["shift_names"]
        label = World.staff_label(staff)
        current = self._shift_of(staff, day)
        if current is not None:
            raise AgentError("%s (staff %s) already works the %s shift on day %d; unassign first"
                             % (label, self.ref("staff", staff), names[current], day))
        k = p["n_shifts"]
        if shift == 0 and day > 0 and self._shift_of(staff, day - 1) == k - 1:
            raise AgentError("%s (staff %s) works the %s shift of day %d: no %s shift on day %d (rest rule)"
                             % (label, self.ref("staff", staff), names[k - 1], day - 1, names[0], day))
        if shift == k - 1 and day + 1 < p["horizon"] and self._shift_of(staff, day + 1) == 0:
            raise AgentError("%s (staff %s) works the %s shift of day %d: no %s shift on day %d (rest rule)"
                             % (label, self.ref("staff", staff), names[0], day + 1, names[k - 1], day))
        # availability and shift limits are hidden in A: one refusal for both, after the rules the roster shows
        available = self.db.execute("SELECT available FROM %s WHERE staff_id = ? AND day = ? AND shift_id = ?"
                                    % self.t["availability"], (staff, day, shift)).fetchone()[0]
        limit = self.db.execute("SELECT max_shifts FROM %s WHERE staff_id = ?" % self.t["staff"], (staff,)).fetchone()[0]
        if not available or self._worked(staff) >= limit:
            raise AgentError("%s (staff %s) cannot take the %s shift on day %d: they are not available for it or "
                             "have no shifts left under their limit (%s and %s tell which)"
                             % (label, self.ref("staff", staff), names[shift], day, self.name["read_availability"],
                                self.name["get_work_rules"]))
        self.db.execute("INSERT INTO %s VALUES (?, ?, ?)" % self.t["roster"], (staff, day, shift))
        self._log("assign", staff_id=staff, day=day, shift_id=shift)
        return {"assigned": {"staff": staff, "label": label, "day": day, "shift": names[shift]},
                "heads_on_shift": self._heads()[day][shift], "shifts_assigned": self._worked(staff)}

    @tool("decision", "Take one staff member off the shift they work on one day.", staff=_STAFF, day=_DAY)
    def tool_unassign_shift(self, staff, day):
        self._open()
        staff, day = self._staff(staff), self._day(day)
        current = self._shift_of(staff, day)
        if current is None:
            raise AgentError("%s (staff %s) is off on day %d"
                             % (World.staff_label(staff), self.ref("staff", staff), day))
        self.db.execute("DELETE FROM %s WHERE staff_id = ? AND day = ?" % self.t["roster"], (staff, day))
        self._log("unassign", staff_id=staff, day=day, shift_id=current)
        return {"unassigned": {"staff": staff, "day": day, "shift": self.p["shift_names"][current]},
                "shifts_assigned": self._worked(staff)}

    @tool("decision", "Clear one whole day: take every staff member off every shift of that day.", day=_DAY)
    def tool_clear_date(self, day):
        self._open()
        day = self._day(day)
        count = self.db.execute("SELECT COUNT(*) FROM %s WHERE day = ?" % self.t["roster"], (day,)).fetchone()[0]
        if count == 0:
            raise AgentError("nobody is rostered on day %d" % day)
        self.db.execute("DELETE FROM %s WHERE day = ?" % self.t["roster"], (day,))
        self._log("clear day", day=day)
        return {"cleared_day": day, "removed_shifts": count}

    @tool("clock", "Publish the roster: the episode ends and the score is minus its total cost in {currency} (wages "
          "plus shortage penalties).")
    def tool_publish_roster(self):
        self._open()
        self._log("published")
        self._set("published", 1)
        return {"published": True, "assigned_shifts": self.db.execute("SELECT COUNT(*) FROM %s"
                                                                      % self.t["roster"]).fetchone()[0],
                "wage_bill": self._wage_bill(), "short_heads": self._short_heads(), "total_cost": self._total_cost(),
                "currency": self.v["currency"]}

    # -- what the player reads --------------------------------------------------------------
    @staticmethod
    def counted(n, noun, plural):
        """n and its noun in the right number: "1 day", "5 days"."""
        return "%d %s" % (n, noun if n == 1 else plural)

    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        names = p["shift_names"]
        staff = World.counted(p["n_staff"], "staff member", "staff members")
        lines = [
            self.skin["narrative"],
            "",
            "You draw up the %s's staff roster for %s, numbered 0 to %d. There %s %s, numbered %s to %s (%s), "
            "and %d shifts a day, numbered 0 to %d: %s. Each shift of each day needs a number of heads." % (
                v["site"], World.counted(p["horizon"], "day", "days"), p["horizon"] - 1,
                "is" if p["n_staff"] == 1 else "are", staff, self.ref("staff", 0), self.ref("staff", p["n_staff"] - 1),
                ", ".join(World.staff_label(s) for s in range(p["n_staff"])), p["n_shifts"], p["n_shifts"] - 1,
                ", ".join("%d %s" % (j, name) for j, name in enumerate(names))),
            "Rules: a staff member works at most one shift a day, only shifts they are available for, at most "
            "their own limit of shifts over the period, and never the %s shift the day after a %s shift."
            % (names[0], names[-1]),
            "Every shift worked is paid the staff member's base wage plus the shift's premium; every head a shift "
            "is short of its requirement costs a shortage penalty (agency cover); extra heads are paid and do "
            "not help. All amounts are in %s." % v["currency"],
            "Build the roster with %s, %s and %s (a call that breaks a rule is refused); %s ends the episode. "
            "Your score is minus the total cost of the published roster (wages plus shortage penalties)."
            % (n["assign_shift"], n["unassign_shift"], n["clear_date"], n["publish_roster"]),
            "You have %d turns: every tool call the world answers uses its turn cost; when they run out, the roster is "
            "published as it stands." % turn_budget,
        ]
        told = self._theta_lines() if presentation == "I" else self._probe_lines()
        return "\n".join(lines + [""] + told)

    def _theta_lines(self):
        """Presentation I: the penalty, the premiums, the required heads and every staff member's terms."""
        p, names = self.p, self.p["shift_names"]
        lines = ["Shortage penalty: %d %s per uncovered head." % (p["shortage_penalty"], self.v["currency"]),
                 "Shift premiums: %s." % ", ".join("%s %d" % pair for pair in zip(names, p["shift_premiums"])),
                 "Required heads per day (%s):" % ", ".join(names)]
        lines += ["  day %d: %s" % (d, ", ".join(str(x) for x in row)) for d, row in enumerate(p["demand"])]
        lines.append("Staff (base wage; shift limit; available shifts by day, '-' for none):")
        for s in range(p["n_staff"]):
            days = ["%d:%s" % (d, "".join(name[0].upper() for name, free in zip(names, p["availability"][s][d])
                                          if free) or "-") for d in range(p["horizon"])]
            lines.append("  staff %s %s: base wage %d; at most %s; %s" % (
                self.ref("staff", s), World.staff_label(s), p["base_wages"][s],
                World.counted(p["max_shifts"][s], "shift", "shifts"),
                " ".join(days)))
        return lines + ["(letters: %s)" % ", ".join("%s = %s" % (name[0].upper(), name) for name in names)]

    def _probe_lines(self):
        """Presentation A: what is hidden, and the probes that reveal it (the exact sheet's cost and
        the noise of the cheap forecast included)."""
        n = self.name
        return ["The requirements, wages, availability, shift limits and shortage penalty are not given. %s reveals "
                "the exact required heads (it uses %d turns); %s gives a cheaper estimate of them (1 turn, each "
                "figure may be off by one head, and each call draws a fresh estimate); %s reveals the base wages and "
                "shift premiums, %s one staff member's availability, %s the shift limits and %s the shortage "
                "penalty, each at the cost of a turn from the same budget." % (
                    n["get_coverage_sheet"], self.cost.get("get_coverage_sheet", 1), n["get_demand_forecast"],
                    n["get_wage_sheet"], n["read_availability"], n["get_work_rules"], n["get_shortage_terms"])]


register(Family.of(
    globals(),
    name="rostering",
    version="6",
    group="beyond",
    model_class="staff rostering with coverage shortfall (integer program)",
    solver="roster MILP, branch and bound (scipy.optimize.milp, HiGHS)",
    stochastic=False,
))
