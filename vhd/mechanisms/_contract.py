"""What a mechanism family declares, and the registry it declares it to.

    >>> from vhd.mechanisms import registry
    >>> fam = registry.get("inventory_dp")
    >>> theta = fam.sample(fam.Params(size=8, horizon=14), np.random.default_rng(7))
    >>> sol = fam.solve(theta)

A family is one module in `vhd/mechanisms/` ending in one `register(Family.of(globals(), ...))` call.
Generic code (tasks, gates, setters) only ever talks to a family through this dataclass.
Policies are numpy integer arrays whose meaning is the family's own business; an `Episode`
is the family simulator's account of one policy on one episode seed, with the canonical
tool calls that play it.
"""

from __future__ import annotations

import functools
import inspect
import math
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np
from pydantic import BaseModel, Field

from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._runtime import AgentError, BaseWorld  # noqa: F401  (the families import both from here)
from vhd.schemas.errors import InvalidParams, UnknownFamily

Group = Literal["train", "near_ood", "far_ood", "probe_budgeted", "beyond"]
Role = Literal["probe", "decision", "clock", "observe"]


@dataclass(frozen=True)
class ToolSpec:
    """One canonical tool of a family's decision process."""

    name: str
    role: Role
    description: str
    input_schema: dict[str, Any]
    reveals: tuple[str, ...] = ()
    turn_cost: int = 1
    noisy: bool = False


def integer(low: int, high: int, description: str) -> dict[str, Any]:
    """The JSON Schema of a whole-number argument in low … high."""
    return {"type": "integer", "minimum": low, "maximum": high, "description": description}


def number(low: float, high: float, description: str) -> dict[str, Any]:
    """The JSON Schema of a real-number argument in low … high."""
    return {"type": "number", "minimum": low, "maximum": high, "description": description}


def text(max_length: int, description: str) -> dict[str, Any]:
    """The JSON Schema of a string argument of at most `max_length` characters."""
    return {"type": "string", "maxLength": max_length, "description": description}


def knob(default: int, low: int, high: int, *, sampled: tuple[int, int], description: str) -> Any:
    """A difficulty knob of a family's Params: its default, the bounds solve() accepts (low … high),
    the narrower range `draw` samples it from, and its unit in `description`.

        >>> knob(6, 1, 40, sampled=(4, 50), description="number of lots, in lots")
        Traceback (most recent call last):
        ValueError: knob sampled (4, 50) must lie inside its bounds 1 … 40
    """
    if not low <= sampled[0] <= sampled[1] <= high:
        raise ValueError(f"knob sampled {tuple(sampled)} must lie inside its bounds {low} … {high}")
    return Field(default, ge=low, le=high, description=description, json_schema_extra={"sampled": list(sampled)})


def doc_section(doc: str, name: str) -> str:
    """The text of a docstring section (a line `name`, then indented lines), dedented; "" if the
    docstring has no such section.

        >>> doc_section("Toy.\\n\\nPlan\\n    a vector of\\n    n numbers.\\n\\nReward\\n    u.\\n", "Plan")
        'a vector of\\nn numbers.'
    """
    lines = doc.splitlines()
    if name not in lines:
        return ""
    body = []
    for line in lines[lines.index(name) + 1:]:
        if line.strip() and not line.startswith(" "):
            break
        body.append(line)
    return textwrap.dedent("\n".join(body)).strip()


