"""Dynamic pricing: sell a fixed stock over a season from a price menu, no replenishment, salvage at the end.

Model
    A seller holds `capacity` = C units of one item and sells them over `horizon` = H periods,
    numbered 0 … H − 1 (H ≥ 2); no unit can be added. The price menu `prices` holds K integer
    price levels, strictly increasing; action a ∈ {0, …, K − 1} posts price level a, action K
    keeps sales closed. Sales start closed and a posted price stays posted until changed.
    In each period at most one unit is sold: with n > 0 units left and level a posted, a sale
    happens with probability
        q_t(a) = (buy_early[a] · (H − 1 − t) + buy_late[a] · t) / (1000 · (H − 1)),
    i.e. per-mille rates `buy_early` (period 0) and `buy_late` (period H − 1), interpolated
    linearly in t; they fold in the chance that no customer comes at all. Both are non-increasing
    in the level, and buy_late ≥ buy_early level by level: late customers are less price-
    sensitive and pay more (the time trend toward the deadline). With sales closed or n = 0,
    nothing is sold. A sale earns prices[a] and leaves n − 1 units. Units left after period
    H − 1 are bought back at `salvage_value` each. The season ends early as soon as the last
    unit is sold (nothing can happen afterwards).
    The random path is one integer ticket per period, u_t uniform on 0 … 1000 · (H − 1) − 1,
    drawn in order from random.Random(episode_seed); a sale at level a happens iff
    u_t < buy_early[a] · (H − 1 − t) + buy_late[a] · t (so every price faces the same customer).
    A plan is a table [t, n] → action for n = 0 … C remaining units (column 0 is ignored).
    Solved exactly by backward Bellman recursion over (period, units left) in integer
    arithmetic (values scaled by (1000 · (H − 1))^(H − t), i.e. exact rationals):
        V_H(n) = salvage_value · n,  V_t(0) = 0,
        V_t(n) = max_a q_t(a) · (prices[a] + V_{t+1}(n − 1)) + (1 − q_t(a)) · V_{t+1}(n)
    (q_t(K) = 0); ties go to the lowest action index.
    Limits: solve() takes 2 … 200 periods, 1 … 60 units and 1 … MAX_LEVELS = 6 strictly
    increasing whole prices ≥ 0 with whole per-mille rates 0 … 1000 and a whole salvage value ≥
    0; any other θ is refused with InvalidParams before anything is allocated (`check_theta`).

State
    the period, units left, the posted price level (or closed), the period history (level
    posted, sale or not, units left), the ledger (sales and salvage), the surveys run so far.

Tools
    probes: the demand study (exact purchase rates, 2 turns), the market survey (a noisy
    estimate of the same rates from 50 respondents per rate, 1 turn, fresh noise each time),
    the buy-back terms (salvage value); decisions: post a price level, close sales; clock: end
    the period; observations: stock, posted price, price menu, calendar, sales history, revenue.
    The tool schemas are fitted to the instance, in I and A alike (both instructions tell the menu
    and H): a price level stops at K − 1 and the sales history at H periods.

Plan
    an integer array of shape [horizon, capacity + 1]: entry [t, n] is the action in period t
    when n units are left, an index into prices (the level posted) or len(prices) for sales
    closed; column n = 0 is ignored.

Reward
    utility = revenue from sales + salvage_value × units left at the end of the season.
    r = clip01((u − u_default) / (u* − u_default)) where both references are played on the
    same episode seed (the same tickets). u_default posts, all season, the one level that
    maximises prices[a] · (buy_early[a] + buy_late[a]) (expected revenue per period averaged
    over the season, ignoring the stock limit and the salvage value); u_idle never opens sales
    (every unit is salvaged).

Advantages
    The solver's state is (period t, units left n): the World's `period` and `units_left`; the
    period's action is the level posted (or closed) when `end_period` runs. `end_period` in
    state (t, n) with action a has A* = Q_t(n, a) − V_t(n), Q_t(n, a) the term of the Bellman
    maximum above; `set_price` and `close_sales` only choose the tentative action (A* = 0);
    running out of turns closes sales to the end of the season: salvage_value · n − V_t(n).
    All in exact integer-scaled rationals, so π*'s calls have A* = 0 exactly.

Episode end
    after period H − 1's `end_period`, as soon as the last unit is sold, or when the turn budget
    runs out: sales then close for the remaining periods and the units left are salvaged.
"""

