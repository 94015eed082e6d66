"""Weighted single-machine tardiness: sequence the jobs of one machine, pay for every late time unit.

Model
    One machine processes `n_jobs` = n jobs, numbered 0 … n − 1, one at a time and without
    idle time or preemption, starting at time 0. Job j takes `processing[j]` ≥ 1 whole time units,
    is due at time `due[j]` ≥ 1 and carries a lateness weight `weights[j]` ≥ 1 (currency units per
    time unit late). A plan is a sequence of distinct jobs (possibly empty, possibly incomplete);
    when the schedule is released, the jobs not in it are appended in index order, so every
    plan yields a permutation σ of all n jobs. Job σ(k) completes at C = Σ_{i ≤ k} processing[σ(i)],
    and its weighted tardiness is weights[σ(k)] · max(0, C − due[σ(k)]). `horizon` = h says how
    tight the due dates were drawn, in tenths of the total processing time P = Σ processing:
    each due[j] was drawn uniformly from 1 … ceil(h · P / 10).
    The decision process is deterministic. Solved exactly by dynamic programming over subsets
    (f(S) = min over the last job j ∈ S of f(S − j) + weights[j] · max(0, P(S) − due[j]),
    2^n · n steps), in integer arithmetic. Limits: solve() takes 1 … 10 jobs (MAX_JOBS) with
    whole processing times, due dates and weights ≥ 1 and a whole `horizon` in 1 … 20; any other
    θ (40 jobs, a fractional due date) is refused with InvalidParams before anything is allocated.

State
    the job catalog (processing time, due date, weight of every job), the inspections made, the
    sequence built so far (position → job), an action log and a state table (released or not).

Tools
    probes: inspect one job (its exact processing time, due date and weight, 1 turn), read the
    job sheet (an estimate of every job's three figures, a "forecast sticker", SHEET_COST = 3
    turns); decisions: schedule a job next, unschedule the last job, clear the sequence; clock:
    release the schedule (ends the episode); observations: view the sequence (with completion
    times), view the current completion time, list the unscheduled jobs, view the tardiness so
    far, view the inspected jobs, view the action log. The observations describe only the jobs
    already scheduled (in presentation A, scheduling a job and looking at the sequence is itself
    a costly probe). The schemas shown bound job numbers by n − 1 (`World.limits`; the
    instruction tells n in both presentations).

    Presentation A hides every processing time, due date and weight. The job sheet shows each
    figure only as the middle of the block of five that holds it (1–5 shows 3, 6–10 shows 8,
    11–15 shows 13, …: off by at most 2, `World.listed`); `inspect_job` shows one job's exact
    figures. The A instruction states the ranges (processing times and weights 1 … 10, due dates
    1 … ceil(horizon · P / 10), told as horizon × 10 % of the total processing time) and the
    sheet's error, so a job on the sheet is guessed at its estimates and, before the sheet is
    read, an uninspected job at GUESS = 5 time units and weight 5, due at the middle of the
    window its believed total processing time gives (`belief`).

Plan
    an integer vector of at most n_jobs distinct job numbers: the processing order; jobs left
    out are appended in index order.

Reward
    utility = −Σ_j weights[j] · max(0, C_j − due[j]) over the released schedule (an integer,
    ≤ 0; 0 when no job is late). r = clip01((u − u_default) / (u* − u_default)), where
    u_default is Smith's rule as the job sheet reads (WSPT: jobs by the sheet's estimated
    processing/weight ascending, ties by index): the default reads the sticker and is misled by it.

Advantages
    The solver's state is (released, sequence): the state table's flag and the jobs of the
    sequence table by position. A* is the change of the potential Φ = the best utility
    reachable from the state: the sequence can be taken back job by job (or cleared), so Φ = u*
    while it is open, whatever it holds, and Φ = −(weighted tardiness of the released
    permutation) once released. Turns are ignored: a budget too short to undo a bad sequence
    still counts as u* (the sum telescopes all the same). Scheduling, unscheduling or clearing
    gets A* = 0; `release_schedule` gets −ΣwT(sequence, then the rest in index order) − u*;
    running out of turns releases the sequence as it stands, also −ΣwT − u*. Whole numbers, so
    Σ A* = u − u* exactly on every trajectory.

Episode end
    after `release_schedule`, or when the turn budget runs out: the sequence is then released as
    it stands, with the unscheduled jobs appended in index order (no further decisions). The
    budget is n + max(1, n − 1) turns, shown in both presentations: every job scheduled and the
    release (any sequence) fit, and in A the inspections π*'s sequence depends on but not every
    job's (A environments are admitted where that binds: `BUDGET_BINDS`), so which jobs to
    inspect is a choice.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from pydantic import BaseModel

from vhd.mechanisms._advantage import until_committed
from vhd.mechanisms._contract import AgentError, BaseWorld, Episode, Family, Solution, integer, knob, register, tool
from vhd.mechanisms._plan import InvalidPlan, PlanSpec
from vhd.mechanisms._solve import certified, solved
from vhd.mechanisms._theta import ThetaCheck

MAX_JOBS = 10  # Params, tool schema and solve() bound: the subset DP takes 2^n · n steps and 2^n memory
MAX_PROCESSING = 10
MAX_WEIGHT = 10
SHEET_COST = 3  # the job sheet: an estimate of every job at once
GUESS = 5  # presentation A: a processing time or weight neither inspected nor on the sheet, the middle of 1 … 10
HIDDEN = ("processing", "due", "weights")


class Params(BaseModel):
    """Difficulty knobs of a weighted-tardiness instance."""

    size: int = knob(6, 3, MAX_JOBS, sampled=(4, 10),
                     description="number of jobs n on the machine, in jobs; solve() refuses θ with more than MAX_JOBS "
                                 "= 10")
    horizon: int = knob(6, 1, 20, sampled=(5, 10),
                        description="due-date window, in tenths of the total processing time P: every due date is "
                                    "drawn uniformly from 1 … ceil(horizon · P / 10) time units (small = tight due "
                                    "dates, 10 = due dates spread over the whole makespan)")


def sample(params: Params, rng: np.random.Generator) -> dict:
    """Draw θ: processing times 1…10, weights 1…10 and due dates 1…ceil(horizon · P / 10), all integers."""
    n = params.size
    processing = [int(p) for p in rng.integers(1, MAX_PROCESSING + 1, size=n)]
    weights = [int(w) for w in rng.integers(1, MAX_WEIGHT + 1, size=n)]
    window = max(1, -(-params.horizon * sum(processing) // 10))
    due = [int(d) for d in rng.integers(1, window + 1, size=n)]
    return {"n_jobs": n, "horizon": params.horizon, "processing": processing, "due": due, "weights": weights}


# ---------------------------------------------------------------------------------------------
# Plans: an integer array of distinct job numbers, the sequence in the order it is scheduled
# (a prefix; the remaining jobs are appended in index order on release). π* is a full permutation.


def plan_spec(theta: dict) -> PlanSpec:
    """The form of a plan: 0 … n_jobs entries, each a job 0 … n_jobs − 1 (distinct: `_check_plan`)."""
    n = theta["n_jobs"]
    return PlanSpec(shape=(n,), integer=True, low=0, high=n - 1, min_length=0)


def _check_plan(theta: dict, policy: np.ndarray) -> list[int]:
    """The plan as a list of distinct job numbers; ValueError (InvalidPlan) naming the entry if it is malformed."""
    seq = [int(j) for j in plan_spec(theta).check(policy).tolist()]
    if len(set(seq)) != len(seq):
        k = next(k for k, j in enumerate(seq) if j in seq[:k])
        raise InvalidPlan(f"entry [{k}] is {seq[k]}, already scheduled; expected a job not yet in the plan "
                          "(a plan schedules each job at most once)")
    return seq


def _completed(theta: dict, seq: list[int]) -> list[int]:
    """The released permutation: the plan, then the unscheduled jobs in index order."""
    chosen = set(seq)
    return seq + [j for j in range(theta["n_jobs"]) if j not in chosen]


def _tardiness(theta: dict, order: list[int]) -> int:
    clock, total = 0, 0
    for j in order:
        clock += theta["processing"][j]
        total += theta["weights"][j] * max(0, clock - theta["due"][j])
    return total


def evaluate(theta: dict, policy: np.ndarray) -> float:
    """Exact utility of a plan: −(weighted tardiness of the plan completed in index order)."""
    seq = _check_plan(theta, policy)
    return float(-_tardiness(theta, _completed(theta, seq)))


def check_theta(theta: dict) -> None:
    """InvalidParams unless θ is what the family declares: 1 … MAX_JOBS jobs, whole processing
    times, due dates and weights ≥ 1, a whole horizon in 1 … 20 (checked before the DP allocates)."""
    check = ThetaCheck("tardiness", theta)
    n = check.count("n_jobs", 1, MAX_JOBS)
    check.count("horizon", 1, 20)
    for key in ("processing", "due", "weights"):
        check.whole(key, (n,), low=1)


def _subset_dp(theta: dict) -> tuple[float, np.ndarray]:
    """f(S) = least weighted tardiness of the jobs of S scheduled first (they end at P(S)).
    Ties go to the smallest last job, so the plan is deterministic."""
    n = theta["n_jobs"]
    p, d, w = theta["processing"], theta["due"], theta["weights"]
    if not (len(p) == len(d) == len(w) == n):
        raise ValueError(f"processing, due and weights must each have n_jobs = {n} entries")
    full = (1 << n) - 1
    length = [0] * (full + 1)
    best = [0] * (full + 1)
    last = [-1] * (full + 1)
    for mask in range(1, full + 1):
        low = (mask & -mask).bit_length() - 1
        length[mask] = length[mask & (mask - 1)] + p[low]
        end = length[mask]
        top, arg = None, -1
        for j in range(n):
            if mask >> j & 1:
                value = best[mask ^ (1 << j)] + w[j] * max(0, end - d[j])
                if top is None or value < top:
                    top, arg = value, j
        best[mask], last[mask] = top, arg
    seq, mask = [], full
    while mask:
        seq.append(last[mask])
        mask ^= 1 << last[mask]
    seq.reverse()
    plan = np.array(seq, dtype=np.int8)
    if _tardiness(theta, seq) != best[full]:
        raise ArithmeticError("the reconstructed sequence does not attain the DP value")
    return float(-best[full]), plan


def solve(theta: dict) -> Solution:
    """u* and π* (the optimal sequence, int8) by the subset DP; values of the default and idle plans.
    InvalidParams first if θ is not of the declared form (`check_theta`)."""
    check_theta(theta)
    found = certified(lambda: _subset_dp(theta), method="dynamic programming over job subsets",
                      solver="python (integer DP)", solver_version=np.__version__,
                      state_space=2 ** theta["n_jobs"])
    return solved(theta, found, evaluate, default_policy, idle_policy)


# z = (u0 − u_idle) / (u* − u_idle), idle = index order. WSPT is optimal when every job is late
# anyway (then ΣwT = ΣwC − Σwd), so z near 1 means tight due dates with nothing to learn; above
# 0.97 Smith's rule nearly solves it (here on the sheet's estimates, which lowers z somewhat).
# Below −1 idling beats Smith's rule by more than π* beats idling.
DEFAULT_BAND = (-1.0, 0.97)


def default_policy(theta: dict) -> np.ndarray:
    """Smith's rule (WSPT) on the job sheet's estimates: every job, by listed(processing[j]) /
    listed(weights[j]) ascending (`World.listed`, the middle of each figure's block of five), ties
    by index. Due dates are ignored. It reads the sticker, not the exact figures, so it is misled by it."""
    listed = World.listed
    order = sorted(range(theta["n_jobs"]),
                   key=lambda j: (Fraction(listed(theta["processing"][j]), listed(theta["weights"][j])), j))
    return np.array(order, dtype=np.int8)


def idle_policy(theta: dict) -> np.ndarray:
    """Schedule nothing: release at once, so the jobs run in index order 0, 1, …, n − 1."""
    return np.zeros(0, dtype=np.int8)


def random_policy(theta: dict, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random permutation of all the jobs."""
    return rng.permutation(theta["n_jobs"]).astype(np.int8)


def simulate(theta: dict, policy: np.ndarray, episode_seed: int) -> Episode:
    """Play a plan: schedule its jobs in order, then release. Deterministic (the episode seed is
    accepted and ignored)."""
    seq = _check_plan(theta, policy)
    calls = [{"tool": "schedule_next", "arguments": {"job": j}} for j in seq]
    calls.append({"tool": "release_schedule", "arguments": {}})
    return Episode(utility=float(-_tardiness(theta, _completed(theta, seq))), calls=calls, decisions=seq)


# ---------------------------------------------------------------------------------------------
# Decision rewards: the potential of a state is the best utility still reachable from it: u*
# while the sequence is open (every job can be taken back), −ΣwT once released.


decision_values, decision_state, advantage = until_committed(solve)


BUDGET_BINDS = True  # A admits θ only where the budget binds (vhd/tasks/stages/check/budget.py)


def turn_budget(theta: dict) -> int:
    """2n − 1 turns: π*'s sequence with the jobs it depends on inspected, but in presentation A not
    every job as well, so which jobs to inspect is a choice (`vhd/tasks/stages/check/budget.py` measures
    both)."""
    return theta["n_jobs"] + max(1, theta["n_jobs"] - 1)


# ---------------------------------------------------------------------------------------------
# Presentation A: what the probes show, and the guess for what they did not (the A instruction
# states the ranges and the job sheet's error): a job on the sheet is at the sheet's estimates;
# a job neither on it nor inspected takes GUESS time units and weight GUESS, and is due at the
# middle of the stated window 1 … ceil(horizon · P / 10), P the total of the believed times.


def probe_calls(theta: dict) -> list[dict]:
    """Read the job sheet, then inspect the jobs in index order."""
    return [{"tool": "get_job_sheet", "arguments": {}}] + [
        {"tool": "inspect_job", "arguments": {"job": j}} for j in range(theta["n_jobs"])]


def belief(theta: dict, read: list[dict]) -> dict:
    """θ as known after the probe calls `read`: inspected jobs exact, the sheet's estimates for
    the other jobs once it is read, the stated guesses before."""
    n, listed = theta["n_jobs"], World.listed
    seen = {call["arguments"]["job"] for call in read if call["tool"] == "inspect_job"}
    if any(call["tool"] == "get_job_sheet" for call in read):
        known = {key: [v if j in seen else listed(v) for j, v in enumerate(theta[key])] for key in HIDDEN}
        return {**theta, **known}
    processing = [theta["processing"][j] if j in seen else GUESS for j in range(n)]
    weights = [theta["weights"][j] if j in seen else GUESS for j in range(n)]
    window = max(1, -(-theta["horizon"] * sum(processing) // 10))
    due = [theta["due"][j] if j in seen else (1 + window) // 2 for j in range(n)]
    return {**theta, "processing": processing, "due": due, "weights": weights}


# ---------------------------------------------------------------------------------------------
# The world the template setter embeds in generated modules: standard library only. It may use
# AgentError, sqlite3, random, math and json, and keeps all mutable state in the database.


TABLES = ("catalog", "inspections", "sequence", "log", "state")


class World(BaseWorld):
    """The site's machine: jobs (catalog), inspections, sequence, log and a state table."""

    PARAMS = ("n_jobs", "horizon", "processing", "due", "weights")
    STATE = (("released", 0),)
    IDS = {key: "job" for key in ("job", "scheduled", "unscheduled", "sequence", "appended_in_index_order")}
    BLOCK = 5  # the job sheet shows the middle of the block of BLOCK units that holds each figure

    @staticmethod
    def listed(value):
        """The job sheet's estimate of a processing time, due date or weight: the middle of its
        block of five (1–5 → 3, 6–10 → 8, 11–15 → 13, …), off by at most 2."""
        return World.BLOCK * ((value - 1) // World.BLOCK) + World.BLOCK // 2 + 1

    def __init__(self, db, params, episode_seed, skin):
        super().__init__(db, params, episode_seed, skin)
        n = params["n_jobs"]
        if not isinstance(n, int) or n < 1 or any(len(params[k]) != n for k in ("processing", "due", "weights")):
            raise ValueError("processing, due and weights must each have n_jobs=%r entries" % (n,))
        t = self.t
        db.execute("CREATE TABLE %s (job_id INTEGER PRIMARY KEY, processing INTEGER NOT NULL, "
                   "due INTEGER NOT NULL, weight INTEGER NOT NULL)" % t["catalog"])
        db.execute("CREATE TABLE %s (job_id INTEGER PRIMARY KEY REFERENCES %s(job_id))"
                   % (t["inspections"], t["catalog"]))
        db.execute("CREATE TABLE %s (position INTEGER PRIMARY KEY, job_id INTEGER NOT NULL UNIQUE REFERENCES "
                   "%s(job_id), released INTEGER NOT NULL DEFAULT 0)" % (t["sequence"], t["catalog"]))
        db.execute("CREATE TABLE %s (entry_id INTEGER PRIMARY KEY, action TEXT, job_id INTEGER)" % t["log"])
        db.executemany("INSERT INTO %s VALUES (?, ?, ?, ?)" % t["catalog"],
                       [(j, params["processing"][j], params["due"][j], params["weights"][j]) for j in range(n)])

    # -- state helpers --------------------------------------------------------------------
    def _job(self, job):
        n = self.p["n_jobs"]
        if not 0 <= job < n:
            raise AgentError("there are %d jobs, numbered %s to %s; got %s"
                             % (n, self.ref("job", 0), self.ref("job", n - 1), self.ref("job", job)))
        return job

    def _open(self):
        if self._get("released"):
            raise AgentError("the schedule has been released; nothing can change any more")

    def _sequence(self):
        return [row[0] for row in self.db.execute("SELECT job_id FROM %s ORDER BY position" % self.t["sequence"])]

    def _timeline(self):
        """(position, job, processing, due, weight, completion) of the sequence so far."""
        rows = self.db.execute("SELECT s.position, s.job_id, c.processing, c.due, c.weight FROM %s s "
                               "JOIN %s c ON c.job_id = s.job_id ORDER BY s.position"
                               % (self.t["sequence"], self.t["catalog"])).fetchall()
        out, clock = [], 0
        for position, job, proc, due, weight in rows:
            clock += proc
            out.append((position, job, proc, due, weight, clock))
        return out

    def _weighted_tardiness(self):
        return sum(weight * max(0, end - due) for _, _, _, due, weight, end in self._timeline())

    def _append(self, job, released):
        position = self.db.execute("SELECT COALESCE(MAX(position), -1) + 1 FROM %s" % self.t["sequence"]).fetchone()[0]
        self.db.execute("INSERT INTO %s VALUES (?, ?, ?)" % self.t["sequence"], (position, job, released))
        return position

    def _release(self, why):
        for job in self._unscheduled():
            self._append(job, 1)
        self._set("released", 1)
        self._log(why)

    def _unscheduled(self):
        return [row[0] for row in self.db.execute(
            "SELECT job_id FROM %s WHERE job_id NOT IN (SELECT job_id FROM %s) ORDER BY job_id"
            % (self.t["catalog"], self.t["sequence"]))]

    # -- episode ----------------------------------------------------------------------------
    def over(self):
        return self._get("released") == 1

    def limits(self, presentation):
        """Jobs run 0 … n − 1 (the instruction tells n in both presentations)."""
        job = {"job": (0, self.p["n_jobs"] - 1)}
        return {"inspect_job": job, "schedule_next": job}

    def utility(self):
        return -self._weighted_tardiness()

    def run_out(self):
        self._release("released (turns ran out)")

    # -- probes -----------------------------------------------------------------------------
    def _inspect(self, job):
        self.db.execute("INSERT OR IGNORE INTO %s VALUES (?)" % self.t["inspections"], (job,))
        proc, due, weight = self.db.execute(
            "SELECT processing, due, weight FROM %s WHERE job_id = ?" % self.t["catalog"], (job,)).fetchone()
        return {"job": job, "processing_time": proc, "due": due, "weight": weight}

    @tool("probe", "Inspect one job for the {supplier}'s {item}: its processing time, due date and weight in "
          "{currency} per time unit late.", reveals=("processing", "due", "weights"),
          job=integer(0, MAX_JOBS - 1, "the job to inspect"))
    def tool_inspect_job(self, job):
        job = self._job(job)
        result = self._inspect(job)
        result["currency"] = self.v["currency"]
        return result

    @tool("probe", "Read the {site}'s job sheet: an estimate of every job's processing time, due date and weight, "
          "each figure the middle of its block of five (1-5 shows 3, 6-10 shows 8, ...), off by at most 2 (costs %d "
          "turns)." % SHEET_COST, reveals=("processing", "due", "weights"), turn_cost=SHEET_COST, noisy=True)
    def tool_get_job_sheet(self):
        rows = self.db.execute("SELECT job_id, processing, due, weight FROM %s ORDER BY job_id"
                               % self.t["catalog"]).fetchall()
        listed = World.listed
        return {"jobs": [{"job": j, "estimated_processing_time": listed(proc),
                          "estimated_due": listed(due), "estimated_weight": listed(weight)}
                         for j, proc, due, weight in rows],
                "weight_unit": "%s per time unit late" % self.v["currency"], "exact": False,
                "note": "an estimate: each figure may be off by up to 2; %s shows one job's exact figures"
                        % self.name["inspect_job"]}

    # -- decisions --------------------------------------------------------------------------
    @tool("decision", "Append one job to the end of the machine's sequence (refused if it is already in it).",
          job=integer(0, MAX_JOBS - 1, "the job to append"))
    def tool_schedule_next(self, job):
        self._open()
        job = self._job(job)
        if job in self._sequence():
            raise AgentError("job %s is already in the sequence, at position %d"
                             % (self.ref("job", job), self._sequence().index(job)))
        position = self._append(job, 0)
        self._log("schedule", job_id=job)
        return {"scheduled": job, "position": position, "sequence": self._sequence()}

    @tool("decision", "Remove the last job from the sequence.")
    def tool_unschedule_last(self):
        self._open()
        sequence = self._sequence()
        if not sequence:
            raise AgentError("the sequence is empty; there is no last job to unschedule")
        self.db.execute("DELETE FROM %s WHERE position = (SELECT MAX(position) FROM %s)"
                        % (self.t["sequence"], self.t["sequence"]))
        self._log("unschedule", job_id=sequence[-1])
        return {"unscheduled": sequence[-1], "sequence": sequence[:-1]}

    @tool("decision", "Remove every job from the sequence.")
    def tool_clear_schedule(self):
        self._open()
        if not self._sequence():
            raise AgentError("the sequence is already empty")
        self.db.execute("DELETE FROM %s" % self.t["sequence"])
        self._log("clear")
        return {"sequence": []}

    # -- clock ------------------------------------------------------------------------------
    @tool("clock", "Release the sequence to the machine: unscheduled jobs are appended in index order, the "
          "episode ends and the score is minus the weighted tardiness in {currency}.")
    def tool_release_schedule(self):
        self._open()
        appended = self._unscheduled()
        self._release("released")
        return {"sequence": self._sequence(), "appended_in_index_order": appended,
                "weighted_tardiness": self._weighted_tardiness(), "currency": self.v["currency"]}

    # -- observations -----------------------------------------------------------------------
    def _known(self):
        """How many jobs at the head of the sequence the player has read every figure of: in
        presentation A a completion time is shown only when every job up to it is inspected (a
        completion time sums the times before it), in I always."""
        timeline = self._timeline()
        if self.presentation != "A":
            return len(timeline)
        inspected = set(row[0] for row in self.db.execute("SELECT job_id FROM %s" % self.t["inspections"]))
        known = 0
        while known < len(timeline) and timeline[known][1] in inspected:
            known += 1
        return known

    @tool("observe", "Show the sequence built so far with every job's completion time (once it and the jobs "
          "before it are inspected).")
    def tool_view_sequence(self):
        known = self._known()
        return {"sequence": [{"position": pos, "job": job, "completes_at": end if pos < known else None}
                             for pos, job, _, _, _, end in self._timeline()]}

    @tool("observe", "Show when the last job of the sequence so far completes (once every job in it is inspected).")
    def tool_view_completion_time(self):
        timeline = self._timeline()
        shown = self._known() == len(timeline)
        return {"jobs_scheduled": len(timeline),
                "completion_time": (timeline[-1][5] if timeline else 0) if shown else None}

    @tool("observe", "List the jobs not yet in the sequence and whether each is inspected.")
    def tool_list_unscheduled(self):
        inspected = set(row[0] for row in self.db.execute("SELECT job_id FROM %s" % self.t["inspections"]))
        rows = self.db.execute("SELECT job_id FROM %s WHERE job_id NOT IN (SELECT job_id FROM %s) "
                               "ORDER BY job_id" % (self.t["catalog"], self.t["sequence"])).fetchall()
        return {"unscheduled": [{"job": j, "inspected": j in inspected} for j, in rows]}

    @tool("observe", "Show the weighted tardiness in {currency} of the sequence so far and which of its jobs "
          "are late.")
    def tool_view_tardiness(self):
        timeline = self._timeline()
        if self._known() < len(timeline):  # presentation A: it sums figures not inspected
            return {"weighted_tardiness": None, "currency": self.v["currency"], "late_jobs": None,
                    "note": "shown once every job in the sequence is inspected"}
        late = [{"job": job, "late_by": max(0, end - due), "cost": weight * max(0, end - due)}
                for _, job, _, due, weight, end in timeline if end > due]
        return {"weighted_tardiness": self._weighted_tardiness(), "currency": self.v["currency"], "late_jobs": late}

    @tool("observe", "List every job inspected so far with its processing time, due date and weight.")
    def tool_view_inspected(self):
        rows = self.db.execute("SELECT c.job_id, c.processing, c.due, c.weight FROM %s c JOIN %s i "
                               "ON i.job_id = c.job_id ORDER BY c.job_id"
                               % (self.t["catalog"], self.t["inspections"])).fetchall()
        return {"jobs": [{"job": j, "processing_time": p, "due": d, "weight": w} for j, p, d, w in rows]}

    @tool("observe", "List the most recent scheduling actions.", limit=integer(1, 500, "how many entries to list"))
    def tool_view_log(self, limit=20):
        rows = self.db.execute("SELECT entry_id, action, job_id FROM %s ORDER BY entry_id DESC LIMIT ?"
                               % self.t["log"], (limit,)).fetchall()
        return {"log": [{"entry": e, "action": a, "job": j} for e, a, j in rows]}

    # -- what the player reads --------------------------------------------------------------
    def instruction(self, presentation, turn_budget):
        p, v, n = self.p, self.v, self.name
        lines = [
            self.skin["narrative"],
            "",
            "The %s runs one machine that must process %d jobs for batches of %s (%s) from the %s, numbered %s to "
            "%s. The machine works on one job at a time, from time 0, without pauses or interruptions. Each job "
            "has a processing time and a due date (in time units) and a weight in %s per time unit it finishes late."
            % (v["site"], p["n_jobs"], v["item"], v["sku"], v["supplier"], self.ref("job", 0),
               self.ref("job", p["n_jobs"] - 1), v["currency"]),
            "Build the sequence with %s (append a job), %s and %s. %s ends the episode: any job not yet in the "
            "sequence is appended in index order, and your score is minus the total weighted tardiness, "
            "the sum over jobs of weight × max(0, completion time − due date)."
            % (n["schedule_next"], n["unschedule_last"], n["clear_schedule"], n["release_schedule"]),
            "You have %d turns: every tool call the world answers uses its turn cost; when they run out, the sequence "
            "is released as it stands (unscheduled jobs appended in index order)." % turn_budget,
        ]
        if presentation == "I":
            lines += ["", "Jobs (processing time; due date; weight in %s per time unit late):" % v["currency"]]
            for j in range(p["n_jobs"]):
                lines.append("  job %s: processing %d; due %d; weight %d"
                             % (self.ref("job", j), p["processing"][j], p["due"][j], p["weights"][j]))
        else:
            cost = [t.get("turn_cost", 1) for t in self.skin["tools"] if t["canonical"] == "get_job_sheet"]
            lines += ["", "The jobs' processing times, due dates and weights are not given: %s reveals one job's "
                      "exact figures (1 turn), %s an estimate of every job's (%d turns), at the cost of turns from "
                      "the same budget. Every processing time and every weight is a whole number from 1 to 10, and "
                      "every due date a whole number from 1 to %d%% of the total processing time of all the jobs "
                      "(rounded up); the sheet shows the middle of the block of five that holds each figure (1-5 "
                      "shows 3, 6-10 shows 8, 11-15 shows 13, ...), so it is off by at most 2."
                      % (n["inspect_job"], n["get_job_sheet"], cost[0] if cost else 1, 10 * p["horizon"])]
        return "\n".join(lines)


register(Family.of(
    globals(),
    name="tardiness",
    version="7",
    group="probe_budgeted",
    model_class="single-machine weighted tardiness (1||ΣwT, sequencing)",
    solver="dynamic programming over job subsets (exact, integer arithmetic)",
    stochastic=False,
))
