"""Cross-checks of the parallel-machine makespan family against plain-Python brute force, its
rendered module and the real admission gates.

The brute force is written from the module docstring's Model section, not from the solver: every
job goes on one of m identical machines, a machine's load is the sum of its jobs' processing
times, the makespan is the largest load; u* is minus the least makespan over all m^n
assignments. A plan gives each job a machine or −1 (unassigned); on dispatch the unassigned jobs
go on machine 0. The job list (a sticker) shows each time as the middle of its block of five.
"""

from __future__ import annotations

import itertools
import sqlite3

import numpy as np
import pytest
from pydantic import ValidationError

from family_kit import PASSAGES, config, env_of, failed, fit, gated, generated, mutant_verdicts, named, play, refused
import family_kit
from vhd.mechanisms import registry
from vhd.mechanisms._runtime import show_id
from vhd.schemas.errors import InvalidParams
from theta_cases import bumped, smallest_theta

FAM = registry.get("scheduling")
ROOMY = 40  # a budget for the tests that look at everything (the family's affords π*, the list, n // 2 jobs)


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in plain Python.


def makespan(theta, plan):
    """Largest machine load of a plan (machine per job, −1 → machine 0)."""
    loads = {k: 0 for k in range(theta["n_machines"])}
    for j, k in enumerate(plan):
        assert -1 <= k < theta["n_machines"]
        loads[0 if k == -1 else k] += theta["processing"][j]
    return max(loads.values())


def brute_force(theta):
    """(u*, every optimal assignment) over all m^n assignments."""
    spans = {a: makespan(theta, a) for a in itertools.product(range(theta["n_machines"]), repeat=theta["n_jobs"])}
    best = min(spans.values())
    return -best, {a for a, s in spans.items() if s == best}


