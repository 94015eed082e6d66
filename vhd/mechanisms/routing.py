"""Routing: prize-collecting orienteering from a depot under a time budget, solved by Held–Karp.

Model
    A van starts at the depot (stop 0) at minute 0. There are `n_stops` customer stops
    1..n_stops at distinct integer points `coordinates[k] = [x, y]` of a 31 × 31 grid (index 0
    is the depot). Travel between any two points takes `travel[i][j]` whole minutes, the
    Euclidean distance rounded half up (symmetric, 0 on the diagonal). Stop k pays
    `rewards[k]` (an integer; `rewards[0] = 0` for the depot) the first time the van arrives
    there; a stop may be visited at most once. The van may drive from its position p at clock
    t to an unvisited stop k only if it can still get home in time from there:
    t + travel[p][k] + travel[k][0] ≤ `budget` (budget = 10 × horizon minutes). A plan is a
    sequence of distinct stops s1..sm (m ≥ 0) obeying that rule at every step, followed by
    the drive back to the depot. Its utility is the sum of the rewards of s1..sm minus
    `travel_cost` × the total minutes driven (including the return leg). The empty plan (stay
    at the depot) has utility 0.
    Solved exactly by Held–Karp dynamic programming over (set of visited stops, last stop):
    the least clock on arrival over every rule-abiding path, then the best closed tour.
    Limits: solve() takes 1 … MAX_STOPS = 18 stops (Held–Karp keeps 2^n × n states: 18 stops take
    about 0.4 s, docs/BENCHMARKS.md "Headroom"), whole
    rewards, a whole budget and cost per minute ≥ 0, grid points in 0 … 30 and whole travel
    minutes ≥ 0; any other θ is refused with InvalidParams before anything is allocated
    (`check_theta`).

State
    the van's position and clock, which stops have been visited, the log of driven legs (each
    leg a row: from, to, departure and arrival minute, payment collected), and whether the van
    is back at the depot for good.

Tools
    probes (a turn each, none noisy): the stop manifest (every stop's payment: one row), one
    stop's details (payment and position), one row of the travel-time matrix (the minutes from
    one stop to every stop), one travel time, the rate card (cost per minute driven);
    decision: drive to a stop; clock: return to the depot (ends the episode); observations:
    position, clock (minutes used, left, needed to get home), visited stops, the legs driven so
    far, the earnings so far. Stop arguments are bounded by n (a drive's by 1 … n).

    Presentation A hides the payments, the positions, the travel times and the cost per minute;
    it tells n, the time budget, the grid (0 … 30), the travel rule (straight-line minutes
    rounded half up), that driving costs 1 or 2 per minute and how payments run (up to 29
    minutes' worth of driving plus up to twice the stop's minutes from the depot). The turn
    budget (6n + horizon) // 4 (n + 1 at least) fits any round (n drives and the return); the
    n + 3 probes that show everything (rate card, manifest, the n + 1 positions) do not all fit
    besides π*'s round where A environments are admitted (`BUDGET_BINDS`). A player's stated
    guess for what it did not read (`belief`): an unread position the grid's centre (15, 15), a
    travel time the rounded distance between the positions as known
    or guessed, the cost 1 per minute, a payment 14 minutes' worth plus the believed minutes
    from the depot. The default (nearest neighbour) reads no sticker: routing has none.

Plan
    an integer vector of length n_stops: the stops to visit in order (numbers 1 … n_stops, each
    at most once, every leg obeying the time-budget rule), padded at the end with −1; all −1
    means stay at the depot.

Reward
    utility = rewards collected − travel_cost × minutes driven, in whole currency units
    (0 for staying at the depot). r = clip01((u − u_default) / (u* − u_default)) with u_default
    the nearest-neighbour plan's utility.

Advantages
    A potential: Φ(state) = the best utility of a round that extends the one driven so far, i.e.
    (payments collected − travel_cost × minutes driven) + the best completion from the van's
    position and clock with the visited stops closed (`_best_completion`, the solver's Held–Karp
    on the stops still open; Φ at the start is u*), and the realised utility once the van is back
    for good. The state is read from the World: position, clock, the visited stops, the legs'
    payments and minutes, and whether the round has ended. `drive_to` and `return_to_depot` have
    A* = Φ(after) − Φ(before), and so does running out of turns (the van drives home); so Σ A* =
    u − u* on every trajectory, exactly (integers). Turns are ignored: Φ is the best completion
    whatever the turns left (a budget too short for it would make the true best lower; the sum
    telescopes all the same).

Episode end
    after `return_to_depot`, or when the turn budget runs out (the van then drives straight
    back to the depot from where it is, which the driving rule always allows; no further stops).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel

from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

GRID = 30  # coordinates are integers in 0..GRID
MAX_STOPS = 18  # Params and solve() bound: Held–Karp keeps 2^n × n states (18 stops: ~0.4 s, ~25 MB)
MINUTES_PER_HORIZON = 10  # budget = MINUTES_PER_HORIZON × horizon
HIDDEN = ("rewards", "travel", "coordinates", "travel_cost")


class Params(BaseModel):
    """Difficulty knobs of a routing instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = knob(6, 3, MAX_STOPS, sampled=(5, 9), description="number of customer stops (besides the depot)")
    horizon: int = knob(10, 3, 30, sampled=(5, 15),
                        description="time budget in tens of minutes: the van must be back at the depot within 10 × "
                                    "horizon minutes")


