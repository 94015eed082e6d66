"""Multi-dimensional 0/1 knapsack: pick lots of an item under several resource limits at once.

Model
    There are `n_items` = n candidate lots, numbered 0 … n − 1, and `n_resources` = m limited
    resources, numbered 0 … m − 1. Lot i is worth `values[i]` (a whole number of currency units)
    and uses `weights[r][i]` ≥ 0 units of resource r; resource r holds `capacities[r]` units.
    A selection is a set S of lots, taken whole or not at all (0/1); it is feasible when
    Σ_{i∈S} weights[r][i] ≤ capacities[r] for every resource r. Its utility is Σ_{i∈S} values[i].
    The decision process is deterministic: every feasible selection can be built by adding its
    lots one at a time in any order, since a subset of a feasible selection is feasible.
    Solved exactly as a 0/1 integer program (maximise v·x subject to W x ≤ c, x ∈ {0,1}^n) by
    HiGHS through scipy.optimize.milp with a zero relative MIP gap; the optimum is re-checked
    in integer arithmetic. Limits: solve() takes 1 … 12 resources (MAX_RESOURCES) and 1 … 100 lots
    (MAX_ITEMS) with one resource — Pisinger's n = 100 instances, every type solved in about 0.1 s —
    or 1 … 50 lots (MAX_ITEMS_MULTI) with two or more (50 lots × 5 resources take about a second,
    docs/BENCHMARKS.md "Headroom"), with whole values, loads and capacities ≥ 0; any other θ (a
    fractional weight such as 1.9, a negative capacity, 101 lots, 51 lots on two resources) is
    refused with InvalidParams, never truncated.

State
    the lot catalog (value, whether inspected), the resources (capacity, whether read), the
    lot-by-resource loads, the current selection, an action log and a state table (whether the
    capacities have been read and whether the selection has been submitted).

Tools
    probes: inspect a lot (its value and its load on every resource), read the capacities;
    decisions: add a lot to the selection, remove a lot, clear the selection; clock: submit the
    selection (ends the episode); observations: list the lots, view the selection (value and
    load of its inspected lots), view the headroom left (once the capacities are read, after the
    inspected lots of the selection), view inspected lots, view the action log. Nothing but the
    two probes shows a value, a load or a capacity: sums leave uninspected lots out (and name
    them), and a refused lot is told only that it would push some resource past its capacity.
    In presentation I the instruction states every value, load and capacity, so every lot counts
    as inspected and the capacities as read from the start.

Plan
    a 0/1 integer vector of length n_items: entry i is 1 if lot i is selected; the selection
    must fit every capacity.

Reward
    utility = total value of the submitted selection (the empty selection scores 0).
    r = clip01((u − u_default) / (u* − u_default)), where u_default is the value of taking the
    lots in index order 0, 1, 2, … while they fit (stopping at the first lot that does not).

Advantages
    The solver's state is (submitted, selection): the state table's flag and the selection
    table. A* is the change of the potential Φ = the best value reachable from the state: every
    lot added can be removed again (or the selection cleared), so Φ = u* while the selection is
    open, whatever it holds, and Φ = the selection's value once it is submitted. Turns are
    ignored: a budget too short to undo a bad selection still counts as u* (the sum telescopes
    all the same). Adding, removing or clearing lots gets A* = 0; `submit_selection` gets
    value(selection) − u*; running out of turns submits the selection as it stands, also
    value(selection) − u*. Whole numbers, so Σ A* = u − u* exactly on every trajectory.

Episode end
    after `submit_selection`, or when the turn budget runs out: the current selection is then
    submitted as it stands (no further lots are added or removed).
"""

from __future__ import annotations


import numpy as np
import scipy
from pydantic import BaseModel, model_validator

from vhd.mechanisms._advantage import until_committed
from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, exact_milp, integer_mip_bound, solved
from vhd.mechanisms._theta import ThetaCheck

MAX_ITEMS = 100  # Params/tool-schema/solve bound with one resource (Pisinger's n = 100); the sampler draws 6…14
MAX_ITEMS_MULTI = 50  # Params/solve bound with two or more resources (mknap1's largest problem, 50 × 5)
MAX_RESOURCES = 12  # Params/solve bound
HIDDEN = ("values", "weights", "capacities")


