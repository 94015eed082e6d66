"""Negotiation with a hidden reservation value: a seller posts prices to one buyer over a few rounds.

Model
    A seller offers one unit of an item to a single buyer over `horizon` = H rounds, numbered
    0 … H − 1. The buyer's reservation value v is drawn once per episode from an integer
    distribution: support `value_points` = step, 2·step, …, K·step (K distinct integers,
    evenly spaced up to V = `max_price` = K·step) with integer weights `value_weights` (≥ 1);
    P(v = value_points[k]) = value_weights[k] / Σ value_weights. In each round t the seller
    either posts a price p ∈ {0, …, V}, passes the round, or walks away. The buyer accepts a
    posted price iff p ≤ v; the episode then ends with utility p − delay_cost · t (one
    `delay_cost` is paid for every round that passed without a deal). A rejected offer or a
    pass ends the round. Walking away in round t ends the episode with utility
    outside_option − delay_cost · t; if no deal is made in any of the H rounds the episode ends
    with outside_option − delay_cost · H. Rejections are the only information the seller
    gets: after rejections the posterior of v is the prior truncated to v ≤ b, where
    b = (lowest rejected price) − 1 (b = V before any rejection). Solved exactly by backward
    recursion over (round, b), in integer arithmetic on weight-scaled values.
    The market survey's sticker `survey_weights` is a biased, noisy estimate of the weights (a share
    of the buyers at every value recorded at the next higher one, then each weight within
    ±World.SURVEY_ERROR = 8, never below 1; drawn by `sample`): the default policy
    prices by it, and presentation A shows it instead of the weights. There are at most K rounds
    (H ≤ K): π* makes at most one offer per support point (a rejection rules out at least one),
    so rounds past K would change neither u* nor π*'s play.
    Limits: solve() takes 1 … 12 rounds, a top price of 1 … MAX_PRICE_SCHEMA = 1000 (a state of
    the recursion), 1 … 12 distinct increasing whole support points within 0 … max_price with
    whole weights ≥ 1 and whole survey weights ≥ 1, a whole delay cost ≥ 0 and a whole outside
    option; any other θ is refused with InvalidParams before anything is allocated (`check_theta`).

State
    the round, the deal status (open, sold, walked away, expired), the offer history (every
    price and the buyer's answer), a round log (the action of every round) and a
    ledger of every booked amount (delay costs, the sale, the outside option).

Tools
    probes (1 turn each): the buyer survey of one possible value (its exact weight: one entry per
    call), the carrying terms (delay cost per round), the outside bid (salvage value); decision:
    make an offer; clock: pass the round, walk away; observations: the round clock, the offer
    history, the costs so far, the item card, the deal status, the ledger. The price runs 0 … V
    and the survey's value numbers 0 … K − 1 in the tool schemas (`World.limits`).
    Presentation A tells the horizon, the price range, the possible values and the survey
    sticker (with its stated error), the delay cost's range 1 … ⌊V/(4H)⌋ + 1 and the outside
    option's 0 … ⌊V/8⌋; it hides the weights, the delay cost and the outside option. The stated
    guess for what is unread (`belief`): the sticker's weight, the middle of each range.

Plan
    an integer table of shape [horizon, max_price + 1]: entry [t, b] is the action in round t
    when b is the highest value the buyer may still have (b = max_price before any rejection,
    else the lowest rejected price − 1): −1 walk away, −2 pass the round, or a price p with 0 ≤
    p ≤ b to post.

Reward
    utility = sale price − delay costs paid (or outside option − delay costs paid when no deal
    is made). r = clip01((u − u_default) / (u* − u_default)) where both references are played
    on the same episode seed (the same reservation value v).

Advantages
    The solver's state is (round t, bound b): the World's `round`, and b = (lowest rejected price
    in its offers table) − 1, V before any rejection; V*(t, b) is the expected utility-to-go given
    v ≤ b (U(t, b) / M(b) of the recursion, M(b) the prior weight of v ≤ b). Every call commits
    the round's action: `make_offer(p)` has A* = Q*(t, b, p) − V*(t, b) (an offer above b is
    surely rejected: Q* of passing), `pass_round` Q*(t, b, pass) − V*(t, b), `walk_away`
    outside_option − delay_cost · t − V*(t, b); running out of turns passes every round left:
    outside_option − delay_cost · H − V*(t, b). Exact integers over M(b), so π*'s calls have
    A* = 0 exactly; the exogenous noise is the buyer's value v.

Episode end
    after an accepted offer, after `walk_away`, or after the last round passes with no deal;
    when the turn budget runs out the remaining rounds pass with no offers (no deal: the
    outside option minus H delay costs). The budget is max(H, K) + 1 turns (K possible
    values; a sampled θ has H ≤ K): an offer every round (π*'s and the default's longest play)
    and K + 1 − H turns more; in A the
    K + 2 probes never all fit after π*'s play, and A environments are admitted where the probes
    π*'s offers depend on do (`BUDGET_BINDS`).
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
from pydantic import BaseModel

from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

WEIGHT_TOTAL = 100
WALK, PASS = -1, -2  # policy codes besides prices 0 … V
HIDDEN = ("value_weights", "delay_cost", "outside_option")
MAX_PRICE_SCHEMA = 1000
MAX_POINTS = 12


class Params(BaseModel):
    """Difficulty knobs of a negotiation instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = knob(6, 3, 12, sampled=(3, 12),
                     description="number of support points of the buyer's value distribution (distinct values step, "
                                 "2·step, …, V in currency units)")
    horizon: int = knob(6, 2, 12, sampled=(2, 12),
                        description="number of negotiation rounds (at most one offer per round; θ uses min(horizon, "
                                    "size): π* never needs more)")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: H = min(horizon, size) rounds; points step, 2·step, …, V = step · size with step
    3…12; weights ≥ 1 summing to 100 (a Dirichlet(1.5) draw); delay cost 1 … ⌊V/(4H)⌋ + 1 per
    round; outside option 0 … ⌊V/8⌋; the survey sticker: the weights as a survey records them
    when a share of 0 … 100 % (uniform) of the buyers at every value name the next higher one
    (`overstated`), each plus an error drawn uniformly from −8 … 8 (World.SURVEY_ERROR), at least 1."""
    n = params.size
    horizon = min(params.horizon, n)
    step = int(rng.integers(3, 13))
    top = step * n
    shares = rng.dirichlet(np.full(n, 1.5))
    weights = 1 + rng.multinomial(WEIGHT_TOTAL - n, shares)
    theta = {
        "horizon": horizon,
        "max_price": top,
        "value_points": [step * (k + 1) for k in range(n)],
        "value_weights": [int(w) for w in weights],
        "delay_cost": int(rng.integers(1, top // (4 * horizon) + 2)),
        "outside_option": int(rng.integers(0, top // 8 + 1)),
    }
    recorded = overstated([int(w) for w in weights], int(rng.integers(0, 101)))
    errors = rng.integers(-World.SURVEY_ERROR, World.SURVEY_ERROR + 1, size=n)
    theta["survey_weights"] = [max(1, w + int(e)) for w, e in zip(recorded, errors)]
    return theta


def overstated(weights: list[int], percent: int) -> list[int]:
    """The weights a survey records when `percent` % (rounded down) of the buyers at every value
    name the next higher one (the highest value keeps its own and gains the next lower's)."""
    moved = [w * percent // 100 for w in weights]
    recorded = [w - m for w, m in zip(weights, moved)]
    for k, m in enumerate(moved):
        recorded[min(k + 1, len(weights) - 1)] += m
    return recorded


# ---------------------------------------------------------------------------------------------
# Scaled values: U(t, b) = Σ_{v ≤ b} weight(v) · (expected utility-to-go | v, from round t, bound b).


def _mass(theta: dict) -> np.ndarray:
    """M[b + 1] = Σ weights of support points ≤ b, for b = −1 … V (int64)."""
    top = theta["max_price"]
    density = np.zeros(top + 1, dtype=np.int64)
    for point, weight in zip(theta["value_points"], theta["value_weights"]):
        if not 0 <= point <= top or weight < 0:
            raise ValueError(f"value point {point} outside 0 … {top} or negative weight {weight}")
        density[point] += weight
    if density.sum() <= 0:
        raise ValueError("the value distribution has no mass")
    return np.concatenate([[0], np.cumsum(density)])


def _actions(theta: dict, mass: np.ndarray, later: np.ndarray, t: int, bound: np.ndarray) -> np.ndarray:
    """Scaled Q of every action in round t for each bound b in `bound`: one row per b, columns walk,
    pass, then prices 0 … V (a price above b is never chosen: int64 min), from later[b + 1] = U(t+1, b)."""
    cost, salvage = theta["delay_cost"], theta["outside_option"]
    price = np.arange(theta["max_price"] + 1)                    # p = 0 … V (columns)
    accepted = mass[bound + 1][:, None] - mass[price][None, :]   # Σ weight of p ≤ v ≤ b
    offers = accepted * (price[None, :] - cost * t) + later[price][None, :]   # later[p] = U(t+1, p−1)
    offers = np.where(price[None, :] <= bound[:, None], offers, np.iinfo(np.int64).min)
    return np.column_stack([mass[bound + 1] * (salvage - cost * t), later[bound + 1], offers])


def _backward(theta: dict) -> tuple[list[np.ndarray], np.ndarray]:
    """(U(t, ·) for t = 0 … H, each indexed b + 1 for b = −1 … V; π*): the optimal recursion."""
    horizon, top = theta["horizon"], theta["max_price"]
    mass = _mass(theta)                                     # index b + 1
    bound = np.arange(top + 1)                              # b = 0 … V (rows)
    values = [mass * (theta["outside_option"] - theta["delay_cost"] * horizon)]   # U(H, b), b = −1 … V
    policy = np.zeros((horizon, top + 1), dtype=np.int16)
    codes = np.concatenate([[WALK, PASS], np.arange(top + 1)]).astype(np.int16)
    for t in range(horizon - 1, -1, -1):
        table = _actions(theta, mass, values[0], t, bound)
        best = table.argmax(axis=1)                         # first maximum: walk, pass, then low prices
        policy[t] = codes[best]
        values.insert(0, np.concatenate([[0], table[bound, best]]))
    return values, policy


def _bellman(theta: dict) -> tuple[float, np.ndarray]:
    values, policy = _backward(theta)
    return float(values[0][theta["max_price"] + 1]) / float(_mass(theta)[-1]), policy


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … 12 rounds, a top price of 1 …
    MAX_PRICE_SCHEMA = 1000 (a state of the recursion), 1 … MAX_POINTS = 12 distinct increasing
    whole support points within 0 … max_price with whole weights ≥ 1 and whole survey weights ≥ 1,
    a whole delay cost ≥ 0 and a whole outside option."""
    check = ThetaCheck("negotiation", theta)
    check.count("horizon", 1, 12)
    top = check.count("max_price", 1, MAX_PRICE_SCHEMA)
    k = check.length("value_points", 1, MAX_POINTS)
    check.whole("value_points", (k,), low=0, high=top)
    check.require(all(a < b for a, b in zip(theta["value_points"], theta["value_points"][1:])), "value_points",
                  "distinct support points in increasing order")
    check.whole("value_weights", (k,), low=1)
    check.whole("survey_weights", (k,), low=1)
    check.whole("delay_cost", low=0)
    check.whole("outside_option")


def solve(theta: dict) -> Solution:
    """u* and π* (table [round, b] → WALK / PASS / price) by backward recursion over (round, b)."""
    check_theta(theta)
    found = certified(lambda: _bellman(theta), state_space=theta["horizon"] * (theta["max_price"] + 1),
                      method="backward recursion over (round, highest acceptable price), integer arithmetic")
    return solved(theta, found, evaluate, default_policy, idle_policy)


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: [round, bound b] → PASS (−2), WALK (−1) or a price 0 … max_price (one above b is
    surely rejected, as in the World)."""
    return PlanSpec(shape=(theta["horizon"], theta["max_price"] + 1), integer=True, low=PASS, high=theta["max_price"])


def _check(theta: dict, policy: np.ndarray) -> np.ndarray:
    """The plan as an int64 table; InvalidPlan (a ValueError) naming the first entry not of the declared form."""
    return plan_spec(theta).check(policy)


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact expected utility of a table [round, b] → WALK (−1), PASS (−2) or a price 0 … V.
    An offer above b is surely rejected and leaves b unchanged."""
    table = _check(theta, policy)
    horizon, top = theta["horizon"], theta["max_price"]
    cost, salvage = theta["delay_cost"], theta["outside_option"]
    mass = [int(m) for m in _mass(theta)]
    value = [m * (salvage - cost * horizon) for m in mass]  # index b + 1
    for t in range(horizon - 1, -1, -1):
        new = [0]
        for b in range(top + 1):
            action = int(table[t, b])
            if action == WALK:
                new.append(mass[b + 1] * (salvage - cost * t))
            elif action == PASS or action > b:
                new.append(value[b + 1])
            else:
                new.append((mass[b + 1] - mass[action]) * (action - cost * t) + value[action])
        value = new
    return value[top + 1] / mass[-1]


def _mean_price(theta: dict) -> int:
    """The survey sticker's mean of v rounded half up, in integers."""
    total = sum(theta["survey_weights"])
    first = sum(p * w for p, w in zip(theta["value_points"], theta["survey_weights"]))
    return (2 * first + total) // (2 * total)


# z = (u0 − u_idle) / (u* − u_idle): below −1 the idle policy would score over 0.5 (trivial);
# above 0.95 the default is already near-optimal (no room to learn)
DEFAULT_BAND = (-1.0, 0.95)


def default_policy(theta: dict) -> np.ndarray:
    """Offer the mean of v by the survey sticker (rounded half up) in every round, whatever was
    rejected: it reads the sticker, so a misleading survey misleads it."""
    return np.full((theta["horizon"], theta["max_price"] + 1), _mean_price(theta), dtype=np.int16)


def idle_policy(theta: dict) -> np.ndarray:
    """Walk away at once: take the outside option in round 0."""
    return np.full((theta["horizon"], theta["max_price"] + 1), WALK, dtype=np.int16)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """In every (round, b), a possible value ≤ b drawn uniformly as the price (walk away when
    none is left). A price between two possible values sells to the same buyers as the next one
    up, and one above b is surely rejected, so this is a random play of the offers that matter."""
    points = np.array(theta["value_points"])
    table = np.empty((theta["horizon"], theta["max_price"] + 1), dtype=np.int16)
    for bound in range(theta["max_price"] + 1):
        allowed = points[points <= bound]
        table[:, bound] = rng.choice(allowed, size=theta["horizon"]) if allowed.size else WALK
    return table


def boundary_calls(theta: dict, rng: np.random.Generator) -> list[list[dict]]:
    """Near-boundary decisions for the reference_agreement gate: offers one above the price
    range (refused), at its top and one below, then walk away (and once more: refused)."""
    top = theta["max_price"]
    offers = [{"tool": "make_offer", "arguments": {"price": int(p)}} for p in (top + 1, top, top - 1)]
    walk = {"tool": "walk_away", "arguments": {}}
    return [offers + [walk, walk]]


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a policy table against the episode's buyer; the canonical calls that play it."""
    table = _check(theta, policy)
    value = World.draw(theta, episode_seed)
    cost, salvage = theta["delay_cost"], theta["outside_option"]
    bound, calls, decisions = theta["max_price"], [], []
    for t in range(theta["horizon"]):
        action = int(table[t, bound])
        decisions.append(action)
        if action == WALK:
            calls.append({"tool": "walk_away", "arguments": {}})
            return Episode(utility=float(salvage - cost * t), calls=calls, decisions=decisions)
        if action == PASS:
            calls.append({"tool": "pass_round", "arguments": {}})
            continue
        calls.append({"tool": "make_offer", "arguments": {"price": action}})
        if action <= value:
            return Episode(utility=float(action - cost * t), calls=calls, decisions=decisions)
        bound = min(bound, action - 1)
    return Episode(utility=float(salvage - cost * theta["horizon"]), calls=calls, decisions=decisions)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the state is (round t, bound b); Q*(t, b, a) = Q_scaled / M(b) and
# V*(t, b) = U(t, b) / M(b), M(b) the prior weight of v ≤ b, from the solver's own `_actions`.


def decision_values(theta: dict) -> dict:
    """U(t, ·) for t = 0 … H (the recursion's tables) and the weights M; u* = U(0, V) / M(V)."""
    values, _ = _backward(theta)
    mass = _mass(theta)
    return {"u_star": float(values[0][theta["max_price"] + 1]) / float(mass[-1]), "values": values, "mass": mass}


def decision_state(theta: dict, world) -> tuple[int, int, bool]:
    """(round, b = lowest rejected price − 1 or V before any rejection, whether the deal is closed)."""
    lowest = world.db.execute("SELECT MIN(price) FROM %s WHERE answer = 'rejected'" % world.t["offers"]).fetchone()[0]
    top = theta["max_price"]
    return world._get("round"), top if lowest is None else min(top, lowest - 1), bool(world._get("status"))


def advantage(theta: dict, values: dict, before: tuple, call: dict | None, after: tuple) -> float:
    """An offer of p is worth Q*(t, b, p) (p > b: surely rejected, the same as passing), passing
    Q*(t, b, pass), walking away outside_option − delay_cost · t, each less V*(t, b); running out
    passes every round left: outside_option − delay_cost · H − V*(t, b)."""
    t, b, closed = before
    if closed:
        return 0.0
    mass = values["mass"]
    row = _actions(theta, mass, values["values"][t + 1], t, np.array([b]))[0]
    if call is None:
        chosen = int(mass[b + 1]) * (theta["outside_option"] - theta["delay_cost"] * theta["horizon"])
    elif call["tool"] == "make_offer":
        price = call["arguments"]["price"]
        chosen = row[1] if price > b else row[2 + price]
    else:
        chosen = row[0] if call["tool"] == "walk_away" else row[1]
    return float(Fraction(int(chosen) - int(row.max()), int(mass[b + 1])))


BUDGET_BINDS = True  # A admits θ only where the budget binds (vhd/tasks/stages/check/budget.py)


def turn_budget(theta: dict) -> int:
    """max(H, K) + 1 turns (K value points, H rounds; a sampled θ has H ≤ K): an offer in every
    round (π*'s and the default's longest play) with the survey points π*'s offers depend on read,
    but in presentation A not all K + 2 probes as well (`vhd/tasks/stages/check/budget.py` measures both)."""
    return max(theta["horizon"], len(theta["value_points"])) + 1


# ---------------------------------------------------------------------------------------------
# Presentation A: what the probes show, and the guess for what they did not (the A instruction
# states it): an unread weight is the survey sticker's, an unread delay cost or outside option the
# middle of its stated range (delay cost 1 … ⌊V/(4H)⌋ + 1, outside option 0 … ⌊V/8⌋), rounded down.


def probe_calls(theta: dict) -> list[dict]:
    """Read the survey of every possible value in order (the weights the sticker only estimates), then the
    carrying terms and the outside bid."""
    return [{"tool": "read_buyer_survey", "arguments": {"point": k}} for k in range(len(theta["value_points"]))] + [
        {"tool": "read_carrying_terms", "arguments": {}}, {"tool": "read_outside_bid", "arguments": {}}]


def belief(theta: dict, read: list[dict]) -> dict:
    """θ as known after the probe calls `read`: what they showed exact, the rest the stated guess."""
    seen = {call["tool"] for call in read}
    points = {call["arguments"]["point"] for call in read if call["tool"] == "read_buyer_survey"}
    top, horizon = theta["max_price"], theta["horizon"]
    weights = [w if k in points else s for k, (w, s) in enumerate(zip(theta["value_weights"], theta["survey_weights"]))]
    delay = theta["delay_cost"] if "read_carrying_terms" in seen else (top // (4 * horizon) + 2) // 2
    outside = theta["outside_option"] if "read_outside_bid" in seen else top // 8 // 2
    return {**theta, "value_weights": weights, "delay_cost": delay, "outside_option": outside}


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


TABLES = ("catalog", "offers", "rounds", "ledger", "state")


class World(BaseWorld):
    """The negotiation desk: catalog (the item card), offers, rounds, ledger and a state table."""

    PARAMS = ("horizon", "max_price", "value_points", "value_weights", "survey_weights", "delay_cost",
              "outside_option")
    STATE = (("round", 0), ("status", 0))  # status: an index into STATUS
    STATUS = ("open", "sold", "walked away", "expired")
    SURVEY_ERROR = 8  # the survey sticker's weights are each within ± this of the true weight (never below 1)

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        if len(params["value_points"]) != len(params["value_weights"]) or not params["value_points"] \
                or len(params["survey_weights"]) != len(params["value_points"]):
            raise ValueError("value_points, value_weights and survey_weights must be non-empty lists of one length")
        self.value = World.draw(params, episode_seed)  # the buyer's reservation value: fixed, never shown
        t = self.t
        db.execute("CREATE TABLE %s (sku TEXT PRIMARY KEY, name TEXT, unit TEXT, max_price INTEGER)" % t["catalog"])
        db.execute("CREATE TABLE %s (offer_id INTEGER PRIMARY KEY, round INTEGER UNIQUE REFERENCES %s(round), "
                   "sku TEXT REFERENCES %s(sku), price INTEGER, answer TEXT)" % (t["offers"], t["rounds"], t["catalog"]))
        db.execute("CREATE TABLE %s (round INTEGER PRIMARY KEY, action TEXT)" % t["rounds"])
        db.execute("CREATE TABLE %s (entry_id INTEGER PRIMARY KEY, round INTEGER, kind TEXT, amount INTEGER)"
                   % t["ledger"])
        db.execute("INSERT INTO %s VALUES (?, ?, ?, ?)" % t["catalog"],
                   (self.v["sku"], self.v["item"], self.v["unit"], params["max_price"]))

    @staticmethod
    def draw(params, episode_seed):
        """The buyer's reservation value: an integer inverse-CDF draw from random.Random(seed)."""
        rng = random.Random(episode_seed)
        return params["value_points"][World.draw_index(rng, params["value_weights"])]

    # -- state helpers --------------------------------------------------------------------
    def _book(self, rnd, kind, amount):
        if amount:
            self.db.execute("INSERT INTO %s (round, kind, amount) VALUES (?, ?, ?)" % self.t["ledger"],
                            (rnd, kind, amount))

    def _total(self):
        return self.db.execute("SELECT COALESCE(SUM(amount), 0) FROM %s" % self.t["ledger"]).fetchone()[0]

    def _costs(self):
        return -self.db.execute("SELECT COALESCE(SUM(amount), 0) FROM %s WHERE kind = 'delay cost'"
                                % self.t["ledger"]).fetchone()[0]

    def _open(self):
        if self._get("status") != 0:
            raise AgentError("the negotiation is closed (%s)" % World.STATUS[self._get("status")])

    def _close_round(self, action):
        """A round passes without a deal: book its delay cost; after the last round take the outside option."""
        rnd = self._get("round")
        self.db.execute("INSERT INTO %s VALUES (?, ?)" % self.t["rounds"], (rnd, action))
        self._book(rnd, "delay cost", -self.p["delay_cost"])
        self._set("round", rnd + 1)
        if rnd + 1 >= self.p["horizon"]:
            self._book(rnd, "outside option", self.p["outside_option"])
            self._set("status", 3)

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("status") != 0

    def utility(self):
        return self._total()

    def run_out(self):
        while not self.over():
            self._close_round("pass (turns ran out)")

    def after_run_out(self, answer):
        answer = super().after_run_out(answer)
        if "status" in answer:  # the rounds left passed with no offers: the deal expired
            answer.update(status=World.STATUS[self._get("status")], rounds_left=0)
        return answer

    # -- tools ------------------------------------------------------------------------------
    @tool("probe", "Read the full market survey of one possible reservation value for {item}: its exact weight "
          "(the chance of a value is its weight over the sum of all the weights).", reveals=("value_weights",),
          point=integer(0, MAX_POINTS - 1, "number of the possible value (0 is the lowest)"))
    def tool_read_buyer_survey(self, point):
        points = self.p["value_points"]
        if not 0 <= point < len(points):
            raise AgentError("the possible values are numbered 0 to %d; got %d" % (len(points) - 1, point))
        return {"point": point, "value": points[point], "weight": self.p["value_weights"][point],
                "sticker_weight": self.p["survey_weights"][point], "currency": self.v["currency"],
                "note": "the buyer's value is drawn once and stays fixed"}

    @tool("probe", "Read the {site}'s carrying terms: the delay cost in {currency} paid for every round that "
          "passes without a deal.", reveals=("delay_cost",))
    def tool_read_carrying_terms(self):
        return {"delay_cost_per_round": self.p["delay_cost"], "currency": self.v["currency"]}

    @tool("probe", "Read the standing bid of the {supplier} for the lot: the outside option in {currency} if no "
          "deal is made.", reveals=("outside_option",))
    def tool_read_outside_bid(self):
        return {"outside_option": self.p["outside_option"], "currency": self.v["currency"],
                "note": "paid when you walk away or when the last round ends with no deal"}

    @tool("observe", "Show the current round and the rounds left.")
    def tool_view_round(self):
        rnd = self._get("round")
        return {"round": rnd, "rounds_left": self.p["horizon"] - rnd, "horizon": self.p["horizon"]}

    @tool("observe", "List the prices offered so far and the buyer's answers.",
          limit=integer(1, 100, "how many entries to list, newest first"))
    def tool_view_offers(self, limit=20):
        rows = self.db.execute("SELECT round, price, answer FROM %s ORDER BY offer_id DESC LIMIT ?"
                               % self.t["offers"], (limit,)).fetchall()
        return {"offers": [{"round": r, "price": p, "answer": a} for r, p, a in rows]}

    @tool("observe", "Show the delay costs paid so far, in {currency}.")
    def tool_view_costs(self):
        return {"delay_costs_so_far": self._costs(), "rounds_passed": self._get("round"),
                "currency": self.v["currency"]}

    @tool("observe", "Show the item card of the {item} ({sku}) on sale and the highest price that may be asked.")
    def tool_view_item(self):
        sku, name, unit, top = self.db.execute("SELECT sku, name, unit, max_price FROM %s" % self.t["catalog"]).fetchone()
        return {"sku": sku, "item": name, "unit": unit, "max_price": top, "currency": self.v["currency"]}

    @tool("observe", "Show whether the negotiation is open, sold, walked away from or expired.")
    def tool_view_deal(self):
        row = self.db.execute("SELECT round, price FROM %s WHERE answer = 'accepted'" % self.t["offers"]).fetchone()
        return {"status": World.STATUS[self._get("status")], "sold_in_round": row[0] if row else None,
                "price": row[1] if row else None}

    @tool("observe", "List the booked amounts (delay costs, sale, outside option) and the balance in {currency}.",
          limit=integer(1, 100, "how many entries to list, newest first"))
    def tool_view_ledger(self, limit=20):
        rows = self.db.execute("SELECT entry_id, round, kind, amount FROM %s ORDER BY entry_id DESC LIMIT ?"
                               % self.t["ledger"], (limit,)).fetchall()
        return {"entries": [{"entry": e, "round": r, "kind": k, "amount": a} for e, r, k, a in rows],
                "balance": self._total()}

    @tool("decision", "Post a price for the {item} to the buyer: accepted iff it is at most the buyer's reservation "
          "value (the deal closes); a rejection ends the round.",
          price=integer(0, MAX_PRICE_SCHEMA, "the asking price, in whole currency units"))
    def tool_make_offer(self, price):
        self._open()
        if price > self.p["max_price"]:
            raise AgentError("prices run from 0 to %d %s; got %d" % (self.p["max_price"], self.v["currency"], price))
        rnd = self._get("round")
        if price <= self.value:
            self.db.execute("INSERT INTO %s VALUES (?, ?)" % self.t["rounds"], (rnd, "offer accepted"))
            self.db.execute("INSERT INTO %s (round, sku, price, answer) VALUES (?, ?, ?, 'accepted')"
                            % self.t["offers"], (rnd, self.v["sku"], price))
            self._book(rnd, "sale", price)
            self._set("status", 1)
            return {"round": rnd, "price": price, "answer": "accepted", "balance": self._total()}
        self.db.execute("INSERT INTO %s (round, sku, price, answer) VALUES (?, ?, ?, 'rejected')"
                        % self.t["offers"], (rnd, self.v["sku"], price))
        self._close_round("offer rejected")
        return {"round": rnd, "price": price, "answer": "rejected", "rounds_left": self.p["horizon"] - rnd - 1,
                "status": World.STATUS[self._get("status")]}

    @tool("clock", "Let the current round pass without an offer (its delay cost is paid).")
    def tool_pass_round(self):
        self._open()
        rnd = self._get("round")
        self._close_round("pass")
        return {"round_passed": rnd, "rounds_left": self.p["horizon"] - rnd - 1,
                "status": World.STATUS[self._get("status")]}

    @tool("clock", "End the negotiation now and take the outside option.")
    def tool_walk_away(self):
        self._open()
        rnd = self._get("round")
        self._book(rnd, "outside option", self.p["outside_option"])
        self._set("status", 2)
        return {"walked_away_in_round": rnd, "balance": self._total()}

    def limits(self, presentation):
        """Prices run 0 … V and the possible values 0 … K − 1 (both told in either presentation)."""
        return {"make_offer": {"price": (0, self.p["max_price"])},
                "read_buyer_survey": {"point": (0, len(self.p["value_points"]) - 1)}}

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        lines = [
            self.skin["narrative"],
            "",
            "The %s has one lot of %s (%s) to sell to a single buyer over %d rounds, numbered 0 to %d. The buyer "
            "has a private reservation value, drawn once and fixed for the whole negotiation." % (
                v["site"], v["item"], v["sku"], p["horizon"], p["horizon"] - 1),
            "Each round you may post a price from 0 to %d %s with %s: the buyer accepts iff the price is at most "
            "the reservation value, and the deal closes at that price. A rejected offer ends the round; %s ends "
            "a round without an offer; %s ends the negotiation and takes the outside option." % (
                p["max_price"], v["currency"], n["make_offer"], n["pass_round"], n["walk_away"]),
            "Every round that passes without a deal costs a delay cost; if no deal is made by the end of the last "
            "round you get the outside option. Your score is the sale price (or the outside option) minus the "
            "delay costs paid.",
            "You have %d turns: every tool call the world answers uses its turn cost; when they run out, the remaining "
            "rounds pass with no offers." % turn_budget,
        ]
        if presentation == "I":
            total = float(sum(p["value_weights"]))
            lines += [
                "",
                "Delay cost: %d %s per round without a deal. Outside option: %d %s." % (
                    p["delay_cost"], v["currency"], p["outside_option"], v["currency"]),
                "The reservation value is one of these values, with probabilities:",
                "  " + ", ".join("%d: %.2f" % (point, weight / total)
                                 for point, weight in zip(p["value_points"], p["value_weights"])),
                "(integer weights %s out of %d)." % (", ".join(str(w) for w in p["value_weights"]), int(total)),
            ]
        else:
            top, horizon = p["max_price"], p["horizon"]
            hidden = "The weights of the possible values, the delay cost per round and the outside option"
            lines += [
                "",
                "The reservation value is one of %d possible values, numbered 0 to %d: %s %s." % (
                    len(p["value_points"]), len(p["value_points"]) - 1,
                    ", ".join(str(point) for point in p["value_points"]), v["currency"]),
                "The survey sticker estimates their weights (a value's chance is its weight over the sum of the "
                "weights) as %s, in that order. Buyers overstate in surveys: up to all of the buyers at a value (the "
                "same share at every value) are recorded at the next higher one; each estimate is then off by at "
                "most %d either way (any error in between as likely), and never below 1." % (
                    ", ".join(str(w) for w in p["survey_weights"]), World.SURVEY_ERROR),
                "The delay cost is a whole number from 1 to %d %s per round; the outside option a whole number from "
                "0 to %d %s." % (top // (4 * horizon) + 1, v["currency"], top // 8, v["currency"]),
                self._not_given(hidden, ("read_buyer_survey", "read_carrying_terms", "read_outside_bid")),
                "%s shows the exact weight of one possible value per call." % n["read_buyer_survey"],
            ]
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="negotiation",
    version="6",
    group="train",
    model_class="finite-horizon Bayesian sequential pricing (hidden reservation value)",
    solver="backward recursion over (round, price bound) (numpy, integer)",
    stochastic=True,
))
