"""Assignment: give workers jobs, at most one job each and one worker a job, for the most profit.

Model
    There are `n_workers` = n workers, numbered 0 … n − 1, and `n_jobs` = m jobs, numbered
    0 … m − 1. Worker i doing job j earns `profits[i][j]`, a whole number ≥ 0 of currency units.
    An assignment gives each worker at most one job and each job at most one worker (a partial
    injection from workers to jobs); its utility is the sum of the profits of its pairs, and a
    worker or a job left out earns nothing. The decision process is deterministic: every
    assignment can be built pair by pair in any order, and a pair can be undone until the
    assignment is submitted. As profits are ≥ 0, some optimal assignment pairs min(n, m) workers.
    Solved exactly as a rectangular linear sum assignment problem (maximise Σ profits[i][x_i]
    over injections) by scipy.optimize.linear_sum_assignment (the Hungarian method, shortest
    augmenting paths), the optimum re-scored in integer arithmetic. Limits: solve() takes 1 …
    MAX_WORKERS = 12 workers and 1 … MAX_JOBS = 12 jobs with whole profits ≥ 0; any other θ (a
    fractional or negative profit, 13 workers, a row of the wrong length) is refused with
    InvalidParams, never truncated.

State
    the workers (whether their profits have been read), the jobs, the worker-by-job profits, the
    current assignment (worker → job), an action log and a state table (whether the assignment
    has been submitted).

Tools
    probes: inspect a worker (their profit on every job); decisions: assign a worker to a job,
    unassign a worker, clear the assignment; clock: submit the assignment (ends the episode);
    observations: list the workers, list the jobs, view the assignment (its pairs, and the profit
    of the pairs whose worker has been inspected), view the inspected workers, view the action
    log. Nothing but the probe shows a profit: the assignment's total leaves pairs of uninspected
    workers out and names them. Worker and job numbers are bounded by n and m (`World.limits`),
    which both instructions state. In presentation I every profit is stated, so every worker
    counts as inspected from the start.
    Presentation A hides the profits (not n or m); the instruction states their range (a job's fee
    of 20 … 60 plus a worker's fit of 0 … 40), and the stated guess (`belief`) for an uninspected
    worker is PROFIT_GUESS = 60 on every job. The budget affords π*'s play and inspecting about
    half of the workers: what to inspect is a choice.

Plan
    an integer vector of length n_workers: entry i is the job of worker i (0 … n_jobs − 1), or −1
    if worker i gets no job; no job may appear twice.

Reward
    utility = total profit of the submitted assignment (the empty assignment scores 0).
    r = clip01((u − u_default) / (u* − u_default)), where u_default is the greedy assignment:
    workers in number order, each taking the free job with the highest profit for them.

Episode end
    after `submit_assignment`, or when the turn budget runs out: the assignment is then submitted
    as it stands (no further pairs are made or undone).
"""

from __future__ import annotations

import math

import numpy as np
import scipy
from pydantic import BaseModel

from vhd.mechanisms._advantage import until_committed
from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

MAX_WORKERS = 12  # Params/tool-schema/solve bound
MAX_JOBS = 12     # Params/tool-schema/solve bound
FEE = (20, 60)    # a job's fee, the same for every worker (the A instruction states the range)
FIT = (0, 40)     # a worker's fit to a job, added to its fee (the A instruction states the range)
PROFIT_GUESS = 60  # the middle of the profits 20 … 100 the A instruction states
HIDDEN = ("profits",)


