"""Uncapacitated facility location: open depots so that every town is served at least cost.

Model
    There are `n_sites` = n candidate depot locations, numbered 0 … n − 1, and
    `n_towns` = m customer towns, numbered 0 … m − 1. Opening depot s costs
    `opening_costs[s]` (a whole number of currency units, paid once); serving town t from depot s
    costs `service_costs[t][s]` (a whole number: the rounded distance times the town's demand).
    A plan is a non-empty set S of open depots; every town is then served by its cheapest open
    depot (ties go to the lowest depot number). Its cost is
        C(S) = Σ_{s∈S} opening_costs[s] + Σ_t min_{s∈S} service_costs[t][s],
    and its utility is −C(S), an integer. The decision process is deterministic: depots are opened
    and closed one at a time in any order, and only the network at the end counts. Solved exactly
    as a mixed-integer program (y ∈ {0,1}^n open flags, x_ts ∈ [0,1] assignments, Σ_s x_ts = 1,
    x_ts ≤ y_s, minimise f·y + c·x) by HiGHS through scipy.optimize.milp with a zero MIP gap; the
    optimum is re-evaluated in integers and checked against the dual bound. Limits: solve() takes
    1 … 8 depots (MAX_SITES) and 1 … 12 towns (MAX_TOWNS) with whole costs ≥ 0; any other θ is
    refused with InvalidParams, never truncated (OR-Library's cap71, 16 depots × 50 towns with
    fractional allocation costs and the optimum 932,615.75, is refused on both counts: see
    docs/INSTANCES.md).

State
    the depot table (opening cost, open flag, whether its cost has been read), the town
    table (whether surveyed), the town-by-depot service-cost table, an action log and a
    state table (whether the network is final).

Tools
    probes, a turn each: read one depot's opening cost (one entry), survey one town (one row: its
    service cost from every depot); decisions: open a depot, close a depot; clock: finalize the
    network (ends the episode); observations: list the depots (with the opening costs read so
    far), view the network (open depots and the total cost if every town uses its cheapest open
    depot), view the town-by-town assignment, view the surveyed towns, view the action log. Depot
    numbers run 0 … n − 1 and town numbers 0 … m − 1 in the schemas (both presentations tell n, m).
    Presentation A hides every opening cost and every service cost; n + m probes (one per depot,
    one per town) reveal all of them. The A instruction states the ranges: an opening cost is
    20 … 30m + 20, a service cost 0 … 705 (demand 1 … 5 times a distance 0 … 141 on the 100 × 100
    map); an entry not read is guessed at the middle of its range (15m + 20, 352). No probe is
    noisy and there are no stickers: the default rule reads the true costs. The budget n + 4 fits
    any network (n openings and the finalization) and three turns more, so after π*'s own |S*| + 1
    turns only n + 3 − |S*| of the n + m probes can be paid for: which towns and depots to look at
    is a choice (A environments are admitted where that binds: `BUDGET_BINDS`). A town not surveyed is, to that guess, equally dear from every depot, so it does
    not sway the choice of depots at all.

Plan
    a 0/1 integer vector of length n_sites: entry k is 1 if depot k is opened (at least one);
    every town is served by its cheapest open depot.

Reward
    utility = −C(S) for the finalized network S (higher is better). The idle plan is depot 0
    alone. r = clip01((u − u_default) / (u* − u_default)), where u_default is the utility of the
    plain rule: open the single depot with the lowest total service cost Σ_t service_costs[t][s]
    (lowest number on ties) plus every depot whose opening cost is strictly below the median
    opening cost.

Advantages
    A potential: every opening and closing can be revised until the network is finalized, so the
    best utility reachable from any unfinished state is u* (the MILP's optimum), and Φ of a
    finalized network is its utility −C(S). The state read from the World is (whether the network
    is final, the open depots). `open_site` and `close_site` have A* = 0; `finalize_network`, and
    running out of turns (the network finalized as it stands, depot 0 alone if none is open),
    have A* = −C(S) − u*; so Σ A* = u − u* on every trajectory, exactly (integers). Turns are
    ignored: with too few turns left to reach S* the true best is lower, but the sum telescopes
    all the same.

Episode end
    after `finalize_network`, or when the turn budget runs out: the network is finalized as it
    stands. If no depot is open at that moment (or when `finalize_network` is called on an empty
    network) the null plan is used: depot 0 alone is opened, so every episode ends with ≥ 1 depot.
"""

