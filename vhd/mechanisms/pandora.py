"""Pandora's boxes (Weitzman): sealed lots with an opening fee and a random prize; open some, keep the best.

Model
    There are `n_boxes` = n sealed boxes (lots), numbered 0 … n − 1. Box i costs `costs[i]` ≥ 1
    (whole currency units) to open and holds a prize X_i drawn independently from the integer
    distribution P(X_i = prize_values[i][k]) = prize_weights[i][k] / Σ_k prize_weights[i][k]
    (values distinct, ascending, ≥ 0; weights ≥ 1). A known `fallback` prize ≥ 0 is always
    available. The player opens boxes one at a time, each at most once and at most `max_open`
    boxes in all (1 ≤ max_open ≤ n; the sampler draws a binding cap, max_open < n, so the cap is
    a rule the player meets), seeing each prize as it is opened, and may stop at any time.
    On stopping, utility = max(fallback, prizes revealed so far) − Σ fees of the opened boxes
    (stopping at once scores `fallback`). Prizes are drawn from the episode seed when the
    world is created (World.draw), so every policy faces the same draw.
    The state of the decision process is (set of opened boxes, best prize so far); solved
    exactly by backward induction over the 2^n opened-sets × the distinct best-prize levels.
    When max_open = n (a θ built by hand; the sampler never draws one) the cap is slack and the
    optimum equals Weitzman's index rule (open in decreasing reservation value σ_i,
    E[(X_i − σ_i)^+] = costs[i], while σ_i > best so far), which the solver re-computes and checks.
    Every box carries a sticker `prize_stickers[i]`: a noisy estimate of its expected prize (the
    mean rounded, plus an error drawn uniformly from −World.STICKER_ERROR = −12 … 12 by `sample`,
    never below 0). The default policy reads the stickers; the solver never does.
    Limits: solve() takes 1 … MAX_BOXES = 7 boxes (the induction runs over 2^n opened sets), a
    cap of 1 … n openings, whole fees ≥ 1, a whole fallback ≥ 0, per box distinct increasing
    whole prizes ≥ 0 with whole weights ≥ 1, and a whole sticker ≥ 0 per box; any other θ is
    refused with InvalidParams before anything is allocated (`check_theta`).

State
    the boxes (fee, opened or not), their prize tables (value, weight), the openings
    (which box, prize found, fee paid, in which step), a ledger of fees paid, and a state table
    (whether the episode has ended, the fallback prize, how many boxes were opened).

Tools
    probes (1 turn each, exact): inspect one box (its fee and prize table: one box per call),
    read the fee schedule (every fee: one row); decision: open a box; clock: stop and take the
    best prize (ends the episode); observations: list the boxes, view the best prize so far,
    view the fees paid, view openings used and left, view the net result if stopping now, view
    the log of openings. Box numbers run 0 … n − 1 in the tool schemas (`World.limits`).
    Presentation A tells n, the cap, the fallback and the stickers (with their stated error) and
    that every fee is 15–50 % of what its box is expected to add over the fallback; it hides the
    fees and the prize tables. The stated guess for what is unread (`belief`): an uninspected box
    pays its sticker for sure, and its unread fee is the middle of that range, 32.5 % of
    (sticker − fallback)^+ rounded, at least 1.

Plan
    an integer table of shape [2^n_boxes, L]: row m is the set of boxes already opened as a bit
    mask (bit i = box i), column k the best prize in hand, as the index k into the sorted
    distinct values of max(fallback, v) over every prize value v and the fallback itself; the
    entry is the box to open next (an unopened box, and only while fewer than max_open are open)
    or −1 to stop and take the best prize.

Reward
    utility = max(fallback, best revealed prize) − total fees paid. r = clip01((u − u_default) /
    (u* − u_default)) where both references are played on the same episode seed (the same
    prizes inside the boxes); the default opens the boxes in decreasing sticker order up to the
    cap, blind to fees and to what it finds (misled where the stickers are).

Advantages
    The solver's state is (opened set, best prize): the mask of the boxes in the World's openings
    table and the prize kept on stopping now (max(fallback, prizes found)), as the level index b;
    V*(mask, b) is the backward induction's table. `open_box(i)` has A* = Q*(mask, b, open i) −
    V*(mask, b), with Q* = E[V*(mask + i, max(b, X_i))] − costs[i] from the solver's own step
    (fees count when paid, so the realised prize is the exogenous noise); `stop_and_take` and
    running out of turns (the best prize is taken) have A* = level b − V*(mask, b). Turns are not
    part of the state (the turn budget has room for max_open openings and the stop; a shorter one
    would lower the true V*, and Σ A* still telescopes to u − u* less the prize surprises). In the
    solver's floats: π*'s calls repeat its own sums, so their A* is 0 exactly.

Episode end
    after `stop_and_take`, or when the turn budget runs out: the player then takes the best
    prize found so far (or the fallback) and no further box is opened. The budget is max_open + 2
    turns: every opening the cap allows and the stop (π*'s and the default's longest play) and one
    turn more; in A the n + 1 probes never all fit after π*'s play (max_open < n).
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
from pydantic import BaseModel

from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import InvalidPlan, PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

MAX_BOXES = 7
WEIGHT_TOTAL = 20
HIDDEN = ("costs", "prize_values", "prize_weights")
TOL = 1e-9
FEE_SHARE = (0.15, 0.5)


class Params(BaseModel):
    """Difficulty knobs of a Pandora's-box instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = knob(5, 2, MAX_BOXES, sampled=(4, 7), description="number of sealed boxes n, in boxes")
    horizon: int = knob(5, 1, MAX_BOXES, sampled=(2, 7),
                        description="cap on how many boxes may be opened, in openings (θ uses min(horizon, size − 1): "
                                    "the cap always binds)")


