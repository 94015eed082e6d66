"""The warehouse's record kinds, one pydantic model each.

    >>> m = ModelRecord.build(family="knapsack", family_version="1", knobs={"size": 2, "horizon": 1}, seed=7,
    ...                       theta={"values": [3, 4]}, batch="2026-12-02")
    >>> m.model_id == m.expected_id()
    True
    >>> m.model_copy(update={"run_id": "r1"}).expected_id() == m.model_id   # a run id is metadata
    True
    >>> m.model_copy(update={"seed": 8}).expected_id() == m.model_id        # the seed is content
    False

Every record names the fields its id is computed over (`content()`); timings and run ids are
metadata and stay out of the hash, so re-running a stage reproduces the same ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from vhd.schemas.hashing import content_id

Presentation = Literal["F", "I", "A"]


class _Fields(dict):
    """A record's fields as `str.format_map` asks for them, one by one (`dict(record)` would copy
    every field of the record first; the audit asks this of every stored row)."""

    def __init__(self, record: BaseModel):
        super().__init__()
        self.record = record

    def __missing__(self, key: str) -> Any:
        return getattr(self.record, key)


class Record(BaseModel):
    """A content-addressed row."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")
    kind: ClassVar[str]
    id_field: ClassVar[str]
    # the code that made the record, "<maker>@<its version>", a {field} standing for that field's
    # value: it is hashed into the id, so a new version of the maker makes new rows
    made_by: ClassVar[str]

    def content(self) -> dict[str, Any]:
        raise NotImplementedError

    def version(self) -> str:
        return self.made_by.format_map(_Fields(self))

    def expected_id(self) -> str:
        return content_id(self.kind, self.version(), self.content())

    @property
    def id(self) -> str:
        return getattr(self, self.id_field)

    @classmethod
    def build(cls, **fields: Any):
        """Make the record and fill in its content id."""
        draft = cls.model_construct(**{cls.id_field: "", **fields})
        return cls(**{**fields, cls.id_field: draft.expected_id()})


class RunRecord(BaseModel):
    """One flow run (an event, not an artifact: its id is a UUID)."""

    model_config = ConfigDict(extra="forbid")
    run_id: str
    flow: str
    started_at: str
    finished_at: str | None = None
    status: str = "running"
    parameters: dict[str, Any] = Field(default_factory=dict)
    code_version: str
    summary: dict[str, Any] = Field(default_factory=dict)


VOCABULARY_KEYS = ("site", "item", "sku", "unit", "supplier", "currency")  # the words every passage names


class PassageRecord(Record):
    """A real-world text passage that supplies a skin's vocabulary (every one of VOCABULARY_KEYS,
    and optional synonyms)."""

    kind = "passage"
    id_field = "passage_id"
    made_by = "passage@1"
    passage_id: str
    domain: str
    source: str
    text: str
    vocabulary: dict[str, Any]

    def content(self):
        return {"domain": self.domain, "source": self.source, "text": self.text, "vocabulary": self.vocabulary}


class ModelRecord(Record):
    """θ: one parameter draw of a family, with the seed that reproduces it."""

    kind = "model"
    id_field = "model_id"
    made_by = "{family}@{family_version}"
    model_id: str
    family: str
    family_version: str
    knobs: dict[str, Any]
    seed: int = Field(ge=0, description="the numpy SeedSequence entropy θ was sampled from")
    theta: dict[str, Any]
    batch: str
    run_id: str = ""

    def content(self):
        return {"family": self.family, "knobs": self.knobs, "seed": self.seed, "theta": self.theta, "batch": self.batch}


class SolutionRecord(Record):
    """The exact solution of one θ: expected values of π*, the default and idle policies."""

    kind = "solution"
    id_field = "solution_id"
    made_by = "{family}@{family_version}"
    solution_id: str
    model_id: str
    family: str
    family_version: str
    u_star: float = Field(description="expected utility of the optimal policy")
    u_default: float = Field(description="expected utility of the default policy")
    u_idle: float = Field(description="expected utility of the idle policy")
    certificate: dict[str, Any]
    policy_digest: str = Field(description="sha256 of the policy array's .npy bytes")
    policy: bytes = Field(repr=False, description="zlib-compressed .npy bytes of π*")
    seconds: float = 0.0
    run_id: str = ""

    def content(self):
        return {
            "model_id": self.model_id,
            "u_star": self.u_star,
            "u_default": self.u_default,
            "u_idle": self.u_idle,
            "certificate": self.certificate,
            "policy_digest": self.policy_digest,
        }


class ToolBinding(BaseModel):
    """How one of the family's canonical tools is named and used in a generated module."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    canonical: str
    name: str
    role: Literal["probe", "decision", "clock", "observe"]
    reveals: tuple[str, ...] = ()
    turn_cost: int = 1


class SetterOutputRecord(Record):
    """A generated environment module and the interface it declares."""

    kind = "setter_output"
    id_field = "setter_output_id"
    made_by = "{setter}@{setter_version}"
    setter_output_id: str
    family: str
    family_version: str
    setter: str
    setter_version: str
    passage_id: str
    module: str
    interface: tuple[ToolBinding, ...]
    run_id: str = ""

    def content(self):
        return {
            "family": self.family,
            "family_version": self.family_version,
            "passage_id": self.passage_id,
            "module": self.module,
            "interface": [b.model_dump(mode="json") for b in self.interface],
        }

    def tool_name(self, canonical: str) -> str:
        for binding in self.interface:
            if binding.canonical == canonical:
                return binding.name
        raise KeyError(canonical)


class CheckRecord(Record):
    """One gate's verdict on one environment candidate."""

    kind = "check"
    id_field = "check_id"
    made_by = "checker@{checker_version}"
    check_id: str
    env_id: str
    gate: str
    passed: bool
    message: str
    checker_version: str
    seconds: float = 0.0
    run_id: str = ""

    def content(self):
        return {"env_id": self.env_id, "gate": self.gate, "passed": self.passed, "message": self.message}