from __future__ import annotations


import numpy as np
import scipy
from pydantic import BaseModel

from vhd.mechanisms._advantage import until_committed
from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, exact_milp, integer_mip_bound, solved
from vhd.mechanisms._theta import ThetaCheck

MAX_SITES = 8  # Params, tool schema and solve() bound
MAX_TOWNS = 12  # Params, tool schema and solve() bound
HIDDEN = ("opening_costs", "service_costs")


class Params(BaseModel):
    """Difficulty knobs of a facility-location instance."""

    size: int = knob(5, 3, MAX_SITES, sampled=(5, 8),
                     description="number of candidate depot sites n, in sites; solve() refuses θ with more than "
                                 "MAX_SITES = 8")
    horizon: int = knob(6, 3, MAX_TOWNS, sampled=(4, 12),
                        description="number of customer towns m to serve, in towns; solve() refuses θ with more than "
                                    "MAX_TOWNS = 12")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: depots and towns at integer points of a 100 × 100 map, town demand 1…5,
    service cost = demand × rounded Euclidean distance, opening cost = a uniform base 20…(15 m + 20)
    plus a rent premium round(15 m × min_s' T(s') / T(s)) where T(s) = Σ_t service cost from s
    (central depots are dearer), all integers."""
    n, m = params.size, params.horizon
    sites = rng.integers(0, 101, size=(n, 2))
    towns = rng.integers(0, 101, size=(m, 2))
    demand = rng.integers(1, 6, size=m)
    dist = np.rint(np.sqrt(((towns[:, None, :] - sites[None, :, :]) ** 2).sum(axis=2))).astype(int)
    service = demand[:, None] * dist
    total = service.sum(axis=0)  # a depot's total service cost: low = central
    rent = np.rint(15 * m * (total.min() / np.maximum(total, 1))).astype(int)
    opening = rng.integers(20, 15 * m + 21, size=n) + rent
    return {
        "n_sites": n,
        "n_towns": m,
        "opening_costs": [int(f) for f in opening],
        "service_costs": [[int(c) for c in row] for row in service],
    }


# ---------------------------------------------------------------------------------------------
# Plans: a 0/1 vector over the depots, at least one open.


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … MAX_SITES depots, 1 … MAX_TOWNS
    towns, whole opening and service costs ≥ 0 (fractions are refused, never truncated)."""
    check = ThetaCheck("facility", theta)
    n = check.count("n_sites", 1, MAX_SITES)
    m = check.count("n_towns", 1, MAX_TOWNS)
    check.whole("opening_costs", (n,), low=0)
    check.whole("service_costs", (m, n), low=0)


def _arrays(theta: dict) -> tuple[np.ndarray, np.ndarray]:
    f = np.array(theta["opening_costs"], dtype=np.int64)
    c = np.array(theta["service_costs"], dtype=np.int64).reshape(theta["n_towns"], theta["n_sites"])
    return f, c


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: one integer 0 or 1 per candidate depot."""
    return PlanSpec(shape=(theta["n_sites"],), integer=True, low=0, high=1)


def _check_plan(theta: dict, policy: np.ndarray) -> np.ndarray:
    """The plan as an int64 0/1 vector; ValueError (InvalidPlan) if it is malformed or opens no depot."""
    y = plan_spec(theta).check(policy)
    if not y.any():
        raise ValueError("a plan must open at least one depot")
    return y.astype(np.int64)


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact utility of an open vector: −(opening costs of the open depots + Σ_towns the cheapest
    open depot's service cost)."""
    y = _check_plan(theta, policy)
    f, c = _arrays(theta)
    open_ = np.flatnonzero(y)
    return float(-(int(f[open_].sum()) + int(c[:, open_].min(axis=1).sum())))


