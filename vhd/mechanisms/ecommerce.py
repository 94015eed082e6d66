"""E-commerce store: a year of daily prices, advertising, reorders and a cash account that can go bankrupt.

Model
    An online store sells one item for `horizon` = H days, numbered 0 … H − 1, from a warehouse
    that holds `capacity` = C units. All money is in whole (coarse) currency units. The day
    opens with stock s (0 … C) and cash c (0 … `cash_cap` = K); day 0 opens with
    `initial_stock` and `initial_cash` (≤ K). Each day the store
      1. may reorder q ≥ 0 units, paying `order_fee` once for any q > 0 plus `unit_cost` per
         unit; the order must fit the warehouse (s + q ≤ C) and be paid from today's cash
         ((q > 0)·order_fee + unit_cost·q ≤ c). With `lead_time` 0 the units arrive before
         today's sales; with `lead_time` 1 they arrive the next morning (so at the start of a
         day nothing is in transit);
      2. sells at price level p ∈ {0, 1, 2} (low, middle, high), at `price_levels[p]` per unit,
         and advertises at level a ∈ {0, 1, 2} (none, low, high), at `ad_costs[a]` for the day
         (ad_costs[0] = 0);
      3. faces demand D drawn from the integer weights `demand_weights[k][p][a]` (probability of
         D = d is weight d / Σ weights; d = 0 … n − 1, one n for every list), where k is the
         day's traffic level k(t) = min(2, weekday_boost[t % 7] + [peak_start ≤ t < peak_end])
         (0 normal, 1 busy, 2 rush: boosted weekdays and the peak season add one level each);
      4. sells min(x, D) of the x units available (x = s + q with lead time 0, x = s with lead
         time 1); unmet demand is lost. Left-over stock l = x − min(x, D) costs `holding_cost`
         per unit and the store pays `overhead` every day. Cash at the end of the day is
           e = c − (q > 0)·order_fee − unit_cost·q − ad_costs[a] − overhead − holding_cost·l
               + price_levels[p]·min(x, D).
    Bankruptcy: if e < 0 the episode ends at once and the utility is owner + e − initial_cash −
    `bankruptcy_penalty` (owner = the owner's account so far; no later days are played).
    Sweep: otherwise any cash above the cap, max(0, e − K), is transferred to the owner's
    account that night and the next day opens with cash min(e, K) and stock l (lead time 0) or
    l + q (lead time 1). The sweep is a rule of the store, not an approximation: money swept out
    still counts in the utility and merely cannot pay later orders, so the bounded cash state
    0 … K describes every outcome exactly. Stock left after the last day is worthless. Without
    bankruptcy the utility is owner's account + final cash − initial_cash.
    Randomness: day t's demand comes from one ticket r_t of `random.Random(episode_seed)`
    (r_t = randrange(2^30), drawn for every day in order, whatever the decisions); with the
    day's weights w (total W) the position j = r_t·W // 2^30 picks the d with w_0 + … + w_{d−1}
    ≤ j < w_0 + … + w_d. The whole decision process lives on (day, stock, cash), so it is
    solved exactly by backward Bellman recursion: V_H(s, c) = c,
    V_t(s, c) = max over feasible (q, p, a) of E[outcome], outcome = e − bankruptcy_penalty if
    e < 0 else max(0, e − K) + V_{t+1}(s', min(e, K)); u* = V_0(initial_stock, initial_cash) −
    initial_cash. Ties go to the smallest q, then the lowest p, then the lowest a.
    Limits: solve() takes 1 … 365 days, a warehouse of 1 … 16 units and a cash cap of 0 …
    MAX_CASH_CAP = 400 (the cash is a state of the recursion), with whole money amounts ≥ 0 (a
    unit cost ≥ 1; prices, costs, fees and overhead ≤ MAX_CASH_CAP, since a day's cash change
    spans the recursion's end-of-day cash axis) and states within their ranges; any other θ is
    refused with InvalidParams before anything is allocated (`check_theta`).

State
    day, stock on hand and on order, cash (the ledger: opening balance, purchases, fees,
    sales, advertising, overhead, holding, transfers to the owner), the owner's account, the
    storefront settings (price level, ad level; they stay until changed; the store opens at
    the middle price without ads), today's pending order, order, sales and campaign history,
    whether the store is bankrupt, how many market estimates were drawn.

Tools
    probes: price list, supplier terms (unit cost, order fee, lead time), cost sheet
    (holding, overhead), ad rates, traffic calendar (boosted weekdays, peak season), demand
    forecast (exact distributions, 2 turns) and a demand estimate (a noisy estimate of the
    mean demands, 1 turn, fresh noise each call); decisions: set price level, set ad level,
    place an order, cancel today's order; clock: close the day; observations: stock, cash,
    storefront, calendar, orders, sales, ledger. The tool schemas are fitted to the instance: an
    order is at most the warehouse capacity (in I also at most what the cash cap can pay, fee
    included: (cash_cap − order_fee) // unit_cost; A does not tell the fee or the unit cost), and
    the order and sales listings stop at H rows (at most one order and one sales row a day).

Plan
    an integer array of shape [horizon, capacity + 1, cash_cap + 1, 3]: entry [d, s, c] is the
    plan for day d when it opens with s units in stock and cash c, as (order quantity q, price
    level 0–2 indexing price_levels, ad level 0–2 indexing ad_costs), where q ≥ 0, s + q ≤
    capacity and (q > 0)·order_fee + unit_cost·q ≤ c.

Reward
    utility = owner's account + final cash − initial cash (sales − purchases − fees −
    advertising − overhead − holding), minus the bankruptcy penalty if the store went bankrupt
    (then the final cash is the negative balance of that night). r = clip01((u − u_default) /
    (u* − u_default)) with both references played on the same episode seed (the same tickets).

Advantages
    The solver's state is (day t, stock s, cash c): the World's day, stock on hand and cash at
    the start of the day (nothing is in transit then; the owner's account is sunk); the day's
    action is (q, p, a) as `end_day` commits it: today's pending order and the storefront's
    price and ad levels. `end_day` gets A* = Q*_t(s, c; q, p, a) − V*_t(s, c), Q* = the
    expected outcome over the day's demand on V*_{t+1} (bankruptcy included), by the evaluator's
    sum over demands (the solver merges demands ≥ stock; the two agree to rounding); setting the
    price or the ads and placing or cancelling an order only set the action (A* = 0). Running
    out of turns drops today's order and closes every remaining day at the current price and
    ads: A* = I^{pa}_t(s, c) − V*_t(s, c), I^{pa} the value of that continuation (the same
    recursion with q = 0 and (p, a) fixed). Floats, as the solver's.

Episode end
    after the last day's `end_day`, at bankruptcy, or when the turn budget runs out: today's
    pending order is then dropped and the remaining days are closed with the current price
    and ad levels and no new orders (bankruptcy can still happen on them).
"""

from __future__ import annotations

import math
import random

import numpy as np
from pydantic import BaseModel

from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import InvalidPlan, PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

WEIGHT_TOTAL = 1000
LEVELS = 3  # price levels and ad levels
MAX_CASH_CAP = 400  # solve() bound on cash_cap: the DP's states are days × (capacity + 1) × (cash_cap + 1)
OPEN_PRICE, OPEN_AD = 1, 0  # the storefront the store opens with (and the idle/default price)
TICKET_BITS = 30
HIDDEN = ("lead_time", "unit_cost", "order_fee", "holding_cost", "overhead", "price_levels", "ad_costs",
          "demand_weights", "weekday_boost", "peak_start", "peak_end")


