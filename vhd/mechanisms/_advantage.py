"""Decision rewards of a deterministic family whose plan stays open until one call commits it.

    >>> class Selection:                      # a World: over once submitted, worth 7 then
    ...     submitted = False
    ...     def over(self):
    ...         return self.submitted
    ...     def utility(self):
    ...         return 7
    >>> from types import SimpleNamespace
    >>> decision_values, decision_state, advantage = until_committed(lambda theta: SimpleNamespace(u_star=10))
    >>> world, values = Selection(), decision_values({})
    >>> before = decision_state({}, world)
    >>> world.submitted = True
    >>> values, before, decision_state({}, world), advantage({}, values, before, None, decision_state({}, world))
    ({'u_star': 10}, (False, None), (True, 7), -3.0)

While the plan is open every decision can be undone, so the best utility still reachable is u*;
once it is committed (by the family's commit tool or, with `call` None, by running out of turns)
it is the World's realised utility. The potential Φ is that, and A* = Φ(after) − Φ(before): 0 for
every revision, utility − u* for the commit.
"""

from __future__ import annotations

from typing import Any, Callable


def until_committed(solve: Callable[[dict[str, Any]], Any]) -> tuple[Callable, Callable, Callable]:
    """`decision_values`, `decision_state` and `advantage` of a family (Family's fields of those
    names) from its `solve(θ)`, whose Solution's u* is the potential of every open state."""

    def decision_values(theta: dict[str, Any]) -> dict[str, float]:
        """u* by the family's own solve (θ checked first): the potential of every open state."""
        return {"u_star": solve(theta).u_star}

    def decision_state(theta: dict[str, Any], world: Any) -> tuple[bool, float | None]:
        """(whether the plan is committed, the World's realised utility once it is)."""
        over = bool(world.over())
        return over, (world.utility() if over else None)

    def advantage(theta: dict[str, Any], values: dict[str, float], before: tuple, call: dict[str, Any] | None,
                  after: tuple) -> float:
        """Φ(after) − Φ(before): 0 for a revision, utility − u* for the commit (or running out)."""
        return float(_potential(values, after) - _potential(values, before))

    return decision_values, decision_state, advantage


def _potential(values: dict[str, float], state: tuple[bool, float | None]) -> float:
    committed, utility = state
    return utility if committed else values["u_star"]
