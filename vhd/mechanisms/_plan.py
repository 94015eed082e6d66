"""The declared form of a family's plans, and the one check every plan goes through first.

    >>> spec = PlanSpec(shape=(2, 3), integer=True, low=0, high=np.array([4, 3, 2]))
    >>> spec.check([[0, 3, 2], [4, 0, 0]]).tolist()
    [[0, 3, 2], [4, 0, 0]]
    >>> spec.check([[0, 3, 2], [4, -1, 0]])
    Traceback (most recent call last):
    vhd.mechanisms._plan.InvalidPlan: entry [1, 1] is -1; expected an integer in 0 … 3 (a plan is an integer \
array of shape [2, 3])

A family declares `plan_spec(θ) -> PlanSpec`: the plan's shape, whether its entries are integers
or real numbers, and the bounds of every entry (a number, or an array that broadcasts to the
shape when the bound depends on the position, e.g. the order quantity a state allows). Its
`evaluate` and `simulate` call `spec.check(policy)` before any arithmetic, then check what a
range cannot say (a capacity, a permutation, a forbidden pair). The check takes a numpy array
or the plan as JSON (nested lists) and never recurses, so a plan nested 10 000 deep is one
`InvalidPlan` line, not a RecursionError. It is stricter than numpy: a float where integers are
declared (even 2.0), a bool, a string, a ragged or extra-deep list and an integer past int64
are refused, never cast; bounds are checked before any index is taken, so −1 never counts from
the end. `spec.schema()` is the same form as JSON Schema 2020-12 (whose "integer" also admits
2.0, so the check, not the schema, is the rule).
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

_INTEGER_TYPES = (int, np.integer)
_NUMBER_TYPES = (int, float, np.integer, np.floating)


class InvalidPlan(ValueError):
    """A plan that is not of the form its family declares for this θ."""


def _describe(value: Any) -> str:
    """A short, one-line, never-recursive account of a value found where an entry should be."""
    if value is None:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        return repr(value[:20] + ("…" if len(value) > 20 else ""))
    if isinstance(value, (int, np.integer)):
        return str(value) if abs(int(value)) < 10 ** 18 else f"an integer of {int(value).bit_length()} bits"
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return f"a {type(value).__name__}"


def _number(value: Any) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() else f"{value:g}"


@dataclass(frozen=True)
class PlanSpec:
    """The form of one θ's plans: an array of `shape` with integer (or real) entries in [low, high].

    `low`/`high`: None (unbounded), a number, or an array broadcasting to `shape` (numpy's
    rule: trailing axes align). `min_length`: a 1-d plan may be shorter, down to this length.
    `tolerance`: for real entries, how far past `high` the family's evaluator still accepts.
    """

    shape: tuple[int, ...]
    integer: bool
    low: Any = None
    high: Any = None
    min_length: int | None = None
    tolerance: float = 0.0

    @property
    def form(self) -> str:
        kind = "an integer" if self.integer else "a real-number"
        if self.min_length is not None:
            return f"{kind} vector of {self.min_length} … {self.shape[0]} entries"
        return f"{kind} array of shape {list(self.shape)}"

    def _lengths(self, axis: int) -> tuple[int, int]:
        n = self.shape[axis]
        return (self.min_length, n) if axis == 0 and self.min_length is not None else (n, n)

    def _fail(self, where: str, found: str, expected: str) -> InvalidPlan:
        context = "" if expected == self.form else f" (a plan is {self.form})"
        return InvalidPlan(f"{where} is {found}; expected {expected}{context}")

    def bounds(self, index: tuple[int, ...]) -> tuple[Any, Any]:
        """(low, high) of the entry at `index` (None: unbounded on that side)."""
        return tuple(None if bound is None else np.broadcast_to(np.asarray(bound), self.shape)[index].item()
                     for bound in (self.low, self.high))

    def entry_form(self, index: tuple[int, ...]) -> str:
        """What the entry at `index` may hold, e.g. 'an integer in 0 … 7'."""
        low, high = self.bounds(index)
        kind = "an integer" if self.integer else "a finite number"
        if low is not None and high is not None:
            return f"{kind} in {_number(low)} … {_number(high)}"
        if low is not None:
            return f"{kind} ≥ {_number(low)}"
        return f"{kind} ≤ {_number(high)}" if high is not None else kind

    # --- the check ---------------------------------------------------------------------------

    def check(self, plan: Any) -> np.ndarray:
        """The plan as an int64 (or float64) array of the declared form; InvalidPlan naming the
        first entry that is not, and what was expected there."""
        if isinstance(plan, np.ndarray) and plan.dtype != object:
            array = self._from_array(plan)
        elif isinstance(plan, (list, tuple, np.ndarray)):
            array = self._from_lists(plan.tolist() if isinstance(plan, np.ndarray) else plan)
        else:
            raise self._fail("the plan", _describe(plan), self.form)
        self._check_bounds(array)
        return array

    def _check_shape(self, shape: tuple[int, ...]) -> None:
        if len(shape) != len(self.shape):
            raise self._fail("the plan", f"an array of shape {list(shape)}", self.form)
        for axis, n in enumerate(shape):
            low, high = self._lengths(axis)
            if not low <= n <= high:
                raise self._fail("the plan", f"an array of shape {list(shape)}", self.form)

    def _from_array(self, plan: np.ndarray) -> np.ndarray:
        self._check_shape(plan.shape)
        kinds = "iu" if self.integer else "iuf"
        if plan.size and plan.dtype.kind not in kinds:
            raise self._fail("the plan", f"an array of {plan.dtype} entries", self.form)
        if plan.dtype.kind == "f":
            self._first(~np.isfinite(plan), plan)
        if self.integer and plan.dtype.kind == "u" and plan.size and int(plan.max()) > np.iinfo(np.int64).max:
            self._first(plan > np.iinfo(np.int64).max, plan)
        return plan.astype(np.int64 if self.integer else np.float64)

    def _from_lists(self, plan: list | tuple) -> np.ndarray:
        """Walk the nested lists level by level (no recursion), then convert the leaves at once."""
        level: list[Any] = [plan]
        shape: list[int] = []
        for axis in range(len(self.shape)):
            low, high = self._lengths(axis)
            if not set(map(type, level)) <= {list, tuple}:
                k = next(k for k, node in enumerate(level) if not isinstance(node, (list, tuple)))
                raise self._fail(self._where(k, shape), _describe(level[k]),
                                 f"a list of {high} entries" if axis else self.form)
            lengths = set(map(len, level))
            n = len(level[0]) if level else high
            if lengths != {n} or not low <= n <= high:
                k = next(k for k, node in enumerate(level) if len(node) != n or not low <= len(node) <= high)
                size = f"{low} … {high}" if low != high else f"{high}"
                raise self._fail(self._where(k, shape), f"a list of {len(level[k])}", f"a list of {size} entries")
            shape.append(n)
            level = list(itertools.chain.from_iterable(level))
        allowed = _INTEGER_TYPES if self.integer else _NUMBER_TYPES
        if not all(issubclass(t, allowed) and not issubclass(t, (bool, np.bool_)) for t in set(map(type, level))):
            k = next(k for k, v in enumerate(level)
                     if isinstance(v, (bool, np.bool_)) or not isinstance(v, allowed))
            raise self._fail(self._where(k, shape), _describe(level[k]), self.entry_form(self._index(k, shape)))
        try:
            flat = np.array(level, dtype=np.int64 if self.integer else np.float64)
        except OverflowError:  # an int past int64 (integer plans) or past the largest float (real plans)
            fits = (lambda v: -2 ** 63 <= v < 2 ** 63) if self.integer else (lambda v: abs(v) <= sys.float_info.max)
            k = next(k for k, v in enumerate(level) if isinstance(v, int) and not fits(v))
            raise self._fail(self._where(k, shape), _describe(level[k]), self.entry_form(self._index(k, shape))) from None
        array = flat.reshape(shape)
        if not self.integer:
            self._first(~np.isfinite(array), array)
        return array

    def _index(self, k: int, shape: list[int]) -> tuple[int, ...]:
        return tuple(int(i) for i in np.unravel_index(k, shape)) if shape else ()

    def _where(self, k: int, shape: list[int]) -> str:
        return f"entry {list(self._index(k, shape))}" if shape else "the plan"

    def _first(self, bad: np.ndarray, array: np.ndarray) -> None:
        """InvalidPlan naming the first True of `bad` (if any)."""
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            raise self._fail(f"entry {list(index)}", _describe(array[index]), self.entry_form(index))

    def _check_bounds(self, array: np.ndarray) -> None:
        if self.low is not None:
            self._first(array < np.asarray(self.low), array)
        if self.high is not None:
            self._first(array > np.asarray(self.high) + (0 if self.integer else self.tolerance), array)

    # --- the same form as JSON Schema ----------------------------------------------------------

    def schema(self) -> dict[str, Any]:
        """The declared form as JSON Schema 2020-12 (bounds that vary along an axis: prefixItems)."""
        return self._schema(0, ())

    def _varies(self, axis: int) -> bool:
        for bound in (self.low, self.high):
            array = np.asarray(bound) if bound is not None else np.asarray(0)
            dims = (1,) * (len(self.shape) - array.ndim) + array.shape
            if dims[axis] > 1:
                return True
        return False

    def _schema(self, axis: int, index: tuple[int, ...]) -> dict[str, Any]:
        if axis == len(self.shape):
            low, high = self.bounds(index)
            leaf: dict[str, Any] = {"type": "integer" if self.integer else "number"}
            for key, bound in (("minimum", low), ("maximum", high)):
                if bound is not None:
                    leaf[key] = int(bound) if self.integer else float(bound)
            return leaf
        low, high = self._lengths(axis)
        node: dict[str, Any] = {"type": "array", "minItems": low, "maxItems": high}
        if self._varies(axis):
            node["prefixItems"] = [self._schema(axis + 1, index + (i,)) for i in range(high)]
            node["items"] = False
        else:
            node["items"] = self._schema(axis + 1, index + (0,))
        return node