def _minutes(a: list[int], b: list[int]) -> int:
    """Euclidean distance between two grid points, rounded half up to whole minutes."""
    return int(math.floor(math.hypot(a[0] - b[0], a[1] - b[1]) + 0.5))


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: distinct grid points (depot first), integer rewards, an integer cost per minute."""
    n = params.size
    cells = rng.choice((GRID + 1) ** 2, size=n + 1, replace=False)
    coordinates = [[int(c) // (GRID + 1), int(c) % (GRID + 1)] for c in cells]
    travel = [[_minutes(a, b) for b in coordinates] for a in coordinates]
    travel_cost = int(rng.integers(1, 3))
    # about 40 % small drops (worth 0..5 minutes of driving), the rest worth 8..29 minutes plus up to
    # twice their distance from the depot: far stops tend to pay more, so nearest-first is a poor guide
    rewards = [0]
    for k in range(1, n + 1):
        if rng.random() < 0.4:
            minutes = int(rng.integers(0, 6))
        else:
            minutes = int(rng.integers(8, 30)) + int(rng.integers(0, 3)) * travel[0][k]
        rewards.append(travel_cost * minutes)
    return {
        "n_stops": n,
        "horizon": params.horizon,
        "budget": MINUTES_PER_HORIZON * params.horizon,
        "travel_cost": travel_cost,
        "rewards": rewards,
        "coordinates": coordinates,
        "travel": travel,
    }


# ---------------------------------------------------------------------------------------------
# The exact solver: Held–Karp over (visited set, last stop).


def _best_completion(theta: dict, position: int = 0, clock: int = 0,
                     visited: frozenset[int] = frozenset()) -> tuple[int, list[int]]:
    """The best way to finish the round from the van at `position` at minute `clock` with `visited`
    stops behind it: (rewards of the stops still to visit − travel_cost × the minutes still to drive,
    the return leg included; those stops in order). Held–Karp over the stops still open; from the
    depot at minute 0 it is the whole problem (u*, π*).

    Vectorised with numpy: the visited sets are taken one size at a time (a set of p stops is
    reached only from its subsets of p − 1), and for each last stop k every set of that size
    holding k is done in one array step: the least clock over every previous stop j, ties to the
    lowest j (np.argmin), which is the tie-break of a scan in increasing j with strict improvement."""
    n, budget, cost = theta["n_stops"], theta["budget"], theta["travel_cost"]
    t = np.array(theta["travel"], dtype=np.int64)
    rewards = np.array(theta["rewards"], dtype=np.int64)
    stops = np.array([k for k in range(1, n + 1) if k not in visited], dtype=np.int64)  # local j ↔ stops[j]
    r = len(stops)
    # clocks in int32 (half the memory traffic) when no sum of a clock and a leg can come near its limit
    dtype = np.int32 if max(budget, clock) + int(t.max(initial=0)) < 1 << 28 else np.int64
    inf = np.iinfo(dtype).max // 4
    full = 1 << r
    # arrive[mask, j]: least clock on arriving at stops[j] having visited exactly `mask` of the open
    # stops (bit j ↔ stops[j]), every step obeying the return rule; parent: the previous one (−1 = start)
    arrive = np.full((full, r), inf, dtype=dtype)
    parent = np.full((full, r), -1, dtype=np.int8)
    home = t[stops, 0]
    first = clock + t[position, stops]
    ones = 1 << np.arange(r, dtype=np.int64)
    ok = first + home <= budget
    arrive[ones[ok], np.flatnonzero(ok)] = first[ok]
    legs = t[np.ix_(stops, stops)].astype(dtype)
    size = np.zeros(full, dtype=np.int64)
    for j in range(r):
        size[1 << j:2 << j] = size[:1 << j] + 1
    by_size = np.argsort(size, kind="stable")  # masks grouped by size, increasing within a size
    edges = np.searchsorted(size[by_size], np.arange(r + 2))
    for p in range(2, r + 1):
        layer = by_size[edges[p]:edges[p + 1]]
        for k in range(r):
            mine = layer[(layer >> k) & 1 == 1]
            times = arrive[mine ^ (1 << k)] + legs[:, k]  # (sets, previous stop j)
            j = np.argmin(times, axis=1)
            best = times[np.arange(len(mine)), j]
            fits = best + home[k] <= budget
            arrive[mine[fits], k] = best[fits]
            parent[mine[fits], k] = j[fits]
    prize = np.zeros(full, dtype=np.int64)
    for j in range(r):
        prize[1 << j:2 << j] = prize[:1 << j] + rewards[stops[j]]
    best, best_state = -cost * int(t[position, 0]), None
    if r:
        reached = arrive < inf
        spent = np.where(reached, arrive, clock).astype(np.int64) - clock + home[None, :]
        value = np.where(reached, prize[:, None] - cost * spent, np.iinfo(np.int64).min)
        at = int(np.argmax(value))  # the first maximum in (mask, j) order
        if reached.flat[at] and int(value.flat[at]) > best:
            best, best_state = int(value.flat[at]), divmod(at, r)
    order = []
    while best_state is not None:
        mask, j = best_state
        order.append(int(stops[j]))
        previous = int(parent[mask, j])
        best_state = None if previous < 0 else (mask & ~(1 << j), previous)
    order.reverse()
    return best, order


def _held_karp(theta: dict) -> tuple[float, np.ndarray]:
    best, order = _best_completion(theta)
    policy = np.full(theta["n_stops"], -1, dtype=np.int16)
    policy[:len(order)] = order
    return float(best), policy


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … MAX_STOPS = 18 stops (Held–Karp keeps
    2^n × n states), whole rewards, a whole budget and cost per minute ≥ 0, grid points in 0 …
    30 and whole travel minutes ≥ 0."""
    check = ThetaCheck("routing", theta)
    n = check.count("n_stops", 1, MAX_STOPS)
    check.whole("horizon", low=1)
    check.whole("budget", low=0)
    check.whole("travel_cost", low=0)
    check.whole("rewards", (n + 1,))
    check.whole("coordinates", (n + 1, 2), low=0, high=GRID)
    check.whole("travel", (n + 1, n + 1), low=0)


