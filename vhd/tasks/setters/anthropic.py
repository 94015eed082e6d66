"""The LLM setter: a module written by a Claude model through the official `anthropic` SDK.

For example (it calls the Anthropic API, so not a doctest):

    setter = AnthropicSetter(LLMSettings.from_env())
    outputs, assignment, attempts = synthesize_with_llm(setter, family, models, solutions, passages, exemplars, "IA")

(`vhd.tasks.stages.synthesize.synthesize_with_llm`: stage 3 with this setter, each module checked by the gates.)

Per (family, passage) in use: one prompt (θ's structure, the family's decision process and
tool roles, the passage, two or three admitted exemplar modules), a reply parsed into a module
(a ```python block) and its interface (a ```json block mapping canonical tools to names). The
module is never imported here: it is checked in the sandbox by the same gates as every module,
on the first model it serves. A failed gate gets one repair turn carrying the gate's message,
up to `max_attempts` replies; a module that still fails is kept and rejected with its reason.
Transport faults (429, 5xx, timeouts) are retried by the SDK with backoff; when they persist,
`SetterUnavailable` is raised and the caller writes nothing for that family.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import anthropic

from vhd.mechanisms import Family
from vhd.schemas.errors import SetterError, SetterUnavailable
from vhd.schemas.records import ModelRecord, PassageRecord, SetterOutputRecord, ToolBinding
from vhd.tasks.setters.lexicon import tool_names, world_words
from vhd.tasks.setters.settings import LLMSettings
from vhd.tasks.setters.skin import skin_of
from vhd.tasks.setters.template import render_module

SETTER = "anthropic"
SETTER_VERSION = "3"
THETA_GATES = ("default_band",)
_CODE = re.compile(r"```(python|json)[^\n]*\n(.*?)```", re.S)

SYSTEM = (
    "You write reinforcement-learning environments as one self-contained Python module (standard library "
    "only; sqlite3 in memory for the relational world). The module defines ENV_API = 3, create(config) and an "
    "Env with instruction, tools, call(name, arguments), done, outcome() and finish() (ends an unfinished "
    "episode by the rule for running out of turns), with the exemplars' turn rule and call limit, exactly like "
    "the exemplars; an Env must work when called from any thread. "
    "Every tool call must be all-or-nothing and never raise for a player's mistake. In presentation 'A' no "
    "observation may reveal the hidden parameters, the optimum or the optimal policy; probes cost turns. "
    "Reply with one ```python block (the whole module) and one ```json block: a list of "
    '{"canonical": <family tool>, "name": <your tool name>} for every family tool.'
)


def theta_structure(theta: dict) -> dict:
    """Keys and shapes of θ (types, lengths), not its values."""
    def shape(v):
        if isinstance(v, list):
            return [shape(v[0])] + [f"len {len(v)}"] if v else []
        if isinstance(v, dict):
            return {k: shape(x) for k, x in v.items()}
        return type(v).__name__
    return {k: shape(v) for k, v in theta.items()}


def world_section(family: Family, passage: PassageRecord) -> list[str]:
    """The passage's lexicon for the prompt (issue 29): the verbs its world uses for each role, its
    nouns, and the names the template setter gives the family's tools in it, so that the model's
    names vary with the world as the template's do (the exemplars are other worlds)."""
    words = world_words(family, passage)
    names = tool_names(family, passage)
    return [
        "## This world's words: name every tool with a verb of its role and a noun of this world",
        "A name must still say what the tool does (`weigh_parcel`, `load_parcel`, `dispatch_truck`), in lowercase "
        "words joined by _, and no name or answer key may be an RL word (reward, score, episode, policy, theta, "
        "optimal). Verbs by role and nouns of this world:",
        json.dumps(words, indent=1),
        "The template setter's names in this world (canonical → name); use them or names as good:",
        json.dumps(names, indent=1),
    ]


def build_prompt(family: Family, model: ModelRecord, passage: PassageRecord,
                 exemplars: list[SetterOutputRecord]) -> str:
    tools = [{"canonical": t.name, "role": t.role, "turn_cost": t.turn_cost, "reveals": list(t.reveals),
              "description": t.description, "input_schema": t.input_schema} for t in family.tools]
    parts = [
        f"# Family `{family.name}` ({family.model_class}, solved by {family.solver})", family.doc.strip(),
        "## θ structure (config['params'])", json.dumps(theta_structure(model.theta), indent=1),
        f"Hidden in presentation A: {', '.join(family.hidden)}",
        "## Tools of the decision process (roles: probe, decision, clock, observe)", json.dumps(tools, indent=1),
        f"## Passage ({passage.domain}): ground names, units and narrative in it", passage.text,
        *world_section(family, passage),
    ]
    for k, ex in enumerate(exemplars):
        parts += [f"## Exemplar {k + 1} (admitted)", "```python\n" + ex.module + "\n```", "```json\n" + json.dumps(
            [{"canonical": b.canonical, "name": b.name} for b in ex.interface]) + "\n```"]
    parts.append("Write the module for this passage's world.")
    return "\n\n".join(parts)


