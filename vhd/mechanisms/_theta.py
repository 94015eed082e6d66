"""The θ check every solve() runs first: sizes within the family's documented limits, numbers of
the declared form. A θ that is not what its family declares raises InvalidParams naming the field
and the expected form, before any solver allocates; nothing is truncated or rounded.

    >>> check = ThetaCheck("knapsack", {"n_items": 2, "n_resources": 1, "weights": [[1.9, 1]]})
    >>> n = check.count("n_items", 1, 50)
    >>> check.whole("weights", (1, n), low=0)
    Traceback (most recent call last):
    vhd.schemas.errors.InvalidParams: knapsack θ['weights'][0][0] = 1.9: expected a whole number ≥ 0 \
(this field is integer-valued: fractions are refused, not rounded)
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any, Sequence

from vhd.schemas.errors import InvalidParams

EXACT = 2 ** 53  # |numbers| above this are not exact as floats (HiGHS and numpy float paths): refused


class ThetaCheck:
    """Checks the fields of one θ of one family; every failure is an InvalidParams."""

    def __init__(self, family: str, theta: Any) -> None:
        if not isinstance(theta, dict):
            raise InvalidParams(f"{family} θ must be a dict of its parameters, got {type(theta).__name__}")
        self.family, self.theta = family, theta

    def _field(self, key: str) -> Any:
        if key not in self.theta:
            raise InvalidParams(f"{self.family} θ lacks the field '{key}'")
        return self.theta[key]

    def _fail(self, key: str, where: str, value: Any, form: str) -> InvalidParams:
        return InvalidParams(f"{self.family} θ['{key}']{where} = {_short(value)}: expected {form}")

    def _number(self, key: str, where: str, value: Any, *, whole: bool, low, high) -> None:
        kind = "a whole number" if whole else "a finite number"
        bounds = "".join(part for part in (f" ≥ {low}" if low is not None else "",
                                           f" ≤ {high}" if high is not None else ""))
        form = kind + (bounds if bounds else "")
        if whole:
            form += " (this field is integer-valued: fractions are refused, not rounded)"
        if isinstance(value, bool) or not isinstance(value, Real):
            raise self._fail(key, where, value, form)
        if not math.isfinite(value) or abs(value) > EXACT:
            raise self._fail(key, where, value, form + " of magnitude ≤ 2^53")
        if whole and value != math.floor(value):
            raise self._fail(key, where, value, form)
        if (low is not None and value < low) or (high is not None and value > high):
            raise self._fail(key, where, value, form)

    def _walk(self, key: str, where: str, value: Any, shape: Sequence[int | None], **number) -> None:
        if not shape:
            self._number(key, where, value, **number)
            return
        length = shape[0]
        if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__") or not hasattr(value, "__iter__"):
            raise self._fail(key, where, value, f"a list of {length if length is not None else 'one or more'} "
                                                f"entries")
        if (length is not None and len(value) != length) or (length is None and len(value) == 0):
            raise InvalidParams(f"{self.family} θ['{key}']{where} has {len(value)} entries: expected "
                                f"{length if length is not None else 'one or more'} entries")
        for i, item in enumerate(value):
            self._walk(key, f"{where}[{i}]", item, shape[1:], **number)

    def count(self, key: str, low: int, high: int) -> int:
        """A size field (a whole number in low … high, the family's documented limit), as an int."""
        value = self._field(key)
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) \
                or value != math.floor(value) or not low <= value <= high:
            raise InvalidParams(f"{self.family} θ['{key}'] = {_short(value)}: expected a whole number in {low} … {high} "
                                f"(the family's size limit)")
        return int(value)

    def length(self, key: str, low: int, high: int) -> int:
        """The length of a list field, which must lie in low … high (a size the family bounds)."""
        value = self._field(key)
        if not isinstance(value, (list, tuple)) or not low <= len(value) <= high:
            raise InvalidParams(f"{self.family} θ['{key}'] = {_short(value)}: expected a list of {low} … {high} "
                                f"entries (the family's size limit)")
        return len(value)

    def whole(self, key: str, shape: Sequence[int | None] = (), *, low=None, high=None) -> None:
        """A field of whole numbers: a scalar (shape ()) or nested lists of the given lengths
        (None: any positive length)."""
        self._walk(key, "", self._field(key), tuple(shape), whole=True, low=low, high=high)

    def real(self, key: str, shape: Sequence[int | None] = (), *, low=None, high=None) -> None:
        """A field of finite real numbers, shaped as for `whole`."""
        self._walk(key, "", self._field(key), tuple(shape), whole=False, low=low, high=high)

    def require(self, ok: bool, key: str, form: str) -> None:
        """A family-specific rule on one field (a total, an order): InvalidParams unless `ok`."""
        if not ok:
            raise InvalidParams(f"{self.family} θ['{key}'] = {_short(self.theta.get(key))}: expected {form}")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"
