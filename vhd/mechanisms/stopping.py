"""Sequential stopping: one consigned lot, one buyer's offer a day, accept one or let it go.

Model
    A lot of an item is held on consignment for `horizon` = H days, numbered 0 … H − 1. Each
    day one buyer's offer arrives; offers are i.i.d. draws from a discrete distribution over
    the integer amounts `values` (sorted, distinct, in 0 … V) with integer weights `weights`
    (probability weights[i] / Σ weights). On day d the seller sees that day's offer x and
    either accepts it, which ends the episode with utility x − waiting_cost · d (storage fees
    of `waiting_cost` per day waited are deducted from the proceeds), or declines it; a
    declined offer is gone for good and the next day's offer arrives. Declining the offer of
    the last day H − 1 ends the episode with no sale: the lot goes back to the supplier and
    the utility is 0 (no proceeds, no fees). Offers are drawn from the episode seed when the
    world is created. A forecast sticker `forecast_mean` gives the mean offer times an error
    factor drawn uniformly in 0.75 … 1.25 (STICKER_ERROR; both instructions show it and its error).
    Solved exactly by backward Bellman recursion in rational arithmetic: V_H = 0,
    V_d = E[max(X − waiting_cost · d, V_{d+1})]; π* accepts on day d iff x − waiting_cost · d
    ≥ V_{d+1} (ties accept). A plan is a threshold vector t (one integer per day): accept on
    day d iff the offer is ≥ t_d (t_d = max(values) + 1: never accept on day d).
    Limits: solve() takes 1 … MAX_HORIZON = 30 days, 1 … 12 distinct increasing whole offer
    amounts ≥ 0 with whole weights ≥ 0 (a positive total) and a whole waiting cost ≥ 0; any
    other θ is refused with InvalidParams before anything is allocated (`check_theta`).

State
    the day, today's offer and every earlier offer with its status (open, declined,
    accepted), the settlement ledger (proceeds and storage fees), the player's notes and a
    state table (whether the episode is closed).

Tools
    probes: one amount of the offer forecast (the amount of a rank, 0 the lowest, and its
    probability; 3 turns), the fee schedule (storage fee per day; 1 turn); decisions: accept
    today's offer; clock: decline today's offer (moves to the next day, or ends the episode on the
    last day); observations: an offer by day, the offer history, the calendar (day, days left),
    the ledger, the notes; annotation: write and delete notes (they change nothing else). Ranks
    are bounded by the number of amounts, days by the last day (`World.limits`).
    Presentation A hides the amounts, their probabilities and the storage fee (not how many
    amounts there are); the instruction states their ranges (amounts in 0 … 25 · n, a fee of 0 … 8
    a day), and the stated guesses (`belief`) are the fee 4 and unread amounts spread evenly
    between the amounts read around them, sharing equally the probability the read ones leave.
    The budget (horizon + 9) affords declining every day and nine turns of probing besides; A
    environments are admitted where the fee and all n amounts (1 + 3n turns) do not fit beside
    π*'s longest play and what its threshold depends on does (`BUDGET_BINDS`).

Plan
    an integer vector of length horizon: entry d is the lowest offer accepted on day d
    (max(values) + 1 means decline every offer that day).

Reward
    utility = accepted offer − waiting_cost × day of acceptance (0 if no offer is accepted).
    r = clip01((u − u_default) / (u* − u_default)) where both references are played on the
    same episode seed (the same offers); u_default accepts the first offer at or above the forecast
    sticker's average offer, so it reflects being misled by it.

Episode end
    after `accept_offer`, after declining the last day's offer, or when the turn budget runs
    out: the lot then goes back unsold (utility 0, no further offers are accepted).
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
from pydantic import BaseModel

from vhd.mechanisms._contract import (
    AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, text, tool,
)
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

WEIGHT_TOTAL = 1000
MAX_HORIZON = 30
HIDDEN = ("values", "weights", "waiting_cost")
STICKER_ERROR = 0.25  # the forecast sticker's average offer is off by a factor in 0.75 … 1.25 (the instructions say so)
TOP_PER_AMOUNT = 25   # the amounts lie in 0 … 25 · (number of amounts) (the A instruction says so)
FEE_GUESS = 4         # the middle of the storage fees 0 … 8 the A instruction states
APPRAISAL_TURNS = 3   # the turn cost of reading one amount of the offer forecast


class Params(BaseModel):
    """Difficulty knobs of a stopping instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = knob(8, 3, 12, sampled=(5, 12),
                     description="number of distinct offer amounts (support points of the offer distribution), in "
                                 "amounts")
    horizon: int = knob(20, 3, MAX_HORIZON, sampled=(18, 30), description="number of days, one offer a day, in days")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: `size` distinct integer amounts in 0 … V (V between 10 and 25 per support point),
    integer weights out of 1000 with a low cluster (the lowest one or two amounts, 30–45 % of the
    mass), a rare top amount (4–8 %) and Dirichlet mass in between; a small integer storage fee
    (0 … top gap × top probability / 3); the forecast sticker: the mean offer times an error factor
    uniform in 1 ± STICKER_ERROR, rounded."""
    n, horizon = params.size, params.horizon
    top_v = int(rng.integers(10 * n, 25 * n + 1))
    values = sorted(int(v) for v in rng.choice(top_v + 1, size=n, replace=False))
    top = int(round(WEIGHT_TOTAL * float(rng.uniform(0.04, 0.08))))
    low = int(round(WEIGHT_TOTAL * float(rng.uniform(0.30, 0.45))))
    n_low = 1 if n < 7 else 2
    n_mid = n - 1 - n_low
    mid = 1 + rng.multinomial(WEIGHT_TOTAL - top - low - n_mid, rng.dirichlet(np.full(n_mid, 2.0)))
    lows = [low // n_low + (low % n_low if i == 0 else 0) for i in range(n_low)]
    weights = lows + [int(x) for x in mid] + [top]
    fee_cap = max(1, int((values[-1] - values[-2]) * top / WEIGHT_TOTAL / 3))  # ≤ 300 · 80 / 1000 / 3 = 8
    theta = {
        "horizon": int(horizon),
        "values": values,
        "weights": [int(w) for w in weights],
        "waiting_cost": int(rng.integers(0, fee_cap + 1)),
    }
    mean = sum(v * w for v, w in zip(values, theta["weights"])) / sum(theta["weights"])
    theta["forecast_mean"] = int(round(mean * float(rng.uniform(1 - STICKER_ERROR, 1 + STICKER_ERROR))))
    return theta


# ---------------------------------------------------------------------------------------------
# Plans: a threshold vector, one integer per day; accept on day d iff offer ≥ t_d.


def _distribution(theta: dict) -> list[tuple[int, Fraction]]:
    total = sum(theta["weights"])
    return [(int(v), Fraction(int(w), total)) for v, w in zip(theta["values"], theta["weights"]) if w > 0]


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: one threshold 0 … max(values) + 1 (decline every offer) per day."""
    return PlanSpec(shape=(theta["horizon"],), integer=True, low=0, high=max(theta["values"]) + 1)


