"""The one helper every exact solve goes through: times it, checks status, maps errors.

    >>> value, policy, cert = certified(lambda: bellman(...), method="backward Bellman recursion",
    ...                                 solver="numpy", solver_version=np.__version__, state_space=n)
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from vhd.mechanisms._contract import Certificate
from vhd.schemas.errors import SolverError


def certified(
    run: Callable[[], tuple[float, Any]],
    *,
    method: str,
    solver: str,
    solver_version: str,
    state_space: int,
    gap: float = 0.0,
    bound: float | None = None,
) -> tuple[float, Any, Certificate]:
    """Run `run() -> (optimal value, plan)`, refuse a non-finite optimum, return a certificate."""
    started = time.perf_counter()
    try:
        value, plan = run()
    except (ArithmeticError, ValueError, MemoryError) as exc:
        raise SolverError(f"{method} failed: {exc}") from exc
    seconds = time.perf_counter() - started
    if not math.isfinite(value):
        raise SolverError(f"{method} returned a non-finite optimum {value!r}; expected a finite utility")
    cert = Certificate(
        status="optimal",
        method=method,
        solver=solver,
        solver_version=solver_version,
        state_space=int(state_space),
        gap=gap,
        bound=value if bound is None else bound,
        seconds=seconds,
    )
    return float(value), plan, cert