class Params(BaseModel):
    """Difficulty knobs of an assignment instance; solve() refuses θ past these bounds (`check_theta`)."""

    size: int = knob(6, 1, MAX_WORKERS, sampled=(5, 8), description="number of workers n, in workers")
    horizon: int = knob(6, 1, MAX_JOBS, sampled=(4, 8),
                        description="number of jobs m (the model has no time axis: the second side of the "
                                    "assignment), in jobs")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: each job a fee uniform in 20 … 60, each worker-job pair a fit uniform in 0 … 40;
    a profit is the job's fee plus the pair's fit (so some jobs are good for everyone, and a
    worker who takes the best one first may take it from the worker it fits best)."""
    n, m = params.size, params.horizon
    fees = rng.integers(FEE[0], FEE[1] + 1, size=m)
    fits = rng.integers(FIT[0], FIT[1] + 1, size=(n, m))
    return {"n_workers": int(n), "n_jobs": int(m), "profits": [[int(x) for x in row] for row in fees[None, :] + fits]}


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … MAX_WORKERS workers, 1 … MAX_JOBS
    jobs and an n × m matrix of whole profits ≥ 0 (fractions are refused, never truncated)."""
    check = ThetaCheck("assignment", theta)
    n = check.count("n_workers", 1, MAX_WORKERS)
    m = check.count("n_jobs", 1, MAX_JOBS)
    check.whole("profits", (n, m), low=0)


# ---------------------------------------------------------------------------------------------
# Plans: the job of every worker, −1 for none.


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: one job number 0 … n_jobs − 1, or −1 (no job), per worker."""
    return PlanSpec(shape=(theta["n_workers"],), integer=True, low=-1, high=theta["n_jobs"] - 1)


def _check_plan(theta: dict, policy: np.ndarray) -> list[int]:
    """The plan as ints; ValueError (InvalidPlan) if it is malformed or gives a job to two workers."""
    jobs = [int(j) for j in plan_spec(theta).check(policy)]
    for i, j in enumerate(jobs):
        if j >= 0 and jobs.index(j) != i:
            raise ValueError(f"the plan gives job {j} to workers {jobs.index(j)} and {i}")
    return jobs


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact utility of a plan: the total profit of its pairs."""
    jobs = _check_plan(theta, policy)
    return float(sum(theta["profits"][i][j] for i, j in enumerate(jobs) if j >= 0))


def _hungarian(theta: dict) -> tuple[float, np.ndarray]:
    """(u*, π*) by linear_sum_assignment on the profit matrix, re-scored exactly."""
    from scipy.optimize import linear_sum_assignment  # lazily: registry discovery stays fast

    profits = np.array(theta["profits"], dtype=np.int64).reshape(theta["n_workers"], theta["n_jobs"])
    rows, cols = linear_sum_assignment(profits, maximize=True)
    plan = np.full(theta["n_workers"], -1, dtype=np.int64)
    plan[rows] = cols
    return evaluate(theta, plan), plan


def solve(theta: dict) -> Solution:
    """u* and π* (each worker's job, −1 for none, int64) by the Hungarian method; values of the
    default and idle plans. InvalidParams first if θ is not of the declared form (`check_theta`)."""
    check_theta(theta)
    n, m = theta["n_workers"], theta["n_jobs"]
    found = certified(lambda: _hungarian(theta), method="rectangular linear sum assignment (Hungarian method)",
                      solver="scipy.optimize.linear_sum_assignment", solver_version=scipy.__version__,
                      state_space=math.perm(max(n, m), min(n, m)))
    return solved(theta, found, evaluate, default_policy, idle_policy)


# z = (u0 − u_idle) / (u* − u_idle) with u_idle = 0 (nobody assigned): z ≥ 0 always, as profits are
# ≥ 0; about 5 % of draws have the greedy optimal (z = 1) and some more nearly so: above 0.98
# there is little to learn beyond "take the best job in turn"
DEFAULT_BAND = (0.0, 0.98)


def default_policy(theta: dict) -> np.ndarray:
    """Greedy in worker order: workers 0, 1, 2, … each take the free job with the highest profit for
    them (ties: the lowest job number); once every job is taken the rest get none."""
    plan, taken = np.full(theta["n_workers"], -1, dtype=np.int64), set()
    for i, row in enumerate(theta["profits"]):
        free = [j for j in range(theta["n_jobs"]) if j not in taken]
        if free:
            plan[i] = max(free, key=lambda j: (row[j], -j))
            taken.add(int(plan[i]))
    return plan


