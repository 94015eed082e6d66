"""Energy storage arbitrage: one battery, a Markov-regime electricity price, hourly charge/discharge.

Model
    A site runs a battery of `capacity` = C energy units for `horizon` = H hours, numbered
    0 … H − 1 (hour t has hour of day t % 24). The state of charge s is an integer in 0 … C and
    starts at `initial_soc`. The price follows a Markov chain over R = len(`regime_prices`)
    regimes 0 … R − 1 (sorted by base price): hour 0 is in regime `initial_regime`, and after
    hour t the regime of hour t + 1 is r' with probability transition_weights[r][r'] /
    Σ transition_weights[r] (r the regime of hour t), independently of the trades. The price of
    hour t in regime r is the integer regime_prices[r] + hour_profile[t % 24] (currency per unit,
    always ≥ 1). In hour t, seeing s and r, the operator trades a signed amount k with |k| ≤
    `power` and 0 ≤ s + k ≤ C: k > 0 charges k units (buys them at the price: cash − price·k),
    k < 0 discharges −k units (the grid is paid for only `efficiency_pct` % of them: cash +
    price·(−k)·efficiency_pct / 100, and the battery wears: cash − cycling_cost·(−k)), k = 0
    idles; then s becomes s + k. After the last hour's trade the stored units are bought back at
    `terminal_value` per unit (cash + terminal_value·s). Money is booked exactly in hundredths of
    the currency (every amount above is a whole number of hundredths).
    Solved exactly by backward Bellman recursion over (hour, state of charge, regime):
    V_H(s, r) = terminal_value·s, V_t(s, r) = max_k [reward(t, r, k) + Σ_r' P[r][r'] V_{t+1}(s + k, r')].
    Limits: solve() takes 1 … MAX_HORIZON = 168 hours, a capacity of 1 … MAX_CAPACITY = 60
    units, 1 … MAX_REGIMES = 4 regimes, whole prices (≥ 1 in every hour), whole weights, costs
    and values ≥ 0, and states within their ranges; any other θ is refused with InvalidParams
    before anything is allocated (`check_theta`).

State
    the hour, the state of charge, this hour's scheduled trade, the price of every hour that has
    begun (hour, regime, price), the trade log, the cash ledger (every purchase, sale, wear charge
    and the buy-back is a row, in hundredths of the currency; its balance kept with every entry: no
    call sums it), the number of price-sticker reads.

Tools
    probes: the tariff sheet (exact base price per regime and hour-of-day add-ons; 2 turns), the
    price sticker (a noisy estimate of the base prices; 1 turn), the market outlook (regime
    transition probabilities), the battery spec sheet (efficiency, wear cost, buy-back price);
    decisions: schedule a charge, schedule a discharge, cancel this hour's schedule; clock: end
    the hour; observations: battery, cash, trade log, clock (hour, regime), the price of an hour,
    the price history. The tool schemas are fitted to the instance (the same in I and A, from what
    both instructions tell): hours stop at H − 1, listings at H rows, and a charge or a discharge
    at the power limit.

Plan
    an integer array of shape [horizon, capacity + 1, len(regime_prices)]: entry [t, s, r] is
    the signed number of units traded in hour t when the battery holds s units and the regime is
    r (k > 0 charges k, k < 0 discharges −k, 0 idles), with |k| ≤ power and 0 ≤ s + k ≤ capacity
    in every entry.

Reward
    utility = cash at the end − cash at the start = sales × efficiency − purchases − wear +
    buy-back of the final charge, in the currency. r = clip01((u − u_default) / (u* − u_default))
    where both references are played on the same episode seed (the same regime path).

Advantages
    The solver's state is (hour t, state of charge s, regime r): the World's hour and charge,
    and the hour's regime from its pre-drawn regime path; the hour's action is the trade k
    settled by `end_hour` (this hour's schedule). `end_hour` gets A* = Q*_t(s, r, k) − V*_t(s, r),
    Q* = the hour's cash + the expected V*_{t+1} over the next regime, as the solver computes it;
    scheduling a charge or discharge, or cancelling it, only sets k (A* = 0). Running out of turns
    drops this hour's schedule and idles to the end: A* = I_t(s, r) − V*_t(s, r), I the value of
    never trading again (the same recursion with k = 0). Floats, as the solver's.

Episode end
    after the last hour's `end_hour`, or when the turn budget runs out (this hour's scheduled
    trade is then dropped and the remaining hours pass idle; the final charge is bought back).
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
MAX_CAPACITY = 60
MAX_HORIZON = 168
MAX_REGIMES = 4  # solve() bound on len(regime_prices) (the sampler draws 2 … 4)
HIDDEN = ("regime_prices", "hour_profile", "transition_weights", "efficiency_pct", "cycling_cost", "terminal_value")
# the shape of a day's price add-on (night trough, morning and evening peaks), in tenths of the amplitude
DAY_SHAPE = (-6, -8, -9, -10, -9, -6, -1, 4, 6, 4, 1, -2, -4, -5, -4, -2, 2, 7, 10, 9, 6, 3, 0, -3)


class Params(BaseModel):
    """Difficulty knobs of an energy-storage instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = knob(12, 2, MAX_CAPACITY, sampled=(4, 40), description="battery capacity, in energy units")
    horizon: int = knob(24, 2, MAX_HORIZON, sampled=(12, 72), description="number of hours traded, in hours")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: 2–4 regimes with sorted integer base prices (the lowest 12–30 and above the daily
    amplitude, gaps 5–20, a fourth "spike" regime 20–50 above the third), sticky transitions (stay
    with probability 0.4–0.8, the rest Dirichlet-split; integer weights out of 1000), a daily add-on
    of amplitude 8–24 on the fixed DAY_SHAPE (± 1 jitter per hour), a power limit of 10–30 % of the
    capacity (at least 1), 70–92 % discharge efficiency, a wear cost of 0–3 per unit discharged, a
    buy-back price below the cheapest possible price, a start at most half full."""
    capacity, horizon = params.size, params.horizon
    n_regimes = int(rng.integers(2, 5))
    amplitude = int(rng.integers(8, 25))
    prices = [int(rng.integers(max(12, amplitude + 2), 31))]
    for r in range(1, n_regimes):
        gap = int(rng.integers(20, 51)) if r == 3 else int(rng.integers(5, 21))
        prices.append(prices[-1] + gap)
    profile = [round(amplitude * s / 10) + int(rng.integers(-1, 2)) for s in DAY_SHAPE]
    weights = []
    for r in range(n_regimes):
        stay = round(WEIGHT_TOTAL * float(rng.uniform(0.4, 0.8)))
        rest = rng.multinomial(WEIGHT_TOTAL - stay, rng.dirichlet(np.ones(n_regimes - 1)))
        others = iter(int(x) for x in rest)
        weights.append([stay if j == r else next(others) for j in range(n_regimes)])
    cheapest = prices[0] + min(profile)
    power = max(1, round(capacity * float(rng.uniform(0.1, 0.3))))
    return {
        "horizon": int(horizon),
        "capacity": int(capacity),
        "power": int(min(power, capacity)),
        "initial_soc": int(rng.integers(0, capacity // 2 + 1)),
        "initial_regime": int(rng.integers(0, n_regimes)),
        "regime_prices": prices,
        "hour_profile": profile,
        "transition_weights": weights,
        "efficiency_pct": int(rng.integers(70, 93)),
        "cycling_cost": int(rng.integers(0, 4)),
        "terminal_value": int(rng.integers(0, max(1, cheapest))),
    }


# ---------------------------------------------------------------------------------------------
# The decision process as arrays: money in hundredths of the currency, states (soc, regime).


class _Process:
    """Rewards and transitions of θ, shared by the solver and the evaluator."""

    def __init__(self, theta: dict):
        self.theta = theta
        self.C, self.P, self.H = theta["capacity"], theta["power"], theta["horizon"]
        self.R = len(theta["regime_prices"])
        weights = np.array(theta["transition_weights"], dtype=float)
        if weights.shape != (self.R, self.R) or (weights < 0).any() or (weights.sum(axis=1) <= 0).any():
            raise ValueError("transition_weights must be an R × R matrix of non-negative rows with positive sums")
        self.transition = weights / weights.sum(axis=1, keepdims=True)
        self.actions = np.arange(-self.P, self.P + 1)  # index j ↔ trade k = j − P
        soc = np.arange(self.C + 1)
        after = soc[:, None] + self.actions[None, :]
        self.valid = (after >= 0) & (after <= self.C)  # [s, j]
        self.after = np.clip(after, 0, self.C)

    def price(self, hour: int) -> np.ndarray:
        return np.array(self.theta["regime_prices"]) + self.theta["hour_profile"][hour % 24]

    def reward(self, hour: int) -> np.ndarray:
        """Cash of each (regime, trade) in hundredths: −100·p·k to charge, p·|k|·eff − 100·wear·|k| to discharge."""
        p, k = self.price(hour)[:, None], self.actions[None, :]
        charge = -100 * p * np.maximum(k, 0)
        out = np.maximum(-k, 0)
        discharge = p * out * self.theta["efficiency_pct"] - 100 * self.theta["cycling_cost"] * out
        return (charge + discharge).astype(float)  # [r, j]

    def terminal(self) -> np.ndarray:
        return np.repeat(100.0 * self.theta["terminal_value"] * np.arange(self.C + 1)[:, None], self.R, axis=1)

    def q_values(self, hour: int, v_next: np.ndarray) -> np.ndarray:
        """Expected cash-to-go of every (soc, regime, trade) in `hour`, given next hour's values [s, r]."""
        expected = v_next @ self.transition.T  # [s', r] = Σ_r' P[r, r'] V(s', r')
        q = self.reward(hour)[None, :, :] + expected[self.after, :].transpose(0, 2, 1)  # [s, r, j]
        return np.where(self.valid[:, None, :], q, -np.inf)