def tool(role: Role, description: str, *, reveals: tuple[str, ...] = (), turn_cost: int = 1, noisy: bool = False,
         **arguments: dict[str, Any]) -> Callable[[Callable], Callable]:
    """Declare a World method `tool_<name>` one of the family's tools.

        >>> class World(BaseWorld):
        ...     @tool("observe", "Show one day's offer.", day=integer(0, 29, "day number, 0 for the first"))
        ...     def tool_view_offer(self, day):
        ...         return {"day": day}
        >>> [(spec.name, spec.input_schema["required"]) for spec in tools_of(World)]
        [('view_offer', ['day'])]

    `description` may use the passage's vocabulary (`{site}`, `{item}`…); `reveals` names the θ
    keys a probe shows; each keyword is the JSON Schema of the method's argument of that name
    (`integer`, `number`, `text`), in the method's order; an argument with a default is optional.
    """
    def declare(method: Callable) -> Callable:
        if not method.__name__.startswith("tool_"):
            raise TypeError(f"@tool declares methods named tool_<name>, not {method.__name__}")
        parameters = list(inspect.signature(method).parameters.values())[1:]
        if [p.name for p in parameters] != list(arguments):
            raise TypeError(f"{method.__qualname__} takes {[p.name for p in parameters]}, its @tool declares "
                            f"{list(arguments)}")
        schema: dict[str, Any] = {"type": "object", "properties": dict(arguments)}
        required = [p.name for p in parameters if p.default is inspect.Parameter.empty]
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        method.tool_spec = ToolSpec(method.__name__[len("tool_"):], role, description, schema, tuple(reveals),
                                    turn_cost, noisy)
        return method

    return declare


@functools.cache
def tools_of(world: type) -> tuple[ToolSpec, ...]:
    """The tools a World declares with `@tool`, in the order its methods are defined (base classes first)."""
    found: dict[str, ToolSpec] = {}
    for cls in reversed(world.__mro__):
        for attribute in vars(cls).values():
            spec = getattr(attribute, "tool_spec", None)
            if spec is not None:
                found[spec.name] = spec
    return tuple(found.values())


@dataclass(frozen=True)
class Certificate:
    """Why a solution is optimal: status, method, bound/gap, solver and its version."""

    status: str
    method: str
    solver: str
    solver_version: str
    state_space: int
    gap: float = 0.0
    bound: float | None = None
    seconds: float = 0.0

    def content(self) -> dict[str, Any]:
        """The hashed part: everything but the wall time."""
        return {
            "status": self.status,
            "method": self.method,
            "solver": self.solver,
            "solver_version": self.solver_version,
            "state_space": self.state_space,
            "gap": self.gap,
            "bound": self.bound,
        }


@dataclass(frozen=True)
class Solution:
    """u* and π* of one θ, the expected values of the two reference policies, the certificate."""

    u_star: float
    policy: np.ndarray
    u_default: float
    u_idle: float
    certificate: Certificate