class Params(BaseModel):
    """Difficulty knobs of a knapsack instance."""

    size: int = knob(10, 1, MAX_ITEMS, sampled=(6, 14),
                     description="number of candidate lots (items) n, in lots; solve() refuses θ with more than "
                                 "MAX_ITEMS = 100, or more than MAX_ITEMS_MULTI = 50 with two or more resources")
    horizon: int = knob(5, 1, MAX_RESOURCES, sampled=(1, 11),
                        description="number of resource constraints m (each a capacity in resource units); solve() "
                                    "refuses θ with more than MAX_RESOURCES = 12")

    @model_validator(mode="after")
    def _lots_per_resources(self) -> "Params":
        if self.horizon > 1 and self.size > MAX_ITEMS_MULTI:
            raise ValueError(f"size ≤ {MAX_ITEMS_MULTI} with two or more resources (horizon {self.horizon}); "
                             f"size ≤ {MAX_ITEMS} only with one")
        return self


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: integer loads 0…20 (each lot uses at least one resource), capacities about half
    the total load per resource, values correlated with a lot's mean load plus noise (10…~120)."""
    n, m = params.size, params.horizon
    weights = rng.integers(0, 21, size=(m, n))
    for i in range(n):  # no free lot: each one uses at least one unit of some resource
        if weights[:, i].sum() == 0:
            weights[int(rng.integers(0, m)), i] = int(rng.integers(1, 21))
    share = rng.uniform(0.4, 0.6, size=m)
    capacities = np.maximum(np.floor(share * weights.sum(axis=1)).astype(int), 1)
    mean_load = weights.mean(axis=0)
    values = np.rint(10 + 3 * mean_load + rng.integers(0, 41, size=n)).astype(int)
    return {
        "n_items": n,
        "n_resources": m,
        "values": [int(v) for v in values],
        "weights": [[int(w) for w in row] for row in weights],
        "capacities": [int(c) for c in capacities],
    }


# ---------------------------------------------------------------------------------------------
# Plans: a 0/1 vector over the lots.


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … MAX_ITEMS lots with one resource, 1 …
    MAX_ITEMS_MULTI with 2 … MAX_RESOURCES, whole values, loads and capacities ≥ 0 (fractions are
    refused, never truncated)."""
    check = ThetaCheck("knapsack", theta)
    m = check.count("n_resources", 1, MAX_RESOURCES)
    n = check.count("n_items", 1, MAX_ITEMS if m == 1 else MAX_ITEMS_MULTI)
    check.whole("values", (n,), low=0)
    check.whole("weights", (m, n), low=0)
    check.whole("capacities", (m,), low=0)


def _arrays(theta: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    values = np.array(theta["values"], dtype=np.int64)
    weights = np.array(theta["weights"], dtype=np.int64).reshape(theta["n_resources"], theta["n_items"])
    capacities = np.array(theta["capacities"], dtype=np.int64)
    return values, weights, capacities


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: one integer 0 or 1 per lot."""
    return PlanSpec(shape=(theta["n_items"],), integer=True, low=0, high=1)


