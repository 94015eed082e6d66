"""Cross-checks of the assignment family against plain-Python brute force, its rendered module and
the real admission gates.

The brute force is written from the module docstring's Model section, not from the solver: an
assignment gives each worker at most one job and each job at most one worker, and is worth the sum
of its pairs' profits; u* is the best worth over every such assignment. The only layout assumption
is that of a plan: the job of every worker, −1 for none.
"""

from __future__ import annotations

import numpy as np
import pytest

from family_kit import env_of, failed, gated, generated, mutant_verdicts, named, refused
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.tasks.stages.sample import draw

FAM = registry.get("assignment")
ROOMY = 60  # a turn budget for the tests that look at everything


# ---------------------------------------------------------------------------------------------
# The model, from the docstring, in plain Python.


def make(profits):
    return {"n_workers": len(profits), "n_jobs": len(profits[0]), "profits": [list(row) for row in profits]}


def assignments(n, m):
    """Every assignment of n workers to m jobs, as a tuple of each worker's job (−1: none)."""
    def extend(i, taken):
        if i == n:
            yield ()
            return
        for j in [-1] + [j for j in range(m) if j not in taken]:
            for rest in extend(i + 1, taken | ({j} if j >= 0 else set())):
                yield (j,) + rest
    return list(extend(0, frozenset()))


def worth(theta, jobs):
    return sum(theta["profits"][i][j] for i, j in enumerate(jobs) if j >= 0)


def brute_force(theta):
    """(best worth, number of assignments) over every assignment."""
    every = assignments(theta["n_workers"], theta["n_jobs"])
    return max(worth(theta, jobs) for jobs in every), len(every)


def greedy(theta):
    """The default's docstring: workers in order, each taking their most profitable free job (ties: lowest)."""
    jobs, taken = [], set()
    for row in theta["profits"]:
        free = [j for j in range(theta["n_jobs"]) if j not in taken]
        best = None if not free else max(free, key=lambda j: (row[j], -j))
        jobs.append(-1 if best is None else best)
        taken.add(best)
    return jobs


def hand_instances():
    return [
        make([[7]]),                                   # one worker, one job
        make([[0, 0], [0, 0]]),                        # nothing to earn
        make([[9, 8], [8, 1]]),                        # greedy takes 9 and leaves 1: 17 beats 10
        make([[5, 1, 1], [1, 5, 1]]),                  # fewer workers than jobs
        make([[5, 1], [1, 5], [6, 6]]),                # more workers than jobs: someone stays idle
        make([[3, 3, 3], [3, 3, 3], [3, 3, 3]]),       # ties everywhere
        make([[10, 0, 0, 0], [9, 8, 0, 0], [0, 9, 8, 0], [0, 0, 9, 8]]),  # a chain on which greedy is optimal
    ]


def random_instances(seed, count):
    rng = np.random.default_rng(seed)
    return [make(rng.integers(0, 30, size=(int(rng.integers(1, 6)), int(rng.integers(1, 6)))).tolist())
            for _ in range(count)]


def sampled_instances():
    return [FAM.sample(FAM.Params(size=n, horizon=m), np.random.default_rng(10 * n + m))
            for n in (1, 3, 5) for m in (1, 2, 4, 5)]


TINY = hand_instances() + random_instances(2026, 30) + sampled_instances()
IDS = ["%d-%dx%d" % (k, t["n_workers"], t["n_jobs"]) for k, t in enumerate(TINY)]


# ---------------------------------------------------------------------------------------------
# The solver against brute force.


@pytest.mark.parametrize("theta", TINY, ids=IDS)
def test_u_star_is_the_best_over_every_assignment(theta):
    sol = FAM.solve(theta)
    best, count = brute_force(theta)
    jobs = [int(j) for j in sol.policy]
    assert sol.u_star == best == worth(theta, jobs)
    assert len({j for j in jobs if j >= 0}) == sum(j >= 0 for j in jobs)  # π* is an assignment
    assert sol.u_default == worth(theta, greedy(theta)) and sol.u_idle == 0
    assert sol.u_default <= sol.u_star and sol.certificate.status == "optimal"
    assert count >= 1 and sol.certificate.state_space >= 1


def test_greedy_in_worker_order_is_beaten_where_the_docstring_says():
    theta = make([[9, 8], [8, 1]])
    assert FAM.default_policy(theta).tolist() == greedy(theta) == [0, 1]
    assert FAM.solve(theta).policy.tolist() == [1, 0] and FAM.solve(theta).u_star == 16 > 10
    chain = make([[10, 9, 0], [9, 0, 0], [0, 0, 1]])  # worker 0 takes the job only worker 1 is good at
    assert FAM.default_policy(chain).tolist() == greedy(chain) == [0, 1, 2]
    assert FAM.solve(chain).u_star == brute_force(chain)[0] == 19 > FAM.evaluate(chain, FAM.default_policy(chain)) == 11