def solve(theta: dict) -> Solution:
    """u* and the optimal visiting order by Held–Karp; exact values of the default and idle plans."""
    check_theta(theta)
    n = theta["n_stops"]
    found = certified(lambda: _held_karp(theta), state_space=(1 << n) * n,
                      method="Held–Karp dynamic programming over (visited set, last stop)")
    return solved(theta, found, evaluate, default_policy, idle_policy)


# ---------------------------------------------------------------------------------------------
# Plans: a visiting order of stops 1..n, padded with -1.


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: n_stops entries, each a stop 1 … n_stops or the padding −1 (0, the depot, is in
    range but never a stop: `_route` refuses it with the other rules)."""
    return PlanSpec(shape=(theta["n_stops"],), integer=True, low=-1, high=theta["n_stops"])


def _route(theta: dict, policy) -> list[int]:
    """The stops of a plan in order; ValueError (InvalidPlan for one not of the declared form) unless it is
    a valid plan under the driving rule."""
    n, t, budget = theta["n_stops"], theta["travel"], theta["budget"]
    array = plan_spec(theta).check(policy)
    values = [int(x) for x in array]
    route = []
    for k, stop in enumerate(values):
        if stop == -1:
            if any(x != -1 for x in values[k:]):
                raise ValueError(f"padding -1 must come last: {values}")
            break
        route.append(stop)
    if any(not 1 <= s <= n for s in route) or len(set(route)) != len(route):
        raise ValueError(f"a plan visits distinct stops among 1..{n}: {values}")
    position, clock = 0, 0
    for stop in route:
        if clock + t[position][stop] + t[stop][0] > budget:
            raise ValueError(f"driving to stop {stop} at minute {clock} leaves no time to return: {values}")
        clock += t[position][stop]
        position = stop
    return route


def _pad(theta: dict, route: list[int]) -> np.ndarray:
    policy = np.full(theta["n_stops"], -1, dtype=np.int16)
    policy[:len(route)] = route
    return policy


def _play(theta: dict, route: list[int]) -> tuple[int, int]:
    """(utility, minutes driven) of a valid route, the return leg included."""
    t, position, minutes = theta["travel"], 0, 0
    for stop in route:
        minutes += t[position][stop]
        position = stop
    minutes += t[position][0]
    return sum(theta["rewards"][s] for s in route) - theta["travel_cost"] * minutes, minutes


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact utility of a plan (deterministic); ValueError for an invalid plan."""
    return float(_play(theta, _route(theta, policy))[0])