def _check_plan(theta: dict, policy: np.ndarray) -> np.ndarray:
    """The plan as an int64 0/1 vector; ValueError (InvalidPlan) if it is malformed or breaks a capacity."""
    x = plan_spec(theta).check(policy)
    _, weights, capacities = _arrays(theta)
    load = weights @ x
    over = np.flatnonzero(load > capacities)
    if over.size:
        r = int(over[0])
        raise ValueError(f"the plan loads resource {r} with {int(load[r])} > capacity {int(capacities[r])}")
    return x


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact utility of a 0/1 selection vector: the total value of the lots it takes."""
    x = _check_plan(theta, policy)
    values, _, _ = _arrays(theta)
    return float(int(values @ x))


def _milp(theta: dict) -> tuple[float, np.ndarray, dict[str, float]]:
    """(u*, π*, the MIP proof) by HiGHS, the optimum re-scored exactly."""
    from scipy.optimize import Bounds, LinearConstraint  # lazily: registry discovery stays fast

    values, weights, capacities = _arrays(theta)
    n = theta["n_items"]
    res = exact_milp(
        c=-values.astype(float),
        constraints=[LinearConstraint(weights.astype(float), -np.inf, capacities.astype(float))],
        integrality=np.ones(n),
        bounds=Bounds(0, 1),
    )
    x = np.rint(res.x).astype(np.int8)
    if np.abs(res.x - x).max() > 1e-6:
        raise ValueError(f"HiGHS returned a fractional plan {res.x.tolist()}")
    value = evaluate(theta, x)  # also re-checks feasibility in integers
    return value, x, integer_mip_bound(res, value)


def solve(theta: dict) -> Solution:
    """u* and π* (the 0/1 selection vector, int8) by MILP; values of the default and idle plans.
    InvalidParams first if θ is not of the declared form (`check_theta`)."""
    check_theta(theta)

    found = certified(lambda: _milp(theta), method="0/1 integer program, branch and bound (zero MIP gap)",
                      solver="scipy.optimize.milp (HiGHS)", solver_version=scipy.__version__,
                      state_space=2 ** theta["n_items"])
    return solved(theta, found, evaluate, default_policy, idle_policy)


# z = (u0 − u_idle) / (u* − u_idle) with u_idle = 0 (the empty selection): z ≥ 0 always, since
# any selection is worth ≥ 0; above 0.95 the index-order first fit already nearly solves it
DEFAULT_BAND = (0.0, 0.95)


def default_policy(theta: dict) -> np.ndarray:
    """Take the lots in index order 0, 1, 2, … while they fit: stop at the first lot that would
    exceed some remaining capacity (values and later lots are ignored)."""
    _, weights, capacities = _arrays(theta)
    left = capacities.copy()
    x = np.zeros(theta["n_items"], dtype=np.int8)
    for i in range(theta["n_items"]):
        if not (weights[:, i] <= left).all():
            break
        x[i] = 1
        left -= weights[:, i]
    return x


def idle_policy(theta: dict) -> np.ndarray:
    """Take nothing: submit the empty selection."""
    return np.zeros(theta["n_items"], dtype=np.int8)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """A random feasible selection: visit the lots in a random order and take each one that
    still fits with probability 1/2."""
    _, weights, capacities = _arrays(theta)
    left = capacities.copy()
    x = np.zeros(theta["n_items"], dtype=np.int8)
    for i in rng.permutation(theta["n_items"]):
        if rng.random() < 0.5 and (weights[:, i] <= left).all():
            x[i] = 1
            left -= weights[:, i]
    return x


BOUNDARY_ORDERS = 12


def boundary_calls(theta: dict, rng: np.random.Generator) -> list[list[dict]]:
    """Near-boundary decisions for the reference_agreement gate: for each resource, a selection
    that fills it exactly to capacity (subset sum over the lots in a random order) while fitting
    the others, added lot by lot, then every other lot tried once (each refused), then submit.
    When no subset fills a resource exactly, the fullest one is used (the tries then miss by a
    few units). Last, up to three lots that fit twice over, each added twice (the repeat refused
    as a lot already selected)."""
    _, weights, capacities = _arrays(theta)
    n = theta["n_items"]
    sequences = []
    for r in range(len(capacities)):
        cap, best = int(capacities[r]), (-1, [])
        for _ in range(BOUNDARY_ORDERS):  # lot orders tried: each keeps one subset per sum
            reach: dict[int, list[int]] = {0: []}
            for i in rng.permutation(n):
                w = int(weights[r, i])
                for total, chosen in list(reach.items()):
                    if total + w <= cap and total + w not in reach and (weights[:, chosen + [i]].sum(axis=1)
                                                                         <= capacities).all():
                        reach[total + w] = chosen + [int(i)]
            best = max(best, (max(reach), reach[max(reach)]))
            if best[0] == cap:
                break
        chosen = best[1]
        rest = [int(i) for i in rng.permutation(n) if int(i) not in chosen]
        calls = [{"tool": "add_item", "arguments": {"item": i}} for i in chosen + rest]
        sequences.append(calls + [{"tool": "submit_selection", "arguments": {}}])
    # lots that fit twice over, each added and then offered again (refused: already selected)
    twice = [int(i) for i in rng.permutation(n) if (2 * weights[:, i] <= capacities).all()][:3]
    calls = [{"tool": "add_item", "arguments": {"item": i}} for i in twice for _ in range(2)]
    sequences.append(calls + [{"tool": "submit_selection", "arguments": {}}])
    return sequences


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a selection: add its lots in index order, then submit. Deterministic (the episode
    seed is accepted and ignored)."""
    x = _check_plan(theta, policy)
    chosen = [int(i) for i in np.flatnonzero(x)]
    calls = [{"tool": "add_item", "arguments": {"item": i}} for i in chosen]
    calls.append({"tool": "submit_selection", "arguments": {}})
    return Episode(utility=evaluate(theta, x), calls=calls, decisions=chosen)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the potential of a state is the best value still reachable from it: u* while