def _milp(theta: dict) -> tuple[float, np.ndarray, dict[str, float]]:
    """(u*, π*, the MIP proof) by HiGHS, the optimum re-scored exactly."""
    from scipy.optimize import Bounds, LinearConstraint  # lazily: registry discovery stays fast

    f, c = _arrays(theta)
    n, m = theta["n_sites"], theta["n_towns"]
    # variables: y_0 … y_{n−1}, then x_{t,s} at n + t·n + s
    cost = np.concatenate([f, c.reshape(-1)]).astype(float)
    assign = np.zeros((m, n + m * n))
    link = np.zeros((m * n, n + m * n))
    for t in range(m):
        assign[t, n + t * n: n + (t + 1) * n] = 1.0
        for s in range(n):
            link[t * n + s, n + t * n + s] = 1.0
            link[t * n + s, s] = -1.0
    res = exact_milp(
        c=cost,
        constraints=[LinearConstraint(assign, 1.0, 1.0), LinearConstraint(link, -np.inf, 0.0)],
        integrality=np.concatenate([np.ones(n), np.zeros(m * n)]),
        bounds=Bounds(0, 1),
    )
    y = np.rint(res.x[:n]).astype(np.int8)
    if np.abs(res.x[:n] - y).max() > 1e-6:
        raise ValueError(f"HiGHS returned fractional open flags {res.x[:n].tolist()}")
    value = evaluate(theta, y)  # exact, in integers
    return value, y, integer_mip_bound(res, value)


def solve(theta: dict) -> Solution:
    """u* and π* (the 0/1 open vector, int8) by MILP; values of the default and idle plans.
    InvalidParams first if θ is not of the declared form (`check_theta`)."""
    check_theta(theta)

    found = certified(lambda: _milp(theta), method="uncapacitated facility location MILP, branch and bound "
                                   "(zero MIP gap)",
                      solver="scipy.optimize.milp (HiGHS)", solver_version=scipy.__version__,
                      state_space=2 ** theta["n_sites"] - 1)
    return solved(theta, found, evaluate, default_policy, idle_policy)


# z = (u_default − u_idle) / (u* − u_idle): below −3 the null plan (depot 0 alone) would beat the
# default by three times the room above it (a default that bad teaches nothing); above 0.97 the
# plain rule already nearly solves the instance. About 89% of sampled θ fall inside.
DEFAULT_BAND = (-3.0, 0.97)


def default_policy(theta: dict) -> np.ndarray:
    """Open the single depot with the lowest total service cost Σ_t service_costs[t][s] (lowest
    number on ties), plus every depot whose opening cost is strictly below the median opening cost."""
    f, c = _arrays(theta)
    y = (f < np.median(f)).astype(np.int8)
    y[int(np.argmin(c.sum(axis=0)))] = 1
    return y