def _expected_excess(values: list[int], weights: list[int], level: float) -> Fraction:
    total = sum(weights)
    return sum((Fraction(w, total) * (v - Fraction(level)) for v, w in zip(values, weights) if v > level),
               Fraction(0))


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: a mix of 'safe' boxes (narrow prizes around a middling value), 'lottery' boxes
    (nothing or a big prize) and 'spread' boxes (3–4 prizes over 0…80); weights out of 20; fees
    a random 15–50 % of what a box adds over the fallback in expectation (so each box alone is
    worth opening, but not all of them); then every box's sticker: its mean prize rounded half
    up plus an error drawn uniformly from −12 … 12 (World.STICKER_ERROR), at least 0."""
    n = params.size
    fallback = int(rng.integers(0, 16))
    values_all, weights_all, costs = [], [], []
    for _ in range(n):
        kind = int(rng.integers(0, 3))
        if kind == 0:  # safe
            centre, spread = int(rng.integers(25, 61)), int(rng.integers(2, 9))
            k = int(rng.integers(2, 4))
            values = sorted({int(v) for v in rng.integers(centre - spread, centre + spread + 1, size=k)})
        elif kind == 1:  # lottery
            values = [int(rng.integers(0, 6)), int(rng.integers(70, 121))]
        else:  # spread
            k = int(rng.integers(3, 5))
            values = sorted({int(v) for v in rng.integers(0, 81, size=k)})
        if len(values) == 1:
            values = [values[0], values[0] + 10]
        k = len(values)
        if kind == 1:
            big = int(rng.integers(2, 7))
            weights = [WEIGHT_TOTAL - big, big]
        else:
            cuts = sorted(int(c) for c in rng.choice(np.arange(1, WEIGHT_TOTAL), size=k - 1, replace=False))
            weights = [b - a for a, b in zip([0] + cuts, cuts + [WEIGHT_TOTAL])]
        excess = float(_expected_excess(values, weights, fallback))
        cost = max(1, int(round(float(rng.uniform(*FEE_SHARE)) * excess)))
        values_all.append(values)
        weights_all.append(weights)
        costs.append(cost)
    errors = rng.integers(-World.STICKER_ERROR, World.STICKER_ERROR + 1, size=n)
    return {
        "n_boxes": n,
        "max_open": min(params.horizon, n - 1),  # binding: at least one box stays shut
        "fallback": fallback,
        "costs": costs,
        "prize_values": values_all,
        "prize_weights": weights_all,
        "prize_stickers": [max(0, _mean_prize(values, weights) + int(e))
                           for values, weights, e in zip(values_all, weights_all, errors)],
    }


def _mean_prize(values: list[int], weights: list[int]) -> int:
    """A box's expected prize rounded half up, in integers."""
    total = sum(weights)
    return (2 * sum(v * w for v, w in zip(values, weights)) + total) // (2 * total)