def _backward(proc: _Process) -> tuple[list[np.ndarray], np.ndarray]:
    """V*_t [soc, regime] in hundredths for t = 0 … H (V*_H the buy-back) and π*, by backward recursion."""
    values = [proc.terminal()]
    policy = np.zeros((proc.H, proc.C + 1, proc.R), dtype=np.int16)
    for hour in range(proc.H - 1, -1, -1):
        q = proc.q_values(hour, values[-1])
        best = q.argmax(axis=2)
        policy[hour] = proc.actions[best]
        values.append(np.take_along_axis(q, best[:, :, None], axis=2)[:, :, 0])
    return values[::-1], policy


def _bellman(theta: dict) -> tuple[float, np.ndarray]:
    values, policy = _backward(_Process(theta))
    return float(values[0][theta["initial_soc"], theta["initial_regime"]]) / 100, policy


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … MAX_HORIZON = 168 hours, a capacity
    of 1 … MAX_CAPACITY = 60 units, 1 … MAX_REGIMES = 4 regimes, whole prices (≥ 1 in every
    hour), whole weights, costs and values ≥ 0, and states within their ranges."""
    check = ThetaCheck("energy_storage", theta)
    check.count("horizon", 1, MAX_HORIZON)
    capacity = check.count("capacity", 1, MAX_CAPACITY)
    check.whole("power", low=1, high=capacity)
    check.whole("initial_soc", low=0, high=capacity)
    regimes = check.length("regime_prices", 1, MAX_REGIMES)
    check.whole("regime_prices", (regimes,))
    check.whole("initial_regime", low=0, high=regimes - 1)
    check.whole("hour_profile", (24,))
    check.require(min(theta["regime_prices"]) + min(theta["hour_profile"]) >= 1, "regime_prices",
                  "prices ≥ 1 in every hour (regime_prices[r] + hour_profile[h] ≥ 1)")
    check.whole("transition_weights", (regimes, regimes), low=0)
    check.require(all(sum(row) > 0 for row in theta["transition_weights"]), "transition_weights",
                  "every row with a positive total weight")
    check.whole("efficiency_pct", low=0, high=100)
    check.whole("cycling_cost", low=0)
    check.whole("terminal_value", low=0)


def solve(theta: dict) -> Solution:
    """u* and π* (signed trade per hour, charge, regime; int16) by backward recursion; default and idle values."""
    check_theta(theta)
    state_space = theta["horizon"] * (theta["capacity"] + 1) * len(theta["regime_prices"])
    found = certified(lambda: _bellman(theta), state_space=state_space,
                      method="backward Bellman recursion over (hour, state of charge, regime)")
    return solved(theta, found, evaluate, default_policy, idle_policy)


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: [hour, soc s, regime] → a signed trade k with |k| ≤ power and 0 ≤ s + k ≤ capacity."""
    C, P = theta["capacity"], theta["power"]
    soc = np.arange(C + 1)[:, None]
    return PlanSpec(shape=(theta["horizon"], C + 1, len(theta["regime_prices"])), integer=True,
                    low=np.maximum(-P, -soc), high=np.minimum(P, C - soc))


