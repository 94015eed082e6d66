"""Machine maintenance: one machine wears through condition states; each day run it, service it or replace it.

Model
    One machine is operated for `horizon` = H days numbered 0 … H − 1. Its condition is one of
    `n_conditions` = n states 0 (new) … n − 1 (failed); day 0 starts in `initial_condition`. On a day
    that starts in condition c the operator takes exactly one action a:
      a = 0, run. A working machine (c < n − 1) earns `revenue[c]` (a list over the n − 1 working
        conditions) and then wears: tomorrow's condition is c' with probability
        wear_weights[c][c'] / Σ_k wear_weights[c][k] (`wear_weights` has one row of n integer weights per
        working condition; sampled rows put no weight below c). A failed machine (c = n − 1) earns
        nothing, pays `downtime_penalty` and stays failed.
      a = 1, preventive maintenance (only when c < n − 1): pays `maintenance_cost`, earns nothing that
        day, and tomorrow's condition is max(0, c − repair_steps), for certain.
      a = 2, replace (any c, the only way out of the failed state): pays `replacement_cost`, earns
        nothing that day, and tomorrow the new machine is in condition 0.
    After day H − 1 the machine is sold for `salvage[c]` in its final condition c (a list over all n
    conditions). utility = revenue − maintenance costs − replacement costs − downtime penalties + salvage.
    The randomness of an episode: ticket u_d is the (d + 1)-th value of random.Random(episode_seed).random(),
    one ticket per day whatever the action; running from c on day d moves to the smallest c' with
    Σ_{k ≤ c'} wear_weights[c][k] > u_d · Σ_k wear_weights[c][k].
    Solved exactly by backward Bellman recursion over (day, condition) in integer arithmetic (every
    value scaled by a power of the common weight denominator): V_H(c) = salvage[c],
    V_d(c) = max over the allowed a of (that day's cash + E[V_{d+1}(next condition)]); ties go to the
    lower action code. A plan is an integer table [day, condition] → action code.
    Limits: solve() takes 1 … 200 days, 2 … 16 conditions, whole revenues and salvage values,
    whole costs ≥ 0, wear rows of whole weights ≥ 0 with a positive total, and an initial
    condition within range; any other θ is refused with InvalidParams before anything is
    allocated (`check_theta`).

State
    the day, the installed machine's condition and today's scheduled work (none, maintenance or
    replacement), the machine register (every machine installed, with its install and retirement day),
    the work log (one row per closed day), the cash ledger (its balance kept with every entry: no call
    sums it), the inspection reports and a state table.

Tools
    probes: cost sheet (maintenance cost, repair steps, replacement cost, downtime penalty, salvage by
    condition), revenue table, a quick inspection (a noisy estimate of each working condition's daily
    deterioration probability, 1 turn) and the engineering reliability report (the exact wear
    probabilities, 2 turns); decisions: schedule maintenance, replace the machine, cancel today's work;
    clock: end the day; observations: the machine, cash, work log, calendar. The tool schemas are
    fitted to the instance, in I and A alike (both instructions tell H): the work log lists at most
    the H days. No tool takes an id or an amount.

Plan
    an integer table of shape [horizon, n_conditions]: entry [d, c] is the action taken on day d
    when the machine starts the day in condition c, 0 = run (a failed machine, c = n_conditions
    − 1, then stands idle and pays the downtime penalty), 1 = preventive maintenance (not
    allowed for c = n_conditions − 1), 2 = replace.

Reward
    utility = revenue − maintenance − replacement − downtime penalties + salvage (cash at the end; the
    ledger starts at 0). r = clip01((u − u_default) / (u* − u_default)) where both references are played on
    the same episode seed (the same tickets). u_default runs to failure: it only ever replaces a failed
    machine. The idle policy always runs: it never services or replaces, so a failed machine stands.

Advantages
    The solver's state is (day d, condition c): the World's `day` and `condition`; the day's
    action is the work scheduled when `end_day` runs (none = run). `end_day` in state (d, c) with
    action a has A* = Q_d(c, a) − V_d(c), Q_d(c, a) the term of the Bellman maximum above;
    `schedule_maintenance`, `replace_machine` and `cancel_work` only choose the tentative action
    (A* = 0); running out of turns drops today's work and runs the machine to the end (a failed
    one stands): V^run_d(c) − V_d(c), V^run the same recursion with the action held at run. All in
    exact integers over powers of D, so π*'s calls have A* = 0 exactly.

Episode end
    after the last day's `end_day`, or when the turn budget runs out: today's scheduled work is dropped
    and the remaining days are closed with no work (a working machine runs, a failed one stands idle and
    pays the downtime penalty), then the machine is sold for its salvage value.
"""