def _check_plan(theta: dict, policy: np.ndarray) -> list[int]:
    """The thresholds as ints; InvalidPlan (a ValueError) naming the first entry not of the declared form."""
    return [int(x) for x in plan_spec(theta).check(policy)]


def _value(theta: dict, thresholds: list[int]) -> Fraction:
    """Exact expected utility of a threshold vector, by backward recursion over the days."""
    dist, cost, later = _distribution(theta), theta["waiting_cost"], Fraction(0)
    for day in range(theta["horizon"] - 1, -1, -1):
        later = sum(p * ((x - cost * day) if x >= thresholds[day] else later) for x, p in dist)
    return later


def _bellman(theta: dict) -> tuple[float, np.ndarray]:
    dist, cost = _distribution(theta), theta["waiting_cost"]
    never = max(theta["values"]) + 1
    thresholds = [never] * theta["horizon"]
    later = Fraction(0)
    for day in range(theta["horizon"] - 1, -1, -1):
        accepted = [x for x, _ in dist if x - cost * day >= later]  # dist is sorted by amount
        thresholds[day] = accepted[0] if accepted else never
        later = sum(p * ((x - cost * day) if x >= thresholds[day] else later) for x, p in dist)
    return float(later), np.array(thresholds, dtype=np.int64)


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … MAX_HORIZON = 30 days, 1 … 12
    distinct increasing whole offer amounts ≥ 0 with whole weights ≥ 0 (a positive total) and a
    whole waiting cost ≥ 0."""
    check = ThetaCheck("stopping", theta)
    check.count("horizon", 1, MAX_HORIZON)
    k = check.length("values", 1, 12)
    check.whole("values", (k,), low=0)
    check.require(all(a < b for a, b in zip(theta["values"], theta["values"][1:])), "values",
                  "distinct amounts in increasing order")
    check.whole("weights", (k,), low=0)
    check.require(sum(theta["weights"]) > 0, "weights", "a positive total weight")
    check.whole("waiting_cost", low=0)
    check.whole("forecast_mean", low=0)


def solve(theta: dict) -> Solution:
    """u* and π* (thresholds per day, int64) by exact backward recursion; default and idle values."""
    check_theta(theta)
    found = certified(
        lambda: _bellman(theta),
        method="backward Bellman recursion (exact rational arithmetic)",
        solver="python fractions",
        solver_version="stdlib",
        state_space=theta["horizon"] * len(theta["values"]),
    )
    return solved(theta, found, evaluate, default_policy, idle_policy)


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact expected utility of a threshold vector (ValueError for a malformed one)."""
    return float(_value(theta, _check_plan(theta, policy)))