@pytest.mark.parametrize("seed", range(5))
def test_every_random_plan_is_valid_and_evaluated_as_its_pairs(seed):
    theta = draw(FAM, 900 + seed)[1]
    rng = np.random.default_rng(seed)
    u_star = FAM.solve(theta).u_star
    for _ in range(20):
        plan = FAM.random_policy(theta, rng)
        jobs = [int(j) for j in plan]
        assert len({j for j in jobs if j >= 0}) == sum(j >= 0 for j in jobs)
        assert FAM.evaluate(theta, plan) == worth(theta, jobs) <= u_star


@pytest.mark.parametrize("plan", [[0, 0], [2, -1], [-2, 0], [0], [0, 1, -1], [0.0, 1]])
def test_evaluate_refuses_what_is_not_an_assignment(plan):
    with pytest.raises(ValueError):
        FAM.evaluate(make([[1, 2], [3, 4]]), plan)


def test_u_star_moves_with_every_profit():
    theta = make([[4, 7, 1], [6, 2, 5], [3, 8, 9]])
    sol = FAM.solve(theta)
    used = {(i, int(j)) for i, j in enumerate(sol.policy) if j >= 0}
    for i in range(3):
        for j in range(3):
            richer = make([[p + 5 * ((a, b) == (i, j)) for b, p in enumerate(row)]
                           for a, row in enumerate(theta["profits"])])
            assert FAM.solve(richer).u_star == brute_force(richer)[0]
            if (i, j) in used:  # an optimal pair made richer raises u* by as much
                assert FAM.solve(richer).u_star == sol.u_star + 5


def test_sample_is_deterministic_and_of_the_drawn_sizes():
    a, b = draw(FAM, 4)[1], draw(FAM, 4)[1]
    assert a == b
    theta = FAM.sample(FAM.Params(size=7, horizon=3), np.random.default_rng(0))
    assert (theta["n_workers"], theta["n_jobs"]) == (7, 3) and len(theta["profits"]) == 7
    assert all(20 <= p <= 100 for row in theta["profits"] for p in row)


@pytest.mark.parametrize("theta", [
    {"n_workers": 2, "n_jobs": 2, "profits": [[1, 2], [3, 4.5]]},   # a fraction
    {"n_workers": 2, "n_jobs": 2, "profits": [[1, 2], [3, -1]]},    # a negative profit
    {"n_workers": 2, "n_jobs": 2, "profits": [[1, 2], [3]]},        # a short row
    {"n_workers": 13, "n_jobs": 1, "profits": [[1]] * 13},          # past MAX_WORKERS
    {"n_workers": 1, "n_jobs": 13, "profits": [[1] * 13]},          # past MAX_JOBS
    {"n_workers": 1, "n_jobs": 1, "profits": [[True]]},             # a bool
    {"n_workers": 1, "n_jobs": 1},                                  # no profits
    [[1]],                                                          # not a dict
])
def test_solve_refuses_theta_not_of_the_declared_form(theta):
    with pytest.raises(InvalidParams):
        FAM.solve(theta)


# ---------------------------------------------------------------------------------------------
# The module.


MODULE_THETAS = [draw(FAM, seed, {"size": n, "horizon": m})[1] for seed, n, m in ((1, 5, 4), (2, 8, 8), (3, 6, 7))]


@pytest.mark.parametrize("k", range(len(MODULE_THETAS)))
def test_the_module_plays_a_plan_in_one_turn_per_pair_and_one_to_submit(k):
    out, _ = generated(FAM, k)
    theta = MODULE_THETAS[k]
    rng = np.random.default_rng(k)
    for plan in (FAM.solve(theta).policy, FAM.default_policy(theta), FAM.idle_policy(theta),
                 FAM.random_policy(theta, rng)):
        pairs = [(i, int(j)) for i, j in enumerate(plan) if j >= 0]
        for presentation in ("I", "A"):
            env = env_of(FAM, k, theta, presentation)
            for i, j in pairs:
                assert env.call(out.tool_name("assign_worker"), {"worker": i, "job": j})["ok"]
            assert env.call(out.tool_name("submit_assignment"), {})["ok"] and env.done
            outcome = env.outcome()
            assert outcome["utility"] == worth(theta, [int(j) for j in plan]) == FAM.evaluate(theta, plan)
            assert outcome["turns_used"] == len(pairs) + 1