def idle_policy(theta: dict) -> np.ndarray:
    """Assign nobody: submit the empty assignment."""
    return np.full(theta["n_workers"], -1, dtype=np.int64)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """A random assignment: workers in a random order, each with probability 1/2 taking a job drawn
    uniformly from the free ones."""
    plan, free = np.full(theta["n_workers"], -1, dtype=np.int64), list(range(theta["n_jobs"]))
    for i in rng.permutation(theta["n_workers"]):
        if free and rng.random() < 0.5:
            plan[i] = free.pop(int(rng.integers(0, len(free))))
    return plan


def boundary_calls(theta: dict, rng: np.random.Generator) -> list[list[dict]]:
    """Calls on the domain's checks for the reference_agreement gate: every job filled (workers in
    a random order), then every worker still free tried on a random job (refused: taken) and an
    assigned worker moved to another taken job (refused), then submit; and one worker assigned
    twice (refused: already assigned), unassigned, assigned again, with an unassign of a free
    worker (refused), then submit."""
    n, m = theta["n_workers"], theta["n_jobs"]
    order, jobs = [int(i) for i in rng.permutation(n)], [int(j) for j in rng.permutation(m)]
    pairs = list(zip(order, jobs))
    calls = [{"tool": "assign_worker", "arguments": {"worker": i, "job": j}} for i, j in pairs]
    calls += [{"tool": "assign_worker", "arguments": {"worker": i, "job": int(rng.integers(0, m))}}
              for i in order[len(pairs):]]
    if len(pairs) > 1:
        calls.append({"tool": "assign_worker", "arguments": {"worker": pairs[0][0], "job": pairs[1][1]}})
    first = [{"tool": "assign_worker", "arguments": {"worker": order[0], "job": jobs[0]}}] * 2
    again = [{"tool": "unassign_worker", "arguments": {"worker": order[0]}}] * 2 + first[:1]
    submit = {"tool": "submit_assignment", "arguments": {}}
    return [calls + [submit], first + again + [submit]]


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a plan: assign its pairs in worker order, then submit. Deterministic (the episode seed
    is accepted and ignored)."""
    jobs = _check_plan(theta, policy)
    pairs = [(i, j) for i, j in enumerate(jobs) if j >= 0]
    calls = [{"tool": "assign_worker", "arguments": {"worker": i, "job": j}} for i, j in pairs]
    calls.append({"tool": "submit_assignment", "arguments": {}})
    return Episode(utility=evaluate(theta, np.array(jobs, dtype=np.int64)), calls=calls, decisions=pairs)


# Decision rewards: every pair can be undone until the assignment is submitted (`until_committed`).
decision_values, decision_state, advantage = until_committed(solve)


def turn_budget(theta: dict) -> int:
    """π*'s play (a call per pair, min(n, m), and the submit) and half the workers more (rounded up):
    in presentation A room to inspect about half of the workers beside π*'s play, not all."""
    return min(theta["n_workers"], theta["n_jobs"]) + 1 + (theta["n_workers"] + 1) // 2


# ---------------------------------------------------------------------------------------------
# Presentation A: what the probe shows, and the guess for what it did not.


def probe_calls(theta: dict) -> list[dict]:
    """Inspect the workers in number order."""
    return [{"tool": "inspect_worker", "arguments": {"worker": i}} for i in range(theta["n_workers"])]


def belief(theta: dict, read: list[dict]) -> dict:
    """θ as known after the probe calls `read`: inspected workers' profits exact, the others
    PROFIT_GUESS on every job."""
    seen = {call["arguments"]["worker"] for call in read if call["tool"] == "inspect_worker"}
    profits = [list(row) if i in seen else [PROFIT_GUESS] * theta["n_jobs"] for i, row in enumerate(theta["profits"])]
    return {**theta, "profits": profits}


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only.