# the selection is open (every decision can be undone), the selection's value once submitted.


decision_values, decision_state, advantage = until_committed(solve)


BUDGET_BINDS = True  # A admits θ only where the budget binds (vhd/tasks/stages/check/budget.py)


def turn_budget(theta: dict) -> int:
    """One and a half turns per lot (n + n // 2, and n + 1 at least: any selection and the submit
    fit): room for π*'s selection with the lots its choice depends on read, but in presentation A
    not for reading every lot and the capacities (n + 1 probes) as well: what to inspect is a
    choice (`vhd/tasks/stages/check/budget.py` measures both)."""
    n = theta["n_items"]
    return n + max(1, n // 2)


# ---------------------------------------------------------------------------------------------
# Presentation A: what the probes show, and the guess for what they did not (the A instruction
# states the ranges): an uninspected lot uses LOAD_GUESS units of every resource and is worth
# VALUE_GUESS; unread capacities are half the guessed total load, as the generator draws them.

LOAD_GUESS, VALUE_GUESS = 10, 60  # the middle of the loads 0…20 and the values 10…110 the instruction states


def probe_calls(theta: dict) -> list[dict]:
    """Read the capacities, then inspect the lots in index order."""
    return [{"tool": "read_capacities", "arguments": {}}] + [
        {"tool": "inspect_item", "arguments": {"item": i}} for i in range(theta["n_items"])]


def belief(theta: dict, read: list[dict]) -> dict:
    """θ as known after the probe calls `read`: inspected lots exact, the others the stated guess."""
    n, m = theta["n_items"], theta["n_resources"]
    seen = {call["arguments"]["item"] for call in read if call["tool"] == "inspect_item"}
    values = [theta["values"][i] if i in seen else VALUE_GUESS for i in range(n)]
    weights = [[row[i] if i in seen else LOAD_GUESS for i in range(n)] for row in theta["weights"]]
    if any(call["tool"] == "read_capacities" for call in read):
        capacities = list(theta["capacities"])
    else:
        capacities = [max(sum(row) // 2, 1) for row in weights]
    return {**theta, "n_items": n, "n_resources": m, "values": values, "weights": weights, "capacities": capacities}


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


TABLES = ("catalog", "resources", "loads", "selection", "log", "state")


class World(BaseWorld):
    """The site's relational world: lots (catalog), resources, loads, selection, log, state."""

    PARAMS = ("n_items", "n_resources", "values", "weights", "capacities")
    STATE = (("capacities_read", 0), ("submitted", 0))
    IDS = {key: "item" for key in ("item", "added", "removed", "selected", "submitted", "not_counted")}
    RESOURCE_NAMES = ("floor space", "handling hours", "cold room", "budget line", "staff hours",
                      "pallet slots", "loading bays", "insurance cover", "vehicle slots", "shelf metres",
                      "inspection hours", "power")

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        n, m = params["n_items"], params["n_resources"]
        if len(params["values"]) != n or len(params["weights"]) != m or len(params["capacities"]) != m \
                or any(len(row) != n for row in params["weights"]):
            raise ValueError("values, weights and capacities do not match n_items=%r, n_resources=%r" % (n, m))
        t = self.t
        db.execute("CREATE TABLE %s (item_id INTEGER PRIMARY KEY, value INTEGER, inspected INTEGER)"
                   % t["catalog"])
        db.execute("CREATE TABLE %s (resource_id INTEGER PRIMARY KEY, name TEXT, unit TEXT, capacity INTEGER)"
                   % t["resources"])
        db.execute("CREATE TABLE %s (item_id INTEGER REFERENCES %s(item_id), resource_id INTEGER REFERENCES "
                   "%s(resource_id), load INTEGER, PRIMARY KEY (item_id, resource_id))"
                   % (t["loads"], t["catalog"], t["resources"]))
        db.execute("CREATE TABLE %s (item_id INTEGER PRIMARY KEY REFERENCES %s(item_id))"
                   % (t["selection"], t["catalog"]))
        db.execute("CREATE TABLE %s (entry_id INTEGER PRIMARY KEY, action TEXT, item_id INTEGER)" % t["log"])
        db.executemany("INSERT INTO %s VALUES (?, ?, 0)" % t["catalog"], [(i, params["values"][i]) for i in range(n)])
        db.executemany("INSERT INTO %s VALUES (?, ?, ?, ?)" % t["resources"],
                       [(r, World.resource_name(r), "units", params["capacities"][r]) for r in range(m)])
        db.executemany("INSERT INTO %s VALUES (?, ?, ?)" % t["loads"],
                       [(i, r, params["weights"][r][i]) for r in range(m) for i in range(n)])

    @staticmethod
    def resource_name(r):
        names = World.RESOURCE_NAMES
        return names[r] if r < len(names) else "resource %d" % r

    # -- state helpers --------------------------------------------------------------------
    def _item(self, item):
        if not 0 <= item < self.p["n_items"]:
            raise AgentError("the lots run from %s to %s; got %s"
                             % (self.ref("item", 0), self.ref("item", self.p["n_items"] - 1), self.ref("item", item)))
        return item

    def _selected(self):
        return [row[0] for row in self.db.execute("SELECT item_id FROM %s ORDER BY item_id" % self.t["selection"])]

    def _used(self, inspected_only=False):
        """Load of the current selection (only its inspected lots, if asked) on every resource, in resource order."""
        only = " AND l.item_id IN (SELECT item_id FROM %s WHERE inspected = 1)" % self.t["catalog"] \
            if inspected_only else ""
        rows = self.db.execute(
            "SELECT r.resource_id, COALESCE(SUM(l.load), 0) FROM %s r LEFT JOIN %s l ON l.resource_id = r.resource_id "
            "AND l.item_id IN (SELECT item_id FROM %s)%s GROUP BY r.resource_id ORDER BY r.resource_id"
            % (self.t["resources"], self.t["loads"], self.t["selection"], only)).fetchall()
        return [row[1] for row in rows]

    def _value(self):
        return self.db.execute("SELECT COALESCE(SUM(c.value), 0) FROM %s c JOIN %s s ON s.item_id = c.item_id"
                               % (self.t["catalog"], self.t["selection"])).fetchone()[0]

    def _inspected_value(self):
        """Value of the inspected lots of the selection."""
        return self.db.execute("SELECT COALESCE(SUM(value), 0) FROM %s WHERE inspected = 1 AND item_id IN "
                               "(SELECT item_id FROM %s)" % (self.t["catalog"], self.t["selection"])).fetchone()[0]

    def _uninspected_selected(self):
        return [row[0] for row in self.db.execute(
            "SELECT s.item_id FROM %s s JOIN %s c ON c.item_id = s.item_id WHERE c.inspected = 0 ORDER BY s.item_id"
            % (self.t["selection"], self.t["catalog"]))]

    def _loads_of(self, item):
        return [row[0] for row in self.db.execute("SELECT load FROM %s WHERE item_id = ? ORDER BY resource_id"
                                                  % self.t["loads"], (item,))]

    def _capacities(self):
        return [row[0] for row in self.db.execute("SELECT capacity FROM %s ORDER BY resource_id" % self.t["resources"])]

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("submitted") == 1

    def utility(self):
        return self._value()

    def run_out(self):
        self._log("submitted (turns ran out)")
        self._set("submitted", 1)

    def limits(self, presentation):
        """Lot numbers run 0 … n − 1 (the instruction tells n in both presentations)."""
        lot = {"item": (0, self.p["n_items"] - 1)}
        return {"inspect_item": lot, "add_item": lot, "remove_item": lot}

    # -- tools ------------------------------------------------------------------------------
    @tool("probe", "Inspect one candidate lot of {item}: its value in {currency} and the units it uses of every "
          "resource.", reveals=("values", "weights"),
          item=integer(0, MAX_ITEMS - 1, "the lot to inspect"))
    def tool_inspect_item(self, item):
        item = self._item(item)
        self.db.execute("UPDATE %s SET inspected = 1 WHERE item_id = ?" % self.t["catalog"], (item,))
        value, = self.db.execute("SELECT value FROM %s WHERE item_id = ?" % self.t["catalog"], (item,)).fetchone()
        names = [World.resource_name(r) for r in range(self.p["n_resources"])]
        return {"item": item, "value": value, "currency": self.v["currency"],
                "loads": dict(zip(names, self._loads_of(item)))}

    @tool("probe", "Read the {site}'s capacity of every limited resource.", reveals=("capacities",))
    def tool_read_capacities(self):
        self._set("capacities_read", 1)
        rows = self.db.execute("SELECT resource_id, name, capacity FROM %s ORDER BY resource_id"
                               % self.t["resources"]).fetchall()
        return {"resources": [{"resource": r, "name": name, "capacity": cap} for r, name, cap in rows]}

    @tool("observe", "List the candidate lots from the {supplier} and whether each is inspected and selected.")
    def tool_list_items(self):
        rows = self.db.execute("SELECT c.item_id, c.inspected, s.item_id IS NOT NULL FROM %s c LEFT JOIN %s s "
                               "ON s.item_id = c.item_id ORDER BY c.item_id"
                               % (self.t["catalog"], self.t["selection"])).fetchall()
        return {"lots": [{"item": i, "inspected": bool(ins), "selected": bool(sel)} for i, ins, sel in rows],
                "resources": [World.resource_name(r) for r in range(self.p["n_resources"])]}

    # A lot's value and loads are shown only once it is inspected (hidden θ in presentation A): the
    # sums below count the inspected lots of the selection and name the ones they leave out.
    @tool("observe", "Show the current selection: its lots, and the total value in {currency} and load on "
          "every resource of its inspected lots (the uninspected ones are listed as not counted).")
    def tool_view_selection(self):
        names = [World.resource_name(r) for r in range(self.p["n_resources"])]
        return {"selected": self._selected(), "value": self._inspected_value(), "currency": self.v["currency"],
                "load": dict(zip(names, self._used(True))), "not_counted": self._uninspected_selected()}

    @tool("observe", "Show how many units of every resource are still free after the inspected lots of the "
          "selection (once the capacities have been read; uninspected lots are listed as not counted).")
    def tool_view_headroom(self):
        if not self._get("capacities_read"):
            raise AgentError("the capacities have not been read yet; call %s first" % self.name["read_capacities"])
        names = [World.resource_name(r) for r in range(self.p["n_resources"])]
        left = [c - u for c, u in zip(self._capacities(), self._used(True))]
        return {"headroom": dict(zip(names, left)), "not_counted": self._uninspected_selected()}

    @tool("observe", "List every lot inspected so far with its value and loads.")
    def tool_view_inspected(self):
        rows = self.db.execute("SELECT item_id, value FROM %s WHERE inspected = 1 ORDER BY item_id"
                               % self.t["catalog"]).fetchall()
        return {"lots": [{"item": i, "value": value, "loads": self._loads_of(i)} for i, value in rows]}

    @tool("observe", "List the most recent additions, removals and clears.",
          limit=integer(1, 500, "how many entries to list"))
    def tool_view_log(self, limit=20):
        rows = self.db.execute("SELECT entry_id, action, item_id FROM %s ORDER BY entry_id DESC LIMIT ?"
                               % self.t["log"], (limit,)).fetchall()
        return {"log": [{"entry": e, "action": a, "item": i} for e, a, i in rows]}

    @tool("decision", "Add one lot of {item} to the selection (refused if it would exceed any capacity).",
          item=integer(0, MAX_ITEMS - 1, "the lot to add"))
    def tool_add_item(self, item):
        item = self._item(item)
        if item in self._selected():
            raise AgentError("lot %s is already in the selection" % self.ref("item", item))
        loads, used, caps = self._loads_of(item), self._used(), self._capacities()
        if any(u + w > c for u, w, c in zip(used, loads, caps)):
            # the rule only: which resource overflows, and by how much, depends on hidden loads
            raise AgentError("lot %s does not fit: it would push some resource past its capacity" % self.ref("item", item))
        self.db.execute("INSERT INTO %s VALUES (?)" % self.t["selection"], (item,))
        self._log("add", item_id=item)
        return {"added": item, "selected": self._selected()}

    @tool("decision", "Remove one lot from the selection.",
          item=integer(0, MAX_ITEMS - 1, "the lot to remove"))
    def tool_remove_item(self, item):
        item = self._item(item)
        if item not in self._selected():
            raise AgentError("lot %s is not in the selection" % self.ref("item", item))
        self.db.execute("DELETE FROM %s WHERE item_id = ?" % self.t["selection"], (item,))
        self._log("remove", item_id=item)
        return {"removed": item, "selected": self._selected()}

    @tool("decision", "Remove every lot from the selection.")
    def tool_clear_selection(self):
        if not self._selected():
            raise AgentError("the selection is already empty")
        self.db.execute("DELETE FROM %s" % self.t["selection"])
        self._log("clear")
        return {"selected": []}

    @tool("clock", "Submit the selection to the {supplier}: the episode ends and the score is the selection's "
          "total value.")
    def tool_submit_selection(self):
        self._log("submitted")
        self._set("submitted", 1)
        return {"submitted": self._selected(), "value": self._value(), "currency": self.v["currency"]}

    # -- what the player reads --------------------------------------------------------------
    @staticmethod
    def counted(n, noun):
        """n and its noun in the right number: "1 candidate lot", "6 candidate lots"."""
        return "%d %s%s" % (n, noun, "" if n == 1 else "s")

    def _tell_everything(self):
        """In I the instruction states every lot and every capacity: they count as inspected and read,
        so the sums and the headroom count every lot from the start."""
        self.db.execute("UPDATE %s SET inspected = 1" % self.t["catalog"])
        self._set("capacities_read", 1)

    def instruction(self, presentation, turn_budget):
        if presentation == "I":
            self._tell_everything()
        p, v, n = self.p, self.v, self.name
        names = [World.resource_name(r) for r in range(p["n_resources"])]
        uses = ("the limited resource %s" % names[0] if len(names) == 1
                else "each of %d limited resources: %s" % (len(names), ", ".join(names)))
        lines = [
            self.skin["narrative"],
            "",
            "The %s can take on %s of %s (%s) from the %s, numbered %s to %s. Each lot is taken whole or not at "
            "all, has a value in %s, and uses some units of %s."
            % (v["site"], World.counted(p["n_items"], "candidate lot"), v["item"], v["sku"], v["supplier"],
               self.ref("item", 0), self.ref("item", p["n_items"] - 1), v["currency"], uses),
            "Build a selection with %s and %s (%s empties it); a lot that would push any resource past its "
            "capacity is refused. %s ends the episode and your score is the total value of the submitted lots."
            % (n["add_item"], n["remove_item"], n["clear_selection"], n["submit_selection"]),
            "You have %d turns: every tool call the world answers uses its turn cost; when they run out, the "
            "selection is submitted as it stands." % turn_budget,
        ]
        told = self._theta_lines() if presentation == "I" else self._probe_lines()
        return "\n".join(lines + [""] + told)

    def _theta_lines(self):
        """Presentation I: the capacities, and every lot's value and loads."""
        p = self.p
        names = [World.resource_name(r) for r in range(p["n_resources"])]
        lots = ["  lot %s: value %d; loads %s" % (self.ref("item", i), p["values"][i],
                                                  ", ".join(str(row[i]) for row in p["weights"]))
                for i in range(p["n_items"])]
        return ["Capacities: %s." % ", ".join("%s %d" % (name, c) for name, c in zip(names, p["capacities"])),
                "Lots (value in %s; load on %s):" % (self.v["currency"], ", ".join(names))] + lots

    def _probe_lines(self):
        """Presentation A: what is hidden, and the probes that reveal it."""
        return ["The lots' values and loads and the resources' capacities are not given: %s reveals one lot's "
                "value and loads, %s the capacities, each at the cost of a turn from the same budget. Every lot "
                "uses 0 to 20 units of each resource and is worth 10 to 110 %s, more for heavier lots; each "
                "capacity is about half the total load of all the lots on that resource."
                % (self.name["inspect_item"], self.name["read_capacities"], self.v["currency"])]


register(Family.of(
    globals(),
    name="knapsack",
    version="7",
    group="near_ood",
    model_class="multi-dimensional 0/1 knapsack (integer program)",
    solver="0/1 MILP, branch and bound (scipy.optimize.milp, HiGHS)",
    stochastic=False,
))
