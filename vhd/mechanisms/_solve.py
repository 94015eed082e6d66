"""The one helper every exact solve goes through: times it, checks status, maps errors.

    >>> import numpy as np
    >>> value, plan, cert = certified(lambda: (12.0, np.array([1, 0, 1])), method="enumeration", state_space=8)
    >>> value, plan.tolist(), cert.status, cert.bound, cert.gap, cert.solver == "numpy"
    (12.0, [1, 0, 1], 'optimal', 12.0, 0.0, True)
    >>> proof = {"bound": 12.5, "gap": 0.04}      # a solver's own proof: its dual bound and gap
    >>> certified(lambda: (12.0, plan, proof), method="branch and bound", solver="highs", solver_version="1.8",
    ...           state_space=8)[2].bound
    12.5
    >>> certified(lambda: (float("nan"), plan), method="enumeration", solver="numpy", solver_version=np.__version__,
    ...           state_space=8)
    Traceback (most recent call last):
    vhd.schemas.errors.SolverError: enumeration returned a non-finite optimum nan; expected a finite utility

A family's `solve` ends with `solved`: the certified optimum with the reference policies' values.

    >>> found = certified(lambda: (12.0, np.array([1, 0, 1])), method="enumeration", solver="numpy",
    ...                   solver_version=np.__version__, state_space=8)
    >>> sol = solved({"n": 3}, found, lambda theta, plan: float(plan.sum()), lambda theta: np.ones(theta["n"]),
    ...              lambda theta: np.zeros(theta["n"]))
    >>> sol.u_star, sol.u_default, sol.u_idle
    (12.0, 3.0, 0.0)
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from typing import Any, Callable

from vhd.mechanisms._contract import Certificate, Solution
from vhd.schemas.errors import SolverError

_STDOUT_LOCK = threading.Lock()


def certified(
    run: Callable[[], tuple],
    *,
    method: str,
    state_space: int,
    solver: str = "numpy",
    solver_version: str | None = None,
) -> tuple[float, Any, Certificate]:
    """Run `run() -> (optimal value, plan[, {"bound": b, "gap": g}])`, refuse a non-finite
    optimum, return a certificate. A solver that proves a dual bound or gap returns it as the
    third element; otherwise the bound is the value itself and the gap 0 (exact methods). The
    solver is a numpy recursion unless named (`solver_version` then defaults to numpy's)."""
    if solver_version is None:
        import numpy

        solver_version = numpy.__version__
    started = time.perf_counter()
    try:
        value, plan, *proof = run()
    except MemoryError as exc:  # its message is usually empty: say what happened
        raise SolverError(f"{method} failed: out of memory ({str(exc) or 'MemoryError'}); the instance is too large "
                          "for this solver") from exc
    except (ArithmeticError, ValueError) as exc:
        raise SolverError(f"{method} failed: {str(exc) or type(exc).__name__}") from exc
    seconds = time.perf_counter() - started
    if not math.isfinite(value):
        raise SolverError(f"{method} returned a non-finite optimum {value!r}; expected a finite utility")
    found = proof[0] if proof else {}
    cert = Certificate(
        status="optimal",
        method=method,
        solver=solver,
        solver_version=solver_version,
        state_space=int(state_space),
        gap=float(found.get("gap", 0.0)),
        bound=float(found.get("bound", value)),
        seconds=seconds,
    )
    return float(value), plan, cert


def solved(theta: dict[str, Any], found: tuple[float, Any, Certificate],
           evaluate: Callable[[dict[str, Any], Any], float], default_policy: Callable[[dict[str, Any]], Any],
           idle_policy: Callable[[dict[str, Any]], Any]) -> Solution:
    """The Solution of θ from `found`, `certified(...)`'s (u*, π*, certificate), with the exact values
    `evaluate` gives the default plan and then the idle plan."""
    u_star, policy, cert = found
    return Solution(
        u_star=u_star,
        policy=policy,
        u_default=evaluate(theta, default_policy(theta)),
        u_idle=evaluate(theta, idle_policy(theta)),
        certificate=cert,
    )


@contextlib.contextmanager
def quiet_native_stdout():
    """Silence file descriptor 1 around a native solver call: HiGHS 1.x (scipy 1.17) printf()s a debug
    line ("HighsMipSolverData::transformNewIntegerFeasibleSolution ...") on some instances,
    which would corrupt machine-read stdout such as `vhd refresh --json`. The lock keeps two
    threads from saving each other's redirected descriptor."""
    with _STDOUT_LOCK:
        try:
            sys.stdout.flush()
            saved = os.dup(1)
        except (OSError, ValueError, AttributeError):  # no real fd 1: nothing to protect
            yield
            return
        try:
            with open(os.devnull, "w") as devnull:
                os.dup2(devnull.fileno(), 1)
                yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def exact_milp(**problem: Any) -> Any:
    """scipy.optimize.milp(**problem) at a zero MIP gap, HiGHS's output kept off stdout; its result,
    or ValueError (certified() turns that into SolverError) unless HiGHS proved an optimum."""
    from scipy.optimize import milp  # lazily: registry discovery stays fast

    with quiet_native_stdout():
        res = milp(**problem, options={"mip_rel_gap": 0.0, "presolve": True})
    if res.status != 0 or res.x is None:
        raise ValueError(f"HiGHS did not prove optimality: status {res.status} ({res.message})")
    return res


def integer_mip_bound(res: object, value: float) -> dict[str, float]:
    """The proof {"gap": g, "bound": b} (certified()'s third element) of a HiGHS MILP that
    *minimised* −utility, for a utility known to be an integer: the exactly re-scored `value` must
    satisfy ⌊bound⌋ ≤ value ≤ bound, where bound = −mip_dual_bound, or it raises ValueError
    (certified() turns that into SolverError)."""
    bound = -float(res.mip_dual_bound)  # utility ≤ bound
    if value > bound + 1e-6 or math.floor(bound + 1e-6) > value:
        raise ValueError(f"MIP value {value} disagrees with the dual bound {bound}")
    gap = float(res.mip_gap) if res.mip_gap is not None else 0.0
    return {"gap": gap, "bound": bound}
