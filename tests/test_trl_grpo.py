"""TRL's own `GRPOTrainer(environment_factory=...)` over vhd environments, one training step
(issue 27, items 2 and 7). Needs torch and TRL, which the CI extra leaves out (torch from PyPI is
a multi-GB download): run it in a venv of its own,

    python3 -m venv /tmp/venv-trl && /tmp/venv-trl/bin/pip install -e '.[test]' trl
    /tmp/venv-trl/bin/python -m pytest tests/test_trl_grpo.py

(docs/TRAINING.md, "TRL", records the versions it ran with). Nothing is downloaded: the model is
a randomly initialised 2-layer Qwen3 (hidden size 64) built here, its tokenizer a byte-level BPE
trained here on the environments' own texts, with TRL's Qwen3 chat template (so TRL's Qwen3 tool
call parser reads its completions). The model's `generate` is scripted — each rollout of a group
makes one fixed list of tool calls, as Qwen3 writes them — and everything else is TRL's: the
dataset, `reset`, the chat template and tool schemas, parsing the tool calls, calling the
environment's methods, `get_reward`, the group advantages, the loss and the optimiser step.

The trainer is built by the second python block of docs/TRAINING.md's TRL section, run as
written. Checked: the prompt holds the instruction once; every tool call reached the
environment with its arguments as sent (an explicit null included); each rollout's reward,
logged by TRL, is the reward of `vhd score` (`vhd.adapters.reward`, its sandboxed replay) of
the calls, counted once (one reward column per class, NaN for the other family's rollouts); and
the logged mean reward is their mean, not twice it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import ClassVar

import pytest

trl = pytest.importorskip("trl", reason="torch and TRL are kept out of the CI extra (torch from PyPI is a multi-GB "
                                        "CUDA build): pip install trl in a venv of its own and run this file there "
                                        "(see its docstring)")
import torch
from family_kit import admitted_environments
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
from transformers.utils import get_json_schema
from trl.chat_template_utils import qwen3_chat_template

from vhd.adapters import reward
from vhd.adapters.trl import environment_factory
from vhd.mechanisms import registry
from vhd.tasks.corpus.export import with_canonical_tool_names

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("knapsack", "stopping")  # one with an optional argument (view_log's limit), one without
GENERATIONS = 4
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _doc_block(number: int) -> str:
    text = (ROOT / "docs" / "TRAINING.md").read_text(encoding="utf-8")
    section = text[text.index("## TRL"):]
    section = section[:section.index("\n## ", len("## TRL"))]
    block = section.split("```python")[number]
    return block[:block.index("```")]


def _scripts(row):
    """The group's rollouts, each a list of calls: π*, none, refusals only (an argument past the
    tool's bound: malformed, no turn used), and 17 calls with an explicit null then π* (issue 27:
    the null dropped, they were accepted calls that used π*'s turns)."""
    best = [{"tool": c["tool"], "arguments": c["arguments"]} for c in row["grader"]["reference_trajectory"]]
    bounded = next(t for t in row["player"]["tools"] for a in t["input_schema"].get("properties", {}).values()
                   if "maximum" in a and a.get("type") == "integer")
    argument, schema = next((a, s) for a, s in bounded["input_schema"]["properties"].items() if "maximum" in s)
    refused = [{"tool": bounded["name"], "arguments": {argument: schema["maximum"] + 1000}}] * 3
    optional = [(t["name"], a) for t in row["player"]["tools"] for a in t["input_schema"].get("properties", {})
                if a not in t["input_schema"].get("required", [])]
    tool, nulled = (optional or [(bounded["name"], argument)])[0]
    null = [{"tool": tool, "arguments": {nulled: None}}] * 17
    return [best, [], refused, null + best]


def _completion(calls) -> str:
    """What Qwen3 writes to make these calls (or to answer without one)."""
    if not calls:
        return "I will not call a tool.<|im_end|>"
    return "\n".join(f'<tool_call>\n{json.dumps({"name": c["tool"], "arguments": c["arguments"]})}\n</tool_call>'
                     for c in calls) + "<|im_end|>"


def _tokenizer(texts):
    """A byte-level BPE trained on `texts`, with Qwen3's special and tool tokens and TRL's Qwen3 chat template."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIALS,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        chat_template=qwen3_chat_template)
    tokenizer.add_tokens(TOOL_TOKENS)  # not special, as in Qwen3's own tokenizer: decoding keeps them
    return tokenizer


class ScriptedQwen3(Qwen3ForCausalLM):
    """A Qwen3 whose `generate` writes the scripted completion of each prompt (the rest of the
    model — its forward pass, log-probabilities and training — is the real one)."""

    tokenizer = None
    script = None  # (first-turn prompt text, its rank among equal prompts in this call) -> completion text
    prompts: ClassVar[list] = []  # the first-turn prompts it was given, as text

    def generate(self, input_ids=None, attention_mask=None, **kwargs):
        rows, seen = [], {}
        for ids, mask in zip(input_ids, attention_mask):
            text = self.tokenizer.decode(ids[mask.bool()].tolist(), skip_special_tokens=False)
            if "<tool_response>" in text:  # after the tool results: the final answer
                completion = "Done.<|im_end|>"
            else:
                type(self).prompts.append(text)
                rank = seen[text] = seen.get(text, -1) + 1
                completion = type(self).script(text, rank)
            rows.append(self.tokenizer(completion, add_special_tokens=False)["input_ids"])
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        completions = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=input_ids.device)
        return torch.cat([input_ids, completions], dim=1)


@pytest.fixture(scope="module")
def rows():
    """A canonical export's I rows of two families (one class each: a dict factory)."""
    return [with_canonical_tool_names(row) for name in FAMILIES
            for _, row, *_ in admitted_environments(registry.get(name)) if row["presentation"] == "I"]