def _feasible(theta: dict, position: int, clock: int, visited: set[int]) -> list[int]:
    t, budget = theta["travel"], theta["budget"]
    return [k for k in range(1, theta["n_stops"] + 1)
            if k not in visited and clock + t[position][k] + t[k][0] <= budget]


# z = (u0 − u_idle) / (u* − u_idle) with u_idle = 0: below −1 staying home would score over
# 0.5 (trivial); above 0.95 nearest-neighbour already nearly solves it (no room to learn)
DEFAULT_BAND = (-1.0, 0.95)


BOUNDARY_ORDERS = 4  # stop orders the boundary rounds take: index order, then random ones


def boundary_calls(theta: dict, rng: np.random.Generator) -> list[list[dict]]:
    """Near-boundary drives for the reference_agreement gate: rounds that run into the time budget.
    Per stop order a drive to every stop in turn, of which those that would not end back at the
    depot within the budget are refused; then every stop again (visited ones refused, the rest
    refused by the budget); then the return. The orders: longest legs first (each next stop the
    farthest that still fits, which spends the day), index order, then random ones. The gate's
    random calls seldom spend a long day's minutes, so without these a World that ignored the
    budget could pass."""
    n, t = theta["n_stops"], theta["travel"]
    longest, position, clock = [], 0, 0
    while True:
        fits = _feasible(theta, position, clock, set(longest))
        if not fits:
            break
        k = max(fits, key=lambda s: (t[position][s], -s))
        longest, position, clock = longest + [k], k, clock + t[position][k]
    longest += [k for k in range(1, n + 1) if k not in longest]
    orders = [longest, list(range(1, n + 1))] + [[int(k) + 1 for k in rng.permutation(n)]
                                                 for _ in range(BOUNDARY_ORDERS - 2)]
    return [[{"tool": "drive_to", "arguments": {"stop": k}} for k in order + order]
            + [{"tool": "return_to_depot", "arguments": {}}] for order in orders]


def default_policy(theta: dict) -> np.ndarray:
    """Nearest neighbour: always drive to the closest unvisited stop that the driving rule
    allows (ties to the lower stop number), ignoring rewards and the cost per minute; go home
    when no stop is allowed."""
    t, position, clock, route = theta["travel"], 0, 0, []
    while True:
        options = _feasible(theta, position, clock, set(route))
        if not options:
            return _pad(theta, route)
        stop = min(options, key=lambda k: (t[position][k], k))
        clock += t[position][stop]
        position = stop
        route.append(stop)