# z = (u0 − u_idle) / (u* − u_idle), u_idle = E[offer] (accept the first one): below −1 taking
# the first offer would score over 0.5 (waiting for the mean is a trap, nothing to learn
# beyond "take it"); above 0.95 the mean threshold already nearly solves the instance
DEFAULT_BAND = (-1.0, 0.95)


def default_policy(theta: dict) -> np.ndarray:
    """Accept the first offer at or above the forecast sticker's average offer (every day, the last
    one included: a last offer below it is declined), ignoring the storage fee; the sticker may be
    25 % off, so the default is misled as a reader of the sticker would be."""
    return np.full(theta["horizon"], theta["forecast_mean"], dtype=np.int64)


def idle_policy(theta: dict) -> np.ndarray:
    """Accept the first offer, whatever it is."""
    return np.zeros(theta["horizon"], dtype=np.int64)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """Each day's threshold uniformly among the support amounts and 'never' (max + 1)."""
    choices = sorted(theta["values"]) + [max(theta["values"]) + 1]
    return np.array([choices[int(k)] for k in rng.integers(0, len(choices), size=theta["horizon"])], dtype=np.int64)


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a threshold vector on the episode's offers: decline until an offer meets the day's
    threshold, then accept it (or decline the last one too)."""
    thresholds = _check_plan(theta, policy)
    offers = World.draw(theta, episode_seed)
    calls, decisions, utility = [], [], 0
    for day, offer in enumerate(offers):
        if offer >= thresholds[day]:
            calls.append({"tool": "accept_offer", "arguments": {}})
            decisions.append(("accept", day, offer))
            utility = offer - theta["waiting_cost"] * day
            break
        calls.append({"tool": "decline_offer", "arguments": {}})
        decisions.append(("decline", day, offer))
    return Episode(utility=float(utility), calls=calls, decisions=decisions)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the state is (day, today's offer, closed); V*(s) = max(offer − fee · day, W_{day+1})
# with W_d the expected value of reaching day d unsold (W_H = 0), all in exact rationals.


def decision_values(theta: dict) -> dict:
    """W_d for d = 0 … H (W_H = 0) by the backward recursion of the solver; u* = W_0."""
    dist, cost, horizon = _distribution(theta), theta["waiting_cost"], theta["horizon"]
    later = [Fraction(0)] * (horizon + 1)
    for day in range(horizon - 1, -1, -1):
        later[day] = sum(p * max(x - cost * day, later[day + 1]) for x, p in dist)
    return {"u_star": float(later[0]), "later": later}


def decision_state(theta: dict, world) -> tuple[int, int, bool]:
    """(day, today's offer, whether the lot is sold or gone)."""
    day = world._get("day")
    return day, world.offers[day], bool(world._get("closed"))


def advantage(theta: dict, values: dict, before: tuple, call: dict | None, after: tuple) -> float:
    """Accepting is worth offer − fee · day, declining W_{day+1}, running out 0 (the lot goes back)."""
    day, offer, closed = before
    if closed:
        return 0.0
    accept, wait = Fraction(offer - theta["waiting_cost"] * day), values["later"][day + 1]
    chosen = Fraction(0) if call is None else accept if call["tool"] == "accept_offer" else wait
    return float(chosen - max(accept, wait))


BUDGET_BINDS = True  # A admits θ only where the budget binds (vhd/tasks/stages/check/budget.py)


def turn_budget(theta: dict) -> int:
    """A decline or an accept for every day (the most any play needs), and nine turns more: in
    presentation A room for the fee and the forecast amounts π*'s threshold depends on, not for
    the fee and every amount (3 turns each) as well: what to read is a choice."""
    return theta["horizon"] + 9


# ---------------------------------------------------------------------------------------------
# Presentation A: what the probes show, and the guess for what they did not (the A instruction
# states the ranges): the storage fee FEE_GUESS; unread amounts spread evenly between the amounts
# read around them (within 0 … TOP_PER_AMOUNT · n), sharing equally the probability the read ones leave.


def probe_calls(theta: dict) -> list[dict]:
    """The fee schedule (one turn), then the forecast amount by amount, lowest first."""
    return [{"tool": "get_fee_schedule", "arguments": {}}] + [
        {"tool": "get_offer_forecast", "arguments": {"rank": rank}} for rank in range(len(theta["values"]))]


def belief(theta: dict, read: list[dict]) -> dict:
    """θ as known after the probe calls `read`: what they showed exact, the rest the stated guess."""
    n = len(theta["values"])
    seen = sorted({call["arguments"]["rank"] for call in read if call["tool"] == "get_offer_forecast"})
    values = [theta["values"][i] if i in seen else None for i in range(n)]
    known = [(-1, -1)] + [(i, theta["values"][i]) for i in seen] + [(n, TOP_PER_AMOUNT * n + 1)]
    for (low_rank, low), (high_rank, high) in zip(known, known[1:]):  # a run of unread ranks between reads
        step = (high - low) / (high_rank - low_rank)
        for i in range(low_rank + 1, high_rank):
            values[i] = low + math.floor(step * (i - low_rank))
    left = max(WEIGHT_TOTAL - sum(theta["weights"][i] for i in seen), 0)
    unread = [i for i in range(n) if i not in seen]
    weights = [theta["weights"][i] if i in seen else left // len(unread) for i in range(n)]
    if unread:
        weights[unread[0]] += left - left // len(unread) * len(unread)
    fee = theta["waiting_cost"] if any(call["tool"] == "get_fee_schedule" for call in read) else FEE_GUESS
    return {**theta, "values": values, "weights": weights, "waiting_cost": fee}


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


TABLES = ("catalog", "offers", "ledger", "notes", "state")


class World(BaseWorld):
    """The consignment's relational world: catalog, offers, ledger, notes and a state table."""

    PARAMS = ("horizon", "values", "weights", "waiting_cost", "forecast_mean")
    STATE = (("day", 0), ("closed", 0))

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        if len(params["values"]) != len(params["weights"]) or not params["values"] or sum(params["weights"]) <= 0:
            raise ValueError("values and weights must be non-empty lists of one length with positive total weight")
        self.offers = World.draw(params, episode_seed)
        t = self.t
        db.execute("CREATE TABLE %s (sku TEXT PRIMARY KEY, name TEXT, unit TEXT, supplier TEXT)" % t["catalog"])
        db.execute("CREATE TABLE %s (day INTEGER PRIMARY KEY, sku TEXT REFERENCES %s(sku), amount INTEGER, "
                   "status TEXT)" % (t["offers"], t["catalog"]))
        db.execute("CREATE TABLE %s (entry_id INTEGER PRIMARY KEY, day INTEGER REFERENCES %s(day), kind TEXT, "
                   "amount INTEGER)" % (t["ledger"], t["offers"]))
        db.execute("CREATE TABLE %s (note_id INTEGER PRIMARY KEY, day INTEGER, text TEXT)" % t["notes"])
        db.execute("INSERT INTO %s VALUES (?, ?, ?, ?)" % t["catalog"],
                   (self.v["sku"], self.v["item"], self.v["unit"], self.v["supplier"]))
        self._arrive(0)

    @staticmethod
    def draw(params, episode_seed):
        """The episode's offers, one a day: integer inverse-CDF draws from random.Random(seed)."""
        rng = random.Random(episode_seed)
        values, weights = params["values"][::-1], params["weights"][::-1]  # tickets meet the highest amount first
        return [values[World.draw_index(rng, weights)] for _ in range(params["horizon"])]

    # -- state helpers --------------------------------------------------------------------
    def _arrive(self, day):
        self.db.execute("INSERT INTO %s VALUES (?, ?, ?, 'open')" % self.t["offers"],
                        (day, self.v["sku"], self.offers[day]))

    def _today(self):
        day = self._get("day")
        amount = self.db.execute("SELECT amount FROM %s WHERE day = ?" % self.t["offers"], (day,)).fetchone()[0]
        return day, amount

    def _open(self):
        if self._get("closed"):
            raise AgentError("the lot is no longer on offer; the episode is over")

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("closed") == 1

    def utility(self):
        return self.db.execute("SELECT COALESCE(SUM(amount), 0) FROM %s" % self.t["ledger"]).fetchone()[0]

    def run_out(self):
        self.db.execute("UPDATE %s SET status = 'lapsed' WHERE status = 'open'" % self.t["offers"])
        self._set("closed", 1)

    # -- tools ------------------------------------------------------------------------------
    @tool("probe", "Read one amount of the {site}'s forecast of buyers' offers for {item}: the amount in {currency} of "
          "a given rank (0 the lowest possible offer) and its probability.", reveals=("values", "weights"),
          turn_cost=APPRAISAL_TURNS, rank=integer(0, 11, "the rank of the amount, 0 for the lowest"))
    def tool_get_offer_forecast(self, rank):
        return {"rank": rank, "amount": self.p["values"][rank],
                "probability": self.p["weights"][rank] / float(sum(self.p["weights"])), "currency": self.v["currency"]}

    @tool("probe", "Read the {supplier}'s consignment terms: the storage fee in {currency} per day the lot waits.",
          reveals=("waiting_cost",))
    def tool_get_fee_schedule(self):
        return {"storage_fee_per_day": self.p["waiting_cost"], "currency": self.v["currency"],
                "charged": "storage fee × day of acceptance, deducted from the accepted offer; nothing if unsold"}

    @tool("observe", "Show the offer of one day (today or an earlier day): amount in {currency} and status.",
          day=integer(0, MAX_HORIZON - 1, "day number, 0 for the first day"))
    def tool_view_offer(self, day):
        today = self._get("day")
        if day > today:
            raise AgentError("the offer of day %d has not arrived yet; today is day %d" % (day, today))
        amount, status = self.db.execute("SELECT amount, status FROM %s WHERE day = ?" % self.t["offers"],
                                         (day,)).fetchone()
        return {"day": day, "amount": amount, "status": status, "currency": self.v["currency"],
                "storage_fee_days_if_accepted_today": today if status == "open" else None}

    @tool("observe", "List the offers already declined (or accepted) with their amounts.")
    def tool_view_offer_history(self):
        rows = self.db.execute("SELECT day, amount, status FROM %s WHERE status != 'open' ORDER BY day"
                               % self.t["offers"]).fetchall()
        return {"past_offers": [{"day": d, "amount": a, "status": s} for d, a, s in rows]}

    @tool("observe", "Show today's day number and how many days are left.")
    def tool_view_calendar(self):
        day = self._get("day")
        return {"today": day, "days_left_after_today": self.p["horizon"] - 1 - day, "horizon": self.p["horizon"],
                "closed": bool(self._get("closed"))}

    @tool("observe", "Show the settlement ledger of the {site}: proceeds and storage fees.")
    def tool_view_ledger(self):
        rows = self.db.execute("SELECT entry_id, day, kind, amount FROM %s ORDER BY entry_id"
                               % self.t["ledger"]).fetchall()
        return {"entries": [{"entry": e, "day": d, "kind": k, "amount": a} for e, d, k, a in rows],
                "balance": self.utility(), "currency": self.v["currency"]}

    @tool("observe", "List your notes.")
    def tool_view_notes(self):
        rows = self.db.execute("SELECT note_id, day, text FROM %s ORDER BY note_id" % self.t["notes"]).fetchall()
        return {"notes": [{"note": n, "day": d, "text": x} for n, d, x in rows]}

    @tool("observe", "Write a note for yourself (changes nothing else).", text=text(500, "the note, 1 to 500 characters"))
    def tool_write_note(self, text):
        if not text.strip() or len(text) > 500:
            raise AgentError("a note is 1 to 500 characters, got %d" % len(text))
        cursor = self.db.execute("INSERT INTO %s (day, text) VALUES (?, ?)" % self.t["notes"], (self._get("day"), text))
        return {"note": cursor.lastrowid}

    @tool("observe", "Delete one of your notes.", note=integer(1, 100000, "number of the note"))
    def tool_delete_note(self, note):
        if self.db.execute("SELECT COUNT(*) FROM %s WHERE note_id = ?" % self.t["notes"], (note,)).fetchone()[0] == 0:
            raise AgentError("there is no note %d" % note)
        self.db.execute("DELETE FROM %s WHERE note_id = ?" % self.t["notes"], (note,))
        return {"deleted": note}

    @tool("decision", "Accept today's offer for the lot of {item}: the lot is sold and the episode ends.")
    def tool_accept_offer(self):
        self._open()
        day, amount = self._today()
        self.db.execute("UPDATE %s SET status = 'accepted' WHERE day = ?" % self.t["offers"], (day,))
        self.db.execute("INSERT INTO %s (day, kind, amount) VALUES (?, 'proceeds', ?)" % self.t["ledger"], (day, amount))
        fee = self.p["waiting_cost"] * day
        if fee:
            self.db.execute("INSERT INTO %s (day, kind, amount) VALUES (?, 'storage fees', ?)" % self.t["ledger"],
                            (day, -fee))
        self._set("closed", 1)
        return {"accepted_day": day, "amount": amount, "storage_fees": fee, "net": amount - fee,
                "currency": self.v["currency"]}

    @tool("clock", "Decline today's offer (it is gone for good) and wait for the next day's offer; on the last day "
          "this ends the episode with no sale.")
    def tool_decline_offer(self):
        self._open()
        day, amount = self._today()
        self.db.execute("UPDATE %s SET status = 'declined' WHERE day = ?" % self.t["offers"], (day,))
        if day + 1 >= self.p["horizon"]:
            self._set("closed", 1)
            return {"declined_day": day, "amount": amount, "closed": True,
                    "outcome": "no sale: the lot goes back to the %s" % self.v["supplier"]}
        self._set("day", day + 1)
        self._arrive(day + 1)
        return {"declined_day": day, "amount": amount, "today": day + 1, "new_offer": self.offers[day + 1],
                "days_left_after_today": self.p["horizon"] - 2 - day}

    def limits(self, presentation):
        """Ranks up to the number of amounts, days up to the last (the instruction tells both)."""
        return {"get_offer_forecast": {"rank": (0, len(self.p["values"]) - 1)},
                "view_offer": {"day": (0, self.p["horizon"] - 1)}}

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        lines = [
            self.skin["narrative"],
            "",
            "The %s holds one lot of %s (%s) on consignment from the %s for %d days, numbered 0 to %d. Each day "
            "one buyer makes an offer in %s; %s shows the offer of a day (today or earlier)." % (
                v["site"], v["item"], v["sku"], v["supplier"], p["horizon"], p["horizon"] - 1, v["currency"],
                n["view_offer"]),
            "%s sells the lot at today's offer and ends the episode; %s lets today's offer go for good and the "
            "next day's offer arrives. Declining the offer of the last day ends the episode with no sale." % (
                n["accept_offer"], n["decline_offer"]),
            "Your score is the accepted offer minus the storage fees (a fee per day waited, times the day "
            "number of the sale); with no sale it is 0. You have %d turns: every tool call the world answers uses its "
            "turn cost; when they run out, the lot goes back unsold." % turn_budget,
            "The forecast sticker puts the average offer at %d %s (it may be up to 25 %% off, either way); "
            "buyers offer one of %d amounts, independently from day to day." % (
                p["forecast_mean"], v["currency"], len(p["values"])),
        ]
        if presentation == "I":
            total = float(sum(p["weights"]))
            lines += [
                "",
                "Storage fee: %d %s per day waited. Offers are independent from day to day; each is one of "
                "these amounts, with these probabilities:" % (p["waiting_cost"], v["currency"]),
                "  " + ", ".join("%d (%.3f)" % (a, w / total) for a, w in zip(p["values"], p["weights"])),
            ]
        else:
            n_amounts = len(p["values"])
            lines += ["", "The offer distribution and the storage fee are not given: %s reveals one amount of the "
                      "forecast (the amount of a rank, 0 the lowest, and its probability) at the cost of 3 turns, %s "
                      "the storage fee at the cost of a turn, from the same budget." % (
                          n["get_offer_forecast"], n["get_fee_schedule"]),
                      "What is known: the %d amounts are whole numbers from 0 to %d %s; the storage fee is 0 to 8 "
                      "%s a day." % (n_amounts, 25 * n_amounts, v["currency"], v["currency"])]
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="stopping",
    version="5",
    group="far_ood",
    model_class="finite-horizon optimal stopping (i.i.d. offers, no recall)",
    solver="backward Bellman recursion (exact rationals)",
    stochastic=True,
))
