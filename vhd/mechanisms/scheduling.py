"""Parallel identical machines: assign jobs to machines, minimize the makespan (P||Cmax).

Model
    A site runs `n_machines` = m identical machines, numbered 0 … m − 1, and
    must process `n_jobs` = n jobs, numbered 0 … n − 1. Job j takes
    `processing[j]` whole time units (an integer 1 … 20) on whichever machine it is put; a machine
    runs its jobs back to back from time 0, so its load is the sum of its jobs' processing times
    and the makespan is the largest load. A plan gives every job either a machine 0 … m − 1 or
    "unassigned" (−1 in the policy array); when the plan is dispatched, every unassigned job is
    put on machine 0. The plan's cost is the makespan max_k Σ_{j on k} processing[j]. The decision
    process is deterministic. Solved exactly by depth-first branch and bound over the m^n
    assignments (jobs in decreasing processing time, machines of equal load tried once, the
    incumbent started from LPT, bound max(max_j p_j, ceil(Σp / m))), in integer arithmetic.
    Limits: solve() takes 1 … MAX_JOBS = 10 jobs (branch and bound over m^n assignments), 1 …
    MAX_MACHINES = 4 machines and whole processing times ≥ 1; any other θ is refused with
    InvalidParams before anything is allocated (`check_theta`).

State
    the job catalog (processing time of every job), the machines, the assignment table (job →
    machine, at most one row per job), the inspections made, an action log and a state table
    (dispatched or not).

Tools
    probes: inspect one job (its exact processing time, 1 turn), read the job list (an estimate
    of every job's time, a "forecast sticker", SHEET_COST = 3 turns); decisions: assign a job to
    a machine, unassign a job, clear every assignment; clock: dispatch the plan (ends the
    episode); observations: view the machine loads, list the unassigned jobs, view the current
    makespan, view the assignment table, view the inspected jobs, view the action log. The
    observations describe only assigned jobs (in presentation A, assigning a job and reading the
    loads is itself a costly probe). The schemas shown bound job numbers by n − 1 and machine
    numbers by m − 1 (`World.limits`; the instruction tells n and m in both presentations).

    Presentation A hides every processing time. The job list shows each job's time only as the
    middle of the block of five that holds it (1–5 shows 3, 6–10 shows 8, 11–15 shows 13, 16–20
    shows 18: off by at most 2, `World.listed`); `inspect_job` shows one job's exact time. The A
    instruction states the range 1 … 20 and the list's error, so a job neither inspected nor
    listed is guessed at PROCESSING_GUESS = 10 and a listed one at its estimate (`belief`).

Plan
    an integer vector of length n_jobs: entry j is the machine (0 … n_machines − 1) of job j, or
    −1 for unassigned (it then goes on machine 0).

Reward
    utility = −makespan of the dispatched plan (an integer, ≤ −ceil(Σp / m)). r = clip01((u −
    u_default) / (u* − u_default)), where u_default is list scheduling in index order as the job
    list reads (each job, 0, 1, …, n − 1, to the machine least loaded by the list's estimates so
    far, ties to the lowest machine number): the default reads the sticker and is misled by it.

Advantages
    The solver's state is (dispatched, plan): the state table's flag and the machine of every
    job from the assignment table (−1 when unassigned). A* is the change of the potential Φ =
    the best utility reachable from the state: every assignment can be undone (or all of them
    cleared), so Φ = u* while the plan is open, whatever it holds, and Φ = −makespan of the
    plan once it is dispatched. Turns are ignored: a budget too short to undo a bad plan still
    counts as u* (the sum telescopes all the same). Assigning, unassigning or clearing jobs
    gets A* = 0; `dispatch` gets −makespan(plan, unassigned jobs on machine 0) − u*; running
    out of turns dispatches the plan as it stands, also −makespan − u*. Whole numbers, so
    Σ A* = u − u* exactly on every trajectory.

Episode end
    after `dispatch`, or when the turn budget runs out: the plan is then dispatched as it stands,
    with every unassigned job put on machine 0 (no further decisions). The budget is
    n + max(1, n // 2 + m − 2) turns, shown in both presentations: every job assigned and the
    dispatch (any plan) fit; π*'s play needs no call for a job on machine 0, and in A the turns
    it leaves buy the inspections it depends on but not every job's (A environments are admitted
    where that binds: `BUDGET_BINDS`), so which jobs to inspect is a choice.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from vhd.mechanisms._advantage import until_committed
from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

MIN_JOBS, MAX_JOBS = 4, 10
MIN_MACHINES, MAX_MACHINES = 2, 4
MAX_PROCESSING = 20
SHEET_COST = 3  # the job list: an estimate of every job at once
PROCESSING_GUESS = 10  # presentation A: a job neither inspected nor listed, the middle of the stated 1 … 20
HIDDEN = ("processing",)


class Params(BaseModel):
    """Difficulty knobs of a P||Cmax instance; solve() refuses a θ past these bounds
    (`check_theta`)."""

    size: int = knob(7, MIN_JOBS, MAX_JOBS, sampled=(6, 10), description="number of jobs n to process, in jobs")
    horizon: int = knob(3, MIN_MACHINES, MAX_MACHINES, sampled=(2, 4),
                        description="number of identical parallel machines m, in machines")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: n integer processing times, each uniform on 1 … 20."""
    n, m = params.size, params.horizon
    processing = [int(p) for p in rng.integers(1, MAX_PROCESSING + 1, size=n)]
    return {"n_jobs": n, "n_machines": m, "processing": processing}