TABLES = ("workers", "jobs", "profits", "assignment", "log", "state")


class World(BaseWorld):
    """The site's relational world: workers, jobs, profits, the assignment, a log and a state table."""

    PARAMS = ("n_workers", "n_jobs", "profits")
    STATE = (("submitted", 0),)
    FEE, FIT = (20, 60), (0, 40)  # the ranges the A instruction states (the module's FEE and FIT, spelled here)

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        n, m = params["n_workers"], params["n_jobs"]
        if len(params["profits"]) != n or any(len(row) != m for row in params["profits"]):
            raise ValueError("profits is not a %r × %r matrix" % (n, m))
        t = self.t
        db.execute("CREATE TABLE %s (worker_id INTEGER PRIMARY KEY, label TEXT, inspected INTEGER)" % t["workers"])
        db.execute("CREATE TABLE %s (job_id INTEGER PRIMARY KEY, label TEXT)" % t["jobs"])
        db.execute("CREATE TABLE %s (worker_id INTEGER REFERENCES %s(worker_id), job_id INTEGER REFERENCES %s(job_id), "
                   "profit INTEGER, PRIMARY KEY (worker_id, job_id))" % (t["profits"], t["workers"], t["jobs"]))
        db.execute("CREATE TABLE %s (worker_id INTEGER PRIMARY KEY REFERENCES %s(worker_id), job_id INTEGER UNIQUE "
                   "REFERENCES %s(job_id))" % (t["assignment"], t["workers"], t["jobs"]))
        db.execute("CREATE TABLE %s (entry_id INTEGER PRIMARY KEY, action TEXT, worker_id INTEGER, job_id INTEGER)"
                   % t["log"])
        db.executemany("INSERT INTO %s VALUES (?, ?, 0)" % t["workers"], [(i, "W%02d" % i) for i in range(n)])
        db.executemany("INSERT INTO %s VALUES (?, ?)" % t["jobs"],
                       [(j, "%s-J%02d" % (self.v["sku"], j)) for j in range(m)])
        db.executemany("INSERT INTO %s VALUES (?, ?, ?)" % t["profits"],
                       [(i, j, params["profits"][i][j]) for i in range(n) for j in range(m)])

    # -- state helpers --------------------------------------------------------------------
    def _pairs(self):
        return self.db.execute("SELECT worker_id, job_id FROM %s ORDER BY worker_id" % self.t["assignment"]).fetchall()

    def _job_of(self, worker):
        row = self.db.execute("SELECT job_id FROM %s WHERE worker_id = ?" % self.t["assignment"], (worker,)).fetchone()
        return None if row is None else row[0]

    def _worker_of(self, job):
        row = self.db.execute("SELECT worker_id FROM %s WHERE job_id = ?" % self.t["assignment"], (job,)).fetchone()
        return None if row is None else row[0]

    def _total(self, inspected_only):
        only = (" AND a.worker_id IN (SELECT worker_id FROM %s WHERE inspected = 1)" % self.t["workers"]
                if inspected_only else "")
        total = self.db.execute("SELECT COALESCE(SUM(p.profit), 0) FROM %s a JOIN %s p ON p.worker_id = a.worker_id "
                                "AND p.job_id = a.job_id%s" % (self.t["assignment"], self.t["profits"], only))
        return total.fetchone()[0]

    def _uninspected_assigned(self):
        return [row[0] for row in self.db.execute(
            "SELECT a.worker_id FROM %s a JOIN %s w ON w.worker_id = a.worker_id WHERE w.inspected = 0 "
            "ORDER BY a.worker_id" % (self.t["assignment"], self.t["workers"]))]

    def _row(self, worker):
        return [row[0] for row in self.db.execute("SELECT profit FROM %s WHERE worker_id = ? ORDER BY job_id"
                                                  % self.t["profits"], (worker,))]

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("submitted") == 1

    def utility(self):
        return self._total(False)

    def run_out(self):
        self._log("submitted (turns ran out)")
        self._set("submitted", 1)

    def limits(self, presentation):
        """Workers run 0 … n − 1 and jobs 0 … m − 1 (both instructions tell n and m)."""
        worker, job = (0, self.p["n_workers"] - 1), (0, self.p["n_jobs"] - 1)
        return {"inspect_worker": {"worker": worker}, "assign_worker": {"worker": worker, "job": job},
                "unassign_worker": {"worker": worker}}

    # -- tools ------------------------------------------------------------------------------
    @tool("probe", "Inspect one worker of the {site}: their profit in {currency} on every job.", reveals=("profits",),
          worker=integer(0, MAX_WORKERS - 1, "number of the worker to inspect (0-based)"))
    def tool_inspect_worker(self, worker):
        self.db.execute("UPDATE %s SET inspected = 1 WHERE worker_id = ?" % self.t["workers"], (worker,))
        return {"worker": worker, "profit_by_job": self._row(worker), "currency": self.v["currency"]}

    @tool("observe", "List the workers with whether each has been inspected and the job each holds.")
    def tool_list_workers(self):
        rows = self.db.execute("SELECT w.worker_id, w.label, w.inspected, a.job_id FROM %s w LEFT JOIN %s a "
                               "ON a.worker_id = w.worker_id ORDER BY w.worker_id"
                               % (self.t["workers"], self.t["assignment"])).fetchall()
        return {"workers": [{"worker": i, "label": label, "inspected": bool(ins), "job": job}
                            for i, label, ins, job in rows]}

    @tool("observe", "List the jobs for {item} from the {supplier} with the worker each is given to.")
    def tool_list_jobs(self):
        rows = self.db.execute("SELECT j.job_id, j.label, a.worker_id FROM %s j LEFT JOIN %s a ON a.job_id = j.job_id "
                               "ORDER BY j.job_id" % (self.t["jobs"], self.t["assignment"])).fetchall()
        return {"jobs": [{"job": j, "label": label, "worker": worker} for j, label, worker in rows]}

    # A profit is shown only once its worker is inspected (hidden θ in presentation A): the total
    # below counts the pairs of inspected workers and names the ones it leaves out.
    @tool("observe", "Show the current assignment: its pairs, and the total profit in {currency} of the pairs "
          "whose worker has been inspected (the others are listed as not counted).")
    def tool_view_assignment(self):
        return {"pairs": [{"worker": i, "job": j} for i, j in self._pairs()], "profit": self._total(True),
                "currency": self.v["currency"], "not_counted": self._uninspected_assigned()}

    @tool("observe", "List every worker inspected so far with their profit on every job.")
    def tool_view_inspected(self):
        rows = self.db.execute("SELECT worker_id FROM %s WHERE inspected = 1 ORDER BY worker_id" % self.t["workers"])
        return {"workers": [{"worker": i, "profit_by_job": self._row(i)} for (i,) in rows.fetchall()]}

    @tool("observe", "List the most recent assignments, unassignments and clears.",
          limit=integer(1, 500, "how many entries to list"))
    def tool_view_log(self, limit=20):
        rows = self.db.execute("SELECT entry_id, action, worker_id, job_id FROM %s ORDER BY entry_id DESC LIMIT ?"
                               % self.t["log"], (limit,)).fetchall()
        return {"log": [{"entry": e, "action": a, "worker": i, "job": j} for e, a, i, j in rows]}

    @tool("decision", "Give one job to one worker (refused if the worker already has a job or the job is taken).",
          worker=integer(0, MAX_WORKERS - 1, "number of the worker (0-based)"),
          job=integer(0, MAX_JOBS - 1, "number of the job (0-based)"))
    def tool_assign_worker(self, worker, job):
        if self._job_of(worker) is not None:
            raise AgentError("worker %d already has job %d; unassign them first" % (worker, self._job_of(worker)))
        if self._worker_of(job) is not None:
            raise AgentError("job %d is already given to worker %d" % (job, self._worker_of(job)))
        self.db.execute("INSERT INTO %s VALUES (?, ?)" % self.t["assignment"], (worker, job))
        self._log("assign", worker_id=worker, job_id=job)
        return {"assigned": {"worker": worker, "job": job}, "pairs": len(self._pairs())}

    @tool("decision", "Take one worker off their job (the job is free again).",
          worker=integer(0, MAX_WORKERS - 1, "number of the worker (0-based)"))
    def tool_unassign_worker(self, worker):
        job = self._job_of(worker)
        if job is None:
            raise AgentError("worker %d has no job" % worker)
        self.db.execute("DELETE FROM %s WHERE worker_id = ?" % self.t["assignment"], (worker,))
        self._log("unassign", worker_id=worker, job_id=job)
        return {"unassigned": {"worker": worker, "job": job}, "pairs": len(self._pairs())}

    @tool("decision", "Take every worker off their job.")
    def tool_clear_assignment(self):
        if not self._pairs():
            raise AgentError("the assignment is already empty")
        self.db.execute("DELETE FROM %s" % self.t["assignment"])
        self._log("clear")
        return {"pairs": 0}

    @tool("clock", "Submit the assignment: the episode ends and the result is the total profit of its pairs.")
    def tool_submit_assignment(self):
        self._log("submitted")
        self._set("submitted", 1)
        return {"submitted": [{"worker": i, "job": j} for i, j in self._pairs()], "profit": self._total(False),
                "currency": self.v["currency"]}

    # -- what the player reads --------------------------------------------------------------
    @staticmethod
    def counted(n, noun):
        """n and its noun in the right number: "1 worker", "6 workers"."""
        return "%d %s%s" % (n, noun, "" if n == 1 else "s")

    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        if presentation == "I":  # every profit is stated: every worker counts as inspected
            self.db.execute("UPDATE %s SET inspected = 1" % self.t["workers"])
        lines = [
            self.skin["narrative"],
            "",
            "The %s has %s, numbered 0 to %d, and %s for %s from the %s, numbered 0 to %d. A worker doing a job "
            "earns a profit in %s; each worker can do at most one job and each job needs at most one worker."
            % (v["site"], World.counted(p["n_workers"], "worker"), p["n_workers"] - 1,
               World.counted(p["n_jobs"], "job"), v["item"], v["supplier"], p["n_jobs"] - 1, v["currency"]),
            "Give jobs with %s and take them back with %s (%s takes every one back). %s ends the episode; the "
            "result is the total profit of the submitted pairs." % (n["assign_worker"], n["unassign_worker"],
                                                                   n["clear_assignment"], n["submit_assignment"]),
            "You have %d turns: every tool call the world answers uses its turn cost; when they run out, the "
            "assignment is submitted as it stands." % turn_budget,
            "",
        ]
        if presentation == "I":
            lines.append("Profit in %s of each worker on jobs 0 to %d:" % (v["currency"], p["n_jobs"] - 1))
            lines += ["  worker %d: %s" % (i, ", ".join(map(str, row))) for i, row in enumerate(p["profits"])]
        else:
            lines.append("The profits are not given: %s reveals one worker's profit on every job at the cost of a "
                         "turn from the same budget. Each profit is a job's fee, %d to %d %s and the same for every "
                         "worker, plus the worker's fit to the job, %d to %d %s." % (
                             n["inspect_worker"], World.FEE[0], World.FEE[1], v["currency"], World.FIT[0], World.FIT[1],
                             v["currency"]))
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="assignment",
    version="1",
    group="beyond",
    model_class="rectangular linear assignment (bipartite matching of most profit)",
    solver="Hungarian method (scipy.optimize.linear_sum_assignment)",
    stochastic=False,
))