from __future__ import annotations

import json
import math
import random
from functools import reduce

import numpy as np
from pydantic import BaseModel

from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import InvalidPlan, PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

WEIGHT_TOTAL = 1000
RUN, MAINTAIN, REPLACE = 0, 1, 2
COST_FIELDS = ("maintenance_cost", "repair_steps", "replacement_cost", "downtime_penalty", "salvage")
HIDDEN = ("revenue", "wear_weights") + COST_FIELDS


class Params(BaseModel):
    """Difficulty knobs of a maintenance instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = knob(8, 3, 16, sampled=(4, 12),
                     description="number of machine condition states, new to failed inclusive, in states")
    horizon: int = knob(40, 3, 200, sampled=(20, 120), description="number of days the machine is operated, in days")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ. Revenue falls from R0 (20 … 60) in condition 0 along 1 − (c / (n − 1))^κ (κ in 0.6 … 1.6).
    Wear: a target life of 20 … 60 % of the horizon (at least 4 days) sets the mean progress per day,
    rising with the condition (aging); progress comes in jumps of 1 … K states (K the least that keeps
    every daily deterioration probability ≤ 0.8), plus a small sudden-failure chance; weights out of 1000.
    Costs in whole currency units: replacement 4 … 12 × R0, maintenance 0.3 … 1.5 × R0 restoring
    1 … max(1, (n − 1) // 3) states, downtime penalty 0 … R0 / 2, salvage up to 30 % of the replacement
    cost falling linearly to 0 at failure."""
    n, horizon = params.size, params.horizon
    working = n - 1
    r0 = int(rng.integers(20, 61))
    kappa = float(rng.uniform(0.6, 1.6))
    revenue = [max(1, round(r0 * (1.0 - (c / working) ** kappa))) for c in range(working)]
    life = max(4.0, float(rng.uniform(0.2, 0.6)) * horizon)
    progress = working / life
    aging = float(rng.uniform(0.3, 1.0))
    rates = [progress * (aging + (2.0 - 2.0 * aging) * (c / max(1, working - 1))) for c in range(working)]
    decay = float(rng.uniform(0.3, 0.7))
    jumps, mean_jump = [1.0], 1.0
    while max(rates) / mean_jump > 0.8 and len(jumps) < working:
        jumps = [decay ** j for j in range(len(jumps) + 1)]
        total = sum(jumps)
        jumps = [p / total for p in jumps]
        mean_jump = sum((j + 1) * p for j, p in enumerate(jumps))
    sudden = float(rng.uniform(0.0, 0.02))
    wear = []
    for c in range(working):
        move = min(0.8, rates[c] / mean_jump)
        fail = sudden * (1.0 + c / max(1, working - 1))
        probs = [0.0] * n
        probs[c] = 1.0 - move - fail
        for j, p in enumerate(jumps):
            probs[min(c + j + 1, n - 1)] += move * p
        probs[n - 1] += fail
        row = [math.floor(p * WEIGHT_TOTAL) for p in probs]
        row[c] += WEIGHT_TOTAL - sum(row)
        wear.append(row)
    replacement = round(r0 * float(rng.uniform(4.0, 12.0)))
    scrap = float(rng.uniform(0.05, 0.3))
    return {
        "horizon": int(horizon),
        "n_conditions": int(n),
        "initial_condition": int(rng.integers(0, working // 2 + 1)),
        "revenue": revenue,
        "wear_weights": wear,
        "maintenance_cost": round(r0 * float(rng.uniform(0.3, 1.5))),
        "repair_steps": int(rng.integers(1, max(1, working // 3) + 1)),
        "replacement_cost": replacement,
        "downtime_penalty": int(rng.integers(0, r0 // 2 + 1)),
        "salvage": [round(replacement * scrap * (1.0 - c / working)) for c in range(n)],
    }


# ---------------------------------------------------------------------------------------------
# Exact arithmetic: values on day d are integers scaled by D^(H − d), D the common weight total.


class _Model:
    """θ as integers: revenue, scaled wear rows over one common denominator D, costs."""

    def __init__(self, theta: dict):
        self.n, self.horizon = int(theta["n_conditions"]), int(theta["horizon"])
        n = self.n
        rows = [[int(w) for w in row] for row in theta["wear_weights"]]
        if len(rows) != n - 1 or any(len(row) != n or min(row) < 0 or sum(row) <= 0 for row in rows):
            raise ValueError(f"wear_weights must hold {n - 1} rows of {n} non-negative weights with positive sums")
        if len(theta["revenue"]) != n - 1 or len(theta["salvage"]) != n:
            raise ValueError(f"revenue needs {n - 1} entries and salvage {n}")
        self.denominator = reduce(math.lcm, (sum(row) for row in rows), 1)
        self.rows = [[w * (self.denominator // sum(row)) for w in row] for row in rows]
        self.revenue = [int(x) for x in theta["revenue"]]
        self.salvage = [int(x) for x in theta["salvage"]]
        self.maintenance, self.replacement = int(theta["maintenance_cost"]), int(theta["replacement_cost"])
        self.penalty, self.steps = int(theta["downtime_penalty"]), int(theta["repair_steps"])
        self.start = int(theta["initial_condition"])

    def allowed(self, c: int) -> tuple[int, ...]:
        return (RUN, REPLACE) if c == self.n - 1 else (RUN, MAINTAIN, REPLACE)

    def q_value(self, c: int, action: int, later: list[int], scale: int) -> int:
        """(today's cash + E[V tomorrow]) × D^(H − d), with later[k] = V_{d+1}(k) × D^(H − d − 1)."""
        d = self.denominator
        if action == MAINTAIN:
            return -self.maintenance * scale + d * later[max(0, c - self.steps)]
        if action == REPLACE:
            return -self.replacement * scale + d * later[0]
        if c == self.n - 1:
            return -self.penalty * scale + d * later[c]
        return self.revenue[c] * scale + sum(w * v for w, v in zip(self.rows[c], later))

    def value(self, scaled_start: int) -> float:
        return scaled_start / self.denominator ** self.horizon  # int / int: correctly rounded


def _backward(m: _Model, choose, keep: list | None = None) -> list[int]:
    """V_0(c) · D^H for every c under `choose(day, c, later, scale) -> V_day(c) · scale`, with
    later[k] = V_{day+1}(k) · D^(H − day − 1) and scale = D^(H − day); `keep`, a list of H entries,
    receives (later, scale) at index day."""
    later, scale = list(m.salvage), m.denominator
    for day in range(m.horizon - 1, -1, -1):
        if keep is not None:
            keep[day] = (later, scale)
        later = [choose(day, c, later, scale) for c in range(m.n)]
        scale *= m.denominator
    return later


def _best(m: _Model, c: int, later: list[int], scale: int) -> tuple[int, int]:
    """(V_d(c) · D^(H − d), the optimal action): the first maximum over the allowed actions."""
    best, arg = None, RUN
    for action in m.allowed(c):
        q = m.q_value(c, action, later, scale)
        if best is None or q > best:
            best, arg = q, action
    return best, arg


def _bellman(theta: dict) -> tuple[float, np.ndarray]:
    m = _Model(theta)
    policy = np.zeros((m.horizon, m.n), dtype=np.int8)

    def choose(day: int, c: int, later: list[int], scale: int) -> int:
        value, policy[day, c] = _best(m, c, later, scale)
        return value

    return m.value(_backward(m, choose)[m.start]), policy


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: [day, condition] → 0 (run), 1 (maintain) or 2 (replace)."""
    return PlanSpec(shape=(int(theta["horizon"]), int(theta["n_conditions"])), integer=True, low=RUN, high=REPLACE)


def _check_plan(theta: dict, policy: np.ndarray) -> list[list[int]]:
    """The plan as int lists; InvalidPlan (a ValueError) naming the first entry not of the declared form."""
    table = plan_spec(theta).check(policy)
    failed = table.shape[1] - 1
    if (table[:, -1] == MAINTAIN).any():
        day = int(np.flatnonzero(table[:, -1] == MAINTAIN)[0])
        raise InvalidPlan(f"entry [{day}, {failed}] is 1; expected 0 or 2: a failed machine (condition {failed}) "
                          "cannot be maintained: run (stand idle) or replace it")
    return [[int(a) for a in row] for row in table]


def _evaluate_exact(theta: dict, table: list[list[int]]) -> float:
    m = _Model(theta)
    values = _backward(m, lambda day, c, later, scale: m.q_value(c, table[day][c], later, scale))
    return m.value(values[m.start])


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … 200 days, 2 … 16 conditions, whole
    revenues and salvage values, whole costs ≥ 0, wear rows of whole weights ≥ 0 with a positive
    total, and an initial condition within range."""
    check = ThetaCheck("maintenance", theta)
    check.count("horizon", 1, 200)
    n = check.count("n_conditions", 2, 16)
    check.whole("initial_condition", low=0, high=n - 1)
    check.whole("revenue", (n - 1,))
    check.whole("wear_weights", (n - 1, n), low=0)
    check.require(all(sum(row) > 0 for row in theta["wear_weights"]), "wear_weights",
                  "every row with a positive total weight")
    for key in ("maintenance_cost", "replacement_cost", "downtime_penalty"):
        check.whole(key, low=0)
    check.whole("repair_steps", low=0)
    check.whole("salvage", (n,))


def solve(theta: dict) -> Solution:
    """u* and π* ([day, condition] → action, int8) by exact backward recursion; default and idle values."""
    check_theta(theta)
    found = certified(
        lambda: _bellman(theta),
        method="backward Bellman recursion (exact integer arithmetic)",
        solver="python int",
        solver_version="stdlib",
        state_space=theta["horizon"] * theta["n_conditions"],
    )
    return solved(theta, found, evaluate, default_policy, idle_policy)


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact expected utility of a plan table [day, condition] → action (ValueError for an invalid one)."""
    return _evaluate_exact(theta, _check_plan(theta, policy))


# z = (u0 − u_idle) / (u* − u_idle): below −1 leaving a failed machine standing would score over
# 0.5; above 0.95 running to failure already nearly solves the instance
DEFAULT_BAND = (-1.0, 0.95)


def default_policy(theta: dict) -> np.ndarray:
    """Run to failure: run in every working condition, replace a failed machine (every day, the last included)."""
    table = np.zeros((theta["horizon"], theta["n_conditions"]), dtype=np.int8)
    table[:, -1] = REPLACE
    return table


def idle_policy(theta: dict) -> np.ndarray:
    """Always run: never service or replace (a failed machine stands idle and pays the downtime penalty)."""
    return np.zeros((theta["horizon"], theta["n_conditions"]), dtype=np.int8)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """Each (day, condition) runs with probability 0.6, else maintains or replaces (a failed machine: replaces)."""
    size = (theta["horizon"], theta["n_conditions"])
    work = np.where(rng.random(size) < 0.5, MAINTAIN, REPLACE)
    table = np.where(rng.random(size) < 0.6, RUN, work).astype(np.int8)
    table[:, -1] = np.where(table[:, -1] == MAINTAIN, REPLACE, table[:, -1])
    return table


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a plan table on the episode's tickets; the canonical calls that play it."""
    table = _check_plan(theta, policy)
    tickets = World.tickets(theta, episode_seed)
    n, c, cash = theta["n_conditions"], theta["initial_condition"], 0
    calls, decisions = [], []
    for day in range(theta["horizon"]):
        action = table[day][c]
        decisions.append(action)
        if action == MAINTAIN:
            calls.append({"tool": "schedule_maintenance", "arguments": {}})
            cash -= theta["maintenance_cost"]
            c = max(0, c - theta["repair_steps"])
        elif action == REPLACE:
            calls.append({"tool": "replace_machine", "arguments": {}})
            cash -= theta["replacement_cost"]
            c = 0
        elif c == n - 1:
            cash -= theta["downtime_penalty"]
        else:
            cash += theta["revenue"][c]
            c = World.worn(theta, c, tickets[day])
        calls.append({"tool": "end_day", "arguments": {}})
    cash += theta["salvage"][c]
    return Episode(utility=float(cash), calls=calls, decisions=decisions)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the state is (day, condition, today's work); Q and V come from the solver's
# q_value on its own tables V*_{d+1}, and run_out's continuation from those of always running.


def decision_values(theta: dict) -> dict:
    """The tables of the recursion, day by day: optimal[d] = (V*_{d+1} · D^(H − d − 1), D^(H − d)),
    running[d] the same for the policy that always runs (run_out's), best[d] = V*_d · D^(H − d) by
    condition (the recursion's own numbers: best[0] its result, best[d] = optimal[d − 1]'s V*);
    u* = V*_0(initial condition)."""
    m = _Model(theta)
    optimal, running = [None] * m.horizon, [None] * m.horizon
    values = _backward(m, lambda day, c, later, scale: _best(m, c, later, scale)[0], keep=optimal)
    _backward(m, lambda day, c, later, scale: m.q_value(c, RUN, later, scale), keep=running)
    best = [values] + [optimal[day - 1][0] for day in range(1, m.horizon)]
    return {"u_star": m.value(values[m.start]), "optimal": optimal, "running": running, "best": best, "model": m}


def decision_state(theta: dict, world) -> tuple[int, int, int]:
    """(day, the machine's condition, today's scheduled work: 0 none (run), 1 maintenance, 2 replacement)."""
    return world._read("day", "condition", "work")


def advantage(theta: dict, values: dict, before: tuple, call: dict | None, after: tuple) -> float:
    """`end_day` is worth Q_d(c, work) − V_d(c); scheduling or cancelling work only sets the day's
    tentative action (0); running out drops today's work and runs to the end: V^run_d(c) − V_d(c)."""
    day, c, work = before
    if day >= theta["horizon"] or (call is not None and call["tool"] != "end_day"):
        return 0.0
    m = values["model"]
    later, scale = values["optimal"][day]
    best = values["best"][day][c]  # _best(m, c, later, scale)[0], kept from the recursion
    if call is not None:
        chosen = m.q_value(c, work, later, scale)
    else:
        chosen = m.q_value(c, RUN, *values["running"][day])
    return (chosen - best) / scale  # int / int: correctly rounded, as float(Fraction(chosen − best, scale))


def turn_budget(theta: dict) -> int:
    """A work order and an end of day for every day, plus room for every probe and a few looks."""
    return 2 * theta["horizon"] + 14


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


TABLES = ("machines", "worklog", "ledger", "inspections", "state")


class World(BaseWorld):
    """The workshop's relational world: machine register, work log, ledger, inspections, state."""

    PARAMS = ("horizon", "n_conditions", "initial_condition", "revenue", "wear_weights", "maintenance_cost",
              "repair_steps", "replacement_cost", "downtime_penalty", "salvage")
    # condition: set to initial_condition; cash: the ledger's sum
    STATE = (("day", 0), ("condition", 0), ("work", 0), ("inspections", 0), ("cash", 0))
    NOISE_SD = 0.08
    WORK = ("none", "maintenance", "replacement")

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        n = params["n_conditions"]
        rows = params["wear_weights"]
        if (n < 2 or len(params["revenue"]) != n - 1 or len(params["salvage"]) != n or len(rows) != n - 1
                or any(len(row) != n or sum(row) <= 0 for row in rows)
                or not 0 <= params["initial_condition"] < n):
            raise ValueError("n_conditions = %r does not fit revenue, salvage, wear_weights or initial_condition" % n)
        self.draws = World.tickets(params, episode_seed)
        self._reads = {}  # the queries of `_read`, by number of keys
        t = self.t
        db.execute("CREATE TABLE %s (machine_id INTEGER PRIMARY KEY, serial TEXT, installed_day INTEGER, "
                   "retired_day INTEGER)" % t["machines"])
        db.execute("CREATE TABLE %s (day INTEGER PRIMARY KEY, machine_id INTEGER REFERENCES %s(machine_id), "
                   "work TEXT, condition_before INTEGER, condition_after INTEGER, revenue INTEGER)"
                   % (t["worklog"], t["machines"]))
        db.execute("CREATE TABLE %s (entry_id INTEGER PRIMARY KEY, day INTEGER, kind TEXT, amount INTEGER)"
                   % t["ledger"])
        db.execute("CREATE TABLE %s (inspection_id INTEGER PRIMARY KEY, day INTEGER, report TEXT)" % t["inspections"])
        self._set("condition", params["initial_condition"])
        self._install(0)

    @staticmethod
    def tickets(params, episode_seed):
        """The episode's daily tickets in [0, 1): one random.Random(seed).random() per day, whatever is done."""
        rng = random.Random(episode_seed)
        return [rng.random() for _ in range(params["horizon"])]

    @staticmethod
    def worn(params, condition, ticket):
        """Tomorrow's condition after running from `condition`: inverse CDF of its wear row at the ticket."""
        row = params["wear_weights"][condition]
        target, total = ticket * sum(row), 0
        for nxt, weight in enumerate(row):
            total += weight
            if total > target:
                return nxt
        return len(row) - 1

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

    def _machine(self):
        return self.db.execute("SELECT machine_id, serial, installed_day FROM %s WHERE retired_day IS NULL"
                               % self.t["machines"]).fetchone()

    def _install(self, day):
        count = self.db.execute("SELECT COUNT(*) FROM %s" % self.t["machines"]).fetchone()[0]
        self.db.execute("INSERT INTO %s (serial, installed_day) VALUES (?, ?)" % self.t["machines"],
                        ("MC-%03d" % (count + 1), day))

    def _failed(self):
        return self._get("condition") == self.p["n_conditions"] - 1

    def _open(self):
        if self.over():
            raise AgentError("all %d days have been played; the episode is over" % self.p["horizon"])

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("day") >= self.p["horizon"]

    def utility(self):
        return self._cash()

    def run_out(self):
        self._idle_to_end(self.tool_end_day, work=0)

    def limits(self, presentation):
        """The work log has at most one row a day, H days (both instructions tell H)."""
        return {"view_work_log": {"last_days": (1, self.p["horizon"])}}

    # -- tools ------------------------------------------------------------------------------
    @tool("probe", "Read the {site}'s maintenance cost sheet in {currency}: maintenance fee and how many condition "
          "states it restores, replacement cost, downtime penalty per failed day and the salvage value by final "
          "condition.", reveals=COST_FIELDS)
    def tool_get_cost_sheet(self):
        p = self.p
        return {"maintenance_cost": p["maintenance_cost"], "repair_steps": p["repair_steps"],
                "replacement_cost": p["replacement_cost"], "downtime_penalty_per_day": p["downtime_penalty"],
                "salvage_by_condition": list(p["salvage"]), "currency": self.v["currency"],
                "note": "maintenance moves the condition back by repair_steps states (not below 0); salvage is "
                        "paid for the machine's condition after the last day"}

    @tool("probe", "Read the revenue in {currency} that a day of running earns in each working condition of the "
          "machine.", reveals=("revenue",))
    def tool_get_revenue_table(self):
        return {"revenue_by_condition": list(self.p["revenue"]), "currency": self.v["currency"],
                "failed_condition": self.p["n_conditions"] - 1,
                "note": "earned on a day the machine runs in that working condition; a failed machine earns nothing"}

    @tool("probe", "Have the machine inspected: a quick, noisy estimate (standard error 0.08, fresh noise on every "
          "call) of the daily probability that running it in each working condition moves it to another condition. "
          "An estimate only; the reliability report is exact.", reveals=("wear_weights",), noisy=True)
    def tool_inspect_machine(self):
        count = self._get("inspections") + 1
        noise = random.Random(self.episode_seed * 7919 + count)  # its own stream: the tickets are untouched
        estimates = []
        for row in self.p["wear_weights"]:
            exact = 1.0 - row[len(estimates)] / float(sum(row))
            estimates.append(round(min(1.0, max(0.0, exact + noise.gauss(0.0, self.NOISE_SD))), 3))
        self._set("inspections", count)
        self.db.execute("INSERT INTO %s (inspection_id, day, report) VALUES (?, ?, ?)" % self.t["inspections"],
                        (count, self._get("day"), json.dumps(estimates)))
        return {"inspection": count, "estimated_daily_deterioration_probability_by_condition": estimates,
                "standard_error": self.NOISE_SD,
                "note": "an estimate: each inspection draws fresh independent noise; the reliability report is exact"}

    @tool("probe", "Read the engineering reliability report: the exact probability of each next condition after a "
          "day of running, from every working condition. Costs 2 turns.", reveals=("wear_weights",), turn_cost=2)
    def tool_get_reliability_report(self):
        rows = self.p["wear_weights"]
        return {"wear_probabilities": [{"from_condition": c, "to_condition_probabilities":
                                        [w / float(sum(row)) for w in row]} for c, row in enumerate(rows)],
                "daily_deterioration_probability_by_condition": [1.0 - row[c] / float(sum(row))
                                                                 for c, row in enumerate(rows)],
                "failed_condition": self.p["n_conditions"] - 1}

    @tool("observe", "Show the installed machine: serial, install day, condition, whether it has failed and the work "
          "scheduled today.")
    def tool_view_machine(self):
        _, serial, installed = self._machine()
        condition = self._get("condition")
        return {"serial": serial, "installed_day": installed, "condition": condition,
                "failed": condition == self.p["n_conditions"] - 1, "n_conditions": self.p["n_conditions"],
                "work_scheduled_today": self.WORK[self._get("work")]}

    @tool("observe", "Show the cash balance of the {site} in {currency}.")
    def tool_view_cash(self):
        return {"cash": self._cash(), "currency": self.v["currency"]}

    @tool("observe", "List recent closed days: work done, condition before and after, revenue.",
          last_days=integer(1, 1000, "how many days back"))
    def tool_view_work_log(self, last_days=7):
        rows = self.db.execute("SELECT w.day, m.serial, w.work, w.condition_before, w.condition_after, w.revenue "
                               "FROM %s w JOIN %s m ON m.machine_id = w.machine_id ORDER BY w.day DESC LIMIT ?"
                               % (self.t["worklog"], self.t["machines"]), (last_days,)).fetchall()
        keys = ("day", "serial", "work", "condition_before", "condition_after", "revenue")
        return {"days": [dict(zip(keys, row)) for row in rows]}

    @tool("observe", "Show today's day number and the days left.")
    def tool_view_calendar(self):
        day = self._get("day")
        return {"day": day, "days_left": self.p["horizon"] - day, "horizon": self.p["horizon"]}

    @tool("decision", "Schedule preventive maintenance for today (not on a failed machine): the fee is paid and the "
          "condition restored when the day ends; no revenue today.")
    def tool_schedule_maintenance(self):
        self._open()
        if self._get("work"):
            raise AgentError("%s is already scheduled today; cancel it first" % self.WORK[self._get("work")])
        if self._failed():
            raise AgentError("the machine has failed (condition %d): it can only be replaced"
                             % (self.p["n_conditions"] - 1))
        self._set("work", 1)
        return {"work_scheduled_today": "maintenance"}

    @tool("decision", "Schedule a replacement for today: the new machine is installed when the day ends (condition 0 "
          "tomorrow) for the replacement cost; no revenue today.")
    def tool_replace_machine(self):
        self._open()
        if self._get("work"):
            raise AgentError("%s is already scheduled today; cancel it first" % self.WORK[self._get("work")])
        self._set("work", 2)
        return {"work_scheduled_today": "replacement"}

    @tool("decision", "Cancel the work scheduled for today (the machine then runs).")
    def tool_cancel_work(self):
        if not self._get("work"):
            raise AgentError("no work is scheduled today")
        self._set("work", 0)
        return {"work_scheduled_today": "none"}

    @tool("clock", "Close the day: do the scheduled work, or run the machine (earn, then wear) or, if it has failed, "
          "book the downtime penalty; move to the next day.")
    def tool_end_day(self):
        p = self.p
        keys = ("day", "work", "condition", "cash")
        read = self._read(*keys)
        day, work, before, cash = read
        machine_id = self._machine()[0]
        earned = 0
        if work == 2:
            entries = [("replacement", -p["replacement_cost"])]
            self.db.execute("UPDATE %s SET retired_day = ? WHERE machine_id = ?" % self.t["machines"],
                            (day, machine_id))
            self._install(day + 1)
            after, label = 0, "replacement"
        elif work == 1:
            entries = [("maintenance", -p["maintenance_cost"])]
            after, label = max(0, before - p["repair_steps"]), "maintenance"
        elif before == p["n_conditions"] - 1:
            entries = [("downtime penalty", -p["downtime_penalty"])]
            after, label = before, "stood failed"
        else:
            earned = p["revenue"][before]
            entries = [("revenue", earned)]
            after, label = World.worn(p, before, self.draws[day]), "ran"
        self.db.execute("INSERT INTO %s VALUES (?, ?, ?, ?, ?, ?)" % self.t["worklog"],
                        (day, machine_id, label, before, after, earned))
        result = {"day_closed": day, "work": label, "condition_before": before, "condition": after,
                  "failed": after == p["n_conditions"] - 1, "revenue": earned, "days_left": p["horizon"] - day - 1}
        if day + 1 == p["horizon"]:
            entries.append(("salvage", p["salvage"][after]))
            result["salvage"] = p["salvage"][after]
        cash += self._book(day, *entries)
        self._write(keys, read, (day + 1, 0, after, cash))
        result["cash"] = cash
        return result

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        failed = p["n_conditions"] - 1
        lines = [
            self.skin["narrative"],
            "",
            "You run the %s's packing machine for %s for %d days, numbered 0 to %d. Its condition is one of %d "
            "states, 0 (new) to %d (failed); on day 0 it is in condition %d. All amounts are in %s." % (
                v["site"], v["item"], p["horizon"], p["horizon"] - 1, p["n_conditions"], failed,
                p["initial_condition"], v["currency"]),
            "Each day do one thing, then close the day with %s. With no work scheduled a working machine runs: "
            "it earns the revenue of its condition and then wears at random, possibly all the way to failure; "
            "a failed machine earns nothing and costs a downtime penalty for each day it stands." % n["end_day"],
            "%s schedules preventive maintenance for today (not on a failed machine): it costs the maintenance fee, "
            "earns nothing that day and moves the condition back by a fixed number of states (not below 0). "
            "%s installs a new machine (condition 0 tomorrow) for the replacement cost, earning nothing that day. "
            "%s undoes today's scheduled work." % (n["schedule_maintenance"], n["replace_machine"], n["cancel_work"]),
            "After the last day the machine is sold for the salvage value of its condition. Your score is the cash "
            "you end with (the ledger starts at 0). You have %d turns: every tool call the world answers uses its turn "
            "cost; when they run out, today's work is dropped and the remaining days pass with no work." % turn_budget,
        ]
        if presentation == "I":
            lines += [
                "",
                "Revenue per day of running, by working condition 0 to %d: %s." % (
                    failed - 1, ", ".join(str(x) for x in p["revenue"])),
                "Maintenance costs %d and restores %s; replacement costs %d; downtime penalty %d per day "
                "failed." % (p["maintenance_cost"], self._count(p["repair_steps"], "states", "state"),
                             p["replacement_cost"], p["downtime_penalty"]),
                "Salvage value by final condition 0 to %d: %s." % (failed, ", ".join(str(x) for x in p["salvage"])),
                "Wear: a day of running in condition c moves the machine to condition c' with these probabilities:",
            ]
            for c, row in enumerate(p["wear_weights"]):
                lines.append("  from %d: %s" % (c, ", ".join("%d: %.3f" % (k, w / float(sum(row)))
                                                             for k, w in enumerate(row) if w)))
        else:
            lines += [
                "",
                "Revenues, costs, salvage values, the repair steps and the wear probabilities are not given: %s and "
                "%s reveal the money side, %s gives a cheap noisy estimate of each condition's daily deterioration "
                "probability and %s the exact wear probabilities. Every probe costs turns from the same budget "
                "(the reliability report 2, the others 1)." % (
                    n["get_cost_sheet"], n["get_revenue_table"], n["inspect_machine"], n["get_reliability_report"]),
            ]
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="maintenance",
    version="5",
    group="beyond",
    model_class="finite-horizon stochastic MDP (machine replacement and preventive maintenance)",
    solver="backward Bellman recursion (exact integer arithmetic, Python int)",
    stochastic=True,
))
