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
    world is created.
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
    probes: the offer forecast (support and probabilities), the fee schedule (storage fee per
    day); decisions: accept today's offer; clock: decline today's offer (moves to the next
    day, or ends the episode on the last day); observations: an offer by day, the offer
    history, the calendar (day, days left), the ledger, the notes; annotation: write and
    delete notes (they change nothing else).

Reward
    utility = accepted offer − waiting_cost × day of acceptance (0 if no offer is accepted).
    r = clip01((u − u_default) / (u* − u_default)) where both references are played on the
    same episode seed (the same offers); u_default accepts the first offer at or above the
    distribution's mean.

Episode end
    after `accept_offer`, after declining the last day's offer, or when the turn budget runs
    out: the lot then goes back unsold (utility 0, no further offers are accepted).
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
from pydantic import BaseModel, Field

from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, register, text, tool
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

WEIGHT_TOTAL = 1000
MAX_HORIZON = 30
HIDDEN = ("values", "weights", "waiting_cost")


class Params(BaseModel):
    """Difficulty knobs of a stopping instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = Field(8, ge=3, le=12, description="number of distinct offer amounts (support points of the "
                                                  "offer distribution), in amounts")
    horizon: int = Field(20, ge=3, le=MAX_HORIZON, description="number of days, one offer a day, in days")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: `size` distinct integer amounts in 0 … V (V between 10 and 25 per support point),
    integer weights out of 1000 with a low cluster (the lowest one or two amounts, 30–45 % of the
    mass), a rare top amount (4–8 %) and Dirichlet mass in between; a small integer storage fee
    (0 … top gap × top probability / 3)."""
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
    fee_cap = max(1, int((values[-1] - values[-2]) * top / WEIGHT_TOTAL / 3))
    return {
        "horizon": int(horizon),
        "values": values,
        "weights": [int(w) for w in weights],
        "waiting_cost": int(rng.integers(0, fee_cap + 1)),
    }


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


def default_policy(theta: dict) -> np.ndarray:
    """Accept the first offer at or above the distribution's mean (every day, the last one
    included: a last offer below the mean is declined), ignoring the storage fee."""
    mean = sum(x * p for x, p in _distribution(theta))
    return np.full(theta["horizon"], math.ceil(mean), dtype=np.int64)


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


def turn_budget(theta: dict) -> int:
    """A decline or an accept for every day, plus room for both probes and a few looks."""
    return 2 * theta["horizon"] + 12


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


class World(BaseWorld):
    """The consignment's relational world: catalog, offers, ledger, notes and a state table."""

    PARAMS = ("horizon", "values", "weights", "waiting_cost")
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
    @tool("probe", "Read the {site}'s forecast of buyers' offers for {item}: every possible amount in {currency} and "
          "its probability.", reveals=("values", "weights"))
    def tool_get_offer_forecast(self):
        total = float(sum(self.p["weights"]))
        return {"offer_probabilities": [{"amount": v, "probability": w / total}
                                        for v, w in zip(self.p["values"], self.p["weights"])],
                "currency": self.v["currency"], "note": "one offer a day, independent of the other days"}

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
            "number of the sale); with no sale it is 0. You have %d turns: every successful tool call uses its "
            "turn cost; when they run out, the lot goes back unsold." % turn_budget,
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
            lines += ["", self._not_given("The offer distribution and the storage fee",
                                          ("get_offer_forecast", "get_fee_schedule"))]
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="stopping",
    version="3",
    group="far_ood",
    model_class="finite-horizon optimal stopping (i.i.d. offers, no recall)",
    solver="backward Bellman recursion (exact rationals)",
    # z = (u0 − u_idle) / (u* − u_idle), u_idle = E[offer] (accept the first one): below −1 taking
    # the first offer would score over 0.5 (waiting for the mean is a trap, nothing to learn
    # beyond "take it"); above 0.95 the mean threshold already nearly solves the instance
    default_band=(-1.0, 0.95),
    knob_ranges={"size": (5, 12), "horizon": (18, 30)},
    plan_format=(
        'an integer vector of length horizon: entry d is the lowest offer accepted on day d (max(values) + 1 '
        'means decline every offer that day).'
    ),
    tables=("catalog", "offers", "ledger", "notes", "state"),
    vocabulary=("site", "item", "sku", "unit", "supplier", "currency"),
))
