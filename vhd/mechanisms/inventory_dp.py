"""Inventory DP: one stocked item, stochastic weekday demand, order lead time, a cash ledger.

Model
    A shop stocks one item for `horizon` days in a store of `capacity` units. Each day it may
    order q ≥ 0 units (paying `order_fee` once for any q > 0 and `unit_cost` per unit); the
    order arrives `lead_time` days later (0: before today's demand). Demand on day t is drawn
    from the weekday's distribution `demand_weights[t % 7]` (integer weights over 0, 1, …).
    Unmet demand is lost and costs `shortage_penalty` per unit; stock left at the end of a day
    costs `holding_cost` per unit; stock left after the last day is sold off at
    `salvage_value`. Orders still in transit at the end are lost. Storage counts what is on
    hand, in transit and ordered today: on_hand + in_transit + q ≤ capacity.
    Solved exactly by backward Bellman recursion over (day, on hand, in transit).
    Limits: solve() takes 1 … 365 days, a store of 1 … 40 units, a lead time of 0 … 2 days,
    whole costs ≥ 0, an initial stock within the store and seven weekday demand distributions of
    whole weights ≥ 0 over demand 0 … ≤ MAX_DEMAND = 160 (one length for all); any other θ is refused with
    InvalidParams before anything is allocated (`check_theta`).

State
    day, on hand, the order in transit (lead time 2 only), today's pending order, the cash
    ledger (every payment and sale is a row), order and sales history.

Tools
    probes: cost sheet (prices and costs), demand forecast (weekday distributions), supplier
    terms (lead time); decisions: place an order, cancel today's order; clock: end the day;
    observations: stock, cash, orders, sales history, calendar.

Reward
    utility = cash at the end − cash at the start (sales + salvage − purchases − order fees −
    holding − shortage penalties). r = clip01((u − u_default) / (u* − u_default)) where both
    references are played on the same episode seed (the same demand path).

Advantages
    The solver's state is (day d, on hand i, in transit o): the World's day, on-hand stock and
    in-transit orders at the start of the day (o = yesterday's order with lead time 2, else 0);
    the day's action is the order q committed by `end_day` (today's pending order). `end_day`
    gets A* = Q*_d(s, q) − V*_d(s), with Q* the solver's expectation over the day's demand of
    the day's cash plus V*_{d+1}; placing or cancelling an order only sets q (A* = 0). Running
    out of turns drops today's order and plays the rest with no orders: A* = I_d(s) − V*_d(s),
    I the value of never ordering again (the same recursion with q = 0). Floats, as the solver's.

Episode end
    after the last day's `end_day`, or when the turn budget runs out (the remaining days are
    then played with no new orders and today's pending order is dropped).
"""

from __future__ import annotations

import math
import random

import numpy as np
from pydantic import BaseModel, Field

from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, register, tool
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

WEIGHT_TOTAL = 1000
MAX_DEMAND = 160  # solve() bound: demand_weights cover demand 0 … at most 160 units (4 × the largest store)
COST_FIELDS = ("unit_cost", "price", "holding_cost", "shortage_penalty", "order_fee", "salvage_value")