@dataclass(frozen=True)
class Episode:
    """One policy played on one episode seed by the family's reference simulator."""

    utility: float
    calls: list[dict[str, Any]]
    decisions: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Family:
    """Everything generic code needs to know about a mechanism family."""

    name: str
    version: str
    group: Group
    model_class: str
    solver: str
    doc: str
    Params: type[BaseModel]
    sample: Callable[[BaseModel, np.random.Generator], dict[str, Any]]
    solve: Callable[[dict[str, Any]], Solution]
    default_policy: Callable[[dict[str, Any]], np.ndarray]
    idle_policy: Callable[[dict[str, Any]], np.ndarray]
    random_policy: Callable[[dict[str, Any], np.random.Generator], np.ndarray]
    evaluate: Callable[[dict[str, Any], np.ndarray], float]
    simulate: Callable[[dict[str, Any], np.ndarray, int], Episode]
    world: type
    hidden: tuple[str, ...]
    stochastic: bool
    # z = (u_default − u_idle) / (u* − u_idle) admitted: outside it the model is rejected (default_band)
    default_band: tuple[float, float]
    knob_ranges: dict[str, tuple[int, int]]  # the ranges `draw` samples knobs from, inside Params' bounds
    turn_budget: Callable[[dict[str, Any]], int]
    plan_format: str  # what a plan is, in words (presentation F)
    tables: tuple[str, ...]  # the World's canonical table names (`self.t`; "state", and "log" if it logs)
    # the form of θ's plans (shape, integer or real, bounds of every entry): presentation F refuses any
    # other plan before `evaluate`, and `evaluate` checks it again (vhd/mechanisms/_plan.py)
    plan_spec: Callable[[dict[str, Any]], PlanSpec] | None = None
    # near-boundary decisions for the reference_agreement gate: θ, rng → canonical call sequences
    # that land exactly on a domain check (a capacity filled to the unit, a forbidden pair)
    boundary_calls: Callable[[dict[str, Any], np.random.Generator], list[list[dict[str, Any]]]] | None = None
    # decision rewards (vhd/tasks/grading/step_advantages.py): `decision_values(θ)` is what the solver knows of θ
    # (Bellman tables, the restricted problem's data; with the optimum as "u_star", a key or an
    # attribute: the scale of rounding errors), computed once per θ; `decision_state(θ, world)`
    # is the World's state as the solver sees it (plain data: it must not alias the World); and
    # `advantage(θ, values, before, call, after)` is A*(s, a) = Q*(s, a) − V*(s) of one accepted
    # decision or clock call between those two states, or, with `call` None, of the World's
    # `run_out` (the episode finished as when the turns run out). π*'s calls have advantage 0.
    decision_values: Callable[[dict[str, Any]], Any] | None = None
    decision_state: Callable[[dict[str, Any], Any], Any] | None = None
    advantage: Callable[[dict[str, Any], Any, Any, dict[str, Any] | None, Any], float] | None = None
    # presentation A (the `prober` agent, vhd/agents/prober.py): `probe_calls(θ)` is every canonical probe
    # call that shows something not shown yet, in the order a methodical player reads them; `belief(θ,
    # read)` is θ as a player knows it after the accepted probe calls `read`: what they showed is θ's,
    # every other hidden entry the family's stated guess (a sticker's estimate, the range's middle),
    # with θ's form (belief(θ, probe_calls(θ)) == θ; belief(θ, []) does not depend on hidden θ)
    probe_calls: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None
    belief: Callable[[dict[str, Any], list[dict[str, Any]]], dict[str, Any]] | None = None
    # `BUDGET_BINDS = True`: the family's turn budget is made to bind in presentation A
    # (vhd/tasks/stages/check/budget.py: π*'s play with every probe does not fit, with the probes π* depends on
    # it does), and the default_band gate admits an A environment only where it does (needs
    # probe_calls and belief)
    budget_binds: bool = False

    @classmethod
    def of(cls, namespace: dict[str, Any], **data: Any) -> Family:
        """The Family of a family module: its functions, classes and declarations found by their
        conventional names in `namespace` (the module's `globals()`), its identity given as keywords
        (name, version, group, model_class, solver, stochastic).

            >>> Family.of({"__doc__": "A toy family."}, name="toy")
            Traceback (most recent call last):
            TypeError: family 'toy' defines no Params, sample, solve, ..., TABLES, a Plan section in the docstring (Family.of takes them from its module)

        The names are `CONVENTION`'s, each declared beside what it describes: `World` becomes `world`,
        `HIDDEN` `hidden`, `DEFAULT_BAND` `default_band`, `TABLES` `tables` (a World that lists its
        tables in `SCHEMA` needs none) and the module docstring `doc`; plan_spec, boundary_calls, the
        three decision-reward functions, probe_calls, belief and BUDGET_BINDS are optional.
        `knob_ranges` are the `sampled` ranges of the Params knobs (`knob`), `plan_format` the
        docstring's Plan section. A keyword wins over anything found in `namespace`."""
        found = {key: namespace[name] for key, name in CONVENTION.items() if namespace.get(name) is not None}
        world, params = found.get("world"), found.get("Params")
        if "tables" not in found and hasattr(world, "SCHEMA"):
            found["tables"] = tuple(table for table, _ in world.SCHEMA) + ("state",)
        if params is not None:
            found["knob_ranges"] = {name: tuple(field.json_schema_extra["sampled"])
                                    for name, field in params.model_fields.items()
                                    if isinstance(field.json_schema_extra, dict) and "sampled" in field.json_schema_extra}
        found["plan_format"] = " ".join(doc_section(found.get("doc") or "", "Plan").split())
        found.update(data)
        missing = [name for key, name in CONVENTION.items() if key in REQUIRED and key not in found]
        missing += ["a Params knob(…, sampled=…)"] * (params is not None and not found["knob_ranges"])
        missing += ["a Plan section in the docstring"] * (not found["plan_format"])
        if missing:
            raise TypeError(f"family {data.get('name', '?')!r} defines no {', '.join(missing)} (Family.of takes them "
                            "from its module)")
        return cls(**found)

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        """The family's canonical tool table: its World's `@tool` declarations, in method order."""
        return tools_of(self.world)

    @property
    def split(self) -> str:
        return "train" if self.group == "train" else "ood"

    @property
    def code_version(self) -> str:
        return f"{self.name}@{self.version}"

    def params(self, knobs: dict[str, Any]) -> BaseModel:
        """Validate knobs into the family's Params, translating pydantic's error."""
        try:
            return self.Params(**knobs)
        except Exception as exc:  # pydantic.ValidationError, TypeError
            first = str(exc).splitlines()
            raise InvalidParams(f"bad knobs for {self.name}: {knobs!r} ({' '.join(first[1:3]).strip()})") from exc

    def tool(self, name: str) -> ToolSpec:
        for spec in self.tools:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def tools_with_role(self, role: Role) -> list[ToolSpec]:
        return [spec for spec in self.tools if spec.role == role]

    @staticmethod
    def default_position(u_star: float, u_default: float, u_idle: float) -> float:
        """Where the default sits between idle (0) and optimal (1), in expectation."""
        span = u_star - u_idle
        if span <= 0:
            return math.inf
        return (u_default - u_idle) / span