def test_grpo_trainer_one_step_rewards_are_vhd_score_once(rows, tmp_path):
    namespace: dict = {}
    exec(compile(_doc_block(1) + _doc_block(2), "TRAINING.md, TRL", "exec"), namespace)
    scripts = {row["player"]["instruction"]: _scripts(row) for row in rows}
    factory = environment_factory(rows)
    assert isinstance(factory, dict) and len(factory) == len(FAMILIES)

    texts = [row["player"]["instruction"] for row in rows]
    for Environment in factory.values():
        texts += [json.dumps(get_json_schema(getattr(Environment, t["name"]))) for t in Environment.tools]
    texts += [_completion(calls) for group in scripts.values() for calls in group]
    tokenizer = _tokenizer(texts)

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=32768,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
                         tie_word_embeddings=True)
    model = ScriptedQwen3(config)
    ScriptedQwen3.tokenizer, ScriptedQwen3.prompts = tokenizer, []

    def script(text, rank):
        found = [instruction for instruction in scripts if instruction in text]
        assert len(found) == 1, "the prompt holds one row's instruction"
        return _completion(scripts[found[0]][rank])
    ScriptedQwen3.script = staticmethod(script)

    trainer = namespace["grpo_trainer"](
        rows, model, tokenizer, output_dir=str(tmp_path), max_steps=1,
        per_device_train_batch_size=GENERATIONS * len(rows), num_generations=GENERATIONS,
        max_completion_length=4096, logging_steps=1, report_to="none", use_cpu=True, bf16=False,
        save_strategy="no", learning_rate=1e-3, seed=0)
    assert sorted(trainer.reward_func_names) == sorted(factory)  # the classes' get_reward, and nothing else
    trainer.train()

    # the prompt holds the instruction once: in the messages TRL built and in the text the model read
    assert len(trainer._logs["prompt"]) == GENERATIONS * len(rows)
    for messages in trainer._logs["prompt"]:
        said = "".join(m["content"] for m in messages)
        assert sum(said.count(instruction) for instruction in scripts) == 1, said[:300]
    assert len(ScriptedQwen3.prompts) == GENERATIONS * len(rows)
    for text in ScriptedQwen3.prompts:
        assert sum(text.count(instruction) for instruction in scripts) == 1

    # every rollout: its calls reached the environment as sent, and TRL's reward for it is vhd score's, once
    environments = trainer.environments
    logged = trainer._logs["rewards"]
    assert sorted(logged) == sorted(factory)
    by_row = {row["player"]["instruction"]: row for row in rows}
    played: dict[str, list] = {instruction: [] for instruction in scripts}
    expected = []
    for i, env in enumerate(environments):
        row = by_row[env._env.row["player"]["instruction"]]
        trajectory = env.trajectory
        played[row["player"]["instruction"]].append(trajectory)
        score = reward(row["grader"], trajectory, row["module"])
        expected.append(score)
        mine = [logged[name][i] for name in logged if not math.isnan(logged[name][i])]
        assert mine == [pytest.approx(score, abs=1e-6)], (i, mine, score)
        assert logged[type(env).__name__][i] == pytest.approx(score, abs=1e-6)
    for instruction, group in scripts.items():
        assert sorted(map(json.dumps, played[instruction])) == sorted(map(json.dumps, group))
        by_script = {json.dumps(calls): reward(by_row[instruction]["grader"], calls, by_row[instruction]["module"])
                     for calls in group}
        # π*, no call, refusals, nulls then π*
        assert [by_script[json.dumps(calls)] for calls in group] == [1.0, 0.0, 0.0, 1.0]

    mean = sum(expected) / len(expected)
    history = next(entry for entry in trainer.state.log_history if "reward" in entry)
    assert history["reward"] == pytest.approx(mean, abs=1e-6) and mean == pytest.approx(0.5)  # not 1.0: counted once
    for name in factory:
        mine = [s for s, env in zip(expected, environments) if type(env).__name__ == name]
        assert history[f"rewards/{name}/mean"] == pytest.approx(sum(mine) / len(mine), abs=1e-6)
    assert history["tools/call_frequency"] > 0