def _check_plan(theta: dict, policy: np.ndarray) -> np.ndarray:
    """The plan as an int64 array; InvalidPlan (a ValueError) naming the first entry not of the declared form."""
    return plan_spec(theta).check(policy)


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact expected utility of a Markov plan [hour, soc, regime] → signed trade (ValueError if invalid)."""
    plan = _check_plan(theta, policy)
    proc = _Process(theta)
    value = proc.terminal()
    for hour in range(proc.H - 1, -1, -1):
        q = proc.q_values(hour, value)
        value = np.take_along_axis(q, (plan[hour] + proc.P)[:, :, None], axis=2)[:, :, 0]
    return float(value[theta["initial_soc"], theta["initial_regime"]]) / 100


# z = (u0 − u_idle) / (u* − u_idle), u_idle = buy-back of the initial charge: below −1 never
# trading would score over 0.5; above 0.95 the mean-price threshold already nearly solves it
DEFAULT_BAND = (-1.0, 0.95)


def default_policy(theta: dict) -> np.ndarray:
    """Threshold rule on the mean price M = mean(regime_prices) + mean(hour_profile): charge as
    much as the power limit and the free capacity allow when the hour's price is below M,
    discharge as much as the power limit and the charge allow when it is above M, idle when
    equal; efficiency, wear, buy-back and the transition probabilities are ignored."""
    C, P, H = theta["capacity"], theta["power"], theta["horizon"]
    prices, profile = theta["regime_prices"], theta["hour_profile"]
    R = len(prices)
    scaled_mean = 24 * sum(prices) + R * sum(profile)  # M · 24R, compared in integers
    plan = np.zeros((H, C + 1, R), dtype=np.int16)
    for hour in range(H):
        for r in range(R):
            scaled = (prices[r] + profile[hour % 24]) * 24 * R
            for s in range(C + 1):
                if scaled < scaled_mean:
                    plan[hour, s, r] = min(P, C - s)
                elif scaled > scaled_mean:
                    plan[hour, s, r] = -min(P, s)
    return plan


def idle_policy(theta: dict) -> np.ndarray:
    """Never trade."""
    return np.zeros((theta["horizon"], theta["capacity"] + 1, len(theta["regime_prices"])), dtype=np.int16)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random valid trade in every (hour, soc, regime); idle half the time."""
    C, P = theta["capacity"], theta["power"]
    shape = (theta["horizon"], C + 1, len(theta["regime_prices"]))
    soc = np.arange(C + 1)[None, :, None]
    low, high = np.maximum(-P, -soc), np.minimum(P, C - soc)
    trade = low + np.floor(rng.random(shape) * (high - low + 1)).astype(np.int64)
    return np.where(rng.random(shape) < 0.5, 0, trade).astype(np.int16)


