"""Inventory DP: one stocked item, stochastic weekday demand, order lead time, a cash ledger.

Model
    A shop stocks one item for `horizon` days in a store of `capacity` units. Each day it may
    order q ≥ 0 units (paying `order_fee` once for any q > 0 and `unit_cost` per unit); the
    order arrives `lead_time` days later (0: before today's demand). Demand on day t is drawn
    from the weekday's distribution `demand_weights[t % 7]` (integer weights over 0, 1, …).
    Unmet demand is lost and costs `shortage_penalty` per unit; stock left at the end of a day
    costs `holding_cost` per unit; stock left after the last day is sold off at
    `salvage_value`. Orders still in transit at the end are lost. Storage counts what is on
    hand, in transit and ordered today: on_hand + in_transit + q ≤ capacity. A forecast sticker
    `demand_forecast` gives each weekday's mean demand times an error factor drawn uniformly in
    0.3 … 1.7 (STICKER_ERROR; both instructions show it and state its error).
    Solved exactly by backward Bellman recursion over (day, on hand, in transit).
    Limits: solve() takes 1 … 365 days, a store of 1 … 40 units, a lead time of 0 … 2 days,
    whole costs ≥ 0, an initial stock within the store and seven weekday demand distributions of
    whole weights ≥ 0 over demand 0 … ≤ MAX_DEMAND = 160 (one length for all); any other θ is refused with
    InvalidParams before anything is allocated (`check_theta`).

State
    day, on hand, the order in transit (lead time 2 only), today's pending order, the cash
    ledger (every payment and sale is a row) and its balance (kept with every entry: no call sums
    the ledger), order and sales history (the orders in transit indexed: no call reads every order).

Tools
    probes, a turn each: supplier terms (the lead time), one line of the cost sheet (one of the six
    prices and costs), one entry of the demand forecast (the probability of one daily demand on one
    weekday); decisions: place an order, cancel today's order; clock: end the day; observations:
    stock, cash, orders, sales history, calendar. Order quantities are bounded by the storage,
    demand entries by the largest demand, history lengths by the horizon (`World.limits`).
    Presentation A hides the lead time, the six costs and the demand distributions (not their
    size: demand is 0 … capacity); the instruction states the ranges they are drawn from and the
    sticker's error, and the stated guesses (`belief`) are the lead time 1, the ranges' middles and
    Poisson counts around the sticker's means. The budget (2 · horizon + 2) affords every order and
    close, and π* leaves the days it does not order for probing: in A never enough to read all
    1 + 6 + 7 · (capacity + 1) probes. The supplier's terms come first in `probe_calls`: the lead
    time shapes the plan (the states include the pipeline).

Plan
    an integer table of shape [horizon, S]: row d is day d, column s a start-of-day state; with
    lead_time 0 or 1 state s is 'on hand = s' (S = capacity + 1); with lead_time 2 the states
    are the pairs (on hand i, in transit o) with i + o ≤ capacity in lexicographic order (i
    ascending, then o). Entry [d, s] is the quantity ordered that day in that state, 0 …
    capacity − i − o.

Reward
    utility = cash at the end − cash at the start (sales + salvage − purchases − order fees −
    holding − shortage penalties). r = clip01((u − u_default) / (u* − u_default)) where both
    references are played on the same episode seed (the same demand path); the default orders up
    to the sticker's mean demand over the lead time, so u_default reflects being misled by it.

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
from pydantic import BaseModel

from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

WEIGHT_TOTAL = 1000
MAX_DEMAND = 160  # solve() bound: demand_weights cover demand 0 … at most 160 units (4 × the largest store)
COST_FIELDS = ("unit_cost", "price", "holding_cost", "shortage_penalty", "order_fee", "salvage_value")
STICKER_ERROR = 0.7  # the forecast sticker's weekday means are off by a factor in 0.3 … 1.7 (the A instruction says so)


class Params(BaseModel):
    """Difficulty knobs of an inventory instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = knob(12, 3, 40, sampled=(4, 30), description="storage capacity, in units")
    horizon: int = knob(30, 3, 365, sampled=(7, 120), description="number of days played")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: costs in whole currency units, weekday demand as integer weights out of 1000 over
    0 … capacity (a truncated Poisson count around each weekday's mean), and the forecast sticker:
    each weekday's mean demand times an error factor uniform in 1 ± STICKER_ERROR, to 0.1 unit."""
    capacity = params.size
    mean = float(rng.uniform(0.15, 0.35)) * capacity
    weekday = rng.uniform(0.6, 1.4, size=7)
    weights = [_poisson_weights(mean * float(m), capacity) for m in weekday]  # demand 0 … capacity
    unit_cost = int(rng.integers(2, 10))
    theta = {
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
    errors = rng.uniform(1 - STICKER_ERROR, 1 + STICKER_ERROR, size=7)
    theta["demand_forecast"] = [round(_mean_demand(row) * float(e), 1) for row, e in zip(weights, errors)]
    return theta


def _mean_demand(row: list[int]) -> float:
    """The mean of a weekday's demand distribution (integer weights over 0, 1, …)."""
    return sum(d * w for d, w in enumerate(row)) / sum(row)


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
    weekday demand distributions of whole weights ≥ 0 over demand 0 … ≤ MAX_DEMAND (one length for all)
    and a forecast sticker of seven mean demands ≥ 0."""
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
    check.real("demand_forecast", (7,), low=0)


def solve(theta: dict) -> Solution:
    """u* and π* by backward recursion; expected values of the default and idle policies."""
    check_theta(theta)
    proc_size = len(_Process(theta).states) * theta["horizon"]
    found = certified(lambda: _bellman(theta), method="backward Bellman recursion", state_space=proc_size)
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


# z = (u0 − u_idle) / (u* − u_idle): below −1 the idle policy would score over 0.5 (trivial);
# above 0.95 the default is already near-optimal (no room to learn)
DEFAULT_BAND = (-1.0, 0.95)


def default_policy(theta: dict) -> np.ndarray:
    """Order up to (lead time + 1) days of mean demand every day, the mean as the forecast sticker
    has it (the average of its seven weekday means, which may be 30 % off), ignoring costs and fees."""
    proc = _Process(theta)
    tenths = sum(round(10 * m) for m in theta["demand_forecast"])  # 7 × the mean, in tenths of a unit
    level = min(theta["capacity"], -(-tenths * (theta["lead_time"] + 1) // 70))
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
        self._q: dict[tuple[int, tuple[int, int], int], float] = {}

    def q(self, day: int, state: tuple[int, int], order: int) -> float:
        """Q*_d(s, q) by the solver's `q_values`, kept per (day, state, order): the episodes of one
        θ pass through the same states again and again."""
        key = (day, state, order)
        found = self._q.get(key)
        if found is None:
            pair = self.proc.pair_index[self.proc.index[state], order]
            found = self._q[key] = float(self.proc.q_values(day, self.optimal[day + 1], [pair])[0])
        return found


def decision_values(theta: dict) -> _Values:
    """V*_d and the idle values I_d over every (day, state), by the solver's recursion; u* = V*_0."""
    check_theta(theta)
    return _Values(theta)


def decision_state(theta: dict, world) -> tuple[int, int, int, int]:
    """(day, on hand, in transit, ordered today) as the World has them."""
    return world._read("day", "on_hand", "in_transit", "pending")


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
    """An order and a close for every day (the most any play needs: the default orders most days),
    and two turns more. π* skips ordering on some days, which leaves turns to probe, but never
    enough in presentation A to read the lead time, the six cost lines and every entry of the
    demand forecast as well: what to read is a choice."""
    return 2 * theta["horizon"] + 2


# ---------------------------------------------------------------------------------------------
# Presentation A: what the probes show, and the guess for what they did not (the A instruction
# states the ranges the generator draws from and the sticker's error): the lead time 1 day, each
# cost the middle of its range, and each weekday's unread demand entries the probability the read
# ones leave, shared as a Poisson count around the sticker's mean would share it.

LEAD_GUESS = 1  # the middle of the lead times 0 … 2


def _cost_guess(known: dict) -> dict:
    """The stated ranges' middles (rounded down): unit cost 2 … 9, price 4 … 14 above the unit
    cost, holding cost 0 … 1, shortage penalty 0 … 5, order fee 5 … 24, salvage value below the
    unit cost."""
    unit = known.get("unit_cost", 5)
    return {"unit_cost": 5, "price": unit + 9, "holding_cost": 0, "shortage_penalty": 2, "order_fee": 14,
            "salvage_value": (unit - 1) // 2}


def probe_calls(theta: dict) -> list[dict]:
    """The supplier's terms first (the lead time shapes the plan: the states include the pipeline,
    so a plan for a guessed lead time does not fit a world of another), then the cost sheet line by
    line, then the demand forecast entry by entry, weekday by weekday."""
    support = len(theta["demand_weights"][0])
    return ([{"tool": "get_supplier_terms", "arguments": {}}]
            + [{"tool": "get_cost_sheet", "arguments": {"line": line}} for line in range(len(COST_FIELDS))]
            + [{"tool": "get_demand_forecast", "arguments": {"weekday": weekday, "demand": demand}}
               for weekday in range(7) for demand in range(support)])


def belief(theta: dict, read: list[dict]) -> dict:
    """θ as known after the probe calls `read`: what they showed exact, the rest the stated guess."""
    tools = {call["tool"] for call in read}
    lines = {COST_FIELDS[call["arguments"]["line"]] for call in read if call["tool"] == "get_cost_sheet"}
    known = {key: theta[key] for key in lines}
    costs = {key: known.get(key, guess) for key, guess in _cost_guess(known).items()}
    seen = {(call["arguments"]["weekday"], call["arguments"]["demand"]) for call in read
            if call["tool"] == "get_demand_forecast"}
    weights = [_demand_guess(row, {d for w, d in seen if w == weekday}, theta["demand_forecast"][weekday])
               for weekday, row in enumerate(theta["demand_weights"])]
    lead = theta["lead_time"] if "get_supplier_terms" in tools else LEAD_GUESS
    return {**theta, **costs, "lead_time": lead, "demand_weights": weights}


def _demand_guess(row: list[int], seen: set[int], mean: float) -> list[int]:
    """A weekday's weights out of WEIGHT_TOTAL: the entries `seen` as read, the others sharing what
    they leave in proportion to a Poisson count of the sticker's `mean` (the rounding remainder to
    the likeliest)."""
    guess = [row[d] if d in seen else 0 for d in range(len(row))]
    unread = [d for d in range(len(row)) if d not in seen]
    if not unread:
        return guess
    share = _poisson_weights(mean, len(row) - 1)
    left, total = max(WEIGHT_TOTAL - sum(guess), 0), sum(share[d] for d in unread)
    for d in unread:
        guess[d] = left * share[d] // total if total else left // len(unread)
    guess[max(unread, key=lambda d: share[d])] += left - sum(guess[d] for d in unread)
    return guess


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


TABLES = ("catalog", "orders", "ledger", "days", "state")


class World(BaseWorld):
    """The shop's relational world: catalog, orders, ledger, days and a state table."""

    PARAMS = ("horizon", "capacity", "lead_time", "unit_cost", "price", "holding_cost", "shortage_penalty",
              "order_fee", "salvage_value", "initial_stock", "initial_cash", "demand_weights", "demand_forecast")
    COSTS = (("unit_cost", "unit cost"), ("price", "selling price"), ("holding_cost", "holding cost per unit left at "
             "the end of a day"), ("shortage_penalty", "penalty per unit of unmet demand"), ("order_fee", "fee per order"),
             ("salvage_value", "salvage value per unit left after the last day"))  # the cost sheet's lines, in order
    # on_hand: set to initial_stock; cash: the ledger's sum; in_transit: the units of the orders in transit
    STATE = (("day", 0), ("on_hand", 0), ("pending", 0), ("cash", 0), ("in_transit", 0))

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        self.demands = World.demand_path(params, episode_seed)
        self._reads = {}  # the queries of `_read`, by number of keys
        t = self.t
        db.execute("CREATE TABLE %s (sku TEXT PRIMARY KEY, name TEXT, unit TEXT, capacity INTEGER)" % t["catalog"])
        db.execute("CREATE TABLE %s (order_id INTEGER PRIMARY KEY, day_placed INTEGER, quantity INTEGER, "
                   "arrives_day INTEGER, status TEXT)" % t["orders"])
        db.execute("CREATE INDEX %s_arriving ON %s (status, arrives_day)" % (t["orders"], t["orders"]))
        db.execute("CREATE TABLE %s (entry_id INTEGER PRIMARY KEY, day INTEGER, kind TEXT, amount INTEGER)" % t["ledger"])
        db.execute("CREATE TABLE %s (day INTEGER PRIMARY KEY, demand INTEGER, sold INTEGER, lost INTEGER, "
                   "closing_stock INTEGER)" % t["days"])
        db.execute("INSERT INTO %s VALUES (?, ?, ?, ?)" % t["catalog"],
                   (self.v["sku"], self.v["item"], self.v["unit"], params["capacity"]))
        self._set("on_hand", params["initial_stock"])
        self._set("cash", self._book(0, ("opening balance", params["initial_cash"])))

    @staticmethod
    def demand_path(params, episode_seed):
        """The episode's daily demands: integer inverse-CDF draws from random.Random(seed)."""
        rng = random.Random(episode_seed)
        return [World.draw_index(rng, params["demand_weights"][day % 7]) for day in range(params["horizon"])]

    # -- state helpers --------------------------------------------------------------------
    def _read(self, *keys):
        """Values of the state table, in the order of `keys` (one query, made once per number of keys)."""
        query = self._reads.get(len(keys))
        if query is None:
            query = self._reads[len(keys)] = "SELECT " + ", ".join(
                ["(SELECT value FROM %s WHERE key = ?)" % self.t["state"]] * len(keys))
        return self.db.execute(query, keys).fetchone()

    def _write(self, keys, before, after):
        """Set the state `keys` whose values changed from `before` to `after` (one statement)."""
        self.db.executemany("UPDATE %s SET value = ? WHERE key = ?" % self.t["state"],
                            [(new, key) for key, old, new in zip(keys, before, after) if new != old])

    def _book(self, day, *entries):
        """Enter (kind, amount) rows in the ledger (an amount of 0 is not entered); returns their sum,
        which the caller adds to the state's cash (the ledger's balance, never summed from its rows)."""
        rows = [(day, kind, amount) for kind, amount in entries if amount]
        self.db.executemany("INSERT INTO %s (day, kind, amount) VALUES (?, ?, ?)" % self.t["ledger"], rows)
        return sum(row[2] for row in rows)

    def _cash(self):
        return self._get("cash")

    def _in_transit(self):
        return self._get("in_transit")

    def _receive(self, day, in_transit):
        """Mark the orders arriving on `day` received (`in_transit`: the units in transit before);
        how many units they bring."""
        if not in_transit:
            return 0
        arriving = self.db.execute("SELECT COALESCE(SUM(quantity), 0) FROM %s WHERE status = 'in transit' "
                                   "AND arrives_day = ?" % self.t["orders"], (day,)).fetchone()[0]
        if arriving:  # every order is of one unit or more: none arrives when nothing does
            self.db.execute("UPDATE %s SET status = 'received' WHERE status = 'in transit' AND arrives_day = ?"
                            % self.t["orders"], (day,))
        return arriving

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("day") >= self.p["horizon"]

    def utility(self):
        return self._cash() - self.p["initial_cash"]

    def run_out(self):
        self._idle_to_end(self.tool_end_day, pending=0)

    # -- tools ------------------------------------------------------------------------------
    @tool("probe", "Read one line of the {site}'s cost sheet for {item}: 0 unit cost, 1 selling price, 2 holding "
          "cost, 3 shortage penalty, 4 order fee, 5 salvage value.", reveals=COST_FIELDS,
          line=integer(0, len(COST_FIELDS) - 1, "the line: 0 unit cost, 1 selling price, 2 holding cost, 3 shortage "
                                                "penalty, 4 order fee, 5 salvage value"))
    def tool_get_cost_sheet(self, line):
        key, term = World.COSTS[line]
        return {"line": line, "term": term, "amount": self.p[key], "currency": self.v["currency"]}

    @tool("probe", "Read one entry of the demand forecast for {item}: the probability that the demand of a weekday "
          "is exactly a given number of {unit}.", reveals=("demand_weights",),
          weekday=integer(0, 6, "the weekday, 0 … 6 (day d has weekday d % 7)"),
          demand=integer(0, MAX_DEMAND, "the daily demand, in {unit}"))
    def tool_get_demand_forecast(self, weekday, demand):
        row = self.p["demand_weights"][weekday]
        return {"weekday": weekday, "demand": demand,
                "probability": row[demand] / float(sum(row)) if demand < len(row) else 0.0}

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
        on_hand, in_transit, pending = self._read("on_hand", "in_transit", "pending")
        if on_hand + in_transit + pending + quantity > self.p["capacity"]:
            raise AgentError("storage holds %s: with %d more, on hand, in transit and ordered today would exceed it"
                             % (self._count(self.p["capacity"]), quantity))
        self._set("pending", pending + quantity)
        return {"ordered_today": pending + quantity}

    @tool("decision", "Cancel everything ordered today.")
    def tool_cancel_order(self):
        if self._get("pending") == 0:
            raise AgentError("nothing has been ordered today")
        self._set("pending", 0)
        return {"ordered_today": 0}

    @tool("clock", "Close the day: pay today's order, serve the day's demand, book holding costs and move to the "
          "next day.")
    def tool_end_day(self):
        p = self.p
        keys = ("day", "pending", "on_hand", "cash", "in_transit")
        before = self._read(*keys)
        day, quantity, on_hand, cash, in_transit = before
        entries = []
        if quantity > 0:
            self.db.execute("INSERT INTO %s (day_placed, quantity, arrives_day, status) VALUES (?, ?, ?, 'in transit')"
                            % self.t["orders"], (day, quantity, day + p["lead_time"]))
            entries += [("purchase", -p["unit_cost"] * quantity), ("order fee", -p["order_fee"])]
            in_transit += quantity
        if p["lead_time"] == 0:
            arriving = self._receive(day, in_transit)
            on_hand, in_transit = on_hand + arriving, in_transit - arriving
        demand = self.demands[day]
        sold = min(on_hand, demand)
        closing = on_hand - sold
        entries += [("sales", p["price"] * sold), ("shortage penalty", -p["shortage_penalty"] * (demand - sold)),
                    ("holding", -p["holding_cost"] * closing)]
        if day == p["horizon"] - 1:
            entries.append(("salvage", p["salvage_value"] * closing))
            if in_transit:
                self.db.execute("UPDATE %s SET status = 'lost' WHERE status = 'in transit'" % self.t["orders"])
            in_transit = 0
        cash += self._book(day, *entries)
        self.db.execute("INSERT INTO %s VALUES (?, ?, ?, ?, ?)" % self.t["days"], (day, demand, sold, demand - sold, closing))
        arriving = self._receive(day + 1, in_transit)  # after the last day nothing is in transit (all lost above)
        on_hand, in_transit = closing + arriving, in_transit - arriving
        self._write(keys, before, (day + 1, 0, on_hand, cash, in_transit))
        return {"day_closed": day, "demand": demand, "sold": sold, "lost_sales": demand - sold,
                "on_hand": on_hand, "cash": cash, "days_left": p["horizon"] - day - 1}

    def limits(self, presentation):
        """Orders up to the storage, demand entries up to the largest demand, days up to the horizon
        (the instruction tells all three in both presentations)."""
        days = (1, self.p["horizon"])
        return {"place_order": {"quantity": (1, self.p["capacity"])},
                "get_demand_forecast": {"demand": (0, len(self.p["demand_weights"][0]) - 1)},
                "view_orders": {"limit": days}, "view_sales": {"last_days": days}}

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
            "Your score is the cash you gain by the end. You have %d turns: every tool call the world answers uses "
            "its turn cost; when they run out, the remaining days pass with no new orders." % turn_budget,
            "The forecast sticker gives the mean daily demand of each weekday, from weekday 0 to 6 (day d has "
            "weekday d %% 7; each mean may be up to 70 %% off, either way): %s %s." % (  # 70 %: STICKER_ERROR
                ", ".join("%.1f" % m for m in p["demand_forecast"]), v["unit"]),
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
            lines += ["", "Prices and costs, the %s's lead time and the exact demand forecast are not given: %s "
                      "reveals the lead time, %s one line of the cost sheet and %s one entry of the demand forecast "
                      "(the probability of one daily demand on one weekday), each at the cost of a turn from the "
                      "same budget." % (v["supplier"], n["get_supplier_terms"], n["get_cost_sheet"],
                                        n["get_demand_forecast"]),
                      "What is known: the lead time is 0, 1 or 2 days; the unit cost is 2 to 9 %s, the price 4 to "
                      "14 above it, the holding cost 0 or 1, the shortage penalty 0 to 5, the order fee 5 to 24 and "
                      "the salvage value below the unit cost (all whole %s); the daily demand of a weekday is 0 to "
                      "%d %s, spread around its mean like a Poisson count." % (
                          v["currency"], v["currency"], len(p["demand_weights"][0]) - 1, v["unit"])]
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="inventory_dp",
    version="7",
    group="train",
    model_class="finite-horizon stochastic MDP",
    solver="backward Bellman recursion (numpy)",
    stochastic=True,
    hidden=("lead_time",) + COST_FIELDS + ("demand_weights",),
))