# Family.of: the Family field each conventional module-level name fills, and which must be there
CONVENTION = {"Params": "Params", "sample": "sample", "solve": "solve", "default_policy": "default_policy",
              "idle_policy": "idle_policy", "random_policy": "random_policy", "evaluate": "evaluate",
              "simulate": "simulate", "plan_spec": "plan_spec", "boundary_calls": "boundary_calls",
              "decision_values": "decision_values", "decision_state": "decision_state", "advantage": "advantage",
              "probe_calls": "probe_calls", "belief": "belief",
              "world": "World", "doc": "__doc__", "turn_budget": "turn_budget", "hidden": "HIDDEN",
              "default_band": "DEFAULT_BAND", "tables": "TABLES", "budget_binds": "BUDGET_BINDS"}
REQUIRED = ("Params", "sample", "solve", "default_policy", "idle_policy", "random_policy", "evaluate", "simulate",
            "world", "doc", "turn_budget", "hidden", "default_band", "tables")


class Registry:
    """Families by name; filled by importing every non-underscore module of the package."""

    def __init__(self) -> None:
        self._families: dict[str, Family] = {}
        self._discovered = False

    def register(self, family: Family) -> Family:
        known = self._families.get(family.name)
        if known is not None and known is not family:
            raise ValueError(f"family {family.name!r} registered twice")
        self._families[family.name] = family
        return family

    def _discover(self) -> None:
        if self._discovered:
            return
        import importlib
        import pkgutil
        from pathlib import Path

        for info in pkgutil.iter_modules([str(Path(__file__).parent)]):  # the family modules beside this one
            if not info.name.startswith("_"):
                importlib.import_module(f"{__package__}.{info.name}")
        self._discovered = True

    def names(self) -> list[str]:
        self._discover()
        return sorted(self._families)

    def all(self) -> list[Family]:
        return [self._families[name] for name in self.names()]

    def get(self, name: str) -> Family:
        self._discover()
        try:
            return self._families[name]
        except KeyError:
            raise UnknownFamily(f"unknown family {name!r}; expected one of: {', '.join(self.names())}") from None


registry = Registry()
register = registry.register