from __future__ import annotations

import json
import math
import random
from fractions import Fraction

import numpy as np
from pydantic import BaseModel

from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

PER_MILLE = 1000
MAX_LEVELS = 6
SURVEY_SAMPLE = 50
HIDDEN = ("buy_early", "buy_late", "salvage_value")


class Params(BaseModel):
    """Difficulty knobs of a dynamic pricing instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = knob(8, 2, 60, sampled=(3, 12), description="units of stock to sell over the season, in units")
    horizon: int = knob(30, 3, 200, sampled=(24, 60), description="number of selling periods in the season, in periods")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: K = 4…6 increasing integer prices (the first 10…40, steps 4…15); logistic
    willingness-to-pay curves (late midpoint 20–60 % of the price span above the early one) scaled
    so that the season's expected sales at the myopic price are 1.8–3.4 × the stock (capped at
    90 % per period); per-mille rates clipped to 1…950; salvage 0 … half the lowest price."""
    capacity, horizon = params.size, params.horizon
    levels = int(rng.integers(4, MAX_LEVELS + 1))
    first = int(rng.integers(10, 41))
    prices = [first]
    for step in rng.integers(4, 16, size=levels - 1):
        prices.append(prices[-1] + int(step))
    span = prices[-1] - prices[0]
    mid_early = prices[0] + float(rng.uniform(0.1, 0.7)) * span
    mid_late = mid_early + float(rng.uniform(0.2, 0.6)) * span
    scale = span / float(rng.uniform(3.0, 6.0))
    shape_early = np.array([1.0 / (1.0 + math.exp((p - mid_early) / scale)) for p in prices])
    shape_late = np.array([1.0 / (1.0 + math.exp((p - mid_late) / scale)) for p in prices])
    myopic = int(np.argmax(np.array(prices) * (shape_early + shape_late)))
    mean_rate = float(shape_early[myopic] + shape_late[myopic]) / 2
    ratio = float(rng.uniform(1.8, 3.4))
    level = min(0.9 / float(shape_late[0]), ratio * capacity / (horizon * mean_rate))
    early = _monotone([round(PER_MILLE * level * s) for s in shape_early])
    late = _monotone([max(e, round(PER_MILLE * level * s)) for e, s in zip(early, shape_late)])
    return {
        "horizon": int(horizon),
        "capacity": int(capacity),
        "prices": prices,
        "buy_early": early,
        "buy_late": late,
        "salvage_value": int(rng.integers(0, prices[0] // 2 + 1)),
    }


def _monotone(rates: list[int]) -> list[int]:
    """Per-mille rates clipped to 1 … 950 and made non-increasing along the menu."""
    out = []
    for r in rates:
        r = min(950, max(1, r))
        out.append(min(r, out[-1]) if out else r)
    return out


# ---------------------------------------------------------------------------------------------
# Exact arithmetic: q_t(a) = num_t(a) / D with D = 1000 · (H − 1); values of period t are kept
# as integers scaled by D^(H − t).


def _denominator(theta: dict) -> int:
    return PER_MILLE * (theta["horizon"] - 1)


def _numerators(theta: dict, period: int) -> list[int]:
    """Sale-probability numerators (over D) of every action in `period`; closed is 0."""
    h = theta["horizon"]
    return [e * (h - 1 - period) + late * period for e, late in zip(theta["buy_early"], theta["buy_late"])] + [0]


def _check_theta(theta: dict) -> None:
    k = len(theta["prices"])
    if k < 1 or len(theta["buy_early"]) != k or len(theta["buy_late"]) != k or theta["horizon"] < 2:
        raise ValueError("prices, buy_early and buy_late must be lists of one length and horizon ≥ 2")
    if any(not 0 <= r <= PER_MILLE for r in theta["buy_early"] + theta["buy_late"]):
        raise ValueError("purchase rates are per mille, in 0 … 1000")


def _options(theta: dict, nums: list[int], later: list[int], scale: int, n: int) -> list[int]:
    """Q_t(n, a) · D^(H − t) of every action a (closed last) with n > 0 units left, from period
    t's numerators and tomorrow's scaled values `later` (scale = D^(H − t − 1))."""
    prices, d = theta["prices"], _denominator(theta)
    options = [nums[a] * (prices[a] * scale + later[n - 1]) + (d - nums[a]) * later[n] for a in range(len(prices))]
    options.append(d * later[n])
    return options


def _backward(theta: dict, choose, keep: list | None = None) -> tuple[int, np.ndarray, int]:
    """(W_0(C), actions, D^H): scaled exact values W_t(n) = V_t(n) · D^(H − t) under
    `choose(t, n, options) -> action`, where options[a] is the scaled value of action a;
    `keep`, a list of H entries, receives (W_{t+1}, D^(H − t − 1)) at index t."""
    _check_theta(theta)
    h, cap, closed, d = theta["horizon"], theta["capacity"], len(theta["prices"]), _denominator(theta)
    w = [theta["salvage_value"] * n for n in range(cap + 1)]
    scale = 1  # D^(H − t − 1): the scale of w, tomorrow's values
    policy = np.full((h, cap + 1), closed, dtype=np.int16)
    for t in range(h - 1, -1, -1):
        if keep is not None:
            keep[t] = (w, scale)
        nums = _numerators(theta, t)
        new = [0] * (cap + 1)
        for n in range(1, cap + 1):
            options = _options(theta, nums, w, scale, n)
            a = choose(t, n, options)
            policy[t, n] = a
            new[n] = options[a]
        w, scale = new, scale * d
    return w[cap], policy, scale


def _argmax(t: int, n: int, options: list[int]) -> int:
    return options.index(max(options))  # the first maximum: ties to the lowest action index


def _bellman(theta: dict) -> tuple[float, np.ndarray]:
    value, policy, scale = _backward(theta, _argmax)
    return float(Fraction(value, scale)), policy


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: [period, units left] → a price level 0 … K − 1, or K = len(prices): sales closed."""
    return PlanSpec(shape=(theta["horizon"], theta["capacity"] + 1), integer=True, low=0, high=len(theta["prices"]))


def _check_plan(theta: dict, policy: np.ndarray) -> np.ndarray:
    """The plan as an int64 table; InvalidPlan (a ValueError) naming the first entry not of the declared form."""
    return plan_spec(theta).check(policy)


def _exact_value(theta: dict, policy: np.ndarray) -> Fraction:
    plan = _check_plan(theta, policy)
    value, _, scale = _backward(theta, lambda t, n, options: int(plan[t, n]))
    return Fraction(value, scale)


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 2 … 200 periods, 1 … 60 units and 1 …
    MAX_LEVELS = 6 strictly increasing whole prices ≥ 0 with whole per-mille rates 0 … 1000 and
    a whole salvage value ≥ 0."""
    check = ThetaCheck("dynamic_pricing", theta)
    check.count("horizon", 2, 200)
    check.count("capacity", 1, 60)
    k = check.length("prices", 1, MAX_LEVELS)
    check.whole("prices", (k,), low=0)
    check.require(all(a < b for a, b in zip(theta["prices"], theta["prices"][1:])), "prices",
                  "strictly increasing prices")
    check.whole("buy_early", (k,), low=0, high=PER_MILLE)
    check.whole("buy_late", (k,), low=0, high=PER_MILLE)
    check.whole("salvage_value", low=0)


def solve(theta: dict) -> Solution:
    """u* and π* ([period, units left] → action, int16) by exact backward recursion; default and idle values."""
    check_theta(theta)
    found = certified(
        lambda: _bellman(theta),
        method="backward Bellman recursion (exact integer-scaled rationals)",
        solver="python int arithmetic",
        solver_version="stdlib",
        state_space=theta["horizon"] * (theta["capacity"] + 1),
    )
    return solved(theta, found, evaluate, default_policy, idle_policy)


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact expected utility of a plan table [period, units left] → action (ValueError if malformed)."""
    return float(_exact_value(theta, policy))


def myopic_level(theta: dict) -> int:
    """The level maximising prices[a] · (buy_early[a] + buy_late[a]); ties to the lowest level."""
    scores = [p * (e + late) for p, e, late in zip(theta["prices"], theta["buy_early"], theta["buy_late"])]
    return scores.index(max(scores))


# z = (u0 − u_idle) / (u* − u_idle), u_idle = salvage of the whole stock: below −1 never selling
# would score over 0.5; above 0.95 the myopic fixed price already nearly solves the instance
DEFAULT_BAND = (-1.0, 0.95)


def default_policy(theta: dict) -> np.ndarray:
    """Post the myopic level (highest expected revenue per period averaged over the season, ignoring
    the stock limit and the salvage value) in every period and every stock position."""
    return np.full((theta["horizon"], theta["capacity"] + 1), myopic_level(theta), dtype=np.int16)


def idle_policy(theta: dict) -> np.ndarray:
    """Never open sales: every unit is salvaged at the end."""
    return np.full((theta["horizon"], theta["capacity"] + 1), len(theta["prices"]), dtype=np.int16)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """Every entry uniformly among the K levels and 'closed'."""
    size = (theta["horizon"], theta["capacity"] + 1)
    return rng.integers(0, len(theta["prices"]) + 1, size=size).astype(np.int16)


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a plan on the episode's tickets: change the posted level when the plan says so, then end
    the period; stop when the stock is gone."""
    plan = _check_plan(theta, policy)
    tickets = World.tickets(theta, episode_seed)
    h, prices, closed = theta["horizon"], theta["prices"], len(theta["prices"])
    left, posted, utility = theta["capacity"], closed, 0
    calls, decisions = [], []
    for t in range(h):
        action = int(plan[t, left])
        if action != posted:
            if action == closed:
                calls.append({"tool": "close_sales", "arguments": {}})
            else:
                calls.append({"tool": "set_price", "arguments": {"level": action}})
            posted = action
        calls.append({"tool": "end_period", "arguments": {}})
        sold = action < closed and tickets[t] < _numerators(theta, t)[action]
        decisions.append((t, left, action, bool(sold)))
        if sold:
            utility += prices[action]
            left -= 1
            if left == 0:
                break
    else:
        utility += theta["salvage_value"] * left
    return Episode(utility=float(utility), calls=calls, decisions=decisions)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the state is (period t, units left n, the level posted); Q_t(n, a) and V_t(n)
# come from `_options` on the solver's own tables W_{t+1}, in exact integer-scaled rationals.


def decision_values(theta: dict) -> dict:
    """The solver's tables: later[t] = (W_{t+1}, D^(H − t − 1)) for t = 0 … H − 1; u* = V_0(C)."""
    later = [None] * theta["horizon"]
    value, _, scale = _backward(theta, _argmax, keep=later)
    return {"u_star": float(Fraction(value, scale)), "later": later}


def decision_state(theta: dict, world) -> tuple[int, int, int]:
    """(period, units left, the level posted: len(prices) while sales are closed)."""
    posted = world._get("posted")
    return world._get("period"), world._get("units_left"), len(theta["prices"]) if posted < 0 else posted


def advantage(theta: dict, values: dict, before: tuple, call: dict | None, after: tuple) -> float:
    """`end_period` is worth Q_t(n, posted) − V_t(n); posting a price or closing sales only sets
    the period's tentative action (0); running out closes sales: salvage · n − V_t(n)."""
    t, n, posted = before
    if n == 0 or t >= theta["horizon"] or (call is not None and call["tool"] != "end_period"):
        return 0.0
    later, scale = values["later"][t]
    options = _options(theta, _numerators(theta, t), later, scale, n)
    d = _denominator(theta)
    chosen = options[posted] if call is not None else theta["salvage_value"] * n * d * scale
    return float(Fraction(chosen - max(options), d * scale))


def turn_budget(theta: dict) -> int:
    """A price change and an end of period for every period, plus every probe and a few looks."""
    return 2 * theta["horizon"] + 12


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


TABLES = ("menu", "periods", "ledger", "surveys", "state")


class World(BaseWorld):
    """The seller's relational world: price menu, period history, ledger, surveys and a state table."""

    PARAMS = ("horizon", "capacity", "prices", "buy_early", "buy_late", "salvage_value")
    # units_left starts at θ's capacity (set in __init__); posted is -1 while sales are closed
    STATE = (("period", 0), ("units_left", 0), ("posted", -1), ("surveys", 0))

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        k = len(params["prices"])
        if k < 1 or len(params["buy_early"]) != k or len(params["buy_late"]) != k or params["horizon"] < 2:
            raise ValueError("prices, buy_early and buy_late must be lists of one length and horizon >= 2")
        if any(not 0 <= r <= 1000 for r in list(params["buy_early"]) + list(params["buy_late"])):
            raise ValueError("purchase rates are per mille, in 0 ... 1000")
        self._set("units_left", params["capacity"])
        self.draws = World.tickets(params, episode_seed)
        t = self.t
        db.execute(f"CREATE TABLE {t['menu']} (level INTEGER PRIMARY KEY, price INTEGER)")
        db.execute(f"CREATE TABLE {t['periods']} (period INTEGER PRIMARY KEY, level INTEGER, price INTEGER, "
                   "sold INTEGER, units_left INTEGER)")
        db.execute(f"CREATE TABLE {t['ledger']} (entry_id INTEGER PRIMARY KEY, period INTEGER, kind TEXT, "
                   "amount INTEGER)")
        db.execute(f"CREATE TABLE {t['surveys']} (survey_id INTEGER PRIMARY KEY, period INTEGER, estimates TEXT)")
        db.executemany(f"INSERT INTO {t['menu']} VALUES (?, ?)", list(enumerate(params["prices"])))

    @staticmethod
    def tickets(params, episode_seed):
        """The episode's customers, one integer ticket a period from random.Random(seed): a sale at
        level a in period t happens iff ticket < buy_early[a] * (H - 1 - t) + buy_late[a] * t."""
        rng = random.Random(episode_seed)
        span = 1000 * (params["horizon"] - 1)
        return [rng.randrange(span) for _ in range(params["horizon"])]

    # -- state helpers --------------------------------------------------------------------
    def _book(self, period, kind, amount):
        if amount:
            self.db.execute(f"INSERT INTO {self.t['ledger']} (period, kind, amount) VALUES (?, ?, ?)",
                            (period, kind, amount))

    def _threshold(self, period, level):
        h = self.p["horizon"]
        return self.p["buy_early"][level] * (h - 1 - period) + self.p["buy_late"][level] * period

    def _posted(self):
        level = self._get("posted")
        if level < 0:
            return {"posted_level": None, "posted_price": None, "sales_open": False}
        return {"posted_level": level, "posted_price": self.p["prices"][level], "sales_open": True}

    def _open(self):
        if self.over():
            raise AgentError("the season is over")

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("period") >= self.p["horizon"] or self._get("units_left") == 0

    def utility(self):
        return self.db.execute(f"SELECT COALESCE(SUM(amount), 0) FROM {self.t['ledger']}").fetchone()[0]

    def run_out(self):
        self._idle_to_end(self.tool_end_period, posted=-1)

    def limits(self, presentation):
        """Menu levels run 0 … K − 1 and the season has H periods (both instructions tell the menu and H)."""
        return {"set_price": {"level": (0, len(self.p["prices"]) - 1)},
                "view_sales": {"last_periods": (1, self.p["horizon"])}}

    # -- tools ------------------------------------------------------------------------------
    @tool("probe", "Commission the demand study for {item}: the exact probability of a sale at every price level "
          "in the first and in the last period of the season (linear in between).", reveals=("buy_early", "buy_late"),
          turn_cost=2)
    def tool_get_demand_study(self):
        p, h = self.p, self.p["horizon"]
        rows = [{"level": k, "price": price, "sale_probability_first_period": p["buy_early"][k] / 1000.0,
                 "sale_probability_last_period": p["buy_late"][k] / 1000.0}
                for k, price in enumerate(p["prices"])]
        return {"purchase_rates": rows, "currency": self.v["currency"],
                "rule": f"in period t (0 ... {h - 1}) the probability of a sale at a level is "
                        f"(first * ({h - 1} - t) + last * t) / {h - 1}; at most one sale a period"}

    @tool("probe", "Run a quick market survey for {item}: an ESTIMATE of the first- and last-period purchase "
          "rates at every price level from 50 respondents per rate (noisy; each survey draws fresh respondents; the "
          "demand study gives the exact rates).", reveals=("buy_early", "buy_late"), turn_cost=1, noisy=True)
    def tool_run_market_survey(self):
        k = self._get("surveys")
        rng = random.Random(self.episode_seed * 7919 + k)  # the survey's own stream: the tickets never see it
        n = 50
        rows = []
        for level, price in enumerate(self.p["prices"]):
            first = sum(1 for _ in range(n) if rng.randrange(1000) < self.p["buy_early"][level]) / float(n)
            last = sum(1 for _ in range(n) if rng.randrange(1000) < self.p["buy_late"][level]) / float(n)
            rows.append({"level": level, "price": price, "estimated_first_period_rate": first,
                         "estimated_last_period_rate": last})
        self._set("surveys", k + 1)
        self.db.execute(f"INSERT INTO {self.t['surveys']} (period, estimates) VALUES (?, ?)",
                        (self._get("period"), json.dumps(rows, sort_keys=True)))
        return {"survey": k + 1, "respondents_per_rate": n, "estimates": rows,
                "note": "an estimate from a small sample: each survey draws fresh respondents; the demand study "
                        "gives the exact rates"}

    @tool("probe", "Read the {supplier}'s buy-back terms: the salvage price in {currency} per {unit} left at the "
          "end of the season.", reveals=("salvage_value",))
    def tool_get_buyback_terms(self):
        return {"salvage_value_per_unit": self.p["salvage_value"], "currency": self.v["currency"],
                "when": f"units left at the end of the season are bought back by the {self.v['supplier']}"}

    @tool("observe", "Show the {unit} left to sell and the {unit} sold so far.")
    def tool_view_stock(self):
        left = self._get("units_left")
        return {"units_left": left, "units_sold": self.p["capacity"] - left, "capacity": self.p["capacity"],
                "unit": self.v["unit"]}

    @tool("observe", "Show the price level posted now (or that sales are closed).")
    def tool_view_price(self):
        out = self._posted()
        out["currency"] = self.v["currency"]
        return out

    @tool("observe", "List the price levels of the menu and their prices in {currency}.")
    def tool_view_price_menu(self):
        rows = self.db.execute(f"SELECT level, price FROM {self.t['menu']} ORDER BY level").fetchall()
        return {"levels": [{"level": k, "price": price} for k, price in rows], "currency": self.v["currency"]}

    @tool("observe", "Show the current period number and the periods left in the season.")
    def tool_view_calendar(self):
        period = self._get("period")
        return {"period": period, "periods_left": max(0, self.p["horizon"] - period), "horizon": self.p["horizon"],
                "season_over": self.over()}

    @tool("observe", "List recent periods: level posted, whether a {unit} sold, {unit} left.",
          last_periods=integer(1, 200, "how many periods back"))
    def tool_view_sales(self, last_periods=10):
        rows = self.db.execute(f"SELECT period, level, price, sold, units_left FROM {self.t['periods']} "
                               "ORDER BY period DESC LIMIT ?", (last_periods,)).fetchall()
        keys = ("period", "level", "price", "sold", "units_left")
        return {"periods": [dict(zip(keys, row)) for row in rows]}

    @tool("observe", "Show the {site}'s takings so far in {currency}: sales and salvage.")
    def tool_view_revenue(self):
        rows = self.db.execute(f"SELECT kind, COALESCE(SUM(amount), 0) FROM {self.t['ledger']} GROUP BY kind "
                               "ORDER BY kind").fetchall()
        return {"by_kind": dict(rows), "total": self.utility(), "currency": self.v["currency"]}

    @tool("decision", "Post a price level from the menu for {item}; it stays posted for this and later periods "
          "until changed.", level=integer(0, MAX_LEVELS - 1, "menu level, 0 for the cheapest"))
    def tool_set_price(self, level):
        self._open()
        if level >= len(self.p["prices"]):
            raise AgentError(f"the menu has levels 0 to {len(self.p['prices']) - 1}, got {level}")
        self._set("posted", level)
        return self._posted()

    @tool("decision", "Take {item} off sale (no price posted) until a level is posted again.")
    def tool_close_sales(self):
        self._open()
        if self._get("posted") < 0:
            raise AgentError("sales are already closed")
        self._set("posted", -1)
        return self._posted()

    @tool("clock", "Run the period at the posted price: at most one customer buys one {unit}; then move to the "
          "next period (after the last one, the {unit} left are bought back).")
    def tool_end_period(self):
        self._open()
        p, period, left, level = self.p, self._get("period"), self._get("units_left"), self._get("posted")
        sold = 1 if level >= 0 and self.draws[period] < self._threshold(period, level) else 0
        if sold:
            self._book(period, "sales", p["prices"][level])
            left -= 1
        self.db.execute(f"INSERT INTO {self.t['periods']} VALUES (?, ?, ?, ?, ?)",
                        (period, level if level >= 0 else None, p["prices"][level] if level >= 0 else None, sold,
                         left))
        self._set("units_left", left)
        self._set("period", period + 1)
        if period + 1 >= p["horizon"] and left > 0:
            self._book(period, "salvage", p["salvage_value"] * left)
        out = {"period_closed": period, "sold": bool(sold), "units_left": left,
               "revenue": self.utility(), "periods_left": p["horizon"] - period - 1}
        if left == 0:
            out["season_over"] = "sold out"
        elif period + 1 >= p["horizon"]:
            out["season_over"] = f"last period: {self._count(left)} bought back"
        return out

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        h = p["horizon"]
        menu = ", ".join(f"level {k} = {x}" for k, x in enumerate(p["prices"]))
        lines = [
            self.skin["narrative"],
            "",
            (f"The {v['site']} has {self._count(p['capacity'])} left ({v['item']}, {v['sku']}) to sell over a "
             f"season of {h} selling periods, numbered 0 to {h - 1}; no more can be had from the {v['supplier']} "
             "this season."),
            (f"Price menu ({v['currency']}): {menu}. {n['set_price']} posts a level (it stays posted until you change "
             f"it), {n['close_sales']} takes the {v['unit']} off sale; sales start closed."),
            (f"{n['end_period']} runs the period: at most one customer comes and buys a single one of the {v['unit']} "
             "at the posted price, with a probability that falls with the price and rises linearly from the first "
             "period to the last (late customers are less price-sensitive); nothing is sold while sales are closed."),
            (f"The season ends after period {h - 1}, or as soon as the last unit is sold; units left then are bought "
             f"back by the {v['supplier']} at a fixed salvage price per unit."),
            (f"Your score is the revenue from sales plus the salvage, in {v['currency']}. You have {turn_budget} "
             "turns: every tool call the world answers uses its turn cost; when they run out, sales close for "
             "the rest of the season and the units left are bought back."),
        ]
        if presentation == "I":
            lines += [
                "",
                f"Salvage price: {p['salvage_value']} {v['currency']} per unit left at the end.",
                (f"Probability of a sale in period t at a level: (first * ({h - 1} - t) + last * t) / {h - 1}, with "
                 "first and last per level:"),
            ]
            for k, price in enumerate(p["prices"]):
                lines.append(f"  level {k} ({price}): first {p['buy_early'][k] / 1000.0:.3f}, "
                             f"last {p['buy_late'][k] / 1000.0:.3f}")
        else:
            lines += [
                "",
                (f"The purchase probabilities and the salvage price are not given: {n['get_demand_study']} reveals "
                 f"the exact purchase probabilities (2 turns), {n['run_market_survey']} gives a noisy estimate of them "
                 f"from a small sample (1 turn, fresh noise each time) and {n['get_buyback_terms']} reveals the "
                 "salvage price (1 turn); the turns come from the same budget."),
            ]
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="dynamic_pricing",
    version="4",
    group="beyond",
    model_class="finite-horizon revenue-management MDP (perishable stock, price menu, time-varying demand)",
    solver="backward Bellman recursion (exact integer-scaled rationals, python int)",
    stochastic=True,
))