def boundary_calls(theta: dict, rng: np.random.Generator) -> list[list[dict]]:
    """Near-boundary decisions for the reference_agreement gate: charge at the power limit hour
    after hour, trying one unit more each hour (refused at the power limit) and one charge past
    the capacity once the battery is full; then discharge the same way. A second sequence
    charges at the power limit until less than one hour's power of room is left, then tries one
    unit past the capacity (within the power limit, so only the capacity check can refuse it),
    fills the battery exactly, and tries the opposite direction in every hour that has a trade
    scheduled."""
    power, capacity = theta["power"], theta["capacity"]

    def call(tool, units=None):
        return {"tool": tool, "arguments": {} if units is None else {"units": int(units)}}

    calls: list[dict] = []
    hours = min(theta["horizon"] - 1, capacity // max(1, power) + 2)
    for kind in ("charge", "discharge"):
        for _ in range(hours // 2):
            calls += [call(kind, power + 1), call(kind, power), call(kind, 1), call("end_hour")]
    # second sequence: at the power limit until less than an hour's power of room is left, then one
    # unit past the capacity (refused by the capacity check, not the power check), then exactly full;
    # each hour also tries the opposite direction once a trade is scheduled (refused)
    soc, second = theta["initial_soc"], []
    for _ in range(theta["horizon"] - 1):
        room = capacity - soc
        if room < power:  # the last hour: one unit past the capacity (within the power limit), then full
            second.append(call("charge", room + 1))
        units = min(power, room)
        second += ([call("charge", units), call("discharge", 1)] if units else []) + [call("end_hour")]
        soc += units
        if room < power:
            break
    if soc > 0:
        second += [call("discharge", min(power, soc)), call("charge", 1), call("end_hour")]
    return [calls, second]


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a plan on the episode's regime path; the canonical calls that play it."""
    plan = _check_plan(theta, policy)
    regimes = World.regime_path(theta, episode_seed)
    soc, cents = theta["initial_soc"], 0
    calls, decisions = [], []
    for hour, r in enumerate(regimes):
        k = int(plan[hour, soc, r])
        decisions.append(k)
        price = theta["regime_prices"][r] + theta["hour_profile"][hour % 24]
        if k > 0:
            calls.append({"tool": "charge", "arguments": {"units": k}})
            cents -= 100 * price * k
        elif k < 0:
            calls.append({"tool": "discharge", "arguments": {"units": -k}})
            cents += price * -k * theta["efficiency_pct"] - 100 * theta["cycling_cost"] * -k
        calls.append({"tool": "end_hour", "arguments": {}})
        soc += k
    cents += 100 * theta["terminal_value"] * soc
    return Episode(utility=cents / 100, calls=calls, decisions=decisions)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the state is (hour, state of charge, regime) as the solver indexes it; the
# hour's action is the trade settled by `end_hour`. Q*_t(s, r, k) is the solver's own `q_values`
# on V*_{t+1}, in hundredths like the solver's tables.


class _Values:
    """What the solver knows of θ: V*_t and the value I_t of idling to the end, t = 0 … H, in hundredths."""

    def __init__(self, theta: dict):
        self.proc = _Process(theta)
        self.optimal, _ = _backward(self.proc)
        self.u_star = float(self.optimal[0][theta["initial_soc"], theta["initial_regime"]]) / 100
        self.idle = [self.proc.terminal()]
        for hour in range(self.proc.H - 1, -1, -1):
            self.idle.append(self.proc.q_values(hour, self.idle[-1])[:, :, self.proc.P])  # trade k = 0
        self.idle.reverse()
        self._hours: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def q(self, hour: int, soc: int, regime: int, trade: int) -> float:
        """`q_values(hour, V*_{t+1})[soc, regime, trade]`: the same sum, of the hour's cash and the
        expected value after it, each kept per hour (`_hour`) rather than the whole table computed."""
        proc, j = self.proc, trade + self.proc.P
        if not proc.valid[soc, j]:
            return -math.inf
        cash, expected = self._hour(hour)
        return float(cash[regime, j] + expected[proc.after[soc, j], regime])

    def _hour(self, hour: int) -> tuple[np.ndarray, np.ndarray]:
        """The hour's cash [r, j] and Σ_r' P[r, r'] V*_{t+1}(s', r') [s', r], as `q_values` computes them."""
        found = self._hours.get(hour)
        if found is None:
            found = self._hours[hour] = (self.proc.reward(hour), self.optimal[hour + 1] @ self.proc.transition.T)
        return found


def decision_values(theta: dict) -> _Values:
    """V*_t and the idle values I_t over every (hour, charge, regime), by the solver's recursion; u* = V*_0."""
    check_theta(theta)
    return _Values(theta)


def decision_state(theta: dict, world) -> tuple[int, int, int | None, int]:
    """(hour, state of charge, this hour's regime from the pre-drawn path, this hour's scheduled trade)."""
    hour, soc, scheduled = world._read("hour", "soc", "scheduled")
    return hour, soc, world.regimes[hour] if hour < theta["horizon"] else None, scheduled


def advantage(theta: dict, values: _Values, before: tuple, call: dict | None, after: tuple) -> float:
    """`end_hour`: Q*_t(s, r, scheduled trade) − V*_t(s, r); scheduling or cancelling (tentative) 0;
    running out: I_t(s, r) − V*_t(s, r) (this hour's schedule dropped, the rest idle). In currency."""
    hour, soc, regime, scheduled = before
    if hour >= theta["horizon"]:
        return 0.0
    best = float(values.optimal[hour][soc, regime])
    if call is None:
        return (float(values.idle[hour][soc, regime]) - best) / 100
    if call["tool"] != "end_hour":
        return 0.0
    return (values.q(hour, soc, regime, scheduled) - best) / 100


def turn_budget(theta: dict) -> int:
    """A trade and an end of hour for every hour, plus room for every probe and a few looks."""
    return 2 * theta["horizon"] + 16


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


TABLES = ("battery", "prices", "trades", "ledger", "state")


class World(BaseWorld):
    """The site's battery world: battery, hourly prices, trades, a ledger in hundredths, a state table."""

    PARAMS = ("horizon", "capacity", "power", "initial_soc", "initial_regime", "regime_prices", "hour_profile",
              "transition_weights", "efficiency_pct", "cycling_cost", "terminal_value")
    # soc: set to initial_soc; cents: the ledger's sum, in hundredths
    STATE = (("hour", 0), ("soc", 0), ("scheduled", 0), ("sticker_reads", 0), ("cents", 0))
    LABELS = ((), ("flat",), ("low", "high"), ("low", "normal", "high"), ("low", "normal", "high", "spike"))

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        n = len(params["regime_prices"])
        if len(params["hour_profile"]) != 24 or len(params["transition_weights"]) != n or any(
                len(row) != n or sum(row) <= 0 for row in params["transition_weights"]):
            raise ValueError("hour_profile needs 24 entries and transition_weights an R × R matrix of positive rows")
        if not 0 <= params["initial_soc"] <= params["capacity"] or not 0 <= params["initial_regime"] < n:
            raise ValueError("initial_soc or initial_regime out of range")
        self.labels = self.LABELS[n] if n < len(self.LABELS) else tuple(f"regime {r}" for r in range(n))
        self.regimes = World.regime_path(params, episode_seed)
        self._reads = {}  # the queries of `_read`, by number of keys
        t = self.t
        db.execute(f"CREATE TABLE {t['battery']} (asset TEXT PRIMARY KEY, capacity INTEGER, power INTEGER)")
        db.execute(f"CREATE TABLE {t['prices']} (hour INTEGER PRIMARY KEY, regime INTEGER, label TEXT, price INTEGER)")
        db.execute(f"CREATE TABLE {t['trades']} (trade_id INTEGER PRIMARY KEY, hour INTEGER REFERENCES "
                   f"{t['prices']}(hour), kind TEXT, units INTEGER, price INTEGER, soc_after INTEGER)")
        db.execute(f"CREATE TABLE {t['ledger']} (entry_id INTEGER PRIMARY KEY, hour INTEGER, kind TEXT, "
                   "hundredths INTEGER)")
        db.execute(f"INSERT INTO {t['battery']} VALUES (?, ?, ?)",
                   (self.v["site"] + " battery", params["capacity"], params["power"]))
        self._set("soc", params["initial_soc"])
        self._open_hour(0)

    @staticmethod
    def regime_path(params, episode_seed):
        """The episode's regime of every hour: integer inverse-CDF draws from random.Random(seed)."""
        rng = random.Random(episode_seed)
        path = [params["initial_regime"]]
        for _ in range(1, params["horizon"]):
            path.append(World.draw_index(rng, params["transition_weights"][path[-1]]))
        return path

    # -- state helpers --------------------------------------------------------------------
    def _read(self, *keys):
        """Values of the state table, in the order of `keys` (one query, made once per number of keys)."""
        query = self._reads.get(len(keys))
        if query is None:
            query = self._reads[len(keys)] = "SELECT " + ", ".join(
                [f"(SELECT value FROM {self.t['state']} WHERE key = ?)"] * len(keys))
        return self.db.execute(query, keys).fetchone()

    def _write(self, keys, before, after):
        """Set the state `keys` whose values changed from `before` to `after` (one statement)."""
        self.db.executemany(f"UPDATE {self.t['state']} SET value = ? WHERE key = ?",
                            [(new, key) for key, old, new in zip(keys, before, after) if new != old])

    def _book(self, hour, *entries):
        """Enter (kind, hundredths) rows in the ledger (an amount of 0 is not entered); returns their
        sum, which the caller adds to the state's cents (the ledger's balance, never summed from its rows)."""
        rows = [(hour, kind, hundredths) for kind, hundredths in entries if hundredths]
        self.db.executemany(f"INSERT INTO {self.t['ledger']} (hour, kind, hundredths) VALUES (?, ?, ?)", rows)
        return sum(row[2] for row in rows)

    def _cents(self):
        return self._get("cents")

    def _price(self, hour):
        return self.p["regime_prices"][self.regimes[hour]] + self.p["hour_profile"][hour % 24]

    def _open_hour(self, hour):
        r = self.regimes[hour]
        self.db.execute(f"INSERT INTO {self.t['prices']} VALUES (?, ?, ?, ?)",
                        (hour, r, self.labels[r], self._price(hour)))

    def _units(self, n):
        return self._count(n, "units", "unit")

    def _live(self, hour=None):
        """AgentError once the last hour has been traded (`hour`: the hour as read, when it was)."""
        over = self.over() if hour is None else hour >= self.p["horizon"]
        if over:
            raise AgentError("the last hour has been traded; the episode is over")

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("hour") >= self.p["horizon"]

    def utility(self):
        return self._cents() / 100

    def run_out(self):
        self._idle_to_end(self.tool_end_hour, scheduled=0)

    def limits(self, presentation):
        """Hours run 0 … H − 1 (at most H of them, or H trades, to list) and one hour's trade is at most
        the power limit (θ's power ≤ capacity): both instructions tell H and the power."""
        p = self.p
        hours, trade = (1, p["horizon"]), {"units": (1, p["power"])}
        return {"view_price": {"hour": (0, p["horizon"] - 1)}, "view_price_history": {"last_hours": hours},
                "view_trades": {"limit": hours}, "charge": trade, "discharge": trade}

    # -- probes -----------------------------------------------------------------------------
    @tool("probe", "Read the {site}'s electricity tariff sheet: the exact base price in {currency} per energy unit "
          "of every price regime and the add-on for each hour of day. Costs 2 turns.",
          reveals=("regime_prices", "hour_profile"), turn_cost=2)
    def tool_get_tariff_sheet(self):
        p = self.p
        return {"base_price_by_regime": [{"regime": r, "label": self.labels[r], "base_price": x}
                                         for r, x in enumerate(p["regime_prices"])],
                "hour_of_day_add_on": list(p["hour_profile"]),
                "price_rule": "price of hour t = base price of its regime + add-on of hour of day t % 24",
                "currency": self.v["currency"], "per": "energy unit"}

    @tool("probe", "Read the price sticker posted at the meter: an estimate (with noise, fresh on every read) of "
          "each regime's base price in {currency}. Costs 1 turn.", noisy=True)
    def tool_read_price_sticker(self):
        k = self._get("sticker_reads")
        rng = random.Random(self.episode_seed * 7919 + k)  # its own stream: the regime path never sees it
        estimates = []
        for r, x in enumerate(self.p["regime_prices"]):
            spread = max(2, (x + 2) // 5)
            estimates.append({"regime": r, "label": self.labels[r],
                              "estimated_base_price": x + rng.randint(-spread, spread)})
        self._set("sticker_reads", k + 1)
        return {"estimates": estimates, "currency": self.v["currency"], "read": k + 1,
                "note": "an estimate: each base price is off by up to about a fifth, in either direction; "
                        "every read is a fresh estimate; the tariff sheet has the exact prices"}

    @tool("probe", "Read the market outlook: the probability of each price regime next hour, given this hour's "
          "regime.", reveals=("transition_weights",))
    def tool_get_market_outlook(self):
        rows = []
        for r, row in enumerate(self.p["transition_weights"]):
            total = float(sum(row))
            rows.append({"from_regime": r, "label": self.labels[r],
                         "next_hour_probabilities": [w / total for w in row]})
        return {"transitions": rows, "note": "the next hour's regime depends only on this hour's regime"}

    @tool("probe", "Read the battery's spec sheet: discharge efficiency, wear cost per unit discharged and the "
          "buy-back price in {currency} per unit stored at the end.",
          reveals=("efficiency_pct", "cycling_cost", "terminal_value"))
    def tool_get_battery_spec(self):
        p = self.p
        return {"efficiency_pct": p["efficiency_pct"], "wear_cost_per_unit_discharged": p["cycling_cost"],
                "buy_back_price_per_unit_at_end": p["terminal_value"], "capacity": p["capacity"],
                "power_limit_per_hour": p["power"], "currency": self.v["currency"],
                "note": "discharging k units is paid as k × efficiency_pct / 100 units at the hour's price"}

    # -- observations -----------------------------------------------------------------------
    @tool("observe", "Show the battery's state of charge, capacity, power limit and this hour's scheduled trade.")
    def tool_view_battery(self):
        return {"state_of_charge": self._get("soc"), "capacity": self.p["capacity"],
                "power_limit_per_hour": self.p["power"], "scheduled_this_hour": self._get("scheduled"),
                "unit": "energy unit"}

    @tool("observe", "Show the {site}'s cash balance from battery trading, in {currency}.")
    def tool_view_cash(self):
        return {"cash": self._cents() / 100, "currency": self.v["currency"]}

    @tool("observe", "List the most recent charges and discharges with their prices.",
          limit=integer(1, MAX_HORIZON, "how many trades to list"))
    def tool_view_trades(self, limit=10):
        rows = self.db.execute(f"SELECT trade_id, hour, kind, units, price, soc_after FROM {self.t['trades']} "
                               "ORDER BY trade_id DESC LIMIT ?", (limit,)).fetchall()
        keys = ("trade", "hour", "kind", "units", "price", "state_of_charge_after")
        return {"trades": [dict(zip(keys, row)) for row in rows]}

    @tool("observe", "Show the hour, the hour of day, the hours left and the current price regime.")
    def tool_view_clock(self):
        hour = self._get("hour")
        r = self.regimes[min(hour, self.p["horizon"] - 1)]
        return {"hour": hour, "hour_of_day": hour % 24, "hours_left": self.p["horizon"] - hour,
                "regime": r, "regime_label": self.labels[r]}

    @tool("observe", "Show the price regime and the price in {currency} of this hour or an earlier one.",
          hour=integer(0, MAX_HORIZON - 1, "hour number, 0 for the first hour"))
    def tool_view_price(self, hour):
        now = self._get("hour")
        if hour > now or hour >= self.p["horizon"]:
            raise AgentError(f"the price of hour {hour} is not known yet; this is hour {now}")
        r, label, price = self.db.execute(f"SELECT regime, label, price FROM {self.t['prices']} WHERE hour = ?",
                                          (hour,)).fetchone()
        return {"hour": hour, "regime": r, "regime_label": label, "price": price, "currency": self.v["currency"]}

    @tool("observe", "List the regimes and prices of the hours already traded.",
          last_hours=integer(1, MAX_HORIZON, "how many hours back"))
    def tool_view_price_history(self, last_hours=24):
        rows = self.db.execute(f"SELECT hour, regime, label, price FROM {self.t['prices']} WHERE hour < ? "
                               "ORDER BY hour DESC LIMIT ?", (self._get("hour"), last_hours)).fetchall()
        keys = ("hour", "regime", "regime_label", "price")
        return {"past_hours": [dict(zip(keys, row)) for row in rows]}

    # -- decisions and the clock ------------------------------------------------------------
    @tool("decision", "Schedule a charge this hour: buy energy from the grid at this hour's price (adds to this "
          "hour's charge; settled when the hour ends).",
          units=integer(1, MAX_CAPACITY, "energy units to charge this hour"))
    def tool_charge(self, units):
        hour, scheduled, soc = self._read("hour", "scheduled", "soc")
        self._live(hour)
        p = self.p
        if scheduled < 0:
            raise AgentError(f"a discharge of {self._units(-scheduled)} is scheduled this hour; cancel it first")
        if scheduled + units > p["power"]:
            raise AgentError(f"the power limit is {self._units(p['power'])} per hour; {scheduled} already scheduled")
        if soc + scheduled + units > p["capacity"]:
            raise AgentError(f"the battery holds {self._units(p['capacity'])}; it has {soc} stored and {scheduled} "
                             "more scheduled")
        self._set("scheduled", scheduled + units)
        return {"scheduled_this_hour": scheduled + units, "state_of_charge": soc}

    @tool("decision", "Schedule a discharge this hour: sell stored energy at this hour's price, less the efficiency "
          "loss and wear (adds to this hour's discharge; settled when the hour ends).",
          units=integer(1, MAX_CAPACITY, "energy units to discharge this hour"))
    def tool_discharge(self, units):
        hour, scheduled, soc = self._read("hour", "scheduled", "soc")
        self._live(hour)
        p = self.p
        if scheduled > 0:
            raise AgentError(f"a charge of {self._units(scheduled)} is scheduled this hour; cancel it first")
        if -scheduled + units > p["power"]:
            raise AgentError(f"the power limit is {self._units(p['power'])} per hour; {-scheduled} already scheduled")
        if -scheduled + units > soc:
            raise AgentError(f"the battery holds only {self._units(soc)}; {-scheduled} already scheduled to go")
        self._set("scheduled", scheduled - units)
        return {"scheduled_this_hour": scheduled - units, "state_of_charge": soc}

    @tool("decision", "Cancel this hour's scheduled charge or discharge.")
    def tool_cancel_schedule(self):
        self._live()
        if self._get("scheduled") == 0:
            raise AgentError("nothing is scheduled this hour")
        self._set("scheduled", 0)
        return {"scheduled_this_hour": 0}

    @tool("clock", "Close the hour: settle the scheduled trade at this hour's price and move to the next hour (its "
          "regime and price are shown).")
    def tool_end_hour(self):
        p = self.p
        keys = ("hour", "scheduled", "soc", "cents")
        before = self._read(*keys)
        hour, k, soc, cents = before
        self._live(hour)
        price = self._price(hour)
        entries = []
        if k > 0:
            entries.append(("purchase", -100 * price * k))
        elif k < 0:
            entries += [("sale", price * -k * p["efficiency_pct"]), ("wear", -100 * p["cycling_cost"] * -k)]
        soc += k
        if k:
            self.db.execute(f"INSERT INTO {self.t['trades']} (hour, kind, units, price, soc_after) "
                            "VALUES (?, ?, ?, ?, ?)", (hour, "charge" if k > 0 else "discharge", abs(k), price, soc))
        if hour == p["horizon"] - 1:
            entries.append(("buy-back", 100 * p["terminal_value"] * soc))
        cents += self._book(hour, *entries)
        self._write(keys, before, (hour + 1, 0, soc, cents))
        out = {"hour_closed": hour, "price": price, "traded": k, "state_of_charge": soc, "cash": cents / 100,
               "hours_left": p["horizon"] - hour - 1}
        if hour + 1 < p["horizon"]:
            self._open_hour(hour + 1)
            r = self.regimes[hour + 1]
            out.update({"next_hour": hour + 1, "next_regime": r, "next_regime_label": self.labels[r],
                        "next_price": self._price(hour + 1)})
        return out

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n, labels = self.p, self.v, self.name, self.labels
        regimes = ", ".join(f"{r} = {label}" for r, label in enumerate(labels))
        about = (f"The {v['site']} also runs a grid-connected battery that stores up to "
                 f"{self._count(p['capacity'], 'energy units', 'energy unit')}; you trade it against the hourly electricity price for {p['horizon']} hours, numbered 0 to "
                 f"{p['horizon'] - 1} (hour t has hour of day t % 24, hour 0 is midnight). It starts with "
                 f"{self._units(p['initial_soc'])} stored, and hour 0 is in the '{labels[p['initial_regime']]}' price "
                 f"regime (regimes: {regimes}).")
        rules = (f"Each hour you may schedule a charge with {n['charge']} (buy energy at the hour's price) or a "
                 f"discharge with {n['discharge']} (sell it; only part of each discharged unit is paid, and the "
                 f"battery wears), at most {self._units(p['power'])} per hour and within the battery's charge; "
                 f"{n['cancel_schedule']} undoes this hour's schedule. {n['end_hour']} settles the trade at this "
                 "hour's price and moves to the next hour, whose regime follows a Markov chain; "
                 f"{n['view_price']} shows the price of this or an earlier hour.")
        prices = ("The price of an hour is its regime's base price plus an add-on for the hour of day. Energy "
                  "still stored after the last hour is bought back at a fixed price per unit.")
        score = (f"Your score is the cash you gain by the end, in {v['currency']}. You have {turn_budget} turns: "
                 "every tool call the world answers uses its turn cost; when they run out, this hour's schedule "
                 "is dropped and the remaining hours pass idle.")
        lines = [self.skin["narrative"], "", about, rules, prices, score, ""]
        if presentation == "I":
            base = ", ".join(f"{labels[r]} {x}" for r, x in enumerate(p["regime_prices"]))
            lines.append(f"Base price per regime ({v['currency']} per unit): {base}.")
            lines.append("Add-on by hour of day 0..23: " + ", ".join(str(x) for x in p["hour_profile"]) + ".")
            lines.append("Next-hour regime probabilities:")
            for r, row in enumerate(p["transition_weights"]):
                odds = ", ".join(f"{labels[j]} {w / float(sum(row)):.3f}" for j, w in enumerate(row))
                lines.append(f"  from {labels[r]}: {odds}")
            lines.append(f"Discharging k units is paid for k × {p['efficiency_pct']} % units at the hour's price; "
                         f"wear costs {p['cycling_cost']} {v['currency']} per unit discharged; the buy-back price is "
                         f"{p['terminal_value']} {v['currency']} per unit stored at the end.")
        else:
            lines.append("The prices, the regime transition probabilities and the battery's efficiency, wear cost "
                         f"and buy-back price are not given. {n['get_tariff_sheet']} (2 turns) gives the exact base "
                         f"prices and hour-of-day add-ons; {n['read_price_sticker']} (1 turn) gives only a rough "
                         f"estimate of the base prices; {n['get_market_outlook']} reveals the transition "
                         f"probabilities and {n['get_battery_spec']} the efficiency, wear and buy-back (1 turn each), "
                         "from the same budget.")
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="energy_storage",
    version="5",
    group="beyond",
    model_class="finite-horizon MDP with a Markov-modulated price (storage arbitrage)",
    solver="backward Bellman recursion over (hour, charge, regime) (numpy)",
    stochastic=True,
))