def idle_policy(theta: dict) -> np.ndarray:
    """Stay at the depot: visit nothing."""
    return _pad(theta, [])


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """A random valid plan: at each step go home or drive to an allowed stop, uniformly."""
    t, position, clock, route = theta["travel"], 0, 0, []
    while True:
        options = _feasible(theta, position, clock, set(route))
        pick = int(rng.integers(0, len(options) + 1))
        if pick == len(options):
            return _pad(theta, route)
        stop = options[pick]
        clock += t[position][stop]
        position = stop
        route.append(stop)


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a plan (deterministic; the episode seed is ignored): one drive per stop, then home."""
    route = _route(theta, policy)
    calls = [{"tool": "drive_to", "arguments": {"stop": s}} for s in route]
    calls.append({"tool": "return_to_depot", "arguments": {}})
    return Episode(utility=float(_play(theta, route)[0]), calls=calls, decisions=list(route))


# ---------------------------------------------------------------------------------------------
# Decision rewards: the potential Φ(state) = realised so far + the best completion (Held–Karp on
# the stops still open), cached by (position, clock, visited) per θ.


def decision_values(theta: dict) -> dict:
    """u* and a cache of best completions, keyed (position, clock, visited stops)."""
    u_star, _ = _best_completion(theta)
    return {"u_star": float(u_star), "completions": {(0, 0, ()): u_star}}


def decision_state(theta: dict, world) -> tuple[bool, int, int, tuple[int, ...], int, int]:
    """(ended, position, clock, the visited stops in order of number, payments collected, minutes driven)."""
    visited = world.db.execute("SELECT stop_id FROM %s WHERE status = 'visited' ORDER BY stop_id"
                               % world.t["stops"]).fetchall()
    collected, minutes = world._totals()
    return (bool(world._get("ended")), world._get("position"), world._get("clock"), tuple(k for k, in visited),
            collected, minutes)


def _potential(theta: dict, values: dict, state: tuple) -> int:
    """Φ: the realised utility once ended, else what is realised so far plus the best completion."""
    ended, position, clock, visited, collected, minutes = state
    so_far = collected - theta["travel_cost"] * minutes
    if ended:
        return so_far
    key = (position, clock, visited)
    if key not in values["completions"]:
        values["completions"][key] = _best_completion(theta, position, clock, frozenset(visited))[0]
    return so_far + values["completions"][key]


def advantage(theta: dict, values: dict, before: tuple, call: dict | None, after: tuple) -> float:
    """Φ(after) − Φ(before), for a drive, the return and running out alike."""
    return float(_potential(theta, values, after) - _potential(theta, values, before))


BUDGET_BINDS = True  # A admits θ only where the budget binds (vhd/tasks/stages/check/budget.py)


def turn_budget(theta: dict) -> int:
    """(6n + horizon) // 4 turns, and n + 1 at least (any round: a drive to every stop and the
    return). A longer day lets π*'s round take more stops, so the budget grows with it; in
    presentation A the turns π*'s round leaves read only part of the n + 3 probes that show
    everything (rate card, manifest, every stop's position), so what to find out is a choice
    (`vhd/tasks/stages/check/budget.py` measures both)."""
    n = theta["n_stops"]
    return max(n + 1, (6 * n + theta["horizon"]) // 4)


# ---------------------------------------------------------------------------------------------
# Presentation A: what the probes show, and the guess for what they did not. The A instruction
# states the grid, the travel rule, the cost per minute's range and how payments run: an unread
# position is the grid's centre, a travel time not read is the rounded distance between the
# positions as known or guessed, the cost per minute 1, an unread payment the middle of its stated
# range (14 minutes of driving plus the believed minutes from the depot, at the believed cost).

CENTRE = [GRID // 2, GRID // 2]


def probe_calls(theta: dict) -> list[dict]:
    """The rate card, the manifest, every stop's position (depot first); then the rows of the travel
    matrix that are not the rounded distances between the positions (none in a sampled θ)."""
    n, points = theta["n_stops"], theta["coordinates"]
    calls = [{"tool": "get_rate_card", "arguments": {}}, {"tool": "get_manifest", "arguments": {}}]
    calls += [{"tool": "inspect_stop", "arguments": {"stop": k}} for k in range(n + 1)]
    return calls + [{"tool": "get_travel_matrix", "arguments": {"from_stop": i}} for i in range(n + 1)
                    if theta["travel"][i] != [_minutes(points[i], b) for b in points]]


def belief(theta: dict, read: list[dict]) -> dict:
    """θ as known after the accepted calls `read`: what they showed exact, the rest the stated guess.
    A probe shows what it reads; a drive shows the minutes of its leg and the stop's payment."""
    n = theta["n_stops"]
    tools = {call["tool"] for call in read}
    inspected = {call["arguments"]["stop"] for call in read if call["tool"] == "inspect_stop"}
    rows = {call["arguments"]["from_stop"] for call in read if call["tool"] == "get_travel_matrix"}
    entries = {(call["arguments"]["from_stop"], call["arguments"]["to_stop"]) for call in read
               if call["tool"] == "get_travel_time"}
    position, paid = 0, set()
    for call in read:  # the legs driven, in order
        if call["tool"] == "drive_to":
            entries.add((position, call["arguments"]["stop"]))
            position = call["arguments"]["stop"]
            paid.add(position)
    cost = theta["travel_cost"] if "get_rate_card" in tools else 1
    points = [list(theta["coordinates"][k]) if k in inspected else list(CENTRE) for k in range(n + 1)]
    travel = [[theta["travel"][i][j] if i in rows or (i, j) in entries else _minutes(points[i], points[j])
               for j in range(n + 1)] for i in range(n + 1)]
    rewards = [0] + [theta["rewards"][k] if "get_manifest" in tools or k in inspected | paid
                     else cost * (14 + travel[0][k]) for k in range(1, n + 1)]
    return {**theta, "travel_cost": cost, "rewards": rewards, "coordinates": points, "travel": travel}


def _stop_arg(description: str) -> dict:
    """The schema of a stop number: 0 (the depot) to MAX_STOPS."""
    return integer(0, MAX_STOPS, description)


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


TABLES = ("stops", "travel", "legs", "state")


class World(BaseWorld):
    """The delivery round's relational world: stops, travel times, driven legs, a state table."""

    PARAMS = ("n_stops", "horizon", "budget", "travel_cost", "rewards", "coordinates", "travel")
    STATE = (("position", 0), ("clock", 0), ("ended", 0))
    IDS = {key: "stop" for key in ("stop", "from_stop", "to_stop", "arrived_at", "visited", "open")}  # 0: the depot
    GRID = 30  # the module's GRID, which the A instruction states (the World is pasted into modules without it)

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        n = params["n_stops"]
        if len(params["rewards"]) != n + 1 or len(params["coordinates"]) != n + 1 or len(params["travel"]) != n + 1:
            raise ValueError("rewards, coordinates and travel must cover the depot and %d stops" % n)
        t = self.t
        db.execute("CREATE TABLE %s (stop_id INTEGER PRIMARY KEY, x INTEGER, y INTEGER, "
                   "payment INTEGER, status TEXT)" % t["stops"])
        db.execute("CREATE TABLE %s (from_stop INTEGER REFERENCES %s(stop_id), to_stop INTEGER REFERENCES "
                   "%s(stop_id), minutes INTEGER, PRIMARY KEY (from_stop, to_stop))"
                   % (t["travel"], t["stops"], t["stops"]))
        db.execute("CREATE TABLE %s (leg_id INTEGER PRIMARY KEY, from_stop INTEGER REFERENCES %s(stop_id), "
                   "to_stop INTEGER REFERENCES %s(stop_id), depart_minute INTEGER, arrive_minute INTEGER, "
                   "minutes INTEGER, payment INTEGER)" % (t["legs"], t["stops"], t["stops"]))
        rows = []
        for k in range(n + 1):
            x, y = params["coordinates"][k]
            rows.append((k, x, y, params["rewards"][k], "depot" if k == 0 else "open"))
        db.executemany("INSERT INTO %s VALUES (?, ?, ?, ?, ?)" % t["stops"], rows)
        db.executemany("INSERT INTO %s VALUES (?, ?, ?)" % t["travel"],
                       [(i, j, params["travel"][i][j]) for i in range(n + 1) for j in range(n + 1)])

    # -- state helpers --------------------------------------------------------------------
    def _minutes(self, a, b):
        return self.db.execute("SELECT minutes FROM %s WHERE from_stop = ? AND to_stop = ?" % self.t["travel"],
                               (a, b)).fetchone()[0]

    def _stop(self, stop):
        if not 0 <= stop <= self.p["n_stops"]:
            raise AgentError("there are stops %s (the depot) to %s; got %s"
                             % (self.ref("stop", 0), self.ref("stop", self.p["n_stops"]), self.ref("stop", stop)))
        return self.db.execute("SELECT stop_id, x, y, payment, status FROM %s WHERE stop_id = ?"
                               % self.t["stops"], (stop,)).fetchone()

    def _totals(self):
        return self.db.execute("SELECT COALESCE(SUM(payment), 0), COALESCE(SUM(minutes), 0) FROM %s"
                               % self.t["legs"]).fetchone()

    def _drive(self, stop):
        position, clock = self._get("position"), self._get("clock")
        minutes = self._minutes(position, stop)
        payment = self._stop(stop)[3] if stop != 0 else 0
        self.db.execute("INSERT INTO %s (from_stop, to_stop, depart_minute, arrive_minute, minutes, payment) "
                        "VALUES (?, ?, ?, ?, ?, ?)" % self.t["legs"],
                        (position, stop, clock, clock + minutes, minutes, payment))
        if stop != 0:
            self.db.execute("UPDATE %s SET status = 'visited' WHERE stop_id = ?" % self.t["stops"], (stop,))
        self._set("position", stop)
        self._set("clock", clock + minutes)
        return minutes, payment

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("ended") == 1

    def utility(self):
        collected, minutes = self._totals()
        return collected - self.p["travel_cost"] * minutes

    def run_out(self):
        if not self.over():
            self.tool_return_to_depot()

    def limits(self, presentation):
        """Stops run 0 (the depot) … n, and a drive goes to a customer stop 1 … n (the instruction
        tells n in both presentations)."""
        n = self.p["n_stops"]
        stop = (0, n)
        return {"inspect_stop": {"stop": stop}, "get_travel_matrix": {"from_stop": stop},
                "get_travel_time": {"from_stop": stop, "to_stop": stop}, "drive_to": {"stop": (1, n)}}

    # -- probes -----------------------------------------------------------------------------
    @tool("probe", "List every customer stop of the round with the payment (in {currency}) due on delivery of "
          "{item}.", reveals=("rewards",))
    def tool_get_manifest(self):
        rows = self.db.execute("SELECT stop_id, payment FROM %s WHERE stop_id > 0 ORDER BY stop_id"
                               % self.t["stops"]).fetchall()
        return {"stops": [{"stop": r[0], "payment": r[1]} for r in rows],
                "currency": self.v["currency"]}

    @tool("probe", "Show one stop: its payment in {currency}, its position on the map and whether it has been "
          "visited.", reveals=("rewards", "coordinates"),
          stop=_stop_arg("the stop to show (the first stop is the depot)"))
    def tool_inspect_stop(self, stop):
        row = self._stop(stop)
        return {"stop": row[0], "x": row[1], "y": row[2], "payment": row[3] if stop else 0,
                "status": row[4]}  # the depot pays nothing; its status is "depot"

    @tool("probe", "Show one row of the travel-time matrix: the minutes from one stop to every stop (the first "
          "stop is the {site}).", reveals=("travel",),
          from_stop=_stop_arg("the stop to leave from (the first stop is the depot)"))
    def tool_get_travel_matrix(self, from_stop):
        self._stop(from_stop)
        self._mark_read("get_travel_matrix", from_stop)
        rows = self.db.execute("SELECT to_stop, minutes FROM %s WHERE from_stop = ? ORDER BY to_stop"
                               % self.t["travel"], (from_stop,)).fetchall()
        return {"from_stop": from_stop, "row": [{"to_stop": j, "minutes": m} for j, m in rows],
                "note": "one entry per stop, the depot (stop %s) first" % self.ref("stop", 0)}

    @tool("probe", "Show the travel time in minutes from one stop to another.", reveals=("travel",),
          from_stop=_stop_arg("the stop to leave from"), to_stop=_stop_arg("the stop to drive to"))
    def tool_get_travel_time(self, from_stop, to_stop):
        self._stop(from_stop)
        self._stop(to_stop)
        self._mark_read("get_travel_time", (from_stop, to_stop))
        return {"from_stop": from_stop, "to_stop": to_stop, "minutes": self._minutes(from_stop, to_stop)}

    @tool("probe", "Show what driving costs, in {currency} per minute, and the time budget of the round.",
          reveals=("travel_cost",))
    def tool_get_rate_card(self):
        return {"cost_per_minute": self.p["travel_cost"], "currency": self.v["currency"],
                "time_budget_minutes": self.p["budget"]}

    # -- decisions and the clock ------------------------------------------------------------
    @tool("decision", "Drive the van to a customer stop and deliver the {item}; refused if the stop was visited or "
          "the van could not get back to the {site} in time from there.",
          stop=_stop_arg("the customer stop to drive to (not the depot, the first stop)"))
    def tool_drive_to(self, stop):
        row = self._stop(stop)
        if stop == 0:
            raise AgentError("stop %s is the depot; use %s to end the round"
                             % (self.ref("stop", 0), self.name["return_to_depot"]))
        if row[4] == "visited":
            raise AgentError("stop %s has already been visited" % self.ref("stop", stop))
        position, clock = self._get("position"), self._get("clock")
        there, back = self._minutes(position, stop), self._minutes(stop, 0)
        if clock + there + back > self.p["budget"]:  # the rule, not the minutes: travel times are hidden in A
            raise AgentError("driving to stop %s and from there back to the depot would not end within the time "
                             "budget of %d minutes" % (self.ref("stop", stop), self.p["budget"]))
        minutes, payment = self._drive(stop)
        return {"arrived_at": stop, "minutes": minutes, "payment": payment, "clock": self._get("clock"),
                "minutes_left": self.p["budget"] - self._get("clock")}

    @tool("clock", "Drive straight back to the {site} and end the round.")
    def tool_return_to_depot(self):
        minutes = self._drive(0)[0] if self._get("position") != 0 else 0
        self._set("ended", 1)
        collected, driven = self._totals()
        return {"back_at_depot_minute": self._get("clock"), "minutes": minutes, "collected": collected,
                "minutes_driven": driven, "utility": self.utility(), "currency": self.v["currency"]}

    # -- observations -----------------------------------------------------------------------
    @tool("observe", "Show where the van is and the minute on the clock.")
    def tool_view_position(self):
        position = self._get("position")
        return {"stop": position, "at_depot": position == 0, "clock": self._get("clock")}

    @tool("observe", "Show minutes used, minutes left and minutes needed to get back to the {site} (in "
          "presentation A once that travel time is read).")
    def tool_view_clock(self):
        clock, position = self._get("clock"), self._get("position")
        back = 0 if position == 0 else self._minutes(position, 0)
        if self.presentation == "A" and position != 0 and not (  # travel times are hidden: a probe reads them
                self._was_read("get_travel_matrix", position) or self._was_read("get_travel_time", (position, 0))):
            back = None
        return {"clock": clock, "budget": self.p["budget"], "minutes_left": self.p["budget"] - clock,
                "minutes_to_depot": back}

    @tool("observe", "List the stops visited and the stops still open.")
    def tool_view_visited(self):
        rows = self.db.execute("SELECT stop_id, status FROM %s WHERE stop_id > 0 ORDER BY stop_id"
                               % self.t["stops"]).fetchall()
        return {"visited": [r[0] for r in rows if r[1] == "visited"], "open": [r[0] for r in rows if r[1] == "open"]}

    @tool("observe", "List the most recent legs driven with their times and payments.",
          limit=integer(1, 100, "how many legs to list"))
    def tool_view_legs(self, limit=20):
        rows = self.db.execute("SELECT leg_id, from_stop, to_stop, depart_minute, arrive_minute, minutes, payment "
                               "FROM %s ORDER BY leg_id DESC LIMIT ?" % self.t["legs"], (limit,)).fetchall()
        keys = ("leg", "from_stop", "to_stop", "depart_minute", "arrive_minute", "minutes", "payment")
        return {"legs": [dict(zip(keys, row)) for row in rows]}

    @tool("observe", "Show the payments collected so far (in {currency}) and the minutes driven.")
    def tool_view_earnings(self):
        collected, minutes = self._totals()
        return {"collected": collected, "minutes_driven": minutes, "currency": self.v["currency"]}

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        lines = [
            self.skin["narrative"],
            "",
            "Today you drive the %s's van on a delivery round of %s. It starts at the %s (stop %s, the depot) at "
            "minute 0; customers at stops %s to %s each pay once, in %s, when the van first arrives." % (
                v["site"], v["item"], v["site"], self.ref("stop", 0), self.ref("stop", 1),
                self.ref("stop", p["n_stops"]), v["currency"]),
            "Drive with %s (one stop per call). A drive is refused unless the van could still get back to the "
            "depot within the time budget of %d minutes from that stop. End the round with %s, which drives "
            "straight back to the depot." % (n["drive_to"], p["budget"], n["return_to_depot"]),
            "Your score is the payments collected minus the cost of every minute driven, the drive home "
            "included. Staying at the depot scores 0. You have %d turns: every tool call the world answers uses its "
            "turn cost; when they run out, the van drives straight home." % turn_budget,
        ]
        told = self._theta_lines() if presentation == "I" else self._probe_lines()
        return "\n".join(lines + [""] + told)

    def _theta_lines(self):
        """Presentation I: the cost per minute, the payments, the positions and the travel minutes."""
        p = self.p
        return [
            "Driving costs %d %s per minute." % (p["travel_cost"], self.v["currency"]),
            "Payments by stop: %s." % ", ".join("stop %s: %d" % (self.ref("stop", k), p["rewards"][k])
                                                for k in range(1, p["n_stops"] + 1)),
            "Stop positions (x, y): %s." % ", ".join("stop %s: (%d, %d)" % (self.ref("stop", k), c[0], c[1])
                                                     for k, c in enumerate(p["coordinates"])),
            "Travel minutes (row = from stop, column = to stop, stops %s..%s in order):"
            % (self.ref("stop", 0), self.ref("stop", p["n_stops"])),
        ] + ["  from %s: %s" % (self.ref("stop", i), " ".join("%d" % m for m in row))
             for i, row in enumerate(p["travel"])]

    def _probe_lines(self):
        """Presentation A: what is hidden, what each probe shows, and what the hidden numbers are like."""
        n = self.name
        return [
            "The payments, the stop positions, the travel times and the cost per minute are not given: %s shows every "
            "stop's payment, %s one stop's payment and position, %s the travel minutes from one stop to every stop, "
            "%s the minutes between two stops and %s the cost per minute, each at the cost of a turn from the same "
            "budget." % (n["get_manifest"], n["inspect_stop"], n["get_travel_matrix"], n["get_travel_time"],
                         n["get_rate_card"]),
            "The depot and the stops lie at distinct points (x, y) of a grid, x and y whole numbers from 0 to %d; "
            "the travel time between two points is their straight-line distance in minutes, rounded half up. "
            "Driving costs 1 or 2 %s per minute. A stop pays up to 29 minutes' worth of driving, plus up to twice "
            "its own minutes from the depot." % (self.GRID, self.v["currency"]),
        ]


register(Family.of(
    globals(),
    name="routing",
    version="8",
    group="train",
    model_class="deterministic prize-collecting orienteering (budgeted TSP)",
    solver="Held–Karp dynamic programming (numpy)",
    stochastic=False,
))