class Params(BaseModel):
    """Difficulty knobs of an e-commerce instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = knob(8, 2, 16, sampled=(4, 12), description="warehouse capacity, in units (stock levels 0 … size)")
    horizon: int = knob(120, 2, 365, sampled=(60, 365), description="number of trading days played, in days")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: prices and costs in whole currency units, Poisson-shaped demand per (traffic,
    price, ad) as integer weights out of 1000 over 0 … capacity (the tail lumped into the
    last cell, since no more than `capacity` units can ever be sold in a day). A normal day at
    the middle price without ads has mean demand m = 0.25–0.45 × capacity; costs scale with its
    margin m·(middle − unit_cost): order fee 0.3–1.2×, overhead 0.1–0.35×, each ad step
    0.05–0.3× (all at least 1); a holding cost of 1 (else 0) with probability 0.3 when that margin
    is at least 8. The cash cap holds a full order, a day's overhead and 5–15 more;
    the opening cash pays the fee, half to all of the warehouse and 1–3 days of overhead."""
    cap, horizon = params.size, params.horizon
    unit_cost = int(rng.integers(1, 4))
    middle = unit_cost + int(rng.integers(2, 5))
    low = max(unit_cost + 1, middle - int(rng.integers(1, 3)))
    high = middle + int(rng.integers(1, 4))
    base = float(rng.uniform(0.25, 0.45)) * cap  # mean demand of a normal day at the middle price, no ads
    margin = base * (middle - unit_cost)  # expected daily gross margin of such a day
    ad_low = max(1, round(margin * float(rng.uniform(0.05, 0.3))))
    ad_costs = [0, ad_low, ad_low + max(1, round(margin * float(rng.uniform(0.05, 0.3))))]
    order_fee = max(1, round(margin * float(rng.uniform(0.3, 1.2))))
    overhead = max(1, round(margin * float(rng.uniform(0.1, 0.35))))
    traffic = [1.0, float(rng.uniform(1.3, 1.7)), float(rng.uniform(1.8, 2.5))]
    price_factor = [float(rng.uniform(1.25, 1.6)), 1.0, float(rng.uniform(0.5, 0.8))]
    ad_factor = [1.0, float(rng.uniform(1.15, 1.4)), float(rng.uniform(1.35, 1.8))]
    weights = [[[_poisson_weights(base * traffic[k] * price_factor[p] * ad_factor[a], cap)
                 for a in range(LEVELS)] for p in range(LEVELS)] for k in range(LEVELS)]
    boosted = {int(d) for d in rng.choice(7, size=int(rng.integers(1, 3)), replace=False)}
    peak_length = int(rng.integers(max(1, horizon // 8), max(1, horizon // 4) + 1))
    peak_start = int(rng.integers(0, horizon - peak_length + 1))
    cash_cap = order_fee + unit_cost * cap + overhead + int(rng.integers(5, 16))
    initial_cash = order_fee + unit_cost * int(rng.integers(cap // 2, cap + 1)) + overhead * int(rng.integers(1, 4))
    return {
        "horizon": int(horizon),
        "capacity": int(cap),
        "lead_time": int(rng.integers(0, 2)),
        "unit_cost": unit_cost,
        "order_fee": order_fee,
        "holding_cost": int(rng.random() < 0.3 and margin >= 8),  # 1 per unit a night is heavy on small margins
        "overhead": overhead,
        "price_levels": [low, middle, high],
        "ad_costs": ad_costs,
        "demand_weights": weights,
        "weekday_boost": [1 if d in boosted else 0 for d in range(7)],
        "peak_start": peak_start,
        "peak_end": peak_start + peak_length,
        "cash_cap": int(cash_cap),
        "initial_cash": int(min(initial_cash, cash_cap)),
        "initial_stock": int(rng.integers(0, cap // 2 + 1)),
        "bankruptcy_penalty": int(rng.integers(30, 121)),
    }


def _poisson_weights(mean: float, top: int) -> list[int]:
    """Poisson(mean) on 0 … top with the tail P(D ≥ top) at `top`, as integer weights summing to 1000."""
    k = np.arange(top + 1)
    log_pmf = k * math.log(max(mean, 1e-9)) - mean - np.array([math.lgamma(x + 1) for x in k])
    pmf = np.exp(log_pmf)
    pmf[top] = max(0.0, 1.0 - float(pmf[:top].sum()))
    raw = np.floor(pmf / pmf.sum() * WEIGHT_TOTAL).astype(int)
    raw[int(np.argmax(pmf))] += WEIGHT_TOTAL - int(raw.sum())
    return [int(x) for x in raw]


def traffic_level(theta: dict, day: int) -> int:
    """k(t) = min(2, weekday_boost[t % 7] + [peak_start ≤ t < peak_end])."""
    return min(2, theta["weekday_boost"][day % 7] + (1 if theta["peak_start"] <= day < theta["peak_end"] else 0))


# ---------------------------------------------------------------------------------------------
# The decision process as arrays. States n = s·(K + 1) + c. A "post-order configuration" g is
# what the day's sales see: x units available and `shift` units added to tomorrow's stock
# (lead time 0: g = x, shift 0; lead time 1: g = (s, q), x = s, shift = q); the cash after
# paying the order is c̃ = c − cost(q) ≥ 0. A night ends in (stock y, cash e) with value
# U(y, e) = e − penalty if e < 0, else max(0, e − K) + V_{t+1}(y, min(e, K)). None of the index
# arrays depends on the day: only V_{t+1} and the day's traffic level do.


class _Process:
    """Enumerated states, post-order configurations and outcomes of θ, shared by solver and evaluator."""

    def __init__(self, theta: dict):
        self.theta = theta
        cap, top, lead = theta["capacity"], theta["cash_cap"], theta["lead_time"]
        if lead not in (0, 1):
            raise ValueError(f"lead_time must be 0 or 1, got {lead}")
        if not 0 <= theta["initial_cash"] <= top or not 0 <= theta["initial_stock"] <= cap:
            raise ValueError("initial cash and stock must lie in 0 … cash_cap and 0 … capacity")
        if min(theta["unit_cost"], theta["order_fee"], theta["holding_cost"], theta["overhead"]) < 0:
            raise ValueError("costs must be non-negative")
        self.n_cash = top + 1
        self.n_states = (cap + 1) * self.n_cash
        if lead == 0:
            posts = [(x, 0) for x in range(cap + 1)]
            post_of = [[s + q for q in range(cap + 1 - s)] for s in range(cap + 1)]
        else:
            posts = [(s, q) for s in range(cap + 1) for q in range(cap + 1 - s)]
            where = {pq: g for g, pq in enumerate(posts)}
            post_of = [[where[(s, q)] for q in range(cap + 1 - s)] for s in range(cap + 1)]
        weights = np.array(theta["demand_weights"], dtype=float)  # [traffic, price, ad, demand]
        if weights.ndim != 4 or weights.shape[:3] != (LEVELS, LEVELS, LEVELS) or (weights < 0).any():
            raise ValueError(f"demand_weights must be a 3×3×3 array of weight lists, got shape {weights.shape}")
        n_demand = weights.shape[3]
        probabilities = (weights / weights.sum(axis=3, keepdims=True)).reshape(LEVELS, LEVELS * LEVELS, n_demand)
        self.probabilities = probabilities  # [traffic, p·3 + a, d]
        price = np.repeat(np.array(theta["price_levels"]), LEVELS)  # by p·3 + a
        ads = np.tile(np.array(theta["ad_costs"]), LEVELS)

        def day_cash(available, sold):  # cash change of the sales and the night, [.., pa]
            left = available - sold
            return (price * sold[..., None] - ads - theta["overhead"] - theta["holding_cost"] * left[..., None])

        # every (g, d): for the evaluator
        self.available = np.array([x for x, _ in posts])
        self.shift = np.array([q for _, q in posts])
        demand = np.arange(n_demand)
        sold = np.minimum(self.available[:, None], demand[None, :])  # [g, d]
        self.next_stock = self.available[:, None] - sold + self.shift[:, None]
        self.delta = day_cash(self.available[:, None], sold).transpose(0, 2, 1)  # [g, pa, d]
        self.e_min = min(0, int(self.delta.min()))
        self.e_max = top + max(0, int(self.delta.max()))
        self.n_end = self.e_max - self.e_min + 1
        # rows for the solver: demands d ≥ x sell the same x units, so they are merged into one row per g.
        # Rows are sorted by demand bucket d, then g; the g that have bucket d (those with x ≥ d) are a
        # suffix of the g order (posts are sorted by x, or by s = x), so each bucket adds into a suffix.
        rows_g, rows_d, tail, self.buckets = [], [], [], []
        for d in range(min(cap, n_demand - 1) + 1):
            having = [g for g, x in enumerate(self.available) if x >= d]
            assert having == list(range(having[0], len(posts))), "posts must be sorted by available stock"
            self.buckets.append((len(rows_g), len(rows_g) + len(having), having[0]))
            for g in having:
                rows_g.append(g)
                rows_d.append(d)
                tail.append(d == self.available[g] or d == n_demand - 1)
        rows_g, rows_d, tail = np.array(rows_g), np.array(rows_d), np.array(tail)
        cumulative_tail = probabilities[..., ::-1].cumsum(axis=2)[..., ::-1]  # P(D ≥ d)
        self.row_probabilities = np.where(tail[None, :, None], cumulative_tail[:, :, rows_d].transpose(0, 2, 1),
                                          probabilities[:, :, rows_d].transpose(0, 2, 1))  # [traffic, row, pa]
        x = self.available[rows_g]
        row_sold = np.minimum(x, rows_d)
        row_next = x - row_sold + self.shift[rows_g]
        row_delta = day_cash(x, row_sold)  # [row, pa]
        # U is read through a sliding window of K + 1 cash values: row (y, o) is U(y, o + e_min … o + e_min + K),
        # so the outcome of row r, action pa and cash c̃ is window[row_stock[r], row_offset[r, pa], c̃]
        self.row_stock = np.repeat(row_next[:, None], LEVELS * LEVELS, axis=1)
        self.row_offset = row_delta - self.e_min  # [row, pa]
        # for every state and order quantity: the flat post-order index g·(K + 1) + c̃, or n_post if infeasible
        self.no_post = len(posts) * self.n_cash
        choice = np.full((self.n_states, cap + 1), self.no_post, dtype=np.int64)
        for s in range(cap + 1):
            for q, g in enumerate(post_of[s]):
                cost = (theta["order_fee"] if q > 0 else 0) + theta["unit_cost"] * q
                affordable = np.arange(cost, self.n_cash)
                choice[s * self.n_cash + affordable, q] = g * self.n_cash + affordable - cost
        self.choice = choice
        self.levels = [traffic_level(theta, day) for day in range(theta["horizon"])]

    def start(self) -> int:
        return self.theta["initial_stock"] * self.n_cash + self.theta["initial_cash"]

    def terminal(self) -> np.ndarray:
        return np.tile(np.arange(self.n_cash, dtype=float), self.theta["capacity"] + 1)  # V_H(s, c) = c

    def night(self, value: np.ndarray) -> np.ndarray:
        """U(y, e) flattened as y·n_end + e − e_min, from tomorrow's values V_{t+1}(y, c)."""
        top = self.theta["cash_cap"]
        end = np.arange(self.e_min, self.e_max + 1)
        by_stock = value.reshape(self.theta["capacity"] + 1, self.n_cash)
        kept = by_stock[:, np.clip(end, 0, top)] + np.maximum(end - top, 0)
        return np.where(end < 0, end - self.theta["bankruptcy_penalty"], kept).ravel()

    def post_values(self, day: int, value: np.ndarray) -> np.ndarray:
        """Expected outcome of every (g, p·3 + a, c̃) on `day`, given tomorrow's values."""
        night = self.night(value).reshape(self.theta["capacity"] + 1, self.n_end)
        window = np.lib.stride_tricks.sliding_window_view(night, self.n_cash, axis=1)
        outcome = window[self.row_stock, self.row_offset]  # [row, pa, c̃], a fresh array
        outcome *= self.row_probabilities[self.levels[day]][:, :, None]
        total = outcome[:len(self.available)]  # bucket 0: every g, in order
        for lo, hi, first in self.buckets[1:]:
            total[first:] += outcome[lo:hi]
        return total  # [g, pa, c̃]

    def night_at(self, value: np.ndarray, stock: np.ndarray, end: np.ndarray) -> np.ndarray:
        """U(stock, end) at the points given: `night(value)`'s numbers, computed only there (grading
        asks one state at a time, and a whole night is (capacity + 1) · (cash range) values)."""
        top = self.theta["cash_cap"]
        kept = value.reshape(self.theta["capacity"] + 1, self.n_cash)[stock, np.clip(end, 0, top)]
        kept += np.maximum(end - top, 0)
        return np.where(end < 0, end - self.theta["bankruptcy_penalty"], kept)

    def outcome(self, day: int, value: np.ndarray, state: int, q: int, pa: int) -> float:
        """`outcomes` of one state, order and price·ad: the same sum over the same demands, with U
        read at the night's outcomes only (`night_at`)."""
        post = self.choice[state, q]
        g, cash = post // self.n_cash, post % self.n_cash
        end = (cash + self.delta[g, pa])[None, :]  # [1, d], as `outcomes` shapes one state
        outcome = self.night_at(value, self.next_stock[g][None, :], end)
        return float((outcome * self.probabilities[self.levels[day]][[pa]]).sum(axis=1)[0])

    def outcomes(self, day: int, value: np.ndarray, states: np.ndarray, q: np.ndarray, pa: np.ndarray) -> np.ndarray:
        """Expected outcome on `day` of order q[i] and price·ad pa[i] in state states[i], given tomorrow's
        values, summed over every demand (the evaluator's form; every order must be feasible)."""
        post = self.choice[states, q]
        g, cash = post // self.n_cash, post % self.n_cash
        end = cash[:, None] + self.delta[g, pa]  # [i, d]
        outcome = self.night(value)[self.next_stock[g] * self.n_end + end - self.e_min]
        return (outcome * self.probabilities[self.levels[day]][pa]).sum(axis=1)


def _backward(proc: _Process) -> tuple[list[np.ndarray], np.ndarray]:
    """V_t over the states n = s·(K + 1) + c for t = 0 … H (V_H(s, c) = c) and π* [day, state, (q, p, a)]."""
    horizon = proc.theta["horizon"]
    values = [proc.terminal()]
    states = np.arange(proc.n_states)
    policy = np.zeros((horizon, proc.n_states, 3), dtype=np.int16)
    for day in range(horizon - 1, -1, -1):
        table = proc.post_values(day, values[-1]).transpose(0, 2, 1).reshape(proc.no_post, LEVELS * LEVELS)
        best_pa = table.argmax(axis=1)
        post_value = np.append(table[np.arange(proc.no_post), best_pa], -np.inf)
        by_order = post_value[proc.choice]  # [state, q]
        q = by_order.argmax(axis=1)
        values.append(by_order[states, q])
        pa = np.append(best_pa, 0)[proc.choice[states, q]]
        policy[day, :, 0] = q
        policy[day, :, 1] = pa // LEVELS
        policy[day, :, 2] = pa % LEVELS
    return values[::-1], policy


def _bellman(theta: dict) -> tuple[float, np.ndarray]:
    proc = _Process(theta)
    values, policy = _backward(proc)
    u_star = float(values[0][proc.start()]) - theta["initial_cash"]
    return u_star, policy.reshape(theta["horizon"], theta["capacity"] + 1, proc.n_cash, 3)


def state_space(theta: dict) -> int:
    return theta["horizon"] * (theta["capacity"] + 1) * (theta["cash_cap"] + 1)


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … 365 days, a warehouse of 1 … 16
    units and a cash cap of 0 … MAX_CASH_CAP = 400 (the cash is a state of the recursion), with
    whole money amounts ≥ 0 (a unit cost ≥ 1; prices, costs, fees, overhead ≤ MAX_CASH_CAP) and
    states within their ranges."""
    check = ThetaCheck("ecommerce", theta)
    check.count("horizon", 1, 365)
    capacity = check.count("capacity", 1, 16)
    check.whole("lead_time", low=0, high=1)
    # a day's cash change spans the solver's end-of-day cash axis: its amounts are bounded like the cash cap
    check.whole("unit_cost", low=1, high=MAX_CASH_CAP)
    for key in ("order_fee", "holding_cost", "overhead"):
        check.whole(key, low=0, high=MAX_CASH_CAP)
    check.whole("bankruptcy_penalty", low=0)
    check.whole("price_levels", (LEVELS,), low=0, high=MAX_CASH_CAP)
    check.whole("ad_costs", (LEVELS,), low=0, high=MAX_CASH_CAP)
    check.require(theta["ad_costs"][0] == 0, "ad_costs", "no cost at ad level 0 (ad_costs[0] = 0)")
    check.whole("demand_weights", (LEVELS, LEVELS, LEVELS, None), low=0)
    check.require(all(sum(w) > 0 for by_price in theta["demand_weights"] for by_ad in by_price for w in by_ad),
                  "demand_weights", "every demand distribution with a positive total weight")
    check.whole("weekday_boost", (7,), low=0, high=1)
    check.whole("peak_start", low=0)
    check.whole("peak_end", low=theta["peak_start"])
    cash_cap = check.count("cash_cap", 0, MAX_CASH_CAP)
    check.whole("initial_cash", low=0, high=cash_cap)
    check.whole("initial_stock", low=0, high=capacity)


def solve(theta: dict) -> Solution:
    """u* and π* by backward recursion over (day, stock, cash); exact values of the default and idle policies."""
    check_theta(theta)
    found = certified(lambda: _bellman(theta), state_space=state_space(theta),
                      method="backward Bellman recursion over (day, stock, cash)")
    return solved(theta, found, evaluate, default_policy, idle_policy)


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: [day, stock, cash] → (order 0 … capacity, price level 0 … 2, ad level 0 … 2);
    what the warehouse and the day's cash allow is `_check_plan`'s."""
    shape = (theta["horizon"], theta["capacity"] + 1, theta["cash_cap"] + 1, 3)
    return PlanSpec(shape=shape, integer=True, low=0, high=np.array([theta["capacity"], LEVELS - 1, LEVELS - 1]))


def _check_plan(theta: dict, proc: _Process, policy: np.ndarray) -> np.ndarray:
    """The plan as int64 [day, state, 3]; InvalidPlan (a ValueError) naming the first entry not of the declared
    form or ordering more than the warehouse or the day's cash allow."""
    plan = plan_spec(theta).check(policy).reshape(theta["horizon"], proc.n_states, 3)
    q = plan[..., 0]
    rows = np.arange(proc.n_states)[None, :]
    bad = proc.choice[rows, q] == proc.no_post
    if bad.any():
        day, n = (int(x[0]) for x in np.nonzero(bad))
        stock, cash = divmod(n, proc.n_cash)
        raise InvalidPlan(f"entry [{day}, {stock}, {cash}, 0] is {q[day, n]}; expected an order that fits the "
                          f"warehouse ({stock} in stock) and the day's cash ({cash})")
    return plan


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact expected utility of a plan [day, stock, cash] → (q, price level, ad level)."""
    proc = _Process(theta)
    plan = _check_plan(theta, proc, policy)
    value = proc.terminal()
    states = np.arange(proc.n_states)
    for day in range(theta["horizon"] - 1, -1, -1):
        value = proc.outcomes(day, value, states, plan[day, :, 0], plan[day, :, 1] * LEVELS + plan[day, :, 2])
    return float(value[proc.start()]) - theta["initial_cash"]


def _mean_demand(weights: list[int]) -> float:
    return sum(d * w for d, w in enumerate(weights)) / sum(weights)


# z = (u0 − u_idle) / (u* − u_idle): below −1 idling would score over 0.5; above 0.95 the
# default (middle price, no ads, order-up-to) already nearly solves the instance
DEFAULT_BAND = (-1.0, 0.95)


def default_policy(theta: dict) -> np.ndarray:
    """Middle price, no ads, and a reorder point: when the day opens with stock s below
    r = min(capacity, ceil(m)), m = the mean demand of a normal day (traffic 0)
    at the middle price without ads, order up to capacity (capacity − s units) or, if that
    would leave less than one day's overhead in cash, the largest q ≥ 1 that keeps it (none if
    not even one unit does); otherwise order nothing. It ignores the season, the weekdays and
    the other costs."""
    cap, top = theta["capacity"], theta["cash_cap"]
    m = _mean_demand(theta["demand_weights"][0][OPEN_PRICE][OPEN_AD])
    reorder = min(cap, math.ceil(m - 1e-12))
    reserve = theta["overhead"]
    row = np.zeros((cap + 1, top + 1, 3), dtype=np.int16)
    row[..., 1] = OPEN_PRICE
    row[..., 2] = OPEN_AD
    for s in range(reorder):
        for c in range(theta["order_fee"] + reserve, top + 1):
            row[s, c, 0] = min(cap - s, (c - theta["order_fee"] - reserve) // theta["unit_cost"])
    return np.tile(row[None], (theta["horizon"], 1, 1, 1))


def idle_policy(theta: dict) -> np.ndarray:
    """Never order, never advertise, keep the opening (middle) price."""
    plan = np.zeros((theta["horizon"], theta["capacity"] + 1, theta["cash_cap"] + 1, 3), dtype=np.int16)
    plan[..., 1] = OPEN_PRICE
    plan[..., 2] = OPEN_AD
    return plan


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """Uniform price and ad levels in every (day, stock, cash); half the time no order, otherwise
    a uniformly random feasible quantity (0 … the most the warehouse and the cash allow)."""
    cap, top, horizon = theta["capacity"], theta["cash_cap"], theta["horizon"]
    stock = np.arange(cap + 1)[:, None]
    cash = np.arange(top + 1)[None, :]
    affordable = np.where(cash >= theta["order_fee"], (cash - theta["order_fee"]) // theta["unit_cost"], 0)
    most = np.minimum(cap - stock, affordable)  # [s, c]
    size = (horizon, cap + 1, top + 1)
    orders = np.floor(rng.random(size) * (most[None] + 1)).astype(np.int16)
    plan = np.zeros(size + (3,), dtype=np.int16)
    plan[..., 0] = np.where(rng.random(size) < 0.5, 0, orders)
    plan[..., 1] = rng.integers(0, LEVELS, size=size)
    plan[..., 2] = rng.integers(0, LEVELS, size=size)
    return plan


CASH_DAYS = 12  # days of the cash-limit sequence (boundary_calls): 80 sampled θ all reached the cash check by day 6


def boundary_calls(theta: dict, rng: np.random.Generator) -> list[list[dict]]:
    """Near-boundary decisions for the reference_agreement gate: the cash check on an order.
    At the low price with the first ad level and no restocking the opening stock sells out,
    and the cash then falls by overhead + ad_costs[1] a night. That step is below the cost of a
    full warehouse, fee + unit_cost · capacity, so some night leaves 0 ≤ cash < that cost: a full
    order then fits the empty warehouse but not the cash. Every day offers a full order
    (refused while stock is left, accepted and cancelled while the cash pays it, refused by the
    cash check after) and closes the day, for CASH_DAYS days. The rng is not used.
    Before it, the capacity check on its own: on day 0 an order one unit over the free room (the
    cheapest order the capacity refuses; a World that misread the capacity would accept it
    wherever the cash pays it, which it does on most sampled θ), then a cancel."""
    capacity, stock = int(theta["capacity"]), int(theta["initial_stock"])
    over = ([{"tool": "place_order", "arguments": {"quantity": capacity - stock + 1}}] if stock >= 1 else
            [{"tool": "place_order", "arguments": {"quantity": capacity}},
             {"tool": "place_order", "arguments": {"quantity": 1}}])
    day = [{"tool": "place_order", "arguments": {"quantity": capacity}},
           {"tool": "cancel_order", "arguments": {}}, {"tool": "end_day", "arguments": {}}]
    start = [{"tool": "set_price", "arguments": {"level": 0}}, {"tool": "set_ads", "arguments": {"level": 1}}]
    return [over + [{"tool": "cancel_order", "arguments": {}}], start + day * min(CASH_DAYS, int(theta["horizon"]))]


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a plan on the episode's tickets; the canonical calls that play it (a price or ad call
    only when the level changes, an order only when q > 0, then the day's close)."""
    plan = np.asarray(policy)
    top = theta["cash_cap"]
    shape = (theta["horizon"], theta["capacity"] + 1, top + 1, 3)
    if plan.shape != shape or not np.issubdtype(plan.dtype, np.integer):
        raise ValueError(f"a plan is an integer array of shape {shape}, got {plan.dtype} {plan.shape}")
    tickets = World.ticket_path(theta, episode_seed)
    stock, cash, owner, price_level, ad_level = theta["initial_stock"], theta["initial_cash"], 0, OPEN_PRICE, OPEN_AD
    calls, decisions = [], []
    utility = None
    for day in range(theta["horizon"]):
        q, p, a = (int(x) for x in plan[day, stock, cash])
        if not (0 <= q <= theta["capacity"] - stock and (theta["order_fee"] if q > 0 else 0) + theta["unit_cost"] * q
                <= cash and 0 <= p < LEVELS and 0 <= a < LEVELS):
            raise ValueError(f"day {day}, stock {stock}, cash {cash}: the plan's entry {(q, p, a)} is not allowed")
        decisions.append((q, p, a))
        if p != price_level:
            calls.append({"tool": "set_price", "arguments": {"level": p}})
            price_level = p
        if a != ad_level:
            calls.append({"tool": "set_ads", "arguments": {"level": a}})
            ad_level = a
        if q > 0:
            calls.append({"tool": "place_order", "arguments": {"quantity": q}})
        calls.append({"tool": "end_day", "arguments": {}})
        available = stock + q if theta["lead_time"] == 0 else stock
        weights = theta["demand_weights"][traffic_level(theta, day)][p][a]
        demand = World.demand_of(weights, tickets[day])
        sold = min(available, demand)
        left = available - sold
        end = (cash - (theta["order_fee"] if q > 0 else 0) - theta["unit_cost"] * q - theta["ad_costs"][a]
               - theta["overhead"] - theta["holding_cost"] * left + theta["price_levels"][p] * sold)
        if end < 0:
            utility = owner + end - theta["initial_cash"] - theta["bankruptcy_penalty"]
            break
        owner += max(0, end - top)
        cash = min(end, top)
        stock = left if theta["lead_time"] == 0 else left + q
    if utility is None:
        utility = owner + cash - theta["initial_cash"]
    return Episode(utility=float(utility), calls=calls, decisions=decisions)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the state is (day, stock, cash) as the solver indexes it; the day's action is
# (order, price level, ad level) as committed by `end_day`. Q*_t(s, c; q, p, a) is `outcomes` on V*_{t+1}.


class _Values:
    """What the solver knows of θ: V*_t for t = 0 … H, and (filled when first asked) the value
    I^{pa}_t of closing every remaining day at price·ad pa with no orders."""

    def __init__(self, theta: dict):
        self.proc = _Process(theta)
        self.optimal, _ = _backward(self.proc)
        self.u_star = float(self.optimal[0][self.proc.start()]) - theta["initial_cash"]
        self._idle: dict[int, list[np.ndarray]] = {}
        self._q: dict[tuple[int, int, int, int], float] = {}

    def q(self, day: int, state: int, order: int, pa: int) -> float:
        """Q*_t by the evaluator's sum (`_Process.outcome`), kept per (day, state, order, price·ad):
        the episodes of one θ pass through the same states again and again."""
        key = (day, state, order, pa)
        found = self._q.get(key)
        if found is None:
            found = self._q[key] = self.proc.outcome(day, self.optimal[day + 1], state, order, pa)
        return found

    def idle(self, day: int, state: int, pa: int) -> float:
        if pa not in self._idle:  # the run-out continuation: the same recursion with q = 0 and pa fixed
            proc, states = self.proc, np.arange(self.proc.n_states)
            values = [proc.terminal()]
            for t in range(proc.theta["horizon"] - 1, -1, -1):
                values.append(proc.outcomes(t, values[-1], states, np.zeros_like(states), np.full_like(states, pa)))
            self._idle[pa] = values[::-1]
        return float(self._idle[pa][day][state])


def decision_values(theta: dict) -> _Values:
    """V*_t over every (day, stock, cash) by the solver's recursion; u* = V*_0 − initial cash."""
    check_theta(theta)
    return _Values(theta)


def decision_state(theta: dict, world) -> tuple[int, int, int, int, int, int, bool]:
    """(day, stock on hand, cash, ordered today, price level, ad level, bankrupt) as the World has them."""
    day, on_hand, cash, pending, price, ad, bankrupt = world._read("day", "on_hand", "cash", "pending", "price_level",
                                                                   "ad_level", "bankrupt")
    return day, on_hand, cash, pending, price, ad, bool(bankrupt)


def advantage(theta: dict, values: _Values, before: tuple, call: dict | None, after: tuple) -> float:
    """`end_day`: Q*_t(s, c; today's order, price, ads) − V*_t(s, c); setting the price or the ads and
    placing or cancelling an order (tentative) 0; running out: I^{pa}_t(s, c) − V*_t(s, c) with the
    current price and ads (today's order dropped, no orders on the remaining days)."""
    day, stock, cash, pending, price, ad, bankrupt = before
    if bankrupt or day >= theta["horizon"]:
        return 0.0
    state = stock * values.proc.n_cash + cash
    best = float(values.optimal[day][state])
    if call is None:
        return values.idle(day, state, price * LEVELS + ad) - best
    if call["tool"] != "end_day":
        return 0.0
    return values.q(day, state, pending, price * LEVELS + ad) - best


def turn_budget(theta: dict) -> int:
    """A price change, an ad change, an order and a close for every day, plus every probe and a few looks."""
    return 4 * theta["horizon"] + 24


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


TABLES = ("catalog", "prices", "stock", "orders", "ledger", "campaigns", "sales", "state")


class World(BaseWorld):
    """The store's relational world: catalog, price list, stock, orders, ledger, ad campaigns, sales, state."""

    PARAMS = ("horizon", "capacity", "lead_time", "unit_cost", "order_fee", "holding_cost", "overhead",
              "price_levels", "ad_costs", "demand_weights", "weekday_boost", "peak_start", "peak_end", "cash_cap",
              "initial_cash", "initial_stock", "bankruptcy_penalty")
    # cash: the ledger's sum; in_transit: the units of the orders in transit
    STATE = (("day", 0), ("pending", 0), ("price_level", 1), ("ad_level", 0), ("owner", 0), ("bankrupt", 0),
             ("estimates", 0), ("cash", 0), ("in_transit", 0))
    PRICE_LABELS = ("low", "middle", "high")
    AD_LABELS = ("none", "low", "high")
    TRAFFIC_LABELS = ("normal", "busy", "rush")

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        weights = params["demand_weights"]
        if (len(params["price_levels"]) != 3 or len(params["ad_costs"]) != 3 or len(params["weekday_boost"]) != 7
                or len(weights) != 3 or any(len(row) != 3 or any(len(cell) != 3 for cell in row) for row in weights)):
            raise ValueError("price_levels and ad_costs need 3 entries, weekday_boost 7, demand_weights 3×3×3 lists")
        self.tickets = World.ticket_path(params, episode_seed)
        self._reads = {}  # the queries of `_read`, by keys
        t, v = self.t, self.v
        db.execute(f"CREATE TABLE {t['catalog']} (sku TEXT PRIMARY KEY, name TEXT, unit TEXT, supplier TEXT, "
                   "warehouse_capacity INTEGER)")
        db.execute(f"CREATE TABLE {t['prices']} (level INTEGER PRIMARY KEY, label TEXT, unit_price INTEGER)")
        db.execute(f"CREATE TABLE {t['stock']} (sku TEXT PRIMARY KEY, on_hand INTEGER)")
        db.execute(f"CREATE TABLE {t['orders']} (order_id INTEGER PRIMARY KEY, day_placed INTEGER, quantity INTEGER, "
                   "cost INTEGER, arrives_day INTEGER, status TEXT)")
        db.execute(f"CREATE INDEX {t['orders']}_arriving ON {t['orders']} (status, arrives_day)")
        db.execute(f"CREATE TABLE {t['ledger']} (entry_id INTEGER PRIMARY KEY, day INTEGER, kind TEXT, amount INTEGER)")
        db.execute(f"CREATE TABLE {t['campaigns']} (day INTEGER PRIMARY KEY, ad_level INTEGER, label TEXT, "
                   "cost INTEGER)")
        db.execute(f"CREATE TABLE {t['sales']} (day INTEGER PRIMARY KEY, price_level INTEGER, unit_price INTEGER, "
                   "ad_level INTEGER, demand INTEGER, sold INTEGER, lost INTEGER, closing_stock INTEGER, "
                   "closing_cash INTEGER)")
        db.execute(f"INSERT INTO {t['catalog']} VALUES (?, ?, ?, ?, ?)",
                   (v["sku"], v["item"], v["unit"], v["supplier"], params["capacity"]))
        db.executemany(f"INSERT INTO {t['prices']} VALUES (?, ?, ?)",
                       [(k, self.PRICE_LABELS[k], params["price_levels"][k]) for k in range(3)])
        db.execute(f"INSERT INTO {t['stock']} VALUES (?, ?)", (v["sku"], params["initial_stock"]))
        self._set("cash", self._book(0, ("opening balance", params["initial_cash"])))

    @staticmethod
    def ticket_path(params, episode_seed):
        """One ticket a day, r_t = randrange(2^30) from random.Random(seed), whatever is decided."""
        rng = random.Random(episode_seed)
        return [rng.randrange(1 << 30) for _ in range(params["horizon"])]

    @staticmethod
    def demand_of(weights, ticket):
        """The demand a ticket picks from integer weights: position ticket·W // 2^30 in the cumulative weights."""
        return World.pick(weights, ticket * sum(weights) >> 30)

    # -- state helpers --------------------------------------------------------------------
    def _read(self, *keys):
        """Values of the state table (and "on_hand", the stock table's), in the order of `keys` (one
        query, made once per `keys`)."""
        query = self._reads.get(keys)
        if query is None:
            state = f"(SELECT value FROM {self.t['state']} WHERE key = ?)"
            stock = f"(SELECT on_hand FROM {self.t['stock']})"
            query = self._reads[keys] = ("SELECT " + ", ".join(stock if key == "on_hand" else state for key in keys),
                                         tuple(key for key in keys if key != "on_hand"))
        return self.db.execute(*query).fetchone()

    def _write(self, keys, before, after):
        """Set the state `keys` whose values changed from `before` to `after` (one statement)."""
        self.db.executemany(f"UPDATE {self.t['state']} SET value = ? WHERE key = ?",
                            [(new, key) for key, old, new in zip(keys, before, after) if new != old])

    def _book(self, day, *entries):
        """Enter (kind, amount) rows in the ledger (an amount of 0 is not entered); returns their sum,
        which the caller adds to the state's cash (the ledger's balance, never summed from its rows)."""
        rows = [(day, kind, amount) for kind, amount in entries if amount]
        self.db.executemany(f"INSERT INTO {self.t['ledger']} (day, kind, amount) VALUES (?, ?, ?)", rows)
        return sum(row[2] for row in rows)

    def _cash(self):
        return self._get("cash")

    def _on_hand(self):
        return self.db.execute(f"SELECT on_hand FROM {self.t['stock']}").fetchone()[0]

    def _set_on_hand(self, value):
        self.db.execute(f"UPDATE {self.t['stock']} SET on_hand = ?", (value,))

    def _in_transit(self):
        return self._get("in_transit")

    def _receive(self, day, in_transit):
        """Mark the orders arriving by `day` received (`in_transit`: the units in transit before); how
        many units they bring."""
        if not in_transit:
            return 0
        orders = self.t["orders"]
        arriving = self.db.execute(f"SELECT COALESCE(SUM(quantity), 0) FROM {orders} WHERE status = 'in transit' "
                                   "AND arrives_day <= ?", (day,)).fetchone()[0]
        if arriving:  # every order is of one unit or more: none arrives when nothing does
            self.db.execute(f"UPDATE {orders} SET status = 'received' WHERE status = 'in transit' AND arrives_day <= ?",
                            (day,))
        return arriving

    def _lose_transit(self, in_transit):
        if in_transit:
            self.db.execute(f"UPDATE {self.t['orders']} SET status = 'lost' WHERE status = 'in transit'")

    def _traffic(self, day):
        p = self.p
        return min(2, p["weekday_boost"][day % 7] + (1 if p["peak_start"] <= day < p["peak_end"] else 0))

    def _order_cost(self, quantity):
        return (self.p["order_fee"] if quantity > 0 else 0) + self.p["unit_cost"] * quantity

    def _open(self, bankrupt=None, day=None):
        """AgentError once the store is closed (`bankrupt` and `day` as read, when they were)."""
        closed = self.over() if day is None else self._closed(bankrupt, day)
        if closed:
            raise AgentError("the store is closed; the episode is over")

    def _closed(self, bankrupt, day):
        return bankrupt == 1 or day >= self.p["horizon"]

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._closed(*self._read("bankrupt", "day"))

    def utility(self):
        bankrupt, owner, cash = self._read("bankrupt", "owner", "cash")
        return owner + cash - self.p["initial_cash"] - (self.p["bankruptcy_penalty"] if bankrupt else 0)

    def run_out(self):
        self._idle_to_end(self.tool_end_day, pending=0)

    def limits(self, presentation):
        """An order fits the warehouse (both instructions tell its capacity) and, in I, today's cash,
        which never opens above the cash cap; at most one order and one sales row a day, H days."""
        p = self.p
        most = p["capacity"]
        if presentation == "I":
            most = min(most, (p["cash_cap"] - p["order_fee"]) // p["unit_cost"])
        days = (1, p["horizon"])
        return {"place_order": {"quantity": (1, most)}, "view_orders": {"limit": days},
                "view_sales": {"last_days": days}}

    # -- probes -----------------------------------------------------------------------------
    @tool("probe", "Read the {site}'s price list for {item}: the unit price in {currency} of each price level "
          "(low, middle, high).", reveals=("price_levels",))
    def tool_get_price_list(self):
        rows = self.db.execute(f"SELECT level, label, unit_price FROM {self.t['prices']} ORDER BY level").fetchall()
        return {"price_levels": [{"level": k, "label": label, "unit_price": price} for k, label, price in rows],
                "currency": self.v["currency"]}

    @tool("probe", "Read the {supplier}'s terms: unit cost, fee per order and delivery lead time.",
          reveals=("unit_cost", "order_fee", "lead_time"))
    def tool_get_supplier_terms(self):
        return {"unit_cost": self.p["unit_cost"], "order_fee": self.p["order_fee"],
                "lead_time_days": self.p["lead_time"], "currency": self.v["currency"],
                "delivery": "before today's sales" if self.p["lead_time"] == 0 else "the next morning"}

    @tool("probe", "Read the {site}'s running costs: holding cost per unit left overnight and the daily "
          "overhead, in {currency}.", reveals=("holding_cost", "overhead"))
    def tool_get_cost_sheet(self):
        return {"holding_cost_per_unit_left": self.p["holding_cost"], "daily_overhead": self.p["overhead"],
                "currency": self.v["currency"]}

    @tool("probe", "Read the daily cost in {currency} of each advertising level (none, low, high).",
          reveals=("ad_costs",))
    def tool_get_ad_rates(self):
        return {"ad_levels": [{"level": k, "label": self.AD_LABELS[k], "daily_cost": self.p["ad_costs"][k]}
                              for k in range(3)], "currency": self.v["currency"]}

    @tool("probe", "Read the traffic calendar: which weekdays are boosted and when the peak season runs.",
          reveals=("weekday_boost", "peak_start", "peak_end"))
    def tool_get_traffic_calendar(self):
        p = self.p
        return {"boosted_weekdays": [d for d in range(7) if p["weekday_boost"][d]],
                "peak_season": {"first_day": p["peak_start"], "last_day": p["peak_end"] - 1},
                "rule": "traffic level of day t = min(2, [weekday t % 7 is boosted] + [t is in the peak season]); "
                        "0 normal, 1 busy, 2 rush"}

    @tool("probe", "Read the exact demand forecast for {item}: the probability of each daily demand for every "
          "traffic level, price level and ad level (costs 2 turns).", reveals=("demand_weights",), turn_cost=2)
    def tool_get_demand_forecast(self):
        forecast = []
        for k in range(3):
            for price in range(3):
                for ad in range(3):
                    row = self.p["demand_weights"][k][price][ad]
                    total = float(sum(row))
                    forecast.append({"traffic": k, "price_level": price, "ad_level": ad,
                                     "probabilities": [w / total for w in row]})
        return {"demand_distributions": forecast, "support": "probabilities of 0, 1, 2, … units demanded in a day"}

    @tool("probe", "Get a quick market-research estimate (not exact: each figure has random error, drawn fresh "
          "on every call) of the mean daily demand of {item} for every traffic level, price level and ad level "
          "(costs 1 turn).", noisy=True)
    def tool_estimate_demand(self):
        k = self._get("estimates")
        self._set("estimates", k + 1)
        rng = random.Random(self.episode_seed * 7919 + k)
        estimates = []
        for level in range(3):
            for price in range(3):
                for ad in range(3):
                    row = self.p["demand_weights"][level][price][ad]
                    mean = sum(d * w for d, w in enumerate(row)) / float(sum(row))
                    noisy = max(0.0, mean + rng.gauss(0.0, 0.3 + 0.25 * mean))
                    estimates.append({"traffic": level, "price_level": price, "ad_level": ad,
                                      "estimated_mean_demand": round(noisy, 1)})
        return {"estimates": estimates, "sample": k + 1,
                "note": "a quick market-research estimate with random error; each call draws fresh error"}

    # -- observations -----------------------------------------------------------------------
    @tool("observe", "Show {unit} on hand, in transit and ordered today, and the warehouse capacity.")
    def tool_view_stock(self):
        return {"on_hand": self._on_hand(), "in_transit": self._in_transit(), "ordered_today": self._get("pending"),
                "capacity": self.p["capacity"], "unit": self.v["unit"]}

    @tool("observe", "Show the {site}'s cash, the owner's account and the cash cap.")
    def tool_view_cash(self):
        return {"cash": self._cash(), "owner_account": self._get("owner"), "cash_cap": self.p["cash_cap"],
                "bankrupt": bool(self._get("bankrupt")), "currency": self.v["currency"]}

    @tool("observe", "Show the current price level and advertising level.")
    def tool_view_storefront(self):
        price, ad = self._get("price_level"), self._get("ad_level")
        return {"price_level": price, "price_label": self.PRICE_LABELS[price], "ad_level": ad,
                "ad_label": self.AD_LABELS[ad]}

    @tool("observe", "Show today's day number, weekday and the days left.")
    def tool_view_calendar(self):
        day = self._get("day")
        return {"day": day, "weekday": day % 7, "days_left": max(0, self.p["horizon"] - day),
                "horizon": self.p["horizon"]}

    @tool("observe", "List the most recent orders to the {supplier} with their status.",
          limit=integer(1, 1000, "how many orders to list"))
    def tool_view_orders(self, limit=10):
        keys = ("order_id", "day_placed", "quantity", "cost", "arrives_day", "status")
        rows = self.db.execute(f"SELECT {', '.join(keys)} FROM {self.t['orders']} ORDER BY order_id DESC LIMIT ?",
                               (limit,)).fetchall()
        return {"orders": [dict(zip(keys, row)) for row in rows]}

    @tool("observe", "List recent days: price and ad levels, demand, sales, lost sales, closing stock and cash.",
          last_days=integer(1, 1000, "how many days back"))
    def tool_view_sales(self, last_days=7):
        keys = ("day", "price_level", "unit_price", "ad_level", "demand", "sold", "lost", "closing_stock",
                "closing_cash")
        rows = self.db.execute(f"SELECT {', '.join(keys)} FROM {self.t['sales']} ORDER BY day DESC LIMIT ?",
                               (last_days,)).fetchall()
        return {"days": [dict(zip(keys, row)) for row in rows]}

    @tool("observe", "List the latest ledger entries of the {site} in {currency}.",
          last_entries=integer(1, 1000, "how many entries to list"))
    def tool_view_ledger(self, last_entries=20):
        rows = self.db.execute(f"SELECT entry_id, day, kind, amount FROM {self.t['ledger']} ORDER BY entry_id DESC "
                               "LIMIT ?", (last_entries,)).fetchall()
        return {"entries": [{"entry": e, "day": d, "kind": k, "amount": a} for e, d, k, a in rows],
                "cash": self._cash(), "owner_account": self._get("owner"), "currency": self.v["currency"]}

    # -- decisions --------------------------------------------------------------------------
    @tool("decision", "Set the price level of {item} from today on: 0 low, 1 middle, 2 high.",
          level=integer(0, 2, "0, 1 or 2"))
    def tool_set_price(self, level):
        self._open()
        self._set("price_level", level)
        return {"price_level": level, "price_label": self.PRICE_LABELS[level]}

    @tool("decision", "Set the advertising level from today on: 0 none, 1 low, 2 high (charged every day at "
          "close).", level=integer(0, 2, "0, 1 or 2"))
    def tool_set_ads(self, level):
        self._open()
        self._set("ad_level", level)
        return {"ad_level": level, "ad_label": self.AD_LABELS[level]}

    @tool("decision", "Order {item} from the {supplier} today (adds to today's order; it must fit the warehouse "
          "and today's cash; paid when the day closes).", quantity=integer(1, 1000, "number of {unit} to order"))
    def tool_place_order(self, quantity):
        bankrupt, day, pending, on_hand, in_transit, cash = self._read("bankrupt", "day", "pending", "on_hand",
                                                                       "in_transit", "cash")
        self._open(bankrupt, day)
        p = self.p
        if on_hand + in_transit + pending + quantity > p["capacity"]:
            raise AgentError(f"the warehouse holds {self._count(p['capacity'])}: with {quantity} more, on hand, in "
                             "transit and ordered today would exceed it")
        cost = self._order_cost(pending + quantity)
        if cost > cash:
            raise AgentError(f"an order of {self._count(pending + quantity)} today would cost more than the cash "
                             "(the order fee included)")
        self._set("pending", pending + quantity)
        return {"ordered_today": pending + quantity, "order_cost": cost}

    @tool("decision", "Cancel everything ordered today.")
    def tool_cancel_order(self):
        self._open()
        if self._get("pending") == 0:
            raise AgentError("nothing has been ordered today")
        self._set("pending", 0)
        return {"ordered_today": 0}

    @tool("clock", "Close the day: pay today's order, serve the day's customers, charge advertising, overhead "
          "and holding, sweep cash above the cap to the owner and move to the next day.")
    def tool_end_day(self):
        keys = ("bankrupt", "day", "pending", "cash", "owner", "in_transit")  # the state keys the day may change
        before = self._read(*keys, "price_level", "ad_level", "on_hand")
        bankrupt, day, quantity, cash, owner, in_transit, price, ad, stocked = before
        on_hand = stocked
        self._open(bankrupt, day)
        p, entries = self.p, []
        if quantity > 0:
            self.db.execute(f"INSERT INTO {self.t['orders']} (day_placed, quantity, cost, arrives_day, status) "
                            "VALUES (?, ?, ?, ?, 'in transit')",
                            (day, quantity, self._order_cost(quantity), day + p["lead_time"]))
            entries += [("purchase", -p["unit_cost"] * quantity), ("order fee", -p["order_fee"])]
            in_transit += quantity
        if p["lead_time"] == 0:
            arriving = self._receive(day, in_transit)
            on_hand, in_transit = on_hand + arriving, in_transit - arriving
        demand = World.demand_of(p["demand_weights"][self._traffic(day)][price][ad], self.tickets[day])
        sold = min(on_hand, demand)
        closing = on_hand - sold
        entries += [("sales", p["price_levels"][price] * sold), ("advertising", -p["ad_costs"][ad]),
                    ("overhead", -p["overhead"]), ("holding", -p["holding_cost"] * closing)]
        cash += self._book(day, *entries)
        self.db.execute(f"INSERT INTO {self.t['campaigns']} VALUES (?, ?, ?, ?)",
                        (day, ad, self.AD_LABELS[ad], p["ad_costs"][ad]))
        result = {"day_closed": day, "demand": demand, "sold": sold, "lost_sales": demand - sold,
                  "on_hand": closing, "arriving_tomorrow": 0, "days_left": p["horizon"] - day - 1}
        closing_cash, stock = cash, closing
        if cash < 0:
            bankrupt = 1
            self._lose_transit(in_transit)
            in_transit = 0
            result.update({"bankrupt": True, "cash": cash, "penalty": p["bankruptcy_penalty"],
                           "outcome": "cash fell below zero: the store is bankrupt and the episode is over"})
        else:
            transfer = max(0, cash - p["cash_cap"])
            if transfer:
                cash += self._book(day, ("transfer to owner", -transfer))
                owner += transfer
            result.update({"cash": cash, "transferred_to_owner": transfer})
            if day + 1 < p["horizon"]:
                arriving = result["arriving_tomorrow"] = self._receive(day + 1, in_transit)
                stock, in_transit = closing + arriving, in_transit - arriving
            else:
                self._lose_transit(in_transit)
                in_transit = 0
        if stock != stocked:
            self._set_on_hand(stock)
        self._write(keys, before, (bankrupt, day + 1, 0, cash, owner, in_transit))
        self.db.execute(f"INSERT INTO {self.t['sales']} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (day, price, p["price_levels"][price], ad, demand, sold, demand - sold, closing, closing_cash))
        result["owner_account"] = owner
        return result

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        cur = v["currency"]
        opening = (f"You run the {v['site']}'s online store for {v['item']} ({v['sku']}) for {p['horizon']} days, "
                   f"numbered 0 to {p['horizon'] - 1}. Day 0 opens with {self._count(p['initial_stock'])} in the "
                   f"warehouse (it holds {p['capacity']}, counting units on order) and {p['initial_cash']} {cur} in "
                   "cash.")
        daily = (f"Each day: {n['set_price']} picks the price level (0 low, 1 middle, 2 high) and {n['set_ads']} the "
                 "advertising level (0 none, 1 low, 2 high); both stay until you change them, and the store opens at "
                 f"the middle price without ads. {n['place_order']} reorders from the {v['supplier']} (a fee per order "
                 f"plus a cost per unit, paid from today's cash; {n['cancel_order']} undoes today's order). "
                 f"{n['end_day']} closes the day: the order is paid, customers arrive, sales are made from stock and "
                 "unmet demand is lost, then advertising, a daily overhead and a holding cost per unit left are "
                 "charged.")
        demand = ("Demand depends on the price level, the advertising level and the day's traffic (normal, busy or "
                  "rush: some weekdays and a peak season are busier).")
        rules = (f"Cash below zero at the end of a day is bankruptcy: the episode ends at once and "
                 f"{p['bankruptcy_penalty']} {cur} is deducted from your score. Every night cash above "
                 f"{p['cash_cap']} {cur} is transferred to the owner's account; it still counts. Stock left after "
                 "the last day is worthless.")
        score = ("Your score is the owner's account plus the final cash minus the opening cash. You have "
                 f"{turn_budget} turns: every tool call the world answers uses its turn cost; when they run "
                 "out, today's order is dropped and the remaining days are closed with the current price and "
                 "ads and no new orders.")
        lines = [self.skin["narrative"], "", opening, daily, demand, rules, score, ""]
        if presentation == "I":
            boosted = [d for d in range(7) if p["weekday_boost"][d]]
            arrival = "before that day's sales" if p["lead_time"] == 0 else "the next morning (day d + 1)"
            lines.append(f"Prices per unit by level (low, middle, high): {', '.join(str(x) for x in p['price_levels'])}"
                         f" {cur}. Advertising per day (none, low, high): {', '.join(str(x) for x in p['ad_costs'])} "
                         f"{cur}.")
            lines.append(f"Unit cost {p['unit_cost']}, order fee {p['order_fee']}, holding cost {p['holding_cost']} "
                         f"per unit left at the end of a day, overhead {p['overhead']} per day (all in {cur}). An "
                         f"order placed on day d arrives {arrival}.")
            lines.append(f"Traffic of day t: min(2, [weekday t % 7 in {boosted}] + [{p['peak_start']} <= t <= "
                         f"{p['peak_end'] - 1}]), 0 normal, 1 busy, 2 rush.")
            lines.append(f"Daily demand, probability of 0, 1, 2, … {v['unit']}, by traffic / price level / ad level:")
            for k in range(3):
                for price in range(3):
                    for ad in range(3):
                        row = p["demand_weights"][k][price][ad]
                        shares = ", ".join(f"{w / float(sum(row)):.3f}" for w in row)
                        lines.append(f"  {self.TRAFFIC_LABELS[k]} / {self.PRICE_LABELS[price]} / "
                                     f"{self.AD_LABELS[ad]}: {shares}")
        else:
            lines.append(f"Prices, costs, lead time, traffic and demand are not given. {n['get_price_list']}, "
                         f"{n['get_supplier_terms']}, {n['get_cost_sheet']}, {n['get_ad_rates']} and "
                         f"{n['get_traffic_calendar']} reveal them (a turn each); {n['get_demand_forecast']} gives "
                         f"the exact demand distributions (2 turns); {n['estimate_demand']} gives a cheap noisy "
                         "estimate of the mean demands (1 turn, fresh error each call).")
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="ecommerce",
    version="7",
    group="beyond",
    model_class="finite-horizon stochastic MDP with a bankruptcy-absorbing cash state",
    solver="backward Bellman recursion over (day, stock, cash) (numpy)",
    stochastic=True,
))