# ---------------------------------------------------------------------------------------------
# The decision process: states (opened mask, best-prize level). A policy is an int8 table
# [mask, level] → box to open next, or −1 to stop; levels are the sorted distinct values of
# max(fallback, v) over every prize v (and the fallback itself).


class _Process:
    def __init__(self, theta: dict):
        self.theta = theta
        self.n = theta["n_boxes"]
        self.cap = theta["max_open"]
        fb = theta["fallback"]
        self.levels = sorted({fb} | {max(fb, v) for row in theta["prize_values"] for v in row})
        self.index = {v: k for k, v in enumerate(self.levels)}
        self.costs = theta["costs"]
        self.outcomes = []  # per box: [(probability, {level index → next level index})…] as two lists
        for values, weights in zip(theta["prize_values"], theta["prize_weights"]):
            total = sum(weights)
            probs = [w / total for w in weights]
            nxt = [[self.index[max(level, v)] for v in values] for level in self.levels]
            self.outcomes.append((probs, nxt))
        self.popcount = [bin(m).count("1") for m in range(1 << self.n)]
        self.shape = (1 << self.n, len(self.levels))

    def q(self, value: list[list[float]], mask: int, b: int, box: int) -> float:
        """Expected utility-to-go of opening `box` in state (mask, level b), given successor values."""
        probs, nxt = self.outcomes[box]
        row, succ = value[mask | (1 << box)], nxt[b]
        total = 0.0
        for p, j in zip(probs, succ):
            total += p * row[j]
        return total - self.costs[box]

    def action_value(self, value: list[list[float]], mask: int, b: int, action: int) -> float:
        """Q*(mask, b, action): the level b kept on stopping (action −1), or opening box `action`."""
        return float(self.levels[b]) if action < 0 else self.q(value, mask, b, action)

    def valid_actions(self, mask: int) -> list[int]:
        if self.popcount[mask] >= self.cap:
            return [-1]
        return [-1] + [i for i in range(self.n) if not mask >> i & 1]


def _backward(theta: dict) -> tuple[_Process, list[list[float]], np.ndarray]:
    """(the process, V*[mask][b] for every state, π*): the first action whose Q* beats the best so
    far by more than TOL, stopping first."""
    proc = _Process(theta)
    masks, n_levels = proc.shape
    value: list[list[float]] = [[0.0] * n_levels for _ in range(masks)]
    policy = np.full(proc.shape, -1, dtype=np.int8)
    for mask in range(masks - 1, -1, -1):
        row = value[mask]
        actions = proc.valid_actions(mask)
        for b in range(n_levels):
            best, act = proc.action_value(value, mask, b, -1), -1
            for i in actions[1:]:
                q = proc.action_value(value, mask, b, i)
                if q > best + TOL:
                    best, act = q, i
            row[b] = best
            policy[mask, b] = act
    return proc, value, policy


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: [opened mask, best level] → a box 0 … n_boxes − 1 to open, or −1 to stop."""
    return _spec(_Process(theta))


def _spec(proc: _Process) -> PlanSpec:
    return PlanSpec(shape=proc.shape, integer=True, low=-1, high=proc.n - 1)


def _check_policy(proc: _Process, policy: np.ndarray) -> np.ndarray:
    """The plan as an int64 table; InvalidPlan (a ValueError) naming the first entry that is not of the
    declared form or opens a box its opened set does not allow."""
    table = _spec(proc).check(policy)
    for mask in range(proc.shape[0]):
        allowed = set(proc.valid_actions(mask))
        row = table[mask].tolist()
        if not set(row) <= allowed:
            k = next(k for k, a in enumerate(row) if a not in allowed)
            raise InvalidPlan(f"entry [{mask}, {k}] is {row[k]}; expected one of {sorted(allowed)} (box {row[k]} "
                              f"cannot be opened in opened-set {mask:b})")
    return table


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact expected utility of a policy table [opened mask, best level] → box or −1 (stop)."""
    proc = _Process(theta)
    table = _check_policy(proc, policy).tolist()
    masks, n_levels = proc.shape
    value: list[list[float]] = [[0.0] * n_levels for _ in range(masks)]
    for mask in range(masks - 1, -1, -1):
        row, acts = value[mask], table[mask]
        for b in range(n_levels):
            a = acts[b]
            row[b] = proc.action_value(value, mask, b, a)
    return value[0][proc.index[theta["fallback"]]]


