"""Myopic heuristics, one per diagnostic family: each looks one step (or one item) ahead. The `greedy`
agent plays them (vhd/agents), and the difficulty measure (`difficulty.py`) grades them on every
environment of these families.

    >>> from vhd.mechanisms import registry
    >>> from vhd.tasks.stages.sample import draw
    >>> knapsack = registry.get("knapsack")
    >>> _, theta = draw(knapsack, 3)
    >>> plan = greedy_policy(knapsack, theta)   # a plan in the family's format: the lots taken
    >>> plan.tolist(), knapsack.solve(theta).policy.tolist()
    ([0, 1, 0, 0, 1, 0], [0, 1, 0, 1, 0, 0])
    >>> knapsack.simulate(theta, plan, 0).utility, knapsack.solve(theta).u_star
    (119.0, 129.0)

None of them reads π* or calls a solver. Each is the textbook myopic rule of its model class:

| family | rule |
|---|---|
| inventory_dp | order up to the newsvendor quantile of (lead time + 1) days of demand at the critical ratio (price − cost + penalty) / (price − cost + penalty + holding); nothing when a unit costs more than it sells for |
| knapsack | take the lots by value per unit of normalised weight (Σ_r w_ri / C_r), best first, while they fit |
| lp | fill products by profit per unit of bottleneck hours (max_i usage_ij / capacity_i), best first, each as much as fits |
| qp | spend the budget in 40 equal chunks, each on the project with the largest positive marginal gain r_i − 2λ(Qx)_i that its cap allows |
| routing | drive to the allowed stop with the largest reward per minute of driving; go home when no stop gains more than the driving costs |
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable

import numpy as np

from vhd.mechanisms import Family


def _inventory(theta: dict[str, Any]) -> np.ndarray:
    from vhd.mechanisms.inventory_dp import _Process

    proc = _Process(theta)
    margin = theta["price"] - theta["unit_cost"]
    position = np.array([i + o for i, o in proc.states])
    if margin <= 0:
        return np.zeros((theta["horizon"], len(proc.states)), dtype=np.int16)
    pmf = np.asarray(proc.probabilities, dtype=float).mean(axis=0)
    total = np.array([1.0])
    for _ in range(theta["lead_time"] + 1):
        total = np.convolve(total, pmf)
    under = margin + theta["shortage_penalty"]
    ratio = under / (under + theta["holding_cost"])
    level = min(theta["capacity"], int(np.searchsorted(np.cumsum(total), ratio)))
    row = np.clip(level - position, 0, proc.max_order).astype(np.int16)
    return np.tile(row, (theta["horizon"], 1))


def _knapsack(theta: dict[str, Any]) -> np.ndarray:
    from vhd.mechanisms.knapsack import _arrays

    values, weights, capacities = _arrays(theta)
    load = (weights / np.maximum(capacities, 1)[:, None]).sum(axis=0)
    order = sorted(range(theta["n_items"]), key=lambda i: (-values[i] / max(load[i], 1e-12), i))
    left, x = capacities.copy(), np.zeros(theta["n_items"], dtype=np.int8)
    for i in order:
        if (weights[:, i] <= left).all():
            x[i] = 1
            left -= weights[:, i]
    return x


def _lp(theta: dict[str, Any]) -> np.ndarray:
    usage, capacity = theta["usage"], theta["capacity"]

    def bottleneck(j: int) -> float:
        return max([usage[i][j] / capacity[i] for i in range(len(capacity)) if capacity[i] > 0] + [1e-12])

    left = [Fraction(c) for c in capacity]
    plan = [0.0] * theta["products"]
    for j in sorted(range(theta["products"]), key=lambda j: (-theta["profit"][j] / bottleneck(j), j)):
        if theta["profit"][j] <= 0:
            continue
        q = Fraction(theta["demand"][j])
        for i, row in enumerate(usage):
            if row[j] > 0:
                q = min(q, left[i] / row[j])
        q = max(Fraction(0), q)
        for i, row in enumerate(usage):
            left[i] -= row[j] * q
        plan[j] = math.floor(float(q) * 1000) / 1000  # thousandths, rounded down: stays feasible
    return np.array(plan, dtype=np.float64)


def _qp(theta: dict[str, Any]) -> np.ndarray:
    from vhd.mechanisms.qp import _arrays

    q, r, caps, budget, lam = _arrays(theta)
    x = np.zeros(len(r))
    chunk = budget / 40
    for _ in range(40):
        gain = r - 2 * lam * (q @ x)
        room = np.minimum(caps - x, budget - x.sum())
        gain[room <= 1e-12] = -np.inf
        best = int(np.argmax(gain))
        if not gain[best] > 0:
            break
        x[best] += min(chunk, room[best])
    return np.minimum(np.floor(x * 1000) / 1000, caps)


def _routing(theta: dict[str, Any]) -> np.ndarray:
    from vhd.mechanisms.routing import _feasible, _pad

    t, position, clock, route = theta["travel"], 0, 0, []
    while True:
        options = _feasible(theta, position, clock, set(route))
        gains = {k: theta["rewards"][k] - theta["travel_cost"] * t[position][k] for k in options}
        good = [k for k in options if gains[k] > 0]
        if not good:
            return _pad(theta, route)
        stop = max(good, key=lambda k: (theta["rewards"][k] / max(t[position][k], 1), -k))
        clock += t[position][stop]
        position = stop
        route.append(stop)


HEURISTICS: dict[str, Callable[[dict[str, Any]], np.ndarray]] = {
    "inventory_dp": _inventory, "knapsack": _knapsack, "lp": _lp, "qp": _qp, "routing": _routing,
}


def greedy_policy(family: Family, theta: dict[str, Any]) -> np.ndarray:
    """The family's myopic plan; ValueError for a family with no heuristic."""
    try:
        return HEURISTICS[family.name](theta)
    except KeyError:
        raise ValueError(f"no greedy heuristic for {family.name}; there is one for {', '.join(HEURISTICS)}") from None