def listed(p):
    """The job list's estimate, from the docstring: 1–5 shows 3, 6–10 shows 8, 11–15 13, 16–20 18."""
    return {0: 3, 1: 8, 2: 13, 3: 18}[(p - 1) // 5]


def list_scheduling(theta):
    """The default's docstring: jobs in index order, each to the machine least loaded by the job
    list's estimates (lowest on ties)."""
    loads = [0] * theta["n_machines"]
    plan = []
    for p in theta["processing"]:
        k = loads.index(min(loads))
        plan.append(k)
        loads[k] += listed(p)
    return plan


def make(processing, machines):
    return {"n_jobs": len(processing), "n_machines": machines, "processing": list(processing)}


def _id(theta):
    return "m%d-p%s" % (theta["n_machines"], theta["processing"])


# ---------------------------------------------------------------------------------------------
# Instances.

TINY = [
    make([1, 1, 1, 1], 2),                 # perfectly balanced: 2
    make([3, 3, 2, 2, 2], 2),              # classic: list/LPT give 7, optimum 6
    make([20, 1, 1, 1], 3),                # one long job dominates: 20
    make([5, 5, 4, 4, 3, 3, 3], 3),        # LPT gives 11, optimum 9; every time reads 3 on the list: 12
    make([2, 2, 3, 3, 10], 2),             # list scheduling puts 10 on a loaded machine: 14 vs 10
    make([7, 7, 7], 3),                    # one job per machine
    make([1, 2, 3, 4, 5, 6, 7], 2),        # P = 28, optimum 14
]


def random_tiny(count, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n, m = int(rng.integers(2, 8)), int(rng.integers(2, 4))
        out.append(make([int(x) for x in rng.integers(1, 21, size=n)], m))
    return out


def sampled_instances():
    rng = np.random.default_rng(2024)
    return [FAM.sample(FAM.Params(size=n, horizon=m), rng) for n in (4, 5, 6, 7) for m in (2, 3)]


ALL = TINY + random_tiny(30, 7) + sampled_instances()


# ---------------------------------------------------------------------------------------------
# The solver against brute force.


@pytest.mark.parametrize("theta", ALL, ids=[_id(t) for t in ALL])
def test_solver_matches_brute_force(theta):
    u_bf, optimal = brute_force(theta)
    sol = FAM.solve(theta)
    assert sol.u_star == u_bf
    plan = tuple(sol.policy.tolist())
    assert plan in optimal and sol.policy.dtype.kind == "i" and len(plan) == theta["n_jobs"]
    assert FAM.evaluate(theta, sol.policy) == -makespan(theta, plan) == sol.u_star
    assert sol.certificate.status == "optimal" and sol.certificate.state_space == theta["n_machines"] ** theta["n_jobs"]
    assert sol.u_default == -makespan(theta, list_scheduling(theta)) <= sol.u_star
    assert sol.u_idle == -sum(theta["processing"]) <= sol.u_star
    rng = np.random.default_rng(len(plan))
    for _ in range(10):
        random_plan = FAM.random_policy(theta, rng)
        assert FAM.evaluate(theta, random_plan) == -makespan(theta, random_plan.tolist()) <= sol.u_star


def test_hand_instances_have_the_known_optimum_and_default():
    expected = [(-2, -2), (-6, -7), (-20, -20), (-9, -12), (-10, -15), (-7, -7), (-14, -16)]
    for theta, (u_star, u_default) in zip(TINY, expected):
        sol = FAM.solve(theta)
        assert (sol.u_star, sol.u_default) == (u_star, u_default), theta


def test_solver_is_deterministic_and_moves_with_each_processing_time():
    theta = make([9, 4, 7, 3, 8, 6, 2, 5], 3)
    a, b = FAM.solve(theta), FAM.solve(dict(theta))
    assert a.u_star == b.u_star and a.policy.tobytes() == b.policy.tobytes()
    assert a.u_star == -15
    for j in range(theta["n_jobs"]):
        bigger = dict(theta, processing=[p + 20 if i == j else p for i, p in enumerate(theta["processing"])])
        assert FAM.solve(bigger).u_star < a.u_star
    assert FAM.solve(dict(theta, n_machines=2)).u_star == -22 and FAM.solve(dict(theta, n_machines=4)).u_star == -11


def test_solver_is_exact_on_the_largest_instances():
    rng = np.random.default_rng(3)
    for _ in range(15):
        theta = FAM.sample(FAM.Params(size=10, horizon=int(rng.integers(2, 5))), rng)
        sol = FAM.solve(theta)
        lower = max(max(theta["processing"]), -(-sum(theta["processing"]) // theta["n_machines"]))
        assert -sol.u_star >= lower and FAM.evaluate(theta, sol.policy) == sol.u_star
    theta = FAM.sample(FAM.Params(size=9, horizon=2), np.random.default_rng(8))
    assert FAM.solve(theta).u_star == brute_force(theta)[0]


def test_default_and_idle_follow_their_docstrings():
    for theta in ALL:
        assert FAM.default_policy(theta).tolist() == list_scheduling(theta)
        assert FAM.idle_policy(theta).tolist() == [-1] * theta["n_jobs"]
    # list scheduling in index order, not LPT: LPT would put the 10 first and reach 10
    assert FAM.default_policy(TINY[4]).tolist() == [0, 1, 0, 1, 0]
    # it reads the list: 5, 5, 4, 4 all read 3, so the two 4s join the 5s (exact times would put them
    # on machine 2) and the last three 3s go round again: loads 5+4+3, 5+3, 4+3
    assert FAM.default_policy(TINY[3]).tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_random_policies_are_valid_and_vary():
    theta = make([3, 1, 4, 1, 5, 9, 2, 6], 3)
    rng = np.random.default_rng(0)
    plans = [FAM.random_policy(theta, rng).tolist() for _ in range(50)]
    assert len({tuple(p) for p in plans}) > 40
    assert all(len(p) == 8 and all(0 <= k < 3 for k in p) for p in plans)
    assert {k for p in plans for k in p} == {0, 1, 2}


@pytest.mark.parametrize("bad", [np.array([0, 1, 2]), np.array([0, 1, 2, 3]), np.array([0, 1, -2, 0, 0]),
                                 np.array([0.0, 1.0, 0.0, 1.0, 0.0]), np.zeros((5, 1), dtype=int)])
def test_evaluate_refuses_malformed_plans(bad):
    with pytest.raises(ValueError):
        FAM.evaluate(make([3, 3, 2, 2, 2], 2), bad)


@pytest.mark.parametrize("theta", TINY + sampled_instances()[:4], ids=[_id(t) for t in TINY + sampled_instances()[:4]])
def test_simulate_assigns_the_plan_then_dispatches(theta):
    sol = FAM.solve(theta)
    rng = np.random.default_rng(11)
    partial = np.array([-1] * (theta["n_jobs"] - 1) + [theta["n_machines"] - 1], dtype=np.int8)
    for plan in (sol.policy, FAM.default_policy(theta), FAM.idle_policy(theta), FAM.random_policy(theta, rng), partial):
        as_list = plan.tolist()
        for seed in (0, 1, 2**31 - 1):
            ep = FAM.simulate(theta, plan, seed)
            assert ep.utility == FAM.evaluate(theta, plan) == -makespan(theta, as_list)
            assert ep.decisions == as_list
            assert ep.calls == [{"tool": "assign_job", "arguments": {"job": j, "machine": k}}
                                for j, k in enumerate(as_list) if k >= 0] + [{"tool": "dispatch", "arguments": {}}]
            assert len(ep.calls) <= FAM.turn_budget(theta)


# ---------------------------------------------------------------------------------------------
# sample and Params.


def test_sample_is_deterministic_per_seed():
    params = FAM.Params(size=8, horizon=3)
    a = FAM.sample(params, np.random.default_rng(5))
    assert a == FAM.sample(params, np.random.default_rng(5))
    others = [FAM.sample(params, np.random.default_rng(s)) for s in (6, 7, 8)]
    assert all(o != a for o in others) and len({repr(o) for o in others}) == 3


@pytest.mark.parametrize("size,horizon", [(4, 2), (6, 3), (10, 4), (10, 2)])
def test_sample_respects_params(size, horizon):
    rng = np.random.default_rng(size * 100 + horizon)
    seen = set()
    for _ in range(40):
        theta = FAM.sample(FAM.Params(size=size, horizon=horizon), rng)
        assert set(theta) == {"n_jobs", "n_machines", "processing"}
        assert theta["n_jobs"] == size and theta["n_machines"] == horizon and len(theta["processing"]) == size
        assert all(type(p) is int and 1 <= p <= 20 for p in theta["processing"])
        assert type(theta["n_jobs"]) is int and type(theta["n_machines"]) is int
        seen.update(theta["processing"])
    assert 1 in seen and 20 in seen


@pytest.mark.parametrize("knobs", [dict(size=3), dict(size=11), dict(horizon=1), dict(horizon=5), dict(size="many")])
def test_params_out_of_bounds_raise(knobs):
    with pytest.raises(ValidationError):
        FAM.Params(**knobs)
    with pytest.raises(InvalidParams):
        FAM.params(knobs)


def test_params_edges_and_family_declarations():
    for knobs in (dict(size=4, horizon=2), dict(size=10, horizon=4)):
        params = FAM.params(knobs)
        assert (params.size, params.horizon) == (knobs["size"], knobs["horizon"])
    for knob, (lo, hi) in FAM.knob_ranges.items():
        field = FAM.Params.model_fields[knob]
        assert field.metadata[0].ge <= lo <= hi <= field.metadata[1].le
    assert FAM.stochastic is False and FAM.group == "probe_budgeted" and FAM.hidden == ("processing",)
    assert {r for t in FAM.tools for r in t.reveals} == {"processing"}
    roles = [t.role for t in FAM.tools]
    assert len(FAM.tools) >= 10 and {"probe", "decision", "clock", "observe"} <= set(roles)
    low = FAM.sample(FAM.Params(**{k: lo for k, (lo, _) in FAM.knob_ranges.items()}), np.random.default_rng(0))
    assert FAM.solve(low).u_star >= FAM.solve(low).u_default >= FAM.solve(low).u_idle


# ---------------------------------------------------------------------------------------------
# The rendered module, in process (tests/test_contract.py replays the reference plans in every
# family's modules; here: the exact makespan and one turn a call, probes, observations, refusals).


MODULE_THETAS = [FAM.sample(FAM.Params(size=n, horizon=m), np.random.default_rng(s))
                 for s, n, m in ((1, 6, 2), (2, 9, 3), (3, 10, 4), (4, 4, 2))]


@pytest.mark.parametrize("k", range(len(MODULE_THETAS)))
def test_a_replayed_plan_scores_its_makespan_one_turn_a_call(k):
    theta = MODULE_THETAS[k]
    sol = FAM.solve(theta)
    rng = np.random.default_rng(k)
    for plan in (sol.policy, FAM.default_policy(theta), FAM.idle_policy(theta), FAM.random_policy(theta, rng)):
        for presentation in ("I", "A"):
            env = env_of(FAM, k, theta, presentation)
            calls = FAM.simulate(theta, plan, k).calls
            for call in calls:
                assert not env.done
                result = play(FAM, k, env, [call])[0]
                assert result["ok"], result
            outcome = env.outcome()
            assert outcome["terminal"] and env.done
            assert outcome["utility"] == FAM.evaluate(theta, plan) == -makespan(theta, plan.tolist())
            assert outcome["turns_used"] == len(calls)


def test_probes_and_observations_report_theta():
    theta = MODULE_THETAS[1]
    out, _ = generated(FAM, 0)
    env = env_of(FAM, 0, theta, "A", budget=ROOMY)
    call = lambda tool, **args: env.call(out.tool_name(tool), args)
    fresh = {t.name: call(t.name) for t in FAM.tools if t.role == "observe"}
    assert [m["load"] for m in fresh["view_machine_loads"]["machines"]] == [0, 0, 0]
    assert fresh["view_makespan"]["makespan"] == 0 and fresh["view_assignments"]["assignments"] == []
    assert fresh["view_inspected"]["jobs"] == [] and fresh["view_log"]["log"] == []
    assert [j["job"] for j in fresh["list_unassigned"]["unassigned"]] == list(range(9))
    assert call("inspect_job", job=3)["processing_time"] == theta["processing"][3]
    assert [j["job"] for j in call("view_inspected")["jobs"]] == [3]
    assert [j["inspected"] for j in call("list_unassigned")["unassigned"]] == [j == 3 for j in range(9)]
    before = call("view_log")["turns_left"]
    sheet = call("get_job_list")
    assert before - sheet["turns_left"] == 3 and sheet["exact"] is False
    assert [j["estimated_processing_time"] for j in sheet["jobs"]] == [listed(p) for p in theta["processing"]]
    assert [j["job"] for j in call("view_inspected")["jobs"]] == [3]  # the list inspects nothing
    plan = FAM.solve(theta).policy.tolist()
    for j in range(5):
        assert call("assign_job", job=j, machine=plan[j])["ok"]
    loads = [sum(theta["processing"][j] for j in range(5) if plan[j] == k) for k in range(3)]
    # no side channel (issue 26): a load sums its jobs' times, so it shows only once they are inspected
    shown = [m["load"] for m in call("view_machine_loads")["machines"]]
    assert shown == [load if all(plan[j] != k for j in range(5) if j != 3) else None for k, load in enumerate(loads)]
    assert call("view_makespan")["makespan"] is None
    assert [a["processing_time"] for a in call("view_assignments")["assignments"]] == [
        theta["processing"][j] if j == 3 else None for j in range(5)]
    for j in range(5):
        assert call("inspect_job", job=j)["ok"]
    assert [m["load"] for m in call("view_machine_loads")["machines"]] == loads
    assert call("view_makespan")["makespan"] == max(loads)
    assert [(a["job"], a["machine"]) for a in call("view_assignments")["assignments"]] == list(enumerate(plan[:5]))
    assert [j["job"] for j in call("list_unassigned")["unassigned"]] == [5, 6, 7, 8]
    assert call("unassign_job", job=2)["was_on_machine"] == plan[2]
    assert call("view_log", limit=2)["log"][0]["action"] == "unassign"
    assert call("clear_assignments")["cleared"] == 4 and call("view_assignments")["assignments"] == []
    assert call("assign_job", job=8, machine=2)["machine_load"] is None  # job 8 is not inspected
    assert call("inspect_job", job=8)["ok"] and call("view_machine_loads")["machines"][2]["load"] == theta["processing"][8]
    done = call("dispatch")
    assert done["moved_jobs"] == list(range(8)) and done["moved_to_machine"] == 0 and env.done
    assert done["loads"] == [{"machine": 0, "load": sum(theta["processing"][:8])}, {"machine": 1, "load": 0},
                             {"machine": 2, "load": theta["processing"][8]}][:theta["n_machines"]]
    assert env.outcome()["utility"] == -max(sum(theta["processing"][:8]), theta["processing"][8])


def test_invalid_calls_are_reported_and_leave_state_unchanged():
    theta = make([3, 3, 2, 2, 2], 2)
    out, _ = generated(FAM, 1)
    env = env_of(FAM, 1, theta, "I", budget=20)  # turns for every refusal below and the play after them
    tool_names = [t.name for t in FAM.tools]
    call = lambda tool, args: env.call(out.tool_name(tool) if tool in tool_names else tool, args)
    assert call("unassign_job", {"job": 0})["ok"] is False and call("clear_assignments", {})["ok"] is False
    assert call("assign_job", {"job": 2, "machine": 1})["ok"]
    bad = [
        ("assign_job", {"job": 2, "machine": 0}),     # already assigned
        ("assign_job", {"job": 5, "machine": 0}),     # no job 5 (n = 5): the fitted schema refuses
        ("assign_job", {"job": 0, "machine": 2}),     # no machine 2 (m = 2): the fitted schema refuses
        ("assign_job", {"job": 0, "machine": 4}),     # beyond the schema maximum
        ("assign_job", {"job": 10, "machine": 0}),
        ("assign_job", {"job": -1, "machine": 0}),
        ("assign_job", {"job": "1", "machine": 0}),
        ("assign_job", {"job": 1.5, "machine": 0}),
        ("assign_job", {"job": 1}),
        ("assign_job", {"job": 1, "machine": 0, "extra": 1}),
        ("unassign_job", {"job": 3}),                 # not assigned
        ("inspect_job", {"job": 7}),
        ("view_log", {"limit": 0}),
        ("dispatch", {"now": True}),
        ("no_such_tool", {}),
    ]
    for tool, args in bad:  # the world's refusals use a turn each, the malformed calls none
        refused(env, named(FAM, out, tool), args)
    assert "already assigned to machine 1" in call("assign_job", {"job": 2, "machine": 0})["error"]
    assert "must be <= 1" in call("assign_job", {"job": 0, "machine": 3})["error"]
    assert call("assign_job", {"job": 0, "machine": 1})["ok"] and call("dispatch", {})["ok"] and env.done
    before = env.state_digest()
    assert call("assign_job", {"job": 1, "machine": 1})["ok"] is False and env.state_digest() == before
    assert env.outcome().items() >= {"utility": -float(3 + 2 + 2), "terminal": True, "turns_used": 8}.items()


def test_a_world_refuses_after_dispatch_even_when_called_directly():
    theta = make([1, 2, 3, 4], 2)
    _, module = generated(FAM, 0)
    world = module.World(sqlite3.connect(":memory:", isolation_level=None), theta, 0, module.SKIN)
    world.tool_dispatch()
    assert world.over() and world.utility() == -10
    with pytest.raises(module.AgentError):
        world.tool_assign_job(job=0, machine=1)
    with pytest.raises(ValueError):
        module.World(sqlite3.connect(":memory:"), {"n_jobs": 3, "n_machines": 2}, 0, module.SKIN)


def test_running_out_of_turns_dispatches_the_plan_as_it_stands():
    theta = MODULE_THETAS[1]
    out, _ = generated(FAM, 2)
    env = env_of(FAM, 2, theta, "I", budget=3)
    assert env.call(out.tool_name("assign_job"), {"job": 0, "machine": 1})["ok"]
    assert env.call(out.tool_name("view_machine_loads"), {})["ok"]
    assert env.call(out.tool_name("assign_job"), {"job": 1, "machine": 2})["ok"]
    assert env.done
    plan = [1, 2] + [-1] * 7
    assert env.outcome().items() >= {"utility": float(-makespan(theta, plan)), "terminal": True, "turns_used": 3}.items()
    assert env.call(out.tool_name("assign_job"), {"job": 2, "machine": 0})["ok"] is False
    # a three-turn job list does not fit in two remaining turns and is refused without a charge
    env = env_of(FAM, 2, theta, "A", budget=4)
    assert env.call(out.tool_name("inspect_job"), {"job": 0})["ok"]
    assert env.call(out.tool_name("inspect_job"), {"job": 1})["ok"]
    assert env.call(out.tool_name("get_job_list"), {})["ok"] is False and not env.done


def test_presentation_a_hides_the_numbers_that_i_states():
    theta = MODULE_THETAS[2]
    other = dict(theta, processing=[p + 100 for p in theta["processing"]])
    for k in range(len(PASSAGES)):
        out, _ = generated(FAM, k)
        i_text, a_text = env_of(FAM, k, theta, "I").instruction, env_of(FAM, k, theta, "A").instruction
        assert env_of(FAM, k, other, "A").instruction == a_text  # A reads the same whatever the hidden fields are
        assert env_of(FAM, k, other, "I").instruction != i_text
        for j in range(theta["n_jobs"]):
            line = "job %d: processing %d" % (j, theta["processing"][j])
            assert line in i_text and line not in a_text
        assert "job 0:" not in a_text and "4 identical machines" in a_text
        assert out.tool_name("inspect_job") in a_text and out.tool_name("get_job_list") in a_text
        # the no-argument observations of a fresh episode do not move with the hidden numbers either
        for spec in FAM.tools:
            if spec.role == "observe":
                a = env_of(FAM, k, theta, "A").call(out.tool_name(spec.name), {})
                b = env_of(FAM, k, other, "A").call(out.tool_name(spec.name), {})
                assert a == b, spec.name


# ---------------------------------------------------------------------------------------------
# Through the real gates.


# Seed 5, not the contract's seed 0: on seed 0 three of the six sampled models fall outside the
# default band, on seed 5 none does (≈80 % of seeds), so this run can show five of six admitted and
# its first and last modules, each serving only admitted models, judge the mutants below.
SEED = 5


def test_the_gates_admit_five_of_six_and_hide_nothing_in_a():
    verdicts = gated(FAM, seed=SEED).verdicts
    for presentation in ("I", "A"):
        mine = [v for v in verdicts if v.candidate.presentation == presentation]
        assert sum(fit(v) for v in mine) >= 5, [v.reason for v in mine]
    for v in verdicts:  # a rejection may only come from the model's own default band
        assert v.admitted or failed([v]) == {"default_band"}, v.reason
    hiding = [g for v in verdicts if v.candidate.presentation == "A" for g in v.gates if g.name == "information_hiding"]
    assert hiding and all(g.passed and "leak check not run" not in g.message for g in hiding)


def _mutant(old, new, which=0):
    """The gates' verdicts on output `which` of the seed-5 run with `old` replaced by `new`; that
    output's own candidates all pass every gate on the module (`fit`)."""
    run = gated(FAM, seed=SEED)
    output_id = run.outputs[which].setter_output_id
    mine = [v for v in run.verdicts if v.candidate.setter_output.setter_output_id == output_id]
    assert mine and all(fit(v) for v in mine)
    return mutant_verdicts(FAM, run, old, new, which)


def test_a_scaled_utility_in_the_world_is_rejected():
    verdicts = _mutant("return -self._makespan()", "return -2 * self._makespan()")
    assert verdicts and not any(v.admitted for v in verdicts)
    assert {"replay_agreement", "dynamics_agreement"} <= failed(verdicts)


def test_a_world_that_forgets_the_unassigned_jobs_is_rejected():
    # dispatch drops the unassigned jobs instead of putting them on machine 0: π*, the default
    # and the random plans (every job assigned) still agree, but the idle plan (dispatch at once)
    # then reports makespan 0, above u*
    verdicts = _mutant("for job in self._unassigned():", "for job in self._unassigned()[:0]:", which=-1)
    assert verdicts and not any(v.admitted for v in verdicts)
    assert {"dynamics_agreement", "no_policy_beats_optimum"} <= failed(verdicts)


# ---------------------------------------------------------------------------------------------
# θ that solve() refuses (issue 14: solvers refuse what they cannot solve exactly).


@pytest.mark.parametrize("key,change", [
    pytest.param("n_machines", lambda t: t["n_machines"] + 0.5, id="n_machines-fraction"),
    pytest.param("processing", lambda t: bumped(t["processing"], (0,), 0.5), id="processing-fraction"),
    pytest.param("n_jobs", lambda t: 11, id="n_jobs-size"),
])
def test_solve_refuses_theta_not_of_the_declared_form(key, change):
    """A fraction where an integer is declared, or a size past the documented limit, is InvalidParams
    naming the field, raised before anything is allocated."""
    theta = smallest_theta(FAM)
    with pytest.raises(InvalidParams, match=r"scheduling θ\['%s'\]" % key):
        FAM.solve(dict(theta, **{key: change(theta)}))


# ---------------------------------------------------------------------------------------------
# Decision rewards (exact advantages), from the Model: the decision process with no turn limit,
# searched breadth-first over the plans its accepted decisions reach.


def plan_moves(theta, plan):
    """The plans one accepted decision leads to: assign an unassigned job, unassign one, clear."""
    n, m = theta["n_jobs"], theta["n_machines"]
    out = [plan[:j] + (k,) + plan[j + 1:] for j in range(n) if plan[j] == -1 for k in range(m)]
    out += [plan[:j] + (-1,) + plan[j + 1:] for j in range(n) if plan[j] != -1]
    return out + ([(-1,) * n] if any(k != -1 for k in plan) else [])


_REACHABLE: dict = {}  # (θ, state) → V*


def best_reachable(theta, plan, memo=_REACHABLE):
    """V*(plan): the best −makespan of a dispatch reachable from the open plan."""
    key = (_id(theta), plan)
    if key not in memo:
        seen, frontier = {plan}, [plan]
        while frontier:
            frontier = [q for s in frontier for q in plan_moves(theta, s) if q not in seen and not seen.add(q)]
        memo[key] = max(-makespan(theta, s) for s in seen)
    return memo[key]


ADVANTAGE_THETA = make([3, 3, 2, 2, 2], 2)  # u* = −6: {3, 3} and {2, 2, 2}


def _random_calls(theta, rng, length):
    """Random calls (some refused, some probes) and the brute force's A* of each, with the final
    plan and whether it was dispatched."""
    n, m = theta["n_jobs"], theta["n_machines"]
    plan, calls, expected, dispatched = (-1,) * n, [], [], False
    for _ in range(length):
        j, k = int(rng.integers(0, n + 1)), int(rng.integers(0, m + 1))  # job n, machine m do not exist
        tool = str(rng.choice(["assign_job", "unassign_job", "clear_assignments", "inspect_job", "view_machine_loads",
                               "dispatch"], p=[.5, .2, .05, .1, .1, .05]))
        args = {"job": j, "machine": k} if tool == "assign_job" else {"job": j} if tool in (
            "unassign_job", "inspect_job") else {}
        calls.append({"tool": tool, "arguments": args})
        after = plan
        if dispatched or tool in ("inspect_job", "view_machine_loads"):
            expected.append(0)
            continue
        if tool == "dispatch":
            expected.append(-makespan(theta, plan) - best_reachable(theta, plan))
            dispatched = True
            continue
        if tool == "assign_job" and j < n and k < m and plan[j] == -1:
            after = plan[:j] + (k,) + plan[j + 1:]
        elif tool == "unassign_job" and j < n and plan[j] != -1:
            after = plan[:j] + (-1,) + plan[j + 1:]
        elif tool == "clear_assignments":
            after = (-1,) * n
        expected.append(best_reachable(theta, after) - best_reachable(theta, plan))  # 0 if refused
        plan = after
    return calls, expected, plan, dispatched


def _config(theta, budget=None):
    return config(FAM, theta, budget=budget)


def test_every_decision_has_the_brute_force_advantage_and_they_sum_to_u_less_u_star():
    from vhd.tasks.grading.step_advantages import step_advantages

    theta = ADVANTAGE_THETA
    u_star = brute_force(theta)[0]
    assert best_reachable(theta, (-1,) * 5) == u_star == -6
    # a specific non-optimal action: jobs 0 (3) and 2 (2) together on machine 0 can be undone, so Q* = V*;
    # dispatching then puts jobs 1, 3, 4 on machine 0 too: makespan 12
    bad = (0, -1, 0, -1, -1)
    assert best_reachable(theta, bad) == u_star and -makespan(theta, bad) - u_star == -6
    steps = step_advantages(FAM, _config(theta), [{"tool": "assign_job", "arguments": {"job": 0, "machine": 0}},
                                                  {"tool": "assign_job", "arguments": {"job": 2, "machine": 0}},
                                                  {"tool": "dispatch", "arguments": {}}])
    assert steps.per_call == [0.0, 0.0, -6.0] and steps.finish == 0.0 and steps.utility == -12.0
    rng = np.random.default_rng(19)
    for _ in range(12):
        calls, expected, plan, dispatched = _random_calls(theta, rng, 14)
        # turns to spare: every call the world answers uses one, refused or not (running out is the next test's)
        steps = step_advantages(FAM, _config(theta, budget=len(calls) + 1), calls)
        finish = 0 if dispatched else -makespan(theta, plan) - best_reachable(theta, plan)
        assert steps.per_call == [float(a) for a in expected] and steps.finish == finish
        assert steps.utility == -makespan(theta, plan) and steps.total == steps.utility - u_star


def test_running_out_of_turns_adds_the_dispatch_advantage_to_the_last_call():
    from vhd.tasks.grading.step_advantages import step_advantages

    theta = ADVANTAGE_THETA
    calls = [{"tool": "assign_job", "arguments": {"job": 0, "machine": 0}},
             {"tool": "view_machine_loads", "arguments": {}},
             {"tool": "assign_job", "arguments": {"job": 1, "machine": 1}},
             {"tool": "assign_job", "arguments": {"job": 2, "machine": 1}}]
    steps = step_advantages(FAM, _config(theta, budget=3), calls)  # jobs 2, 3, 4 join job 0: makespan 9
    assert steps.per_call == [0.0, 0.0, -9.0 + 6.0, 0.0] and steps.finish == 0.0 and steps.utility == -9.0


# ---------------------------------------------------------------------------------------------
# Issue 16: schemas fitted to the instance, and what one probe call shows in presentation A.


def test_job_and_machine_arguments_are_bounded_by_the_instance():
    """"item maximum 49 for 6 lots": the schemas the module shows and checks stop at n − 1 jobs and
    m − 1 machines, in both presentations (the instruction tells n and m), and the World behind
    them still refuses what a direct call gets wrong."""
    theta = MODULE_THETAS[0]  # 6 jobs, 2 machines
    n, m = theta["n_jobs"], theta["n_machines"]
    out, module = generated(FAM, 0)
    for presentation in ("I", "A"):
        env = env_of(FAM, 0, theta, presentation)
        schemas = {t["name"]: t["input_schema"]["properties"] for t in env.tools}
        for tool in ("inspect_job", "assign_job", "unassign_job"):
            job = schemas[out.tool_name(tool)]["job"]
            assert (job["minimum"], job["maximum"]) == (0, n - 1)
        assert schemas[out.tool_name("assign_job")]["machine"]["maximum"] == m - 1
        before = env.state_digest()
        refused = env.call(out.tool_name("assign_job"), {"job": n, "machine": 0})
        assert refused["ok"] is False and "argument 'job' must be <= %d, got %d" % (n - 1, n) in refused["error"]
        refused = env.call(out.tool_name("assign_job"), {"job": 0, "machine": m})
        assert refused["ok"] is False and "argument 'machine' must be <= %d, got %d" % (m - 1, m) in refused["error"]
        assert env.call(out.tool_name("inspect_job"), {"job": n})["ok"] is False and env.state_digest() == before
        assert env.call(out.tool_name("assign_job"), {"job": n - 1, "machine": m - 1})["ok"]
    world = module.World(sqlite3.connect(":memory:", isolation_level=None), theta, 0, module.SKIN)
    with pytest.raises(module.AgentError, match="there are 2 machines"):
        world.tool_assign_job(job=0, machine=2)


def test_in_a_one_probe_call_shows_one_job_or_the_list_estimates():
    """inspect_job shows one job's exact time; the job list (3 turns) shows every job's estimate, the
    middle of its block of five, off by at most 2, as the A instruction states; the default plays
    list scheduling on those estimates, so a list that misleads it costs it."""
    theta = make([5, 6, 11, 15, 16, 20, 1, 10], 2)
    out, _ = generated(FAM, 1)
    env = env_of(FAM, 1, theta, "A")
    call = lambda tool, **args: env.call(out.tool_name(tool), args)
    assert "off by at most 2" in env.instruction and "from 1 to 20" in env.instruction
    job = call("inspect_job", job=4)
    assert {k: v for k, v in job.items() if k not in ("ok", "turns_left")} == {"job": 4, "processing_time": 16}
    assert call("view_inspected")["jobs"] == [{"job": 4, "processing_time": 16}]
    sheet = call("get_job_list")
    estimates = [j["estimated_processing_time"] for j in sheet["jobs"]]
    assert estimates == [3, 8, 13, 13, 18, 18, 3, 8] and sheet["exact"] is False
    assert all(abs(e - p) <= 2 for e, p in zip(estimates, theta["processing"]))
    assert [j for j in sheet["jobs"] if "processing_time" in j] == []  # no exact time on the list
    assert FAM.belief(theta, [{"tool": "get_job_list", "arguments": {}}])["processing"] == estimates
    # what the list says is what the default plays: jobs 0 (5, reads 3) and 6 (1, reads 3) look alike
    assert FAM.default_policy(theta).tolist() == list_scheduling(dict(theta, processing=estimates))
    assert FAM.solve(theta).u_default == -makespan(theta, list_scheduling(theta))
    assert FAM.belief(theta, [])["processing"] == [10] * 8  # nothing read: the middle of the stated 1 … 20


# ---------------------------------------------------------------------------------------------
# A world that writes its jobs and machines as codes (issue 29 item 2).


def coded_world():
    """(output, module, styles, renamed): the first world that writes both jobs and machines as
    codes and names the machine argument by its own word (`family_kit.coded_world`)."""
    return family_kit.coded_world(FAM, "machine", "job")


def test_a_coded_world_takes_and_writes_job_and_machine_codes():
    """An unknown code (or a bare number) is malformed and uses no turn; the first codes are job 0
    and machine 0, and the answers, the refusals and the instruction write codes."""
    out, module, styles, renamed = coded_world()
    job_key, machine_key = renamed.get("job", "job"), renamed["machine"]
    job = lambda k: show_id(styles["job"], k)  # noqa: E731
    machine = lambda k: show_id(styles["machine"], k)  # noqa: E731
    theta = MODULE_THETAS[1]  # 9 jobs, 3 machines
    assert job(0).endswith("-01") and machine(0).endswith("-01")
    env = module.create({"params": theta, "presentation": "I", "episode_seed": 0, "turn_budget": ROOMY})
    assert "3 identical machines, numbered %s to %s" % (machine(0), machine(2)) in env.instruction
    assert "numbered %s to %s. Each job" % (job(0), job(8)) in env.instruction
    assert "is put on machine %s" % machine(0) in env.instruction
    assert "\n  job %s: processing %d" % (job(4), theta["processing"][4]) in env.instruction
    schema = {t["name"]: t["input_schema"]["properties"] for t in env.tools}[out.tool_name("assign_job")]
    assert schema[job_key]["enum"] == [job(j) for j in range(9)]
    assert schema[machine_key]["enum"] == [machine(k) for k in range(3)]
    for wrong in ({job_key: job(9), machine_key: machine(0)}, {job_key: job(0), machine_key: machine(3)},
                  {job_key: 0, machine_key: machine(0)}, {job_key: job(0), machine_key: 0},
                  {job_key: machine(0), machine_key: job(0)}):
        answer = env.call(out.tool_name("assign_job"), wrong)
        assert answer["ok"] is False and "turns_left" not in answer, (wrong, answer)
    assert env.outcome()["turns_used"] == 0
    inspected = env.call(out.tool_name("inspect_job"), {job_key: job(0)})
    assert inspected[job_key] == job(0) and inspected["processing_time"] == theta["processing"][0]
    assigned = env.call(out.tool_name("assign_job"), {job_key: job(0), machine_key: machine(2)})
    assert assigned["ok"] and (assigned["assigned"], assigned[machine_key]) == (job(0), machine(2)), assigned
    again = env.call(out.tool_name("assign_job"), {job_key: job(0), machine_key: machine(1)})
    assert "job %s is already assigned to machine %s" % (job(0), machine(2)) in again["error"]
    loads = env.call(out.tool_name("view_machine_loads"), {})["machines"]
    assert [(m[machine_key], m["jobs"], m["load"]) for m in loads] == [
        (machine(0), 0, 0), (machine(1), 0, 0), (machine(2), 1, theta["processing"][0])]
    assert env.call(out.tool_name("view_assignments"), {})["assignments"][0][machine_key] == machine(2)
    assert [j[job_key] for j in env.call(out.tool_name("list_unassigned"), {})["unassigned"]] == [
        job(j) for j in range(1, 9)]
    assert env.call(out.tool_name("view_log"), {})["log"][0][machine_key] == machine(2)
    done = env.call(out.tool_name("dispatch"), {})
    assert done["moved_jobs"] == [job(j) for j in range(1, 9)] and done[renamed["moved_to_machine"]] == machine(0)
    assert done["loads"] == [{machine_key: machine(0), "load": sum(theta["processing"][1:])},
                             {machine_key: machine(1), "load": 0},
                             {machine_key: machine(2), "load": theta["processing"][0]}]