# ---------------------------------------------------------------------------------------------
# Plans: an integer array of length n, plan[j] = machine of job j (0 … m − 1) or −1 (unassigned,
# put on machine 0 on dispatch). π* assigns every job.


def _check_theta(theta: dict) -> tuple[list[int], int]:
    n, m, p = theta["n_jobs"], theta["n_machines"], theta["processing"]
    if len(p) != n or n < 1 or m < 1 or any(int(x) != x or x < 1 for x in p):
        raise ValueError(f"θ needs n_jobs = {n} positive integer processing times and n_machines ≥ 1, "
                         f"got {p}, m={m}")
    return [int(x) for x in p], int(m)


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: one machine 0 … n_machines − 1 per job, or −1 (unassigned)."""
    return PlanSpec(shape=(theta["n_jobs"],), integer=True, low=-1, high=theta["n_machines"] - 1)


def _check_plan(theta: dict, policy: np.ndarray) -> list[int]:
    """The plan as a list of machine numbers (−1 = unassigned); InvalidPlan (a ValueError) naming the
    first entry not of the declared form."""
    return [int(k) for k in plan_spec(theta).check(policy).tolist()]


def _makespan(theta: dict, plan: list[int]) -> int:
    loads = [0] * theta["n_machines"]
    for j, k in enumerate(plan):
        loads[max(k, 0)] += theta["processing"][j]
    return max(loads)


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact utility of a plan: −makespan, unassigned jobs on machine 0."""
    return float(-_makespan(theta, _check_plan(theta, policy)))