def parse_reply(family: Family, text: str) -> tuple[str, tuple[ToolBinding, ...]]:
    """(module, interface) from a reply, or SetterError naming what is missing or wrong."""
    blocks: dict[str, str] = {}
    for kind, body in _CODE.findall(text):
        blocks.setdefault(kind, body)
    if "python" not in blocks:
        raise SetterError("the reply has no ```python block with the module")
    if "json" not in blocks:
        raise SetterError("the reply has no ```json block with the tool interface")
    try:
        mapping = json.loads(blocks["json"])
        names = {row["canonical"]: row["name"] for row in mapping}
    except (ValueError, TypeError, KeyError) as exc:
        raise SetterError(f"the interface block is not a list of {{canonical, name}}: {exc}") from None
    missing = [t.name for t in family.tools if t.name not in names]
    if missing:
        raise SetterError(f"the interface block lacks the family tools {missing}")
    interface = tuple(ToolBinding(canonical=t.name, name=str(names[t.name]), role=t.role, turn_cost=t.turn_cost,
                                  reveals=t.reveals) for t in family.tools)
    return blocks["python"], interface


def rewritten(family: Family, passage: PassageRecord, output: SetterOutputRecord, tools: list[dict]) -> bool:
    """Tool names or argument schemas (properties, required) unlike the template's for this passage
    (its argument names are the world's: `SKIN["renamed"]`)."""
    template = render_module(family, passage)
    if [b.name for b in output.interface] != [b.name for b in template.interface]:
        return True
    renamed = (skin_of(template.module) or {}).get("renamed", {})
    by_name = {t.get("name"): t.get("input_schema", {}) for t in tools}
    for spec, binding in zip(family.tools, output.interface):
        got = by_name.get(binding.name)
        if got is None:
            continue  # not reported (the module did not run): names decide
        if sorted(got.get("properties", {})) != sorted(renamed.get(k, k) for k in spec.input_schema.get("properties", {})) or \
                sorted(got.get("required", [])) != sorted(renamed.get(k, k) for k in spec.input_schema.get("required", [])):
            return True
    return False


@dataclass
class Outcome:
    output: SetterOutputRecord | None
    attempts: int = 0
    first_try: bool = False
    passed: bool = False
    tools: list = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    reasons: list[str] = field(default_factory=list)


class AnthropicSetter:
    def __init__(self, settings: LLMSettings):
        if not settings.api_key:
            raise SetterError("no ANTHROPIC_API_KEY: the LLM setter cannot run")
        self.settings = settings
        self.client = anthropic.Anthropic(api_key=settings.api_key, base_url=settings.base_url,
                                          timeout=settings.timeout_seconds, max_retries=settings.max_retries)

    def _ask(self, messages: list[dict]) -> tuple[str, str, int, int, float]:
        try:
            reply = self.client.messages.create(model=self.settings.model, max_tokens=self.settings.max_tokens,
                                                system=SYSTEM, messages=messages)
        except (anthropic.APIConnectionError, anthropic.APITimeoutError, anthropic.RateLimitError,
                anthropic.InternalServerError, anthropic.APIStatusError) as exc:
            raise SetterUnavailable(f"the Messages API failed after {self.settings.max_retries} retries: "
                                    f"{type(exc).__name__}: {exc}") from None
        text = "".join(block.text for block in reply.content if getattr(block, "type", "") == "text")
        i, o = reply.usage.input_tokens, reply.usage.output_tokens
        return text, reply.stop_reason or "", i, o, self.settings.cost(self.settings.model, i, o)

    def write(self, family: Family, passage: PassageRecord, probe, prompt: str) -> Outcome:
        """Up to max_attempts replies; `probe(output)` runs the gates and returns (passed, reason, tools)."""
        messages = [{"role": "user", "content": prompt}]
        result = Outcome(None)
        for attempt in range(1, self.settings.max_attempts + 1):
            text, stop, i, o, cost = self._ask(messages)
            result.attempts, result.input_tokens, result.output_tokens = attempt, result.input_tokens + i, \
                result.output_tokens + o
            result.cost = round(result.cost + cost, 6)
            if stop == "max_tokens":
                reason = "reply truncated (stop_reason max_tokens): no complete module"
            else:
                try:
                    module, interface = parse_reply(family, text)
                except SetterError as exc:
                    reason = str(exc)
                else:
                    output = SetterOutputRecord.build(
                        family=family.name, family_version=family.version, setter=SETTER,
                        setter_version=f"{SETTER_VERSION}:{self.settings.model}", passage_id=passage.passage_id,
                        module=module, interface=interface)
                    passed, reason, tools = probe(output)
                    result.output, result.tools = output, tools
                    if passed:
                        result.passed, result.first_try = True, attempt == 1
                        return result
            result.reasons.append(reason)
            messages += [{"role": "assistant", "content": text or "(empty)"},
                         {"role": "user", "content": f"The module was rejected: {reason}\nFix it and reply with the "
                                                     "whole module and interface again."}]
        return result