def reservation_values(theta: dict) -> list[Fraction]:
    """Weitzman's σ_i: the root of E[(X_i − σ)^+] = costs[i], exact (piecewise-linear in σ)."""
    out = []
    for values, weights, cost in zip(theta["prize_values"], theta["prize_weights"], theta["costs"]):
        total = sum(weights)
        pairs = sorted(zip(values, weights))
        # on the segment σ ≤ v_k, E[(X − σ)^+] = Σ_{j ≥ k} p_j (v_j − σ); scan from the top
        sigma = None
        for k in range(len(pairs) - 1, -1, -1):
            mass = Fraction(sum(w for _, w in pairs[k:]), total)
            first = Fraction(sum(v * w for v, w in pairs[k:]), total)
            root = (first - cost) / mass
            lower = pairs[k - 1][0] if k > 0 else None
            if root <= pairs[k][0] and (lower is None or root >= lower):
                sigma = root
                break
        if sigma is None:
            raise ValueError(f"no reservation value for box with values {values}")
        out.append(sigma)
    return out


def weitzman_policy(theta: dict) -> np.ndarray:
    """The index rule as a table: open the unopened box of highest σ (lowest index on ties) while
    σ > best so far and the cap allows; otherwise stop."""
    proc = _Process(theta)
    sigma = reservation_values(theta)
    table = np.full(proc.shape, -1, dtype=np.int8)
    for mask in range(proc.shape[0]):
        if proc.popcount[mask] >= proc.cap:
            continue
        free = [i for i in range(proc.n) if not mask >> i & 1]
        top = max(free, key=lambda i: (sigma[i], -i))
        for b, level in enumerate(proc.levels):
            if sigma[top] > level:
                table[mask, b] = top
    return table


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … MAX_BOXES = 7 boxes (the induction
    runs over 2^n opened sets), a cap of 1 … n openings, whole fees ≥ 1, a whole fallback ≥ 0,
    per box distinct increasing whole prizes ≥ 0 with whole weights ≥ 1, and whole stickers ≥ 0."""
    check = ThetaCheck("pandora", theta)
    n = check.count("n_boxes", 1, MAX_BOXES)
    check.count("max_open", 1, n)
    check.whole("fallback", low=0)
    check.whole("costs", (n,), low=1)
    check.whole("prize_values", (n, None), low=0)
    check.whole("prize_weights", (n, None), low=1)
    check.whole("prize_stickers", (n,), low=0)
    check.require(all(len(values) == len(weights) and all(a < b for a, b in zip(values, values[1:]))
                      for values, weights in zip(theta["prize_values"], theta["prize_weights"])),
                  "prize_values", "per box distinct prizes in increasing order, one weight each")


def solve(theta: dict) -> Solution:
    """u* and π* by backward induction over (opened set, best prize); Weitzman's index rule is
    re-checked against it when the opening cap is slack (max_open = n)."""
    check_theta(theta)
    proc = _Process(theta)

    def run():
        _, table, policy = _backward(theta)
        value = table[0][proc.index[theta["fallback"]]]
        if theta["max_open"] >= theta["n_boxes"]:
            index_value = evaluate(theta, weitzman_policy(theta))
            if abs(index_value - value) > 1e-6 * max(1.0, abs(value)):
                raise ValueError(f"Weitzman's index rule gives {index_value}, backward induction {value}")
        return value, policy

    found = certified(run, method="backward induction over (opened set, best prize); "
                                  "Weitzman index cross-check when the cap is slack",
                      solver="python", solver_version=f"numpy {np.__version__}",
                      state_space=proc.shape[0] * proc.shape[1])
    return solved(theta, found, evaluate, default_policy, idle_policy)


# z = (u0 − u_idle) / (u* − u_idle): below −1 stopping at once would score over 0.5 (trivial);
# above 0.95 the fee-blind exhaustive search in sticker order already nearly solves it
DEFAULT_BAND = (-1.0, 0.95)


def default_policy(theta: dict) -> np.ndarray:
    """Believe the stickers and search exhaustively, blind to fees and to what is found: open the
    unopened box with the highest sticker (the lowest number on ties) while the cap allows, then
    stop and take the best prize."""
    proc = _Process(theta)
    order = sorted(range(proc.n), key=lambda i: (-theta["prize_stickers"][i], i))
    table = np.full(proc.shape, -1, dtype=np.int8)
    for mask in range(proc.shape[0]):
        if proc.popcount[mask] < proc.cap:
            table[mask] = next(i for i in order if not mask >> i & 1)
    return table


def idle_policy(theta: dict) -> np.ndarray:
    """Stop at once and take the fallback prize."""
    return np.full(_Process(theta).shape, -1, dtype=np.int8)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """In every state, a uniformly random valid action: stop, or open any unopened box the cap allows."""
    proc = _Process(theta)
    table = np.full(proc.shape, -1, dtype=np.int8)
    for mask in range(proc.shape[0]):
        actions = proc.valid_actions(mask)
        if len(actions) > 1:
            picks = rng.integers(0, len(actions), size=proc.shape[1])
            table[mask] = [actions[int(k)] for k in picks]
    return table


def boundary_calls(theta: dict, rng: np.random.Generator) -> list[list[dict]]:
    """Near-boundary decisions for the reference_agreement gate: open every box in a random
    order (the openings past `max_open` are refused), then stop."""
    boxes = [{"tool": "open_box", "arguments": {"box": int(b)}} for b in rng.permutation(theta["n_boxes"])]
    return [boxes + [{"tool": "stop_and_take", "arguments": {}}]]


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a policy table on the episode's prizes (World.draw): open boxes as the table says,
    then stop and take the best."""
    proc = _Process(theta)
    table = _check_policy(proc, policy)
    prizes = World.draw(theta, episode_seed)
    mask, best, paid = 0, theta["fallback"], 0
    calls, decisions = [], []
    while True:
        box = int(table[mask, proc.index[best]])
        if box < 0:
            break
        decisions.append(box)
        calls.append({"tool": "open_box", "arguments": {"box": box}})
        paid += theta["costs"][box]
        best = max(best, prizes[box])
        mask |= 1 << box
    calls.append({"tool": "stop_and_take", "arguments": {}})
    return Episode(utility=float(best - paid), calls=calls, decisions=decisions)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the state is (opened mask, best prize kept on stopping, stopped); Q* and V*