def _branch_and_bound(theta: dict) -> tuple[float, np.ndarray]:
    """Least makespan over every assignment. Jobs go in decreasing processing time (ties by
    index); at each job, machines with a load already tried are skipped (they are symmetric);
    a branch is cut when its makespan reaches the incumbent. The search stops at the lower bound
    max(max p, ceil(P / m)). Deterministic: a fixed enumeration, strict improvement only."""
    p, m = _check_theta(theta)
    n = len(p)
    order = sorted(range(n), key=lambda j: (-p[j], j))
    lower = max(max(p), -(-sum(p) // m))
    loads = [0] * m
    incumbent = [0] * n
    for j in order:  # LPT as the first incumbent
        k = min(range(m), key=lambda i: (loads[i], i))
        incumbent[j] = k
        loads[k] += p[j]
    best = [max(loads), incumbent[:]]
    loads = [0] * m
    current = [0] * n

    def dfs(depth: int, top: int) -> bool:
        if depth == n:
            best[0], best[1] = top, current[:]
            return top <= lower
        j = order[depth]
        tried = set()
        for k in range(m):
            if loads[k] in tried:
                continue
            tried.add(loads[k])
            new = max(top, loads[k] + p[j])
            if new >= best[0]:
                continue
            loads[k] += p[j]
            current[j] = k
            done = dfs(depth + 1, new)
            loads[k] -= p[j]
            if done:
                return True
        return False

    if best[0] > lower:
        dfs(0, 0)
    plan = np.array(best[1], dtype=np.int8)
    if _makespan(theta, best[1]) != best[0] or best[0] < lower:
        raise ArithmeticError("the branch-and-bound plan does not attain its value")
    return float(-best[0]), plan


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … MAX_JOBS = 10 jobs (branch and bound
    over m^n assignments), 1 … MAX_MACHINES = 4 machines and whole processing times ≥ 1."""
    check = ThetaCheck("scheduling", theta)
    n = check.count("n_jobs", 1, MAX_JOBS)
    check.count("n_machines", 1, MAX_MACHINES)
    check.whole("processing", (n,), low=1)


def solve(theta: dict) -> Solution:
    """u* and π* (machine per job, int8) by branch and bound; values of the default and idle plans."""
    check_theta(theta)
    found = certified(lambda: _branch_and_bound(theta),
                      method="branch and bound over job-machine assignments",
                      solver="python (integer branch and bound)", solver_version=np.__version__,
                      state_space=theta["n_machines"] ** theta["n_jobs"])
    return solved(theta, found, evaluate, default_policy, idle_policy)


# z = (u0 − u_idle) / (u* − u_idle), idle = everything on machine 0 (makespan Σp). List
# scheduling is a 2 − 1/m approximation, and on the job list's estimates (off by at most 2
# each) not much worse, so z sits high (typically 0.8–0.95); it is often optimal outright,
# which the band gate's realized-gap check rejects. Above 0.99 the default
# is within a unit or so of π* on a large instance; below 0 it would do worse than idling.
DEFAULT_BAND = (0.0, 0.99)


def default_policy(theta: dict) -> np.ndarray:
    """List scheduling in index order (not LPT) on the job list's estimates: jobs 0, 1, …, n − 1
    each go to the machine with the least estimated load so far (`World.listed` of each time, the
    middle of its block of five), ties to the lowest machine number. It reads the sticker, not the
    exact times, so it is misled by it."""
    loads = [0] * theta["n_machines"]
    plan = []
    for j in range(theta["n_jobs"]):
        k = min(range(theta["n_machines"]), key=lambda i: (loads[i], i))
        plan.append(k)
        loads[k] += World.listed(theta["processing"][j])
    return np.array(plan, dtype=np.int8)


def idle_policy(theta: dict) -> np.ndarray:
    """Assign nothing: dispatch at once, so every job runs on machine 0."""
    return np.full(theta["n_jobs"], -1, dtype=np.int8)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """Every job on a machine drawn uniformly from 0 … m − 1, independently."""
    return rng.integers(0, theta["n_machines"], size=theta["n_jobs"]).astype(np.int8)


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a plan: assign its assigned jobs in index order, then dispatch. Deterministic (the
    episode seed is accepted and ignored)."""
    plan = _check_plan(theta, policy)
    calls = [{"tool": "assign_job", "arguments": {"job": j, "machine": k}} for j, k in enumerate(plan) if k >= 0]
    calls.append({"tool": "dispatch", "arguments": {}})
    return Episode(utility=float(-_makespan(theta, plan)), calls=calls, decisions=plan)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the potential of a state is the best utility still reachable from it: u*
# while the plan is open (every assignment can be undone), −makespan once dispatched.


decision_values, decision_state, advantage = until_committed(solve)


BUDGET_BINDS = True  # A admits θ only where the budget binds (vhd/tasks/stages/check/budget.py)


def turn_budget(theta: dict) -> int:
    """n + n // 2 + m − 2 turns: π*'s plan (a job on machine 0 needs no call: dispatch puts it
    there) with the jobs it depends on inspected, but in presentation A not every job as well, so
    which jobs to inspect is a choice (`vhd/tasks/stages/check/budget.py` measures both)."""
    n = theta["n_jobs"]
    return n + max(1, n // 2 + theta["n_machines"] - 2)


# ---------------------------------------------------------------------------------------------
# Presentation A: what the probes show, and the guess for what they did not (the A instruction
# states the range 1 … 20 and the job list's error): a listed job is at the list's estimate, a
# job neither listed nor inspected at PROCESSING_GUESS.


def probe_calls(theta: dict) -> list[dict]:
    """Read the job list, then inspect the jobs in index order."""
    return [{"tool": "get_job_list", "arguments": {}}] + [
        {"tool": "inspect_job", "arguments": {"job": j}} for j in range(theta["n_jobs"])]


def belief(theta: dict, read: list[dict]) -> dict:
    """θ as known after the probe calls `read`: inspected jobs exact, listed ones the list's
    estimate, the others the stated guess."""
    seen = {call["arguments"]["job"] for call in read if call["tool"] == "inspect_job"}
    listed = any(call["tool"] == "get_job_list" for call in read)
    processing = [p if j in seen else World.listed(p) if listed else PROCESSING_GUESS
                  for j, p in enumerate(theta["processing"])]
    return {**theta, "processing": processing}


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


_JOB = integer(0, MAX_JOBS - 1, "the job")
_MACHINE = integer(0, MAX_MACHINES - 1, "the machine")


TABLES = ("jobs", "machines", "assignments", "inspections", "log", "state")


class World(BaseWorld):
    """The site's machine floor: jobs (catalog), machines, assignments, inspections, log, state."""

    PARAMS = ("n_jobs", "n_machines", "processing")
    STATE = (("dispatched", 0),)
    IDS = {"job": "job", "assigned": "job", "unassigned": "job", "moved_jobs": "job",
           "machine": "machine", "was_on_machine": "machine", "moved_to_machine": "machine"}
    BLOCK = 5  # the job list shows the middle of the block of BLOCK time units that holds each time

    @staticmethod
    def listed(processing):
        """The job list's estimate of a processing time: the middle of its block of five (1–5 → 3,
        6–10 → 8, 11–15 → 13, 16–20 → 18), off by at most 2."""
        return World.BLOCK * ((processing - 1) // World.BLOCK) + World.BLOCK // 2 + 1

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        n, m = params["n_jobs"], params["n_machines"]
        if not isinstance(n, int) or not isinstance(m, int) or n < 1 or m < 1 or len(params["processing"]) != n:
            raise ValueError("processing must have n_jobs=%r entries and n_machines=%r must be ≥ 1" % (n, m))
        t = self.t
        db.execute("CREATE TABLE %s (job_id INTEGER PRIMARY KEY, processing INTEGER NOT NULL)" % t["jobs"])
        db.execute("CREATE TABLE %s (machine_id INTEGER PRIMARY KEY)" % t["machines"])
        db.execute("CREATE TABLE %s (job_id INTEGER PRIMARY KEY REFERENCES %s(job_id), machine_id INTEGER NOT NULL "
                   "REFERENCES %s(machine_id))" % (t["assignments"], t["jobs"], t["machines"]))
        db.execute("CREATE TABLE %s (job_id INTEGER PRIMARY KEY REFERENCES %s(job_id))"
                   % (t["inspections"], t["jobs"]))
        db.execute("CREATE TABLE %s (entry_id INTEGER PRIMARY KEY, action TEXT, job_id INTEGER, machine_id INTEGER)"
                   % t["log"])
        db.executemany("INSERT INTO %s VALUES (?, ?)" % t["jobs"], [(j, params["processing"][j]) for j in range(n)])
        db.executemany("INSERT INTO %s VALUES (?)" % t["machines"], [(k,) for k in range(m)])

    # -- state helpers --------------------------------------------------------------------
    def _job(self, job):
        n = self.p["n_jobs"]
        if not 0 <= job < n:
            raise AgentError("there are %d jobs, numbered %s to %s; got %s"
                             % (n, self.ref("job", 0), self.ref("job", n - 1), self.ref("job", job)))
        return job

    def _machine(self, machine):
        m = self.p["n_machines"]
        if not 0 <= machine < m:
            raise AgentError("there are %d machines, numbered %s to %s; got %s"
                             % (m, self.ref("machine", 0), self.ref("machine", m - 1), self.ref("machine", machine)))
        return machine

    def _open(self):
        if self._get("dispatched"):
            raise AgentError("the plan has been dispatched; nothing can change any more")

    def _machine_of(self, job):
        row = self.db.execute("SELECT machine_id FROM %s WHERE job_id = ?" % self.t["assignments"], (job,)).fetchone()
        return None if row is None else row[0]

    def _loads(self):
        """[(machine, jobs on it, load)] over every machine, from the assignment table."""
        rows = self.db.execute(
            "SELECT m.machine_id, COUNT(a.job_id), COALESCE(SUM(j.processing), 0) FROM %s m "
            "LEFT JOIN %s a ON a.machine_id = m.machine_id LEFT JOIN %s j ON j.job_id = a.job_id "
            "GROUP BY m.machine_id ORDER BY m.machine_id" % (self.t["machines"], self.t["assignments"], self.t["jobs"]))
        return [tuple(row) for row in rows.fetchall()]

    def _makespan(self):
        return max(load for _, _, load in self._loads())

    def _inspected(self):
        return {row[0] for row in self.db.execute("SELECT job_id FROM %s" % self.t["inspections"])}

    def _shown_loads(self):
        """`_loads()` as the player may read them: in presentation A a machine's load is None while
        a job on it is not inspected (a sum of unread times would reveal them)."""
        loads = self._loads()
        if self.presentation != "A":
            return loads
        inspected = self._inspected()
        unread = {k for j, k in self.db.execute("SELECT job_id, machine_id FROM %s" % self.t["assignments"])
                  if j not in inspected}
        return [(k, count, None if k in unread else load) for k, count, load in loads]

    def _unassigned(self):
        return [row[0] for row in self.db.execute(
            "SELECT job_id FROM %s WHERE job_id NOT IN (SELECT job_id FROM %s) ORDER BY job_id"
            % (self.t["jobs"], self.t["assignments"]))]

    def _dispatch(self, why):
        for job in self._unassigned():
            self.db.execute("INSERT INTO %s VALUES (?, ?)" % self.t["assignments"], (job, 0))
        self._set("dispatched", 1)
        self._log(why)

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("dispatched") == 1

    def limits(self, presentation):
        """Jobs run 0 … n − 1 and machines 0 … m − 1 (the instruction tells n and m in both presentations)."""
        n = self.p["n_jobs"]
        job, machine = (0, n - 1), (0, self.p["n_machines"] - 1)
        return {"inspect_job": {"job": job}, "assign_job": {"job": job, "machine": machine},
                "unassign_job": {"job": job}}

    def utility(self):
        return -self._makespan()

    def run_out(self):
        self._dispatch("dispatched (turns ran out)")

    # -- probes -----------------------------------------------------------------------------
    def _inspect(self, job):
        self.db.execute("INSERT OR IGNORE INTO %s VALUES (?)" % self.t["inspections"], (job,))
        proc = self.db.execute("SELECT processing FROM %s WHERE job_id = ?" % self.t["jobs"], (job,)).fetchone()[0]
        return {"job": job, "processing_time": proc}

    @tool("probe", "Inspect one job for the {supplier}'s {item}: its processing time.", reveals=("processing",),
          job=_JOB)
    def tool_inspect_job(self, job):
        return self._inspect(self._job(job))

    @tool("probe", "Read the {site}'s job list: an estimate of every job's processing time, the middle of its "
          "block of five time units (1-5 shows 3, 6-10 shows 8, ...), off by at most 2 (costs %d turns)." % SHEET_COST,
          reveals=("processing",), turn_cost=SHEET_COST, noisy=True)
    def tool_get_job_list(self):
        jobs = self.db.execute("SELECT job_id, processing FROM %s ORDER BY job_id" % self.t["jobs"]).fetchall()
        return {"jobs": [{"job": j, "estimated_processing_time": World.listed(proc)} for j, proc in jobs],
                "time_unit": "time units", "exact": False,
                "note": "an estimate: each time may be off by up to 2; %s shows one job's exact time"
                        % self.name["inspect_job"]}

    # -- decisions --------------------------------------------------------------------------
    @tool("decision", "Put one job on a machine (refused if the job is already assigned or the machine does not "
          "exist).", job=_JOB, machine=_MACHINE)
    def tool_assign_job(self, job, machine):
        self._open()
        job = self._job(job)
        machine = self._machine(machine)
        already = self._machine_of(job)
        if already is not None:
            raise AgentError("job %s is already assigned to machine %s; unassign it first"
                             % (self.ref("job", job), self.ref("machine", already)))
        self.db.execute("INSERT INTO %s VALUES (?, ?)" % self.t["assignments"], (job, machine))
        self._log("assign", job_id=job, machine_id=machine)
        load = [l for k, _, l in self._shown_loads() if k == machine][0]
        return {"assigned": job, "machine": machine, "machine_load": load}

    @tool("decision", "Take one assigned job off its machine.", job=_JOB)
    def tool_unassign_job(self, job):
        self._open()
        job = self._job(job)
        machine = self._machine_of(job)
        if machine is None:
            raise AgentError("job %s is not assigned to any machine" % self.ref("job", job))
        self.db.execute("DELETE FROM %s WHERE job_id = ?" % self.t["assignments"], (job,))
        self._log("unassign", job_id=job, machine_id=machine)
        return {"unassigned": job, "was_on_machine": machine}

    @tool("decision", "Take every job off every machine.")
    def tool_clear_assignments(self):
        self._open()
        count = self.db.execute("SELECT COUNT(*) FROM %s" % self.t["assignments"]).fetchone()[0]
        if count == 0:
            raise AgentError("no job is assigned yet")
        self.db.execute("DELETE FROM %s" % self.t["assignments"])
        self._log("clear")
        return {"cleared": count}

    # -- clock ------------------------------------------------------------------------------
    @tool("clock", "Dispatch the plan to the {site}'s machines: unassigned jobs go on the first machine, the "
          "episode ends and the score is minus the makespan.")
    def tool_dispatch(self):
        self._open()
        moved = self._unassigned()
        self._dispatch("dispatched")
        return {"moved_jobs": moved, "moved_to_machine": 0,
                "loads": [{"machine": k, "load": load} for k, _, load in self._loads()],
                "makespan": self._makespan()}

    # -- observations -----------------------------------------------------------------------
    @tool("observe", "Show every machine's number of jobs and load so far (once its jobs are inspected).")
    def tool_view_machine_loads(self):
        return {"machines": [{"machine": k, "jobs": count, "load": load} for k, count, load in self._shown_loads()]}

    @tool("observe", "List the jobs not yet on a machine and whether each is inspected.")
    def tool_list_unassigned(self):
        inspected = set(row[0] for row in self.db.execute("SELECT job_id FROM %s" % self.t["inspections"]))
        rows = self.db.execute("SELECT job_id FROM %s WHERE job_id NOT IN (SELECT job_id FROM %s) "
                               "ORDER BY job_id" % (self.t["jobs"], self.t["assignments"])).fetchall()
        return {"unassigned": [{"job": j, "inspected": j in inspected} for j, in rows]}

    @tool("observe", "Show the makespan (largest machine load) of the jobs assigned so far (once they are "
          "inspected).")
    def tool_view_makespan(self):
        loads = self._shown_loads()
        shown = None if any(load is None for _, _, load in loads) else max(load for _, _, load in loads)
        return {"makespan": shown, "jobs_assigned": sum(c for _, c, _ in loads)}

    @tool("observe", "Show the assignment table: every assigned job, its machine and its processing time (once "
          "inspected).")
    def tool_view_assignments(self):
        rows = self.db.execute("SELECT a.job_id, a.machine_id, j.processing FROM %s a JOIN %s j "
                               "ON j.job_id = a.job_id ORDER BY a.job_id" % (self.t["assignments"], self.t["jobs"]))
        shown = self._inspected() if self.presentation == "A" else None
        return {"assignments": [{"job": j, "machine": k,
                                 "processing_time": proc if shown is None or j in shown else None}
                                for j, k, proc in rows.fetchall()]}

    @tool("observe", "List every job inspected so far with its processing time.")
    def tool_view_inspected(self):
        rows = self.db.execute("SELECT j.job_id, j.processing FROM %s j JOIN %s i ON i.job_id = j.job_id "
                               "ORDER BY j.job_id" % (self.t["jobs"], self.t["inspections"])).fetchall()
        return {"jobs": [{"job": j, "processing_time": proc} for j, proc in rows]}

    @tool("observe", "List the most recent planning actions.", limit=integer(1, 500, "how many entries to list"))
    def tool_view_log(self, limit=20):
        rows = self.db.execute("SELECT entry_id, action, job_id, machine_id FROM %s ORDER BY entry_id DESC LIMIT ?"
                               % self.t["log"], (limit,)).fetchall()
        return {"log": [{"entry": e, "action": a, "job": j, "machine": k} for e, a, j, k in rows]}

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        lines = [
            self.skin["narrative"],
            "",
            "The %s runs %d identical machines, numbered %s to %s, and must process %d jobs for batches of %s (%s) "
            "from the %s, numbered %s to %s. Each job runs on exactly one machine and takes the same processing "
            "time (in time units) on any of them; a machine runs its jobs back to back from time 0, so its load "
            "is the sum of its jobs' processing times."
            % (v["site"], p["n_machines"], self.ref("machine", 0), self.ref("machine", p["n_machines"] - 1),
               p["n_jobs"], v["item"], v["sku"], v["supplier"], self.ref("job", 0), self.ref("job", p["n_jobs"] - 1)),
            "Build the plan with %s (put a job on a machine), %s and %s. %s ends the episode: any job not yet "
            "assigned is put on machine %s, and your score is minus the makespan, the largest machine load."
            % (n["assign_job"], n["unassign_job"], n["clear_assignments"], n["dispatch"], self.ref("machine", 0)),
            "You have %d turns: every tool call the world answers uses its turn cost; when they run out, the plan is "
            "dispatched as it stands (unassigned jobs on machine %s)." % (turn_budget, self.ref("machine", 0)),
        ]
        if presentation == "I":
            lines += ["", "Jobs (processing time in time units):"]
            for j in range(p["n_jobs"]):
                lines.append("  job %s: processing %d" % (self.ref("job", j), p["processing"][j]))
        else:
            cost = [t.get("turn_cost", 1) for t in self.skin["tools"] if t["canonical"] == "get_job_list"]
            lines += ["", "The jobs' processing times are not given: %s reveals one job's exact time (1 turn), %s "
                      "an estimate of every job's time (%d turns), at the cost of turns from the same budget. "
                      "Every processing time is a whole number from 1 to 20; the list shows the middle of the "
                      "block of five that holds it (1-5 shows 3, 6-10 shows 8, 11-15 shows 13, 16-20 shows 18), "
                      "so it is off by at most 2."
                      % (n["inspect_job"], n["get_job_list"], cost[0] if cost else 1)]
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="scheduling",
    version="7",
    group="probe_budgeted",
    model_class="identical parallel machines, makespan (P||Cmax, assignment)",
    solver="branch and bound over job-machine assignments (exact, integer arithmetic)",
    stochastic=False,
))