class Params(BaseModel):
    """Difficulty knobs of an inventory instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = Field(12, ge=3, le=40, description="storage capacity, in units")
    horizon: int = Field(30, ge=3, le=365, description="number of days played")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: costs in whole currency units, weekday demand as integer weights out of 1000."""
    capacity = params.size
    mean = float(rng.uniform(0.15, 0.35)) * capacity
    weekday = rng.uniform(0.6, 1.4, size=7)
    support = int(min(capacity, math.ceil(mean * 1.4 * 2.5) + 1))
    weights = [_poisson_weights(mean * float(m), support) for m in weekday]
    unit_cost = int(rng.integers(2, 10))
    return {
        "horizon": params.horizon,
        "capacity": capacity,
        "lead_time": int(rng.integers(0, 3)),
        "unit_cost": unit_cost,
        "price": unit_cost + int(rng.integers(4, 15)),
        "holding_cost": int(rng.integers(0, 2)),
        "shortage_penalty": int(rng.integers(0, 6)),
        "order_fee": int(rng.integers(5, 25)),
        "salvage_value": int(rng.integers(0, unit_cost)),
        "initial_stock": int(rng.integers(0, capacity // 2 + 1)),
        "initial_cash": 100 * int(rng.integers(5, 50)),
        "demand_weights": weights,
    }


def _poisson_weights(mean: float, support: int) -> list[int]:
    """Poisson(mean) truncated to 0..support as integer weights summing to WEIGHT_TOTAL."""
    k = np.arange(support + 1)
    log_pmf = k * math.log(max(mean, 1e-9)) - mean - np.array([math.lgamma(x + 1) for x in k])
    pmf = np.exp(log_pmf - log_pmf.max())
    raw = np.floor(pmf / pmf.sum() * WEIGHT_TOTAL).astype(int)
    raw[int(np.argmax(pmf))] += WEIGHT_TOTAL - int(raw.sum())
    return [int(x) for x in raw]


# ---------------------------------------------------------------------------------------------
# The decision process as arrays: states (on hand, in transit), state-action pairs, outcomes.


class _Process:
    """Enumerated states and transitions of θ, shared by the solver, evaluator and simulator."""

    def __init__(self, theta: dict):
        self.theta = theta
        cap, lead = theta["capacity"], theta["lead_time"]
        self.states = [(i, o) for i in range(cap + 1) for o in range(cap + 1 - i if lead == 2 else 1)]
        self.index = {s: n for n, s in enumerate(self.states)}
        self.max_order = np.array([cap - i - o for i, o in self.states])
        support = len(theta["demand_weights"][0])
        demand = np.arange(support)
        pair_state, pair_q = [], []
        for n, (i, o) in enumerate(self.states):
            for q in range(cap - i - o + 1):
                pair_state.append(n)
                pair_q.append(q)
        self.pair_state = np.array(pair_state)
        self.pair_q = np.array(pair_q)
        self.pair_index = np.full((len(self.states), cap + 1), -1)
        self.pair_index[self.pair_state, self.pair_q] = np.arange(len(pair_q))
        on_hand = np.array([s[0] for s in self.states])[self.pair_state]
        transit = np.array([s[1] for s in self.states])[self.pair_state]
        q = self.pair_q[:, None]
        available = on_hand[:, None] + (q if lead == 0 else 0)
        sold = np.minimum(available, demand[None, :])
        self.end = available - sold
        self.reward = (
            -theta["order_fee"] * (q > 0)
            - theta["unit_cost"] * q
            + theta["price"] * sold
            - theta["shortage_penalty"] * (demand[None, :] - sold)
            - theta["holding_cost"] * self.end
        ).astype(float)
        if lead == 0:
            next_on_hand, next_transit = self.end, np.zeros_like(self.end)
        elif lead == 1:
            next_on_hand, next_transit = self.end + q, np.zeros_like(self.end)
        else:
            next_on_hand, next_transit = self.end + transit[:, None], np.broadcast_to(q, self.end.shape)
        index = np.full((cap + 1, cap + 1), -1)
        for n, (i, o) in enumerate(self.states):
            index[i, o] = n
        # the storage rule keeps on hand + in transit within capacity, so every successor exists
        self.next_state = index[next_on_hand, next_transit]
        weights = np.array(theta["demand_weights"], dtype=float)
        self.probabilities = weights / weights.sum(axis=1, keepdims=True)  # as World.demand_path draws them

    def q_values(self, day: int, v_next: np.ndarray, pairs=slice(None)) -> np.ndarray:
        """Expected reward-to-go of every state-action pair on `day` (or of the `pairs` given),
        given tomorrow's values."""
        outcome = self.reward[pairs] + v_next[self.next_state[pairs]]
        if day == self.theta["horizon"] - 1:
            outcome = outcome + self.theta["salvage_value"] * self.end[pairs]
        return outcome @ self.probabilities[day % 7]

    def start(self) -> int:
        return self.index[(self.theta["initial_stock"], 0)]


def _backward(proc: _Process) -> tuple[list[np.ndarray], np.ndarray]:
    """V*_d for d = 0 … H (V*_H = 0) and π*, by backward recursion over the state-action pairs."""
    n_states, horizon = len(proc.states), proc.theta["horizon"]
    table = np.zeros((n_states, proc.theta["capacity"] + 1))
    values = [np.zeros(n_states)]
    policy = np.zeros((horizon, n_states), dtype=np.int16)
    for day in range(horizon - 1, -1, -1):
        table.fill(-np.inf)
        table[proc.pair_state, proc.pair_q] = proc.q_values(day, values[-1])
        policy[day] = table.argmax(axis=1)
        values.append(table.max(axis=1))
    return values[::-1], policy


def _bellman(theta: dict) -> tuple[float, np.ndarray]:
    proc = _Process(theta)
    values, policy = _backward(proc)
    return float(values[0][proc.start()]), policy


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … 365 days, a store of 1 … 40 units, a
    lead time of 0 … 2 days, whole costs ≥ 0, an initial stock within the store and seven
    weekday demand distributions of whole weights ≥ 0 over demand 0 … ≤ MAX_DEMAND (one length for all)."""
    check = ThetaCheck("inventory_dp", theta)
    check.count("horizon", 1, 365)
    capacity = check.count("capacity", 1, 40)
    check.whole("lead_time", low=0, high=2)
    for key in COST_FIELDS:
        check.whole(key, low=0)
    check.whole("initial_stock", low=0, high=capacity)
    check.whole("initial_cash", low=0)
    check.whole("demand_weights", (7, None), low=0)
    support = len(theta["demand_weights"][0])
    check.require(support <= MAX_DEMAND + 1 and all(len(w) == support and sum(w) > 0 for w in theta["demand_weights"]),
                  "demand_weights", f"seven lists of one length ≤ {MAX_DEMAND + 1}, each with a positive total weight")


def solve(theta: dict) -> Solution:
    """u* and π* by backward recursion; expected values of the default and idle policies."""
    check_theta(theta)
    proc_size = len(_Process(theta).states) * theta["horizon"]
    found = certified(
        lambda: _bellman(theta),
        method="backward Bellman recursion",
        solver="numpy",
        solver_version=np.__version__,
        state_space=proc_size,
    )
    return solved(theta, found, evaluate, default_policy, idle_policy)


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: [day, start-of-day state] → an order of 0 … what storage allows there."""
    return _spec(_Process(theta))


def _spec(proc: _Process) -> PlanSpec:
    return PlanSpec(shape=(proc.theta["horizon"], len(proc.states)), integer=True, low=0, high=proc.max_order)


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact expected utility of a Markov policy table [day, state] → order quantity (InvalidPlan, a
    ValueError, unless it is of the declared form: an entry −1 is refused, never read from the end)."""
    proc = _Process(theta)
    policy = _spec(proc).check(policy)
    value = np.zeros(len(proc.states))
    for day in range(theta["horizon"] - 1, -1, -1):
        pairs = proc.pair_index[np.arange(len(proc.states)), policy[day]]
        if (pairs < 0).any():
            raise ValueError(f"policy orders beyond capacity on day {day}")
        value = proc.q_values(day, value)[pairs]
    return float(value[proc.start()])


def default_policy(theta: dict) -> np.ndarray:
    """Order up to (lead time + 1) days of mean demand every day, ignoring costs and fees."""
    proc = _Process(theta)
    mean = float(np.mean(proc.probabilities @ np.arange(proc.probabilities.shape[1])))
    level = min(theta["capacity"], math.ceil(mean * (theta["lead_time"] + 1)))
    position = np.array([i + o for i, o in proc.states])
    row = np.clip(level - position, 0, proc.max_order).astype(np.int16)
    return np.tile(row, (theta["horizon"], 1))


def idle_policy(theta: dict) -> np.ndarray:
    """Never order."""
    return np.zeros((theta["horizon"], len(_Process(theta).states)), dtype=np.int16)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random valid order in every (day, state); orders nothing half the time."""
    proc = _Process(theta)
    size = (theta["horizon"], len(proc.states))
    orders = np.floor(rng.random(size) * (proc.max_order[None, :] + 1)).astype(np.int16)
    return np.where(rng.random(size) < 0.5, 0, orders).astype(np.int16)


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a policy table on the episode's demand path; the canonical calls that play it."""
    proc = _Process(theta)
    demands = World.demand_path(theta, episode_seed)
    on_hand, transit, cash = theta["initial_stock"], 0, 0
    calls, decisions = [], []
    lead = theta["lead_time"]
    for day, demand in enumerate(demands):
        q = int(policy[day, proc.index[(on_hand, transit)]])
        decisions.append(q)
        if q > 0:
            calls.append({"tool": "place_order", "arguments": {"quantity": q}})
            cash -= theta["order_fee"] + theta["unit_cost"] * q
        calls.append({"tool": "end_day", "arguments": {}})
        available = on_hand + (q if lead == 0 else 0)
        sold = min(available, demand)
        end = available - sold
        cash += theta["price"] * sold - theta["shortage_penalty"] * (demand - sold) - theta["holding_cost"] * end
        if day == theta["horizon"] - 1:
            cash += theta["salvage_value"] * end
        if lead == 0:
            on_hand, transit = end, 0
        elif lead == 1:
            on_hand, transit = end + q, 0
        else:
            on_hand, transit = end + transit, q
    return Episode(utility=float(cash), calls=calls, decisions=decisions)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the state is (day, on hand, in transit) as the solver indexes it; the day's
# action is the order committed by `end_day`. Q*_d(s, q) is the solver's own `q_values` on V*_{d+1}.


class _Values:
    """What the solver knows of θ: V*_d and the value I_d of never ordering again, d = 0 … H."""

    def __init__(self, theta: dict):
        self.proc = _Process(theta)
        self.optimal, _ = _backward(self.proc)
        self.u_star = float(self.optimal[0][self.proc.start()])
        idle = self.proc.pair_index[np.arange(len(self.proc.states)), 0]  # every state's "order nothing" pair
        self.idle = [np.zeros(len(self.proc.states))]
        for day in range(theta["horizon"] - 1, -1, -1):
            self.idle.append(self.proc.q_values(day, self.idle[-1], idle))
        self.idle.reverse()

    def q(self, day: int, state: tuple[int, int], order: int) -> float:
        pair = self.proc.pair_index[self.proc.index[state], order]
        return float(self.proc.q_values(day, self.optimal[day + 1], [pair])[0])


def decision_values(theta: dict) -> _Values:
    """V*_d and the idle values I_d over every (day, state), by the solver's recursion; u* = V*_0."""
    check_theta(theta)
    return _Values(theta)


def decision_state(theta: dict, world) -> tuple[int, int, int, int]:
    """(day, on hand, in transit, ordered today) as the World has them."""
    return world._get("day"), world._get("on_hand"), world._in_transit(), world._get("pending")


def advantage(theta: dict, values: _Values, before: tuple, call: dict | None, after: tuple) -> float:
    """`end_day`: Q*_d(s, today's order) − V*_d(s); placing or cancelling an order (tentative) 0;
    running out: I_d(s) − V*_d(s) (today's order dropped, no orders on the remaining days)."""
    day, on_hand, transit, pending = before
    if day >= theta["horizon"]:
        return 0.0
    state = (on_hand, transit)
    best = float(values.optimal[day][values.proc.index[state]])
    if call is None:
        return float(values.idle[day][values.proc.index[state]]) - best
    if call["tool"] != "end_day":
        return 0.0
    return values.q(day, state, pending) - best


def turn_budget(theta: dict) -> int:
    """An order and an end of day for every day, plus room for every probe and a few looks."""
    return 2 * theta["horizon"] + 12


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


class World(BaseWorld):
    """The shop's relational world: catalog, orders, ledger, days and a state table."""

    PARAMS = ("horizon", "capacity", "lead_time", "unit_cost", "price", "holding_cost", "shortage_penalty",
              "order_fee", "salvage_value", "initial_stock", "initial_cash", "demand_weights")
    STATE = (("day", 0), ("on_hand", 0), ("pending", 0))  # on_hand: set to initial_stock

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        self.demands = World.demand_path(params, episode_seed)
        t = self.t
        db.execute("CREATE TABLE %s (sku TEXT PRIMARY KEY, name TEXT, unit TEXT, capacity INTEGER)" % t["catalog"])
        db.execute("CREATE TABLE %s (order_id INTEGER PRIMARY KEY, day_placed INTEGER, quantity INTEGER, "
                   "arrives_day INTEGER, status TEXT)" % t["orders"])
        db.execute("CREATE TABLE %s (entry_id INTEGER PRIMARY KEY, day INTEGER, kind TEXT, amount INTEGER)" % t["ledger"])
        db.execute("CREATE TABLE %s (day INTEGER PRIMARY KEY, demand INTEGER, sold INTEGER, lost INTEGER, "
                   "closing_stock INTEGER)" % t["days"])
        db.execute("INSERT INTO %s VALUES (?, ?, ?, ?)" % t["catalog"],
                   (self.v["sku"], self.v["item"], self.v["unit"], params["capacity"]))
        self._set("on_hand", params["initial_stock"])
        self._book(0, "opening balance", params["initial_cash"])

    @staticmethod
    def demand_path(params, episode_seed):
        """The episode's daily demands: integer inverse-CDF draws from random.Random(seed)."""
        rng = random.Random(episode_seed)
        return [World.draw_index(rng, params["demand_weights"][day % 7]) for day in range(params["horizon"])]

    # -- state helpers --------------------------------------------------------------------
    def _book(self, day, kind, amount):
        if amount:
            self.db.execute("INSERT INTO %s (day, kind, amount) VALUES (?, ?, ?)" % self.t["ledger"], (day, kind, amount))

    def _cash(self):
        return self.db.execute("SELECT COALESCE(SUM(amount), 0) FROM %s" % self.t["ledger"]).fetchone()[0]

    def _in_transit(self):
        return self.db.execute("SELECT COALESCE(SUM(quantity), 0) FROM %s WHERE status = 'in transit'"
                               % self.t["orders"]).fetchone()[0]

    def _receive(self, day):
        arriving = self.db.execute("SELECT COALESCE(SUM(quantity), 0) FROM %s WHERE status = 'in transit' "
                                   "AND arrives_day = ?" % self.t["orders"], (day,)).fetchone()[0]
        self.db.execute("UPDATE %s SET status = 'received' WHERE status = 'in transit' AND arrives_day = ?"
                        % self.t["orders"], (day,))
        self._set("on_hand", self._get("on_hand") + arriving)

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("day") >= self.p["horizon"]

    def utility(self):
        return self._cash() - self.p["initial_cash"]

    def run_out(self):
        self._idle_to_end(self.tool_end_day, pending=0)

    # -- tools ------------------------------------------------------------------------------
    @tool("probe", "Read the {site}'s cost sheet for {item}: unit cost, selling price, holding cost, shortage "
          "penalty, order fee and salvage value.",
          reveals=("unit_cost", "price", "holding_cost", "shortage_penalty", "order_fee", "salvage_value"))
    def tool_get_cost_sheet(self):
        return {key: self.p[key] for key in ("unit_cost", "price", "holding_cost", "shortage_penalty",
                                             "order_fee", "salvage_value")}

    @tool("probe", "Read the demand forecast for {item}: the probability of each daily demand, by weekday.",
          reveals=("demand_weights",))
    def tool_get_demand_forecast(self):
        return {"demand_probabilities_by_weekday": [[w / float(sum(row)) for w in row]
                                                    for row in self.p["demand_weights"]],
                "weekday_of_day": "day d has weekday d % 7"}

    @tool("probe", "Read the {supplier}'s terms: delivery lead time in days and the storage capacity.",
          reveals=("lead_time",))
    def tool_get_supplier_terms(self):
        return {"lead_time_days": self.p["lead_time"], "capacity": self.p["capacity"]}

    @tool("observe", "Show {unit} on hand, in transit and ordered today.")
    def tool_view_stock(self):
        return {"on_hand": self._get("on_hand"), "in_transit": self._in_transit(),
                "ordered_today": self._get("pending"), "capacity": self.p["capacity"]}

    @tool("observe", "Show the cash balance of the {site}.")
    def tool_view_cash(self):
        return {"cash": self._cash(), "currency": self.v["currency"]}

    @tool("observe", "List the most recent orders to the {supplier} with their status.",
          limit=integer(1, 365, "how many orders to list"))
    def tool_view_orders(self, limit=10):
        rows = self.db.execute("SELECT order_id, day_placed, quantity, arrives_day, status FROM %s "
                               "ORDER BY order_id DESC LIMIT ?" % self.t["orders"], (limit,)).fetchall()
        keys = ("order_id", "day_placed", "quantity", "arrives_day", "status")
        return {"orders": [dict(zip(keys, row)) for row in rows]}

    @tool("observe", "List demand, sales, lost sales and closing stock of recent days.",
          last_days=integer(1, 365, "how many days back"))
    def tool_view_sales(self, last_days=7):
        rows = self.db.execute("SELECT day, demand, sold, lost, closing_stock FROM %s ORDER BY day DESC LIMIT ?"
                               % self.t["days"], (last_days,)).fetchall()
        keys = ("day", "demand", "sold", "lost", "closing_stock")
        return {"days": [dict(zip(keys, row)) for row in rows]}

    @tool("observe", "Show today's day number, weekday and the days left.")
    def tool_view_calendar(self):
        day = self._get("day")
        return {"day": day, "weekday": day % 7, "days_left": self.p["horizon"] - day}

    @tool("decision", "Order {item} from the {supplier} today (adds to today's order; paid when the day ends).",
          quantity=integer(1, 1000, "number of {unit} to order"))
    def tool_place_order(self, quantity):
        stocked = self._get("on_hand") + self._in_transit() + self._get("pending")
        if stocked + quantity > self.p["capacity"]:
            raise AgentError("storage holds %s: with %d more, on hand, in transit and ordered today would exceed it"
                             % (self._count(self.p["capacity"]), quantity))
        self._set("pending", self._get("pending") + quantity)
        return {"ordered_today": self._get("pending")}

    @tool("decision", "Cancel everything ordered today.")
    def tool_cancel_order(self):
        if self._get("pending") == 0:
            raise AgentError("nothing has been ordered today")
        self._set("pending", 0)
        return {"ordered_today": 0}

    @tool("clock", "Close the day: pay today's order, serve the day's demand, book holding costs and move to the "
          "next day.")
    def tool_end_day(self):
        p, day, quantity = self.p, self._get("day"), self._get("pending")
        if quantity > 0:
            self.db.execute("INSERT INTO %s (day_placed, quantity, arrives_day, status) VALUES (?, ?, ?, 'in transit')"
                            % self.t["orders"], (day, quantity, day + p["lead_time"]))
            self._book(day, "purchase", -p["unit_cost"] * quantity)
            self._book(day, "order fee", -p["order_fee"])
        if p["lead_time"] == 0:
            self._receive(day)
        demand = self.demands[day]
        on_hand = self._get("on_hand")
        sold = min(on_hand, demand)
        closing = on_hand - sold
        self._book(day, "sales", p["price"] * sold)
        self._book(day, "shortage penalty", -p["shortage_penalty"] * (demand - sold))
        self._book(day, "holding", -p["holding_cost"] * closing)
        if day == p["horizon"] - 1:
            self._book(day, "salvage", p["salvage_value"] * closing)
            self.db.execute("UPDATE %s SET status = 'lost' WHERE status = 'in transit'" % self.t["orders"])
        self.db.execute("INSERT INTO %s VALUES (?, ?, ?, ?, ?)" % self.t["days"], (day, demand, sold, demand - sold, closing))
        self._set("on_hand", closing)
        self._set("pending", 0)
        self._set("day", day + 1)
        self._receive(day + 1)  # after the last day nothing is in transit any more (all marked lost above)
        return {"day_closed": day, "demand": demand, "sold": sold, "lost_sales": demand - sold,
                "on_hand": self._get("on_hand"), "cash": self._cash(), "days_left": p["horizon"] - day - 1}

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        lines = [
            self.skin["narrative"],
            "",
            "You manage the %s's stock of %s (%s) for %d days, starting on day 0 with %s on hand and "
            "%d %s in cash." % (v["site"], v["item"], v["sku"], p["horizon"], self._count(p["initial_stock"]),
                                p["initial_cash"], v["currency"]),
            "Each day you may order from the %s with %s (any number of calls; %s undoes today's order), "
            "then close the day with %s: the order is paid, demand arrives, unmet demand is lost." % (
                v["supplier"], n["place_order"], n["cancel_order"], n["end_day"]),
            "Storage holds %s, counting what is on hand, in transit and ordered today. Stock left after "
            "the last day is sold off; orders still in transit then are lost." % self._count(p["capacity"]),
            "Your score is the cash you gain by the end. You have %d turns: every successful tool call uses "
            "its turn cost; when they run out, the remaining days pass with no new orders." % turn_budget,
        ]
        if presentation == "I":
            lines += [
                "",
                "Terms: unit cost %d, selling price %d, holding cost %d per unit left at the end of a day, "
                "penalty %d per unit of unmet demand, fee %d per order, salvage value %d per unit (all in %s)." % (
                    p["unit_cost"], p["price"], p["holding_cost"], p["shortage_penalty"], p["order_fee"],
                    p["salvage_value"], v["currency"]),
                "An order placed on day d arrives at the start of day d + %d%s." % (
                    p["lead_time"], " (before that day's demand)" if p["lead_time"] == 0 else ""),
                "Daily demand by weekday (day d has weekday d %% 7), probability of 0, 1, 2, … %s:" % v["unit"],
            ]
            for weekday, row in enumerate(p["demand_weights"]):
                lines.append("  weekday %d: %s" % (weekday, ", ".join("%.3f" % (w / float(sum(row))) for w in row)))
        else:
            hidden = "Prices and costs, the %s's lead time and the demand forecast" % v["supplier"]
            lines += ["", self._not_given(hidden, ("get_cost_sheet", "get_supplier_terms", "get_demand_forecast"))]
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="inventory_dp",
    version="5",
    group="train",
    model_class="finite-horizon stochastic MDP",
    solver="backward Bellman recursion (numpy)",
    hidden=("lead_time",) + COST_FIELDS + ("demand_weights",),
    # z = (u0 − u_idle) / (u* − u_idle): below −1 the idle policy would score over 0.5 (trivial);
    # above 0.95 the default is already near-optimal (no room to learn)
    default_band=(-1.0, 0.95),
    knob_ranges={"size": (4, 30), "horizon": (7, 120)},
    plan_format=(
        'an integer table of shape [horizon, S]: row d is day d, column s a start-of-day state; with '
        "lead_time 0 or 1 state s is 'on hand = s' (S = capacity + 1); with lead_time 2 the states are the "
        'pairs (on hand i, in transit o) with i + o ≤ capacity in lexicographic order (i ascending, then o). '
        'Entry [d, s] is the quantity ordered that day in that state, 0 … capacity − i − o.'
    ),
    tables=("catalog", "orders", "ledger", "days", "state"),
    vocabulary=("site", "item", "sku", "unit", "supplier", "currency"),
))