# from the backward induction's own table and step (_Process.action_value).


def decision_values(theta: dict) -> dict:
    """The process and V*[mask][b] of the backward induction; u* = V*(∅, fallback)."""
    proc, value, _ = _backward(theta)
    return {"u_star": value[0][proc.index[theta["fallback"]]], "process": proc, "value": value}


def decision_state(theta: dict, world) -> tuple[int, int, bool]:
    """(mask of the opened boxes, the prize kept on stopping now, whether the episode has ended)."""
    boxes = world.db.execute("SELECT box_id FROM %s" % world.t["openings"]).fetchall()
    return sum(1 << box for box, in boxes), world._best()[0], bool(world._get("stopped"))


def advantage(theta: dict, values: dict, before: tuple, call: dict | None, after: tuple) -> float:
    """Opening box i is worth Q*(mask, b, i), stopping (or running out) the level b in hand, each
    less V*(mask, b)."""
    mask, best, stopped = before
    if stopped:
        return 0.0
    proc, value = values["process"], values["value"]
    b = proc.index[best]
    action = call["arguments"]["box"] if call is not None and call["tool"] == "open_box" else -1
    return proc.action_value(value, mask, b, action) - value[mask][b]


def turn_budget(theta: dict) -> int:
    """Every opening the cap allows and the stop (π*'s and the default's longest play), and one
    turn more: in presentation A room for some probes, never for all n + 1 (max_open < n)."""
    return theta["max_open"] + 2


# ---------------------------------------------------------------------------------------------
# Presentation A: what the probes show, and the guess for what they did not (the A instruction
# states it): an uninspected box pays its sticker for sure; an unread fee is the middle of the
# stated 15–50 % of what that box adds over the fallback, 32.5 % of (sticker − fallback)^+
# rounded half up, at least 1.


def probe_calls(theta: dict) -> list[dict]:
    """Read the fee schedule, then inspect the boxes in index order."""
    return [{"tool": "read_fee_schedule", "arguments": {}}] + [
        {"tool": "inspect_box", "arguments": {"box": i}} for i in range(theta["n_boxes"])]