def test_the_probe_and_the_observations_report_theta_and_hide_the_unread_in_a():
    theta = make([[4, 7, 1], [6, 2, 5], [3, 8, 9]])
    out, _ = generated(FAM, 2)
    env = env_of(FAM, 2, theta, "A", budget=ROOMY)
    call = lambda tool, **args: env.call(out.tool_name(tool), args)
    assert "worker 0: 4, 7, 1" not in env.instruction  # A states no profit
    assert call("assign_worker", worker=0, job=1)["ok"] and call("assign_worker", worker=2, job=2)["ok"]
    shown = call("view_assignment")
    assert shown["profit"] == 0 and shown["not_counted"] == [0, 2]  # nobody inspected: nothing counted
    assert call("view_inspected")["workers"] == []
    assert call("inspect_worker", worker=2)["profit_by_job"] == [3, 8, 9]
    shown = call("view_assignment")
    assert shown["profit"] == 9 and shown["not_counted"] == [0]
    assert shown["pairs"] == [{"worker": 0, "job": 1}, {"worker": 2, "job": 2}]
    assert [w["job"] for w in call("list_workers")["workers"]] == [1, None, 2]
    assert [j["worker"] for j in call("list_jobs")["jobs"]] == [None, 0, 2]
    assert call("submit_assignment")["profit"] == 16 and env.outcome()["utility"] == 16.0
    # in I every profit is stated, so every pair counts from the start
    env = env_of(FAM, 2, theta, "I", budget=ROOMY)
    assert "worker 2: 3, 8, 9" in env.instruction
    env.call(out.tool_name("assign_worker"), {"worker": 1, "job": 0})
    assert env.call(out.tool_name("view_assignment"), {})["profit"] == 6


def test_invalid_calls_are_refused_and_leave_the_state_unchanged():
    theta = make([[4, 7, 1], [6, 2, 5]])
    out, _ = generated(FAM, 1)
    env = env_of(FAM, 1, theta, "I", budget=30)
    assert env.call(out.tool_name("assign_worker"), {"worker": 0, "job": 1})["ok"]
    bad = [
        ("assign_worker", {"worker": 0, "job": 2}),    # worker 0 already has a job
        ("assign_worker", {"worker": 1, "job": 1}),    # job 1 is taken
        ("unassign_worker", {"worker": 1}),            # worker 1 has no job
        ("assign_worker", {"worker": 2, "job": 0}),    # no worker 2 (n = 2): past the fitted schema
        ("assign_worker", {"worker": 1, "job": 3}),    # no job 3 (m = 3)
        ("assign_worker", {"worker": 1}),
        ("assign_worker", {"worker": "1", "job": 0}),
        ("inspect_worker", {"worker": -1}),
        ("view_log", {"limit": 0}),
        ("no_such_tool", {}),
    ]
    for tool, args in bad:  # the world's refusals use a turn each, the malformed calls none
        refused(env, named(FAM, out, tool), args)
    assert env.call(out.tool_name("unassign_worker"), {"worker": 0})["ok"]
    refused(env, out.tool_name("clear_assignment"), {})  # already empty
    assert env.call(out.tool_name("submit_assignment"), {})["ok"] and env.done
    refused(env, out.tool_name("assign_worker"), {"worker": 0, "job": 0})  # the episode is over
    assert env.outcome()["utility"] == 0.0


def test_running_out_of_turns_submits_the_assignment_as_it_stands():
    theta = make([[4, 7, 1], [6, 2, 5]])
    out, _ = generated(FAM, 0)
    env = env_of(FAM, 0, theta, "I", budget=2)
    assert env.call(out.tool_name("assign_worker"), {"worker": 0, "job": 1})["ok"]
    answer = env.call(out.tool_name("assign_worker"), {"worker": 1, "job": 2})
    assert answer["ok"] and "episode_over" in answer and env.done
    assert env.outcome()["utility"] == 12.0


def test_advantages_are_zero_until_the_submit_which_gets_u_less_u_star():
    theta = make([[9, 8], [8, 1]])
    values = FAM.decision_values(theta)
    assert values["u_star"] == 16
    out, _ = generated(FAM, 0)
    env = env_of(FAM, 0, theta, "I", budget=ROOMY)
    world = env._world
    before = FAM.decision_state(theta, world)
    for call in ({"tool": "assign_worker", "arguments": {"worker": 0, "job": 0}},
                 {"tool": "assign_worker", "arguments": {"worker": 1, "job": 1}}):
        assert env.call(out.tool_name(call["tool"]), call["arguments"])["ok"]
        after = FAM.decision_state(theta, world)
        assert FAM.advantage(theta, values, before, call, after) == 0.0
        before = after
    env.call(out.tool_name("submit_assignment"), {})
    assert FAM.advantage(theta, values, before, {"tool": "submit_assignment", "arguments": {}},
                         FAM.decision_state(theta, world)) == 10 - 16


# ---------------------------------------------------------------------------------------------
# Through the real gates.


def test_the_gates_admit_the_family_and_reject_a_world_that_pays_double():
    run = gated(FAM)
    for presentation in ("I", "A"):
        mine = [v for v in run.verdicts if v.candidate.presentation == presentation]
        assert sum(v.admitted for v in mine) >= 3, [v.reason for v in mine]
    verdicts = mutant_verdicts(FAM, run, "SELECT COALESCE(SUM(p.profit), 0)", "SELECT COALESCE(SUM(2 * p.profit), 0)")
    assert verdicts and not any(v.admitted for v in verdicts)
    assert "default_band" not in failed(verdicts)  # the candidates were played
    assert {"replay_agreement", "no_policy_beats_optimum", "dynamics_agreement"} <= failed(verdicts)
