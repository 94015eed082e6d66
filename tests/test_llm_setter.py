"""The LLM setter through the real `anthropic` SDK against a loopback Messages API server."""

import json

import pytest

from conftest import run_vhd
from llm_server import LEAK, MessagesServer, reply_for
from vhd.mechanisms import registry
from vhd.schemas.errors import SetterUnavailable
from vhd.tasks.setters.passages import builtin_passages
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.setters.anthropic import AnthropicSetter
from vhd.tasks.setters.settings import LLMSettings
from vhd.tasks.setters.template import render_module
from vhd.tasks.stages.solve import solve_models
from vhd.tasks.stages.synthesize import passage_for, synthesize_with_llm

FAMILY = registry.get("knapsack")
PASSAGES = builtin_passages()


@pytest.fixture(scope="module")
def one():
    models = sample_models(FAMILY, 1, 0, "llm")
    solutions = {s.model_id: s for s in solve_models(FAMILY, models)}
    return models, solutions, render_module(FAMILY, passage_for(models[0], PASSAGES))


def run(script, one, **settings):
    models, solutions, _ = one
    server = MessagesServer(script)
    try:
        setter = AnthropicSetter(LLMSettings(api_key="test-key", base_url=server.url, **{"max_retries": 2, **settings}))
        return (*synthesize_with_llm(setter, FAMILY, models, solutions, PASSAGES, [], ("I", "A")), server.requests)
    finally:
        server.close()


def test_good_reply_is_admitted_on_first_try_with_cost_and_prompt_contents(one):
    good = one[2]
    outputs, assignment, [rec], requests = run([("text", reply_for(good), "end_turn")], one)
    assert rec.attempts == 1 and rec.first_try and rec.passed and not rec.rewritten
    assert outputs[0].module.strip() == good.module.strip() and outputs[0].setter == "anthropic"
    assert assignment == {one[0][0].model_id: outputs[0].setter_output_id}
    assert rec.input_tokens > 0 and rec.cost_usd == pytest.approx(
        (rec.input_tokens * 3 + rec.output_tokens * 15) / 1e6, abs=1e-6)
    prompt = requests[0]["messages"][0]["content"]
    passage = passage_for(one[0][0], PASSAGES)
    assert passage.text in prompt and "submit_selection" in prompt and '"role": "clock"' in prompt
    assert "```python" in prompt  # an exemplar module (the template's, with an empty warehouse)
    structure = prompt.split("θ structure")[1].split("## Tools")[0]
    assert all(key in structure for key in one[0][0].theta)  # keys and shapes only


def test_renamed_tools_are_admitted_and_counted_as_a_rewrite(one):
    good = one[2]
    rename = {good.interface[0].name: "examine_unit", good.interface[-1].name: "finalize_plan"}
    outputs, _, [rec], _ = run([("text", reply_for(good, rename), "end_turn")], one)
    assert rec.passed and rec.first_try and rec.rewritten
    assert outputs[0].tool_name(good.interface[0].canonical) == "examine_unit"


def test_broken_code_then_repair_sends_the_gate_message(one):
    good = one[2]
    broken = reply_for(good, module=good.module.replace("def create(config):", "def create(config:", 1))
    outputs, _, [rec], requests = run([("text", broken, "end_turn"), ("text", reply_for(good), "end_turn")], one)
    assert rec.attempts == 2 and rec.passed and not rec.first_try
    assert rec.reasons[0].split(": ")[1] == "executes"
    repair = requests[1]["messages"]
    assert [m["role"] for m in repair] == ["user", "assistant", "user"] and "executes" in repair[-1]["content"]


def test_leak_of_theta_in_A_is_rejected_by_information_hiding_until_attempts_run_out(one):
    good = one[2]
    leak = reply_for(good, module=good.module + LEAK)
    outputs, _, [rec], requests = run([("text", leak, "end_turn")], one, max_attempts=2)
    assert rec.attempts == 2 and not rec.passed and len(requests) == 2
    assert all(r.startswith("A: information_hiding") for r in rec.reasons)
    assert outputs and outputs[0].module.rstrip().endswith(LEAK.rstrip()[-40:])  # kept, to be stored rejected with its reason


def test_truncated_reply_is_a_rejection_not_a_retry(one):
    good = one[2]
    cut = reply_for(good)[:5000]
    outputs, _, [rec], requests = run([("text", cut, "max_tokens"), ("text", reply_for(good), "end_turn")], one)
    assert rec.attempts == 2 and rec.passed and "truncated" in rec.reasons[0] and len(requests) == 2


def test_429_then_success_is_retried_by_the_sdk(one):
    outputs, _, [rec], requests = run([("status", 429), ("text", reply_for(one[2]), "end_turn")], one)
    assert rec.attempts == 1 and rec.first_try and len(requests) == 2


def test_500s_until_exhaustion_raise_setter_unavailable(one):
    with pytest.raises(SetterUnavailable, match="InternalServerError"):
        run([("status", 500)], one, max_retries=1)


def test_refresh_with_the_llm_setter_end_to_end_and_yield(prefect_server, tmp_path, one):
    models = sample_models(FAMILY, 2, 0, "llm-e2e")
    replies = [("text", reply_for(render_module(FAMILY, passage_for(m, PASSAGES))), "end_turn") for m in models]
    db = tmp_path / "vhd.duckdb"
    server = MessagesServer(replies)
    try:
        env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": server.url, "VHD_LLM_MAX_RETRIES": "1"}
        import os
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            result = run_vhd(prefect_server, "refresh", "--setter", "anthropic", "--families", "knapsack",
                             "--per-family", "2", "--batch", "llm-e2e", "--db", db, "--json")
            assert result.returncode == 0, result.stderr[-3000:]
            summary = json.loads(result.stdout)
            assert summary["setter"].startswith("anthropic") and summary["admitted"] == 4 and not summary["failed"]
            server.script = [("status", 500)]  # the API goes down: the next batch stores nothing
            before = run_vhd(prefect_server, "yield", "--db", db, "--json")
            result = run_vhd(prefect_server, "refresh", "--setter", "anthropic", "--families", "knapsack",
                             "--per-family", "2", "--batch", "llm-down", "--db", db, "--json")
            down = json.loads(result.stdout)
            assert down["failed"]["knapsack"].startswith("the Messages API failed") and down["admitted"] == 0
        finally:
            for k, v in old.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    finally:
        server.close()
    after = run_vhd(prefect_server, "yield", "--db", db, "--json")
    assert after.returncode == 0 and after.stdout == before.stdout
    [row] = json.loads(after.stdout)
    assert row["setter"] == "anthropic" and row["first_try_rate"] == 1.0 and row["mean_attempts"] == 1.0
    assert row["admitted"] == 4 and row["cost_per_admitted_usd"] > 0 and row["runs"] == 1
    keyless = run_vhd(prefect_server, "refresh", "--setter", "anthropic", "--families", "knapsack", "--per-family",
                      "1", "--batch", "nokey", "--db", db, "--json")
    assert json.loads(keyless.stdout)["setter"].startswith("template (no ANTHROPIC_API_KEY")