class EnvironmentRecord(Record):
    """An environment candidate: θ + solution + module + presentation + episode seed, annotated."""

    kind = "environment"
    id_field = "env_id"
    made_by = "annotator@{annotator_version}"
    env_id: str
    family: str
    presentation: Presentation
    split: str
    model_id: str
    solution_id: str
    setter_output_id: str
    episode_seed: int = Field(ge=0)
    turn_budget: int = Field(gt=0)
    knobs: dict[str, Any]
    u_star: float = Field(description="utility of π* on this episode seed (reward 1)")
    u_default: float = Field(description="utility of the default policy on this episode seed")
    u_idle: float | None = Field(None, description="utility of doing nothing on this episode seed (the episode "
                                                  "finished at once); the reward's zero is max(u_default, u_idle)")
    reference_trajectory: list[dict[str, Any]]
    default_trajectory: list[dict[str, Any]]
    instruction: str
    tools: list[dict[str, Any]]
    admitted: bool
    reason: str = ""
    gate_seconds: dict[str, float] = Field(default_factory=dict)
    annotator_version: str
    run_id: str = ""
    difficulty: dict[str, Any] = Field(default_factory=dict, description=(
        "what the environment asks of a player, read off the solved model (vhd/tasks/stages/difficulty.py): knobs, "
        "state space, span, scripted agents' rewards in I and A, and `score` in [0, 1]; {} when not measured "
        "(a rejected candidate, or a row annotated before migration 007)"))

    IDENTITY: ClassVar[tuple[str, ...]] = (
        "family", "presentation", "model_id", "solution_id", "setter_output_id", "episode_seed", "turn_budget",
    )

    @classmethod
    def id_for(cls, annotator_version: str, **identity: Any) -> str:
        """The env_id of an environment before it is checked (its identity fields only)."""
        return content_id(cls.kind, f"annotator@{annotator_version}", {key: identity[key] for key in cls.IDENTITY})

    def content(self):
        return {key: getattr(self, key) for key in self.IDENTITY}

    def config(self, theta: dict[str, Any]) -> dict[str, Any]:
        """The full config `create` takes (grader side: carries θ even in presentation A)."""
        return {
            "params": theta,
            "presentation": self.presentation,
            "episode_seed": self.episode_seed,
            "turn_budget": self.turn_budget,
        }


class LineageEdge(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    child_id: str
    parent_id: str
    relation: str


@dataclass
class Chain:
    """An environment and every record on its lineage, as loaded for an audit."""

    environment: EnvironmentRecord
    model: ModelRecord | None
    solution: SolutionRecord | None
    setter_output: SetterOutputRecord | None
    passage: PassageRecord | None
    checks: list[CheckRecord]
    edges: dict[str, list[LineageEdge]]
    runs: dict[str, RunRecord | None] = field(default_factory=dict)
    # record id -> the row as stored (JSON columns as text, `field_digests` included), for the audit's
    # digests; and record id -> {field: why the stored value is not a valid value of that field}
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    invalid: dict[str, dict[str, str]] = field(default_factory=dict)


class CorpusVersionRecord(BaseModel):
    """An immutable manifest of the admitted environments at one point in time."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: str = Field(description="v1, v2, … in publication order")
    created_at: str
    run_id: str
    admitted: int = Field(ge=0)
    manifest: dict[str, Any] = Field(description="env_ids, counts per family/split/presentation, digest")


class SetterAttemptRecord(BaseModel):
    """How an LLM setter obtained one module: attempts, tokens, cost (table setter_attempts)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    attempt_id: str
    setter_output_id: str
    family: str
    passage_id: str
    setter: str
    llm_model: str
    attempts: int
    first_try: bool
    passed: bool
    rewritten: bool
    input_tokens: int
    output_tokens: int
    cost_usd: float
    reasons: list[str] = []
    run_id: str = ""


class EpisodeRecord(Record):
    """One agent episode on one environment: the calls, what came back, tokens, reward.

    The id hashes (env, corpus version, agent, presentation, episode seed, episode index) and
    what was played, so re-running a scripted evaluation rewrites the same rows (a no-op)."""

    kind = "episode"
    id_field = "episode_id"
    made_by = "episode@1"
    episode_id: str
    env_id: str
    corpus_version: str = Field(description="the corpus version evaluated, '' when none is published")
    agent: str
    presentation: Presentation
    family: str
    episode_seed: int = Field(description="the environment's episode seed (its random path)")
    episode_index: int = Field(ge=0, description="which of the K episodes; seeds the agent's own randomness")
    messages: list[Any] = Field(default_factory=list, description="the LLM conversation; empty for scripted agents")
    tool_calls: list[Any] = Field(default_factory=list, description='[{"tool", "arguments"}]')
    observations: dict[str, Any] = Field(default_factory=dict,
                                         description="the sandbox replay's report: rejected calls, observation digest, error")
    tokens: dict[str, Any] = Field(default_factory=dict, description='{"input", "output"}; zeros for scripted agents')
    utility: float | None = None
    reward: float
    created_at: str = ""

    def content(self):
        return {"env_id": self.env_id, "corpus_version": self.corpus_version, "agent": self.agent,
                "presentation": self.presentation, "episode_seed": self.episode_seed,
                "episode_index": self.episode_index, "tool_calls": self.tool_calls, "messages": self.messages}