def belief(theta: dict, read: list[dict]) -> dict:
    """θ as known after the probe calls `read`: inspected boxes and read fees exact, the rest the
    stated guess."""
    inspected = {call["arguments"]["box"] for call in read if call["tool"] == "inspect_box"}
    schedule = any(call["tool"] == "read_fee_schedule" for call in read)
    costs, values, weights = [], [], []
    for i, sticker in enumerate(theta["prize_stickers"]):
        known = i in inspected
        guess = max(1, (13 * max(sticker - theta["fallback"], 0) + 20) // 40)
        costs.append(theta["costs"][i] if known or schedule else guess)
        values.append(theta["prize_values"][i] if known else [sticker])
        weights.append(theta["prize_weights"][i] if known else [1])
    return {**theta, "costs": costs, "prize_values": values, "prize_weights": weights}


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


TABLES = ("boxes", "prizes", "openings", "ledger", "state")


class World(BaseWorld):
    """The sealed-lot auction room: boxes, prize tables, openings, a fee ledger and a state table."""

    PARAMS = ("n_boxes", "max_open", "fallback", "costs", "prize_values", "prize_weights", "prize_stickers")
    STATE = (("stopped", 0), ("fallback", 0))  # the fallback is θ's, set in __init__
    IDS = {"box": "box", "best_box": "box"}
    STICKER_ERROR = 12  # a sticker is within ± this of its box's expected prize (never below 0)

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        n = params["n_boxes"]
        if len(params["costs"]) != n or len(params["prize_values"]) != n or len(params["prize_weights"]) != n \
                or len(params["prize_stickers"]) != n or any(len(v) != len(w) for v, w in zip(params["prize_values"], params["prize_weights"])):
            raise ValueError("costs, prize_values, prize_weights and prize_stickers do not match n_boxes=%r" % (n,))
        self._set("fallback", params["fallback"])
        self.prizes = World.draw(params, episode_seed)  # immutable: the hidden contents of the boxes
        t = self.t
        db.execute("CREATE TABLE %s (box_id INTEGER PRIMARY KEY, fee INTEGER, opened INTEGER)" % t["boxes"])
        db.execute("CREATE TABLE %s (box_id INTEGER REFERENCES %s(box_id), outcome INTEGER, value INTEGER, "
                   "weight INTEGER, PRIMARY KEY (box_id, outcome))" % (t["prizes"], t["boxes"]))
        db.execute("CREATE TABLE %s (step INTEGER PRIMARY KEY, box_id INTEGER UNIQUE REFERENCES %s(box_id), "
                   "prize INTEGER, fee INTEGER)" % (t["openings"], t["boxes"]))
        db.execute("CREATE TABLE %s (entry_id INTEGER PRIMARY KEY, step INTEGER, kind TEXT, amount INTEGER)"
                   % t["ledger"])
        db.executemany("INSERT INTO %s VALUES (?, ?, 0)" % t["boxes"], [(i, params["costs"][i]) for i in range(n)])
        db.executemany("INSERT INTO %s VALUES (?, ?, ?, ?)" % t["prizes"],
                       [(i, k, v, w) for i in range(n)
                        for k, (v, w) in enumerate(zip(params["prize_values"][i], params["prize_weights"][i]))])

    @staticmethod
    def draw(params, episode_seed):
        """The prize inside every box: integer inverse-CDF draws from random.Random(seed), box by box."""
        rng = random.Random(episode_seed)
        return [values[World.draw_index(rng, weights)]
                for values, weights in zip(params["prize_values"], params["prize_weights"])]

    # -- state helpers --------------------------------------------------------------------
    def _box(self, box):
        n = self.p["n_boxes"]
        if not 0 <= box < n:
            raise AgentError("there are %d boxes, numbered %s to %s; got %s"
                             % (n, self.ref("box", 0), self.ref("box", n - 1), self.ref("box", box)))
        return box

    def _opened_count(self):
        return self.db.execute("SELECT COUNT(*) FROM %s" % self.t["openings"]).fetchone()[0]

    def _best(self):
        """(the prize kept on stopping now: the best opened prize or the fallback, whichever is
        higher; the opened box with the highest prize, the first opened on ties, or None). The box
        is reported whether or not its prize beats the fallback, so a tie needs no rule."""
        row = self.db.execute("SELECT box_id, prize FROM %s ORDER BY prize DESC, step ASC LIMIT 1"
                              % self.t["openings"]).fetchone()
        fallback = self._get("fallback")
        if row is None:
            return fallback, None
        return max(fallback, row[1]), row[0]

    def _paid(self):
        return -self.db.execute("SELECT COALESCE(SUM(amount), 0) FROM %s WHERE kind = 'fee'"
                                % self.t["ledger"]).fetchone()[0]

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("stopped") == 1

    def utility(self):
        return self._best()[0] - self._paid()

    def run_out(self):
        if not self.over():
            self._stop("taken when the turns ran out")

    def _stop(self, kind):
        best, box = self._best()
        self.db.execute("INSERT INTO %s (step, kind, amount) VALUES (?, ?, ?)" % self.t["ledger"],
                        (self._opened_count(), kind, best))
        self._set("stopped", 1)
        return best, box

    # -- tools ------------------------------------------------------------------------------
    def _distribution(self, box):
        rows = self.db.execute("SELECT value, weight FROM %s WHERE box_id = ? ORDER BY outcome"
                               % self.t["prizes"], (box,)).fetchall()
        total = sum(w for _, w in rows)
        return {"prizes": [v for v, _ in rows], "weights": [w for _, w in rows],
                "probabilities": [w / float(total) for _, w in rows]}

    @tool("probe", "Inspect one sealed lot of {item} from the {supplier}: its opening fee in {currency} and its "
          "prize table (possible prizes and their weights).", reveals=HIDDEN,
          box=integer(0, MAX_BOXES - 1, "the box to inspect"))
    def tool_inspect_box(self, box):
        box = self._box(box)
        fee = self.db.execute("SELECT fee FROM %s WHERE box_id = ?" % self.t["boxes"], (box,)).fetchone()[0]
        out = {"box": box, "fee": fee, "currency": self.v["currency"]}
        out.update(self._distribution(box))
        return out

    @tool("probe", "Read the {supplier}'s fee schedule: the opening fee of every box, in {currency}.",
          reveals=("costs",))
    def tool_read_fee_schedule(self):
        rows = self.db.execute("SELECT box_id, fee FROM %s ORDER BY box_id" % self.t["boxes"]).fetchall()
        return {"fees": [{"box": i, "fee": fee} for i, fee in rows], "currency": self.v["currency"]}

    @tool("observe", "List the boxes at the {site}, whether each is open and the prize found in it.")
    def tool_list_boxes(self):
        rows = self.db.execute("SELECT b.box_id, b.opened, o.prize FROM %s b LEFT JOIN %s o "
                               "ON o.box_id = b.box_id ORDER BY b.box_id"
                               % (self.t["boxes"], self.t["openings"])).fetchall()
        return {"boxes": [{"box": i, "opened": bool(opened), "prize": prize} for i, opened, prize in rows]}

    @tool("observe", "Show the prize you would keep now (the best prize found or the fallback prize, whichever is "
          "higher) in {currency}, and the opened box with the highest prize.")
    def tool_view_best(self):
        best, box = self._best()
        return {"best_prize": best, "best_box": box, "fallback": self._get("fallback"),
                "currency": self.v["currency"]}

    @tool("observe", "Show the total opening fees paid so far, in {currency}.")
    def tool_view_fees_paid(self):
        return {"fees_paid": self._paid(), "currency": self.v["currency"]}

    @tool("observe", "Show how many boxes have been opened and how many may still be opened.")
    def tool_view_openings(self):
        used = self._opened_count()
        return {"opened": used, "max_open": self.p["max_open"], "left": self.p["max_open"] - used,
                "boxes": self.p["n_boxes"]}

    @tool("observe", "Show the net result if you stopped now: best prize minus fees paid.")
    def tool_view_net(self):
        best, _ = self._best()
        return {"best_prize": best, "fees_paid": self._paid(), "net_if_stopped_now": best - self._paid(),
                "currency": self.v["currency"]}

    @tool("observe", "List the most recent openings: box, prize found and fee paid.",
          limit=integer(1, 50, "how many openings to list"))
    def tool_view_log(self, limit=10):
        rows = self.db.execute("SELECT step, box_id, prize, fee FROM %s ORDER BY step DESC LIMIT ?"
                               % self.t["openings"], (limit,)).fetchall()
        return {"openings": [{"step": s, "box": b, "prize": prize, "fee": fee} for s, b, prize, fee in rows]}

    @tool("decision", "Open one sealed box: pay its fee in {currency} and see the prize inside (refused if it is "
          "already open or the opening cap is reached).",
          box=integer(0, MAX_BOXES - 1, "the box to open"))
    def tool_open_box(self, box):
        box = self._box(box)
        opened, fee = self.db.execute("SELECT opened, fee FROM %s WHERE box_id = ?" % self.t["boxes"],
                                      (box,)).fetchone()
        if opened:
            raise AgentError("box %s is already open" % self.ref("box", box))
        used = self._opened_count()
        if used >= self.p["max_open"]:
            raise AgentError("at most %s may be opened and %d already %s; call %s"
                             % (self._count(self.p["max_open"], "boxes", "box"), used, "is" if used == 1 else "are",
                                self.name["stop_and_take"]))
        prize = self.prizes[box]
        self.db.execute("UPDATE %s SET opened = 1 WHERE box_id = ?" % self.t["boxes"], (box,))
        self.db.execute("INSERT INTO %s VALUES (?, ?, ?, ?)" % self.t["openings"], (used, box, prize, fee))
        self.db.execute("INSERT INTO %s (step, kind, amount) VALUES (?, 'fee', ?)" % self.t["ledger"], (used, -fee))
        best, _ = self._best()
        return {"box": box, "prize": prize, "fee": fee, "best_prize": best, "fees_paid": self._paid(),
                "openings_left": self.p["max_open"] - used - 1, "currency": self.v["currency"]}

    @tool("clock", "Stop searching and keep the best prize found (or the fallback): the episode ends and the "
          "score is that prize minus all fees paid.")
    def tool_stop_and_take(self):
        best, box = self._stop("prize taken")
        return {"prize_taken": best, "best_box": box, "fees_paid": self._paid(), "net": best - self._paid(),
                "currency": self.v["currency"]}

    def limits(self, presentation):
        """Box numbers run 0 … n − 1 (the instruction tells n in both presentations)."""
        box = {"box": (0, self.p["n_boxes"] - 1)}
        return {"inspect_box": box, "open_box": box}

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        lines = [
            self.skin["narrative"],
            "",
            "The %s is offered %d sealed lots (boxes) of %s (%s) by the %s, numbered %s to %s. Each box holds "
            "one prize worth a whole number of %s, drawn at random from that box's own prize table; opening a "
            "box costs its fee and shows its prize." % (v["site"], p["n_boxes"], v["item"], v["sku"], v["supplier"],
                                                         self.ref("box", 0), self.ref("box", p["n_boxes"] - 1),
                                                         v["currency"]),
            "Open boxes one at a time with %s (at most %s in all, each once), then call %s to keep the "
            "single best prize found, or the fallback prize of %d %s if nothing opened beats it." % (
                n["open_box"], self._count(p["max_open"], "boxes", "box"), n["stop_and_take"], p["fallback"],
                v["currency"]),
            "Your score is the prize you keep minus every fee you paid. You have %d turns: every "
            "tool call the world answers uses its turn cost; when they run out, you keep the best prize found "
            "so far." % turn_budget,
        ]
        if presentation == "I":
            lines += ["", "Boxes (fee; prize: chance out of the box's total weight):"]
            for i in range(p["n_boxes"]):
                total = sum(p["prize_weights"][i])
                table = ", ".join("%d %s with chance %d/%d" % (value, v["currency"], w, total)
                                  for value, w in zip(p["prize_values"][i], p["prize_weights"][i]))
                lines.append("  box %s: fee %d; prize %s" % (self.ref("box", i), p["costs"][i], table))
        else:
            lines += [
                "",
                "Each box carries a sticker estimating its expected prize: %s (%s). A sticker is off from its "
                "box's expected prize by at most %d either way (any error in between as likely), and never "
                "below 0." % (", ".join("box %s: %d" % (self.ref("box", i), s)
                                        for i, s in enumerate(p["prize_stickers"])),
                              v["currency"], World.STICKER_ERROR),
                "Each box's fee is between 15 % and 50 % of what the box is expected to add over the fallback "
                "prize.",
                "The boxes' fees and prize tables are not given: %s reveals one box's fee and prize table, %s "
                "every fee, each at the cost of a turn from the same budget." % (
                    n["inspect_box"], n["read_fee_schedule"]),
            ]
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="pandora",
    version="5",
    group="far_ood",
    model_class="sequential search with costly inspection (Pandora's boxes, finite MDP)",
    solver="backward induction over (opened set, best prize); Weitzman reservation-value index cross-check",
    stochastic=True,
))