def idle_policy(theta: dict) -> np.ndarray:
    """The null plan: depot 0 alone."""
    y = np.zeros(theta["n_sites"], dtype=np.int8)
    y[0] = 1
    return y


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random non-empty set of depots (each of the 2^n − 1 equally likely)."""
    n = theta["n_sites"]
    mask = int(rng.integers(1, 2 ** n))
    return np.array([mask >> s & 1 for s in range(n)], dtype=np.int8)


def boundary_calls(theta: dict, rng: np.random.Generator) -> list[list[dict]]:
    """Near-boundary calls for the reference_agreement gate: each id argument at its first and last
    valid number (town 0 and m − 1, depot 0 and n − 1), a probe twice, a depot opened and closed,
    then the matching observation. (The gate's edge sequences try ids from the largest down, each
    twice, and the turns may run out before they reach id 0.) The rng is not used."""
    first_town, last_town, first_site, last_site = 0, theta["n_towns"] - 1, 0, theta["n_sites"] - 1

    def call(tool, **arguments):
        return {"tool": tool, "arguments": arguments}

    return [
        [call("survey_town", town=first_town), call("survey_town", town=last_town),
         call("survey_town", town=first_town), call("view_surveys")],
        [call("get_site_costs", site=first_site), call("get_site_costs", site=last_site),
         call("get_site_costs", site=first_site), call("list_sites")],
        [call("open_site", site=first_site), call("close_site", site=first_site), call("open_site", site=last_site),
         call("close_site", site=last_site), call("view_network")],
    ]


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play an open vector: open its depots in index order, then finalize. Deterministic (the
    episode seed is accepted and ignored)."""
    y = _check_plan(theta, policy)
    chosen = [int(s) for s in np.flatnonzero(y)]
    calls = [{"tool": "open_site", "arguments": {"site": s}} for s in chosen]
    calls.append({"tool": "finalize_network", "arguments": {}})
    return Episode(utility=evaluate(theta, y), calls=calls, decisions=chosen)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the potential Φ = u* until the network is final (every decision can still be
# revised), then the final network's utility.


decision_values, decision_state, advantage = until_committed(solve)


BUDGET_BINDS = True  # A admits θ only where the budget binds (vhd/tasks/stages/check/budget.py)


def turn_budget(theta: dict) -> int:
    """Open every depot and finalize, and three turns more (n + 4): room for any network (π*'s and
    the default's) and for the depots and towns π*'s choice depends on, but in presentation A not
    for reading every depot and town as well (n + m probes): what to look at is a choice
    (`vhd/tasks/stages/check/budget.py` measures both)."""
    return theta["n_sites"] + 4


# ---------------------------------------------------------------------------------------------
# Presentation A: what the probes show, and the guess for what they did not (the A instruction
# states the ranges): an unread opening cost is the middle of 20 … 30m + 20, an unsurveyed
# town's service cost from every depot the middle of 0 … 705.

SERVICE_GUESS = 352  # the middle of the service costs 0 … 705 the instruction states


def opening_guess(n_towns: int) -> int:
    """The middle of the opening costs 20 … 30m + 20 the instruction states."""
    return 15 * n_towns + 20


def probe_calls(theta: dict) -> list[dict]:
    """Survey the towns in index order, then read the depots' opening costs in index order."""
    return [{"tool": "survey_town", "arguments": {"town": t}} for t in range(theta["n_towns"])] + [
        {"tool": "get_site_costs", "arguments": {"site": s}} for s in range(theta["n_sites"])]


def belief(theta: dict, read: list[dict]) -> dict:
    """θ as known after the probe calls `read`: read entries exact, the others the stated guess."""
    n, m = theta["n_sites"], theta["n_towns"]
    sites = {call["arguments"]["site"] for call in read if call["tool"] == "get_site_costs"}
    towns = {call["arguments"]["town"] for call in read if call["tool"] == "survey_town"}
    opening = [theta["opening_costs"][s] if s in sites else opening_guess(m) for s in range(n)]
    service = [list(theta["service_costs"][t]) if t in towns else [SERVICE_GUESS] * n for t in range(m)]
    return {**theta, "n_sites": n, "n_towns": m, "opening_costs": opening, "service_costs": service}


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


class World(BaseWorld):
    """The site's relational world: depots, towns, service costs, log, state."""

    PARAMS = ("n_sites", "n_towns", "opening_costs", "service_costs")
    STATE = (("final", 0),)
    IDS = {"site": "site", "opened": "site", "closed": "site", "open": "site", "town": "town"}
    # the World's tables and their columns, other tables named by their canonical names
    SCHEMA = (
        ("depots", "site_id INTEGER PRIMARY KEY, opening_cost INTEGER, is_open INTEGER, cost_read INTEGER"),
        ("towns", "town_id INTEGER PRIMARY KEY, surveyed INTEGER"),
        ("service", "town_id INTEGER REFERENCES %(towns)s(town_id), site_id INTEGER REFERENCES %(depots)s(site_id), "
                    "cost INTEGER, PRIMARY KEY (town_id, site_id)"),
        ("log", "entry_id INTEGER PRIMARY KEY, action TEXT, site_id INTEGER"),
    )

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        n, m = params["n_sites"], params["n_towns"]
        if n < 1 or len(params["opening_costs"]) != n or len(params["service_costs"]) != m \
                or any(len(row) != n for row in params["service_costs"]):
            raise ValueError("opening_costs and service_costs do not match n_sites=%r, n_towns=%r" % (n, m))
        t = self.t
        for table, columns in World.SCHEMA:
            db.execute("CREATE TABLE %s (%s)" % (t[table], columns % t))
        db.executemany("INSERT INTO %s VALUES (?, ?, 0, 0)" % t["depots"],
                       [(s, params["opening_costs"][s]) for s in range(n)])
        db.executemany("INSERT INTO %s VALUES (?, 0)" % t["towns"], [(k,) for k in range(m)])
        db.executemany("INSERT INTO %s VALUES (?, ?, ?)" % t["service"],
                       [(k, s, params["service_costs"][k][s]) for k in range(m) for s in range(n)])

    # -- state helpers --------------------------------------------------------------------
    def _site(self, site):
        n = self.p["n_sites"]
        if not 0 <= site < n:
            raise AgentError("there are %d candidate depots, numbered %s to %s; got %s"
                             % (n, self.ref("site", 0), self.ref("site", n - 1), self.ref("site", site)))
        return site

    def _town(self, town):
        m = self.p["n_towns"]
        if not 0 <= town < m:
            raise AgentError("there are %d towns, numbered %s to %s; got %s"
                             % (m, self.ref("town", 0), self.ref("town", m - 1), self.ref("town", town)))
        return town

    def _open(self):
        return [row[0] for row in self.db.execute("SELECT site_id FROM %s WHERE is_open = 1 ORDER BY site_id"
                                                  % self.t["depots"])]

    def _assignment(self):
        """(town, serving depot, cost) per town: its cheapest open depot, lowest number on ties."""
        rows = self.db.execute(
            "SELECT c.town_id, c.site_id, c.cost FROM %s c JOIN %s d ON d.site_id = c.site_id AND d.is_open = 1 "
            "ORDER BY c.town_id, c.cost, c.site_id" % (self.t["service"], self.t["depots"])).fetchall()
        best = {}
        for town, site, cost in rows:
            if town not in best:
                best[town] = (town, site, cost)
        return [best[k] for k in sorted(best)]

    def _cost(self, sites):
        """Total cost of a network with depots `sites` open: their opening costs plus every town's
        service cost from its cheapest depot among them."""
        marks = ", ".join("?" for _ in sites)
        opening = self.db.execute("SELECT COALESCE(SUM(opening_cost), 0) FROM %s WHERE site_id IN (%s)"
                                  % (self.t["depots"], marks), sites).fetchone()[0]
        service = self.db.execute("SELECT COALESCE(SUM(cheapest), 0) FROM (SELECT MIN(cost) AS cheapest FROM %s "
                                  "WHERE site_id IN (%s) GROUP BY town_id)" % (self.t["service"], marks),
                                  sites).fetchone()[0]
        return opening + service

    def _total(self):
        """Total cost of the current network, or None when no depot is open."""
        sites = self._open()
        return self._cost(sites) if sites else None

    def _finalize(self, why):
        if not self._open():  # the null plan: depot 0 alone
            self.db.execute("UPDATE %s SET is_open = 1 WHERE site_id = 0" % self.t["depots"])
            self._log("opened (null plan)", site_id=0)
        self._log(why, site_id=None)
        self._set("final", 1)

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("final") == 1

    def utility(self):
        # before the end with no depot open: what finalizing now would score (the null plan, depot 0 alone)
        return -self._cost(self._open() or [0])

    def run_out(self):
        self._finalize("finalized (turns ran out)")

    def limits(self, presentation):
        """Depot numbers run 0 … n − 1 and town numbers 0 … m − 1 (the instruction tells n and m in
        both presentations)."""
        site, town = {"site": (0, self.p["n_sites"] - 1)}, {"town": (0, self.p["n_towns"] - 1)}
        return {"get_site_costs": site, "open_site": site, "close_site": site, "survey_town": town}

    # -- tools ------------------------------------------------------------------------------
    @tool("probe", "Read the one-off opening cost in {currency} of one candidate depot of the {site}.",
          reveals=("opening_costs",), site=integer(0, MAX_SITES - 1, "the depot"))
    def tool_get_site_costs(self, site):
        site = self._site(site)
        self.db.execute("UPDATE %s SET cost_read = 1 WHERE site_id = ?" % self.t["depots"], (site,))
        f = self.db.execute("SELECT opening_cost FROM %s WHERE site_id = ?" % self.t["depots"], (site,)).fetchone()[0]
        return {"site": site, "opening_cost": f, "currency": self.v["currency"]}

    @tool("probe", "Survey one customer town: the cost in {currency} of serving its demand for {item} from each "
          "candidate depot.", reveals=("service_costs",),
          town=integer(0, MAX_TOWNS - 1, "the town to survey"))
    def tool_survey_town(self, town):
        town = self._town(town)
        self.db.execute("UPDATE %s SET surveyed = 1 WHERE town_id = ?" % self.t["towns"], (town,))
        return {"town": town, "service_costs": self._row(town), "currency": self.v["currency"]}

    @tool("observe", "List the candidate depots, whether each is open and (once read) its opening cost.")
    def tool_list_sites(self):
        rows = self.db.execute("SELECT site_id, opening_cost, is_open, cost_read FROM %s ORDER BY site_id"
                               % self.t["depots"]).fetchall()
        return {"depots": [{"site": s, "is_open": bool(o), "opening_cost": f if read else None}
                           for s, f, o, read in rows], "towns": self.p["n_towns"]}

    def _row(self, town):
        """One town's service costs, depot by depot: [{"site": s, "cost": c}, ...]."""
        return [{"site": s, "cost": c} for s, c in self.db.execute(
            "SELECT site_id, cost FROM %s WHERE town_id = ? ORDER BY site_id" % self.t["service"], (town,))]

    def _surveyed(self):
        return {row[0] for row in self.db.execute("SELECT town_id FROM %s WHERE surveyed = 1" % self.t["towns"])}

    def _all_read(self):
        """Whether the player has read every cost the current network's total sums (presentation A:
        every town surveyed and every open depot's opening cost read); always in I."""
        if self.presentation != "A":
            return True
        unread = self.db.execute("SELECT COUNT(*) FROM %s WHERE is_open = 1 AND cost_read = 0"
                                 % self.t["depots"]).fetchone()[0]
        return unread == 0 and len(self._surveyed()) == self.p["n_towns"]

    @tool("observe", "Show the open depots and the network's total cost in {currency} if every town is served by "
          "its cheapest open depot (once every cost it sums has been read).")
    def tool_view_network(self):
        total = self._total()
        note = "no depot is open" if total is None else "every town uses its cheapest open depot"
        if total is not None and not self._all_read():  # a sum of unread costs would reveal them
            total, note = None, "the total is shown once every town is surveyed and every open depot's cost read"
        return {"open": self._open(), "total_cost": total, "currency": self.v["currency"], "note": note}

    @tool("observe", "Show, town by town, which open depot serves it and at what cost (a town once surveyed).")
    def tool_view_assignment(self):
        served = {town: (site, cost) for town, site, cost in self._assignment()}
        shown = self._surveyed() if self.presentation == "A" else set(served)
        return {"towns": [{"town": k, "site": served[k][0] if k in served and k in shown else None,
                           "cost": served[k][1] if k in served and k in shown else None}
                          for k in range(self.p["n_towns"])]}

    @tool("observe", "List every town surveyed so far with its service costs.")
    def tool_view_surveys(self):
        towns = [row[0] for row in self.db.execute("SELECT town_id FROM %s WHERE surveyed = 1 ORDER BY town_id"
                                                   % self.t["towns"])]
        return {"surveyed": [{"town": k, "service_costs": self._row(k)} for k in towns]}

    @tool("observe", "List the most recent openings, closings and the finalization.",
          limit=integer(1, 500, "how many entries to list"))
    def tool_view_log(self, limit=20):
        rows = self.db.execute("SELECT entry_id, action, site_id FROM %s ORDER BY entry_id DESC LIMIT ?"
                               % self.t["log"], (limit,)).fetchall()
        return {"log": [{"entry": e, "action": a, "site": s} for e, a, s in rows]}

    @tool("decision", "Open one candidate depot (refused if it is already open).",
          site=integer(0, MAX_SITES - 1, "the depot to open"))
    def tool_open_site(self, site):
        site = self._site(site)
        if site in self._open():
            raise AgentError("depot %s is already open" % self.ref("site", site))
        self.db.execute("UPDATE %s SET is_open = 1 WHERE site_id = ?" % self.t["depots"], (site,))
        self._log("open", site_id=site)
        return {"opened": site, "open": self._open()}

    @tool("decision", "Close one open depot (refused if it is not open).",
          site=integer(0, MAX_SITES - 1, "the depot to close"))
    def tool_close_site(self, site):
        site = self._site(site)
        if site not in self._open():
            raise AgentError("depot %s is not open" % self.ref("site", site))
        self.db.execute("UPDATE %s SET is_open = 0 WHERE site_id = ?" % self.t["depots"], (site,))
        self._log("close", site_id=site)
        return {"closed": site, "open": self._open()}

    @tool("clock", "Finalize the network: the episode ends and the score is minus its total cost in {currency} "
          "(the first depot alone if none is open).")
    def tool_finalize_network(self):
        self._finalize("finalized")
        return {"open": self._open(), "total_cost": self._total(), "currency": self.v["currency"]}

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        lines = [
            self.skin["narrative"],
            "",
            "The %s is planning its distribution network for %s: %d candidate depot locations, numbered %s to %s, "
            "and %d customer towns, numbered %s to %s, that must all be served. Opening a depot costs a one-off "
            "opening cost in %s; each town is served by its cheapest open depot at that depot's service cost "
            "for the town." % (v["site"], v["item"], p["n_sites"], self.ref("site", 0),
                               self.ref("site", p["n_sites"] - 1), p["n_towns"], self.ref("town", 0),
                               self.ref("town", p["n_towns"] - 1), v["currency"]),
            "Open and close depots with %s and %s; %s ends the episode. Your score is minus the total cost of the "
            "final network: the opening costs of the open depots plus every town's service cost. Finalizing with "
            "no depot open opens depot %s alone." % (n["open_site"], n["close_site"], n["finalize_network"],
                                            self.ref("site", 0)),
            "You have %d turns: every tool call the world answers uses its turn cost; when they run out, the network "
            "is finalized as it stands." % turn_budget,
        ]
        if presentation == "I":
            lines += ["", "Opening costs (%s): %s." % (v["currency"], ", ".join(
                "depot %s %d" % (self.ref("site", s), f) for s, f in enumerate(p["opening_costs"]))),
                "Service costs (%s), one line per town, depots %s to %s:" % (v["currency"], self.ref("site", 0),
                                                                            self.ref("site", p["n_sites"] - 1))]
            for k in range(p["n_towns"]):
                lines.append("  town %s: %s" % (self.ref("town", k), ", ".join(str(c) for c in p["service_costs"][k])))
        else:
            lines += ["", "The opening and service costs are not given: %s reveals one depot's opening cost and "
                      "%s one town's service cost from every depot, each at the cost of a turn from the same budget. "
                      "Every opening cost is between 20 and %d %s; every service cost is between 0 and 705 %s (the "
                      "town's demand, 1 to 5, times its distance from the depot, 0 to 141 on a 100 by 100 map)."
                      % (n["get_site_costs"], n["survey_town"], 30 * p["n_towns"] + 20, v["currency"], v["currency"])]
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="facility",
    version="7",
    group="probe_budgeted",
    model_class="uncapacitated facility location (mixed-integer program)",
    solver="facility-location MILP, branch and bound (scipy.optimize.milp, HiGHS)",
    stochastic=False,
))
