"""docs/TRAINING.md, "Training loops: GRPO-style and per-step (PPO-style)": both examples run as
written on an admitted stopping environment (I and A), made by the pipeline's own stages."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from family_kit import admitted_environments
from vhd.adapters import reward
from vhd.mechanisms import registry
from vhd.tasks.grading.score import Grading

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Training loops: GRPO-style and per-step (PPO-style)"


@pytest.fixture(scope="module")
def rows():
    return [row for _, row, *_ in admitted_environments(registry.get("stopping"))]


@pytest.fixture(scope="module")
def examples():
    """The section's python blocks, executed in one namespace."""
    text = (ROOT / "docs" / "TRAINING.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ", len(SECTION))]
    blocks = section.split("```python")[1:]
    assert len(blocks) == 2, "a GRPO-style and a per-step example"
    namespace: dict = {}
    for number, block in enumerate(blocks):
        exec(compile(block[:block.index("```")], f"TRAINING.md training loops, block {number + 1}", "exec"), namespace)
    return namespace


def _scripted(calls):
    """A policy that makes these calls in order, then stops (None)."""
    remaining = iter(calls)

    def policy(observation):
        call = next(remaining, None)
        return None if call is None else json.dumps(call)
    return policy


def test_grpo_example_scores_a_group_and_normalises_it(rows, examples):
    for row in rows:
        best = row["grader"]["reference_trajectory"]
        group = [best, [], best[:1], best[: len(best) // 2], best]
        rewards, advantages = examples["grpo_advantages"](row, group)
        assert rewards == [reward(row["grader"], t, row["module"]) for t in group]
        assert rewards[0] == rewards[-1] == 1.0 and rewards[1] == 0.0
        assert math.fsum(advantages) == pytest.approx(0.0, abs=1e-9)
        assert advantages[0] == max(advantages) > 0 > advantages[1]
        assert sum(a * a for a in advantages) / len(advantages) == pytest.approx(1.0, abs=1e-4)


def test_per_step_example_pays_every_decision_and_returns_the_reward(rows, examples):
    rollout = examples["rollout"]
    for row in rows:
        best = row["grader"]["reference_trajectory"]
        steps, returns, episode = rollout(row, _scripted(best), gamma=1.0)
        assert episode == 1.0 and returns[0] == pytest.approx(1.0, abs=1e-12)
        paid = [r for *_, r in steps]  # π*'s decisions: advantage 0, so the baseline 1 on the first step alone
        assert paid == [1.0] + [0.0] * (len(steps) - 1)
        # a cut of π* (stopped by the policy): the rest lands on the last step, the return is the
        # reward `vhd score` gives the same calls, and discounting only shrinks it
        cut = best[: max(1, len(best) // 2)]
        steps, returns, episode = rollout(row, _scripted(cut), gamma=1.0)
        assert [json.loads(a) for _, a, _ in steps] == cut
        assert returns[0] == pytest.approx(episode, abs=1e-12)
        assert episode == pytest.approx(reward(row["grader"], cut, row["module"]), abs=1e-12)
        assert all(r <= 1e-12 + (t == 0) for t, (*_, r) in enumerate(steps[:-1]))  # no decision beats π*'s
        _, discounted, _ = rollout(row, _scripted(cut), gamma=0.9)
        assert len(discounted) == len(steps) and discounted[-1] == pytest.approx(steps[-1][2], abs=1e-12)
        assert discounted[0] <= 1.0 + 1e-12  # discounted, the return is at most π*'s, 1


def test_per_step_example_on_fresh_seeds(rows, examples):
    """reset(seed=k): a fresh episode of the same θ; its return is that episode's decision reward."""
    row = rows[0]
    grading = Grading.of_grader(row["grader"], row["module"])
    for seed in (3, 17, 41):
        calls = [{"tool": c["tool"], "arguments": c["arguments"]} for c in row["grader"]["reference_trajectory"][:2]]
        steps, returns, episode = examples["rollout"](row, _scripted(calls), seed=seed, gamma=1.0)
        fresh = grading.for_seed(seed)
        played = [json.loads(a) for _, a, _ in steps]
        assert returns[0] == pytest.approx(episode, abs=1e-12)
        assert episode == pytest.approx(fresh.row(played, 0.0)["reward"], abs=1e-12)
        assert 0.0 <= episode <= 1.0
