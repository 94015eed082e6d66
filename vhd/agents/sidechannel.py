"""The `sidechannel` agent: an adversary that learns hidden θ from whatever the world answers.

    >>> from vhd.mechanisms import registry
    >>> from vhd.tasks.stages.sample import draw
    >>> facility = registry.get("facility")
    >>> knobs, theta = draw(facility, 3)
    >>> run = infer_then_play(facility, theta, knobs, facility.turn_budget(theta), episode_seed=0)
    >>> run.eliminated           # the closed world's answers tell its candidates apart nowhere
    0
    >>> run.play[-1]["tool"]
    'finalize_network'

In presentation A it spends turns where the `prober` would not: on refusals, decision answers and
observations, wherever they could tell hidden θ apart. It keeps back π*'s turns as the prober does
(`reserved_turns`) and then:

1. **Candidates.** It draws CANDIDATES θ from the family's own prior (`Family.sample` with the
   environment's knobs, seeded by the episode seed), each with θ's told fields and with every
   hidden entry its probes show (the family's `belief` follows it) taken from θ, and adds the
   belief itself: worlds the probes cannot tell from θ.
2. **Exploration.** Out of its spare turns it keeps EXPLORE_SHARE for calls chosen from the
   argument-free observations (`looks`), the decisions of the belief's optimal play, the
   information-hiding gate's edge calls (`edge_sequences` on the belief) and each decision followed
   by each observation. A call that changes the world's state is used only with an undo (another
   decision on the same arguments, or an argument-free one, that restores every table but the
   log on every candidate world), issued only when the call was accepted. It plays the calls, block
   by block, on the candidates and takes greedily the blocks whose answers split them into the most
   classes per turn; a block that splits nothing is not played, and the turns it does not use go
   back to the probes (with nothing to explore it reads and plays exactly as the prober).
3. **Inference.** It plays probes and exploration on the family's reference World with the true θ
   (trusted code, in process; every call is in its trajectory and pays its turns, refusals
   included) and keeps the candidates whose answers are the same, the ok flag and every number.
   If none fits, it moves each hidden entry of the belief that the answers depend on to the
   number the answers show that brings them closest (an echoed entry is found so).
4. **Play.** With nothing eliminated it plays the prober's plan (the optimum of `belief`); else
   the plan, among the survivors' optima and the prober's, with the best mean `Family.evaluate`
   over the survivors (their read entries as the belief states them). The plan is turned into
   calls as the prober's is.

It never reads θ's unread entries: the probes and explorations it chooses are functions of what
it read, and its plan of the answers. If the world leaks nothing unpaid, it does no better than
the prober; docs/EVAL.md measures both.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from vhd.agents.prober import affordable, reads_probes
from vhd.mechanisms import Family
from vhd.schemas.errors import InvalidParams, VhdError
from vhd.tasks.stages.check.budget import reserved_turns, turns_of
from vhd.tasks.stages.check.sequences import edge_sequences, looks
from vhd.tasks.grading.oracle import reference_module

EXPLORE_SHARE = 0.5  # of the turns left after π*'s reserve, at most this share goes to exploration
CANDIDATES = 12  # prior draws kept as candidate worlds (the belief is one more)
PLAN_DECISIONS = 3  # the belief plan's first decisions tried as explorations
EDGE_CALLS = 24  # edge calls tried, round robin over the gate's edge sequences
PAIRED = 6  # decisions each followed by every observation
PROPOSALS = 128  # numbers from the answers tried for an entry the answers depend on
SENSITIVE = 128  # hidden entries tested for whether the answers depend on them
LOG_TABLES = ("log", "journal")  # append-only records: an undone decision leaves its line there


@dataclass(frozen=True)
class Run:
    """One episode of the sidechannel agent, in canonical calls."""

    read: list[dict[str, Any]]  # the probes it paid for
    explored: list[dict[str, Any]]  # the exploration calls it made (undos included)
    chosen: list[list[dict[str, Any]]]  # the exploration blocks it chose before any answer
    play: list[dict[str, Any]]  # the plan's calls
    candidates: int  # candidate worlds it started with
    eliminated: int  # candidates the answers ruled out
    plan: np.ndarray
    nearest: dict[str, Any] | None = None  # the candidate it refined when none fitted

    @property
    def calls(self) -> list[dict[str, Any]]:
        return self.read + self.explored + self.play


class Worlds:
    """The family's reference World in presentation A, played in process on any θ."""

    def __init__(self, family: Family, turn_budget: int, episode_seed: int):
        self.family = family
        self.module, self.output = reference_module(family)
        self.config = {"presentation": "A", "episode_seed": episode_seed, "turn_budget": turn_budget}

    def create(self, theta: dict[str, Any]) -> Any:
        return self.module.create({**self.config, "params": theta})

    def after(self, theta: dict[str, Any], calls: list[dict[str, Any]]) -> Any:
        """A fresh episode on θ with `calls` made."""
        env = self.create(theta)
        for call in calls:
            self.call(env, call)
        return env

    def call(self, env: Any, call: dict[str, Any]) -> dict[str, Any]:
        return env.call(self.output.tool_name(call["tool"]), call["arguments"])

    def state(self, env: Any) -> str:
        """The world's tables but the logs: what an undo must restore."""
        names = env._world.t
        skip = {names[t] for t in LOG_TABLES if t in names}
        rows = []
        for (table,) in env._db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            if table not in skip:
                rows.append((table, sorted(map(repr, env._db.execute('SELECT * FROM "%s"' % table)))))
        return repr(rows)

    def told(self, theta: dict[str, Any]) -> str:
        """What the player reads for free: the instruction and the tool list."""
        env = self.create(theta)
        return json.dumps([env.instruction, env.tools], sort_keys=True)

    def run(self, theta: dict[str, Any], prefix: list[dict[str, Any]], block: list[dict[str, Any]],
            undos: dict[str, dict[str, Any] | None]) -> tuple[list[dict[str, Any]], list[str]]:
        """`prefix` then `block`, each accepted call of the block undone (in reverse): (the block's
        calls as issued, undos included; their answers, serialised)."""
        return self.block(self.after(theta, prefix), block, undos)

    def block(self, env: Any, block: list[dict[str, Any]], undos: dict[str, dict[str, Any] | None],
              ) -> tuple[list[dict[str, Any]], list[str]]:
        issued, answers, accepted = [], [], []
        for call in block:
            answer = self.call(env, call)
            issued.append(call)
            answers.append(_shown(answer))
            if answer.get("ok") and undos.get(_key(call)):
                accepted.append(undos[_key(call)])
        for undo in reversed(accepted):
            issued.append(undo)
            answers.append(_shown(self.call(env, undo)))
        return issued, answers


def _key(call: dict[str, Any]) -> str:
    return json.dumps(call, sort_keys=True)


def _shown(answer: dict[str, Any]) -> str:
    return json.dumps(answer, sort_keys=True, default=str)


# --- candidates: θ's told fields and read entries, the prior's draws elsewhere -----------------

def _numbers(value: Any, path: tuple = ()) -> list[tuple]:
    """The paths of the numbers in a nested list (a bare number is the path ())."""
    if isinstance(value, list):
        return [p for k, v in enumerate(value) for p in _numbers(v, path + (k,))]
    return [path] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def _at(value: Any, path: tuple) -> Any:
    for k in path:
        value = value[k]
    return value


def _put(value: Any, path: tuple, x: Any) -> Any:
    if not path:
        return x
    out = list(value)
    out[path[0]] = _put(value[path[0]], path[1:], x)
    return out


def _shape(value: Any) -> Any:
    return [_shape(v) for v in value] if isinstance(value, list) else type(value).__name__


def _differing(known: Any, other: Any, path: tuple = ()) -> list[tuple]:
    """The paths where `known` and `other` differ: number by number where they are shaped alike,
    a whole part where they are not (a box whose prize list the belief guesses shorter)."""
    if isinstance(known, list) and isinstance(other, list) and len(known) == len(other):
        return [p for k, (a, b) in enumerate(zip(known, other)) for p in _differing(a, b, path + (k,))]
    return [] if known == other else [path]


def _shown_entries(family: Family, theta: dict[str, Any], draws: list[dict[str, Any]], read: list[dict[str, Any]],
                   ) -> set[tuple[str, tuple]]:
    """(hidden field, path) of every entry the probes `read` show: the belief follows it (it
    differs between θ and some draw that agrees with θ on the told fields)."""
    known = family.belief(theta, read)
    shown = set()
    for draw in draws:
        other = family.belief(draw, read)
        for field in family.hidden:
            shown |= {(field, p) for p in _differing(known[field], other[field])}
    return shown


def _is_shown(field: str, path: tuple, shown: set[tuple[str, tuple]]) -> bool:
    return any((field, path[:i]) in shown for i in range(len(path) + 1))


def _with(value: Any, source: Any, field: str, shown: set[tuple[str, tuple]]) -> Any:
    """`value` with `source`'s part at every shown path of `field` (its parent's where `value` is
    shaped otherwise there)."""
    for f, path in sorted(shown, key=lambda fp: len(fp[1])):
        if f != field:
            continue
        try:
            value = _put(value, path, _at(source, path))
        except (IndexError, TypeError):
            value = _put(value, path[:-1], _at(source, path[:-1]))
    return value


def candidates(family: Family, theta: dict[str, Any], knobs: dict[str, Any], read: list[dict[str, Any]],
               rng: np.random.Generator, k: int = CANDIDATES) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(worlds, beliefs): the belief and k prior draws, each with θ's told fields and, where the
    probes `read` show an entry, θ's entry (worlds: to replay, as the twin of the information-hiding
    gate keeps it) or the belief's (beliefs: to plan on, a noisy reading as read)."""
    draws = [{**theta, **{f: drawn[f] for f in family.hidden}}
             for drawn in (family.sample(family.params(knobs), rng) for _ in range(k))]
    known = family.belief(theta, read)
    shown = _shown_entries(family, theta, draws, read)
    worlds = [{**own, **{f: _with(own[f], theta[f], f, shown) for f in family.hidden}} for own in [known] + draws]
    beliefs = [{**own, **{f: _with(own[f], known[f], f, shown) for f in family.hidden}} for own in [known] + draws]
    return worlds, beliefs


# --- exploration: the calls whose answers could tell the candidates apart ----------------------

def _undo_candidates(family: Family, call: dict[str, Any]) -> list[dict[str, Any]]:
    """Decisions that may undo `call`: on the same arguments (close a site opened), then argument-free ones."""
    found, plain = [], []
    for spec in family.tools_with_role("decision"):
        needed = spec.input_schema.get("required", [])
        if spec.name == call["tool"]:
            continue
        if not needed:
            plain.append({"tool": spec.name, "arguments": {}})
        elif set(needed) <= set(call["arguments"]):
            found.append({"tool": spec.name, "arguments": {a: call["arguments"][a] for a in needed}})
    return found + plain


def _undo(worlds: Worlds, thetas: list[dict[str, Any]], prefix: list[dict[str, Any]], call: dict[str, Any],
          ) -> tuple[bool, dict[str, Any] | None]:
    """(usable, undo): a call that changes the state of no candidate world needs no undo; one that
    does is usable with the first undo that restores every such world's state (logs apart)."""
    undo, changed = None, False
    for theta in thetas:
        env = worlds.after(theta, prefix)
        before = worlds.state(env)
        if not worlds.call(env, call).get("ok") or worlds.state(env) == before:
            continue
        changed = True
        options = [undo] if undo is not None else _undo_candidates(worlds.family, call)
        for option in options:
            if worlds.state(worlds.after(theta, prefix + [call, option])) == before:
                undo = option
                break
        else:
            return False, None
    return True, (undo if changed else None)


def _round_robin(sequences: list[list[dict[str, Any]]], limit: int) -> list[dict[str, Any]]:
    out, seen = [], set()
    for k in range(max((len(s) for s in sequences), default=0)):
        for s in sequences:
            if k < len(s) and _key(s[k]) not in seen:
                seen.add(_key(s[k]))
                out.append(s[k])
                if len(out) == limit:
                    return out
    return out


def blocks(family: Family, guess: dict[str, Any], episode_seed: int) -> list[list[dict[str, Any]]]:
    """What it may explore with: every look; the belief plan's first decisions; edge calls of the
    decisions and of the observations that take arguments; each of the first PAIRED decisions followed by each look."""
    observe = looks(family)
    roles = {spec.name: spec.role for spec in family.tools}
    try:
        planned = [c for c in family.simulate(guess, family.solve(guess).policy, episode_seed).calls
                   if roles[c["tool"]] == "decision"][:PLAN_DECISIONS]
    except (ValueError, VhdError):
        planned = []
    edges = [[c for c in seq if roles[c["tool"]] in ("decision", "observe") and c["arguments"]]
             for seq in edge_sequences(family, guess)]
    singles = planned + [c for c in _round_robin(edges, EDGE_CALLS) if _key(c) not in {_key(p) for p in planned}]
    decisions = [c for c in singles if roles[c["tool"]] == "decision"][:PAIRED]
    return [[c] for c in observe + singles] + [[d, o] for d in decisions for o in observe]


def explore(worlds: Worlds, thetas: list[dict[str, Any]], read: list[dict[str, Any]],
            options: list[list[dict[str, Any]]], budget: int,
            ) -> tuple[list[list[dict[str, Any]]], dict[str, dict[str, Any] | None]]:
    """(the blocks chosen, the undos): greedily the block whose answers split the candidate worlds
    into the most classes per turn (an undo's turn counted), while one splits more and the turns last."""
    undos: dict[str, dict[str, Any] | None] = {}
    usable = []
    for block in options:
        ok = True
        for call in block:
            if _key(call) not in undos:
                fine, undo = _undo(worlds, thetas, read, call)
                undos[_key(call)] = undo if fine else {"unusable": True}
            ok = ok and "unusable" not in (undos[_key(call)] or {})
        if ok:
            usable.append(block)
    undos = {k: v for k, v in undos.items() if v is None or "unusable" not in v}
    cost = {id(b): turns_of(worlds.family, b) + sum(1 for c in b if undos.get(_key(c))) for b in usable}
    answers = {id(b): [tuple(worlds.run(t, read, b, undos)[1]) for t in thetas] for b in usable}
    chosen, classes, used = [], [() for _ in thetas], 0
    while True:
        best, best_gain = None, 0.0
        for b in usable:
            if b in chosen or used + cost[id(b)] > budget:
                continue
            split = len({c + (a,) for c, a in zip(classes, answers[id(b)])}) - len(set(classes))
            if split > 0 and split / cost[id(b)] > best_gain:
                best, best_gain = b, split / cost[id(b)]
        if best is None:
            return chosen, undos
        chosen.append(best)
        used += cost[id(best)]
        classes = [c + (a,) for c, a in zip(classes, answers[id(best)])]


# --- inference and play ------------------------------------------------------------------------

def _mismatch(worlds: Worlds, theta: dict[str, Any], read: list[dict[str, Any]], explored: list[dict[str, Any]],
              seen: list[str]) -> int:
    """How many values of the exploration's answers differ on `theta` from those seen (the calls
    replayed as issued; a world that does not start differs everywhere)."""
    try:
        env = worlds.after(theta, read)
    except (ValueError, KeyError, IndexError, TypeError):
        return 10 ** 9
    return sum(len(_leaves(_shown(worlds.call(env, call))) ^ _leaves(answer)) for call, answer in zip(explored, seen))


def _walk(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every leaf of a decoded answer, in order."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else None
    if items is None:
        yield path, value
        return
    for k, v in items:
        yield from _walk(v, f"{path}/{k}")


def _leaves(answer: str) -> set[tuple[str, str]]:
    """(path, value) of every value in a serialised answer."""
    return {(path, repr(value)) for path, value in _walk(json.loads(answer))}


def _numbers_in(answers: list[str]) -> list[float]:
    """Every distinct number the answers show, in order of appearance."""
    numbers = (v for answer in answers for _, v in _walk(json.loads(answer))
               if isinstance(v, (int, float)) and not isinstance(v, bool))
    return list(dict.fromkeys(numbers))


def refine(worlds: Worlds, start: dict[str, Any], read: list[dict[str, Any]], explored: list[dict[str, Any]],
           seen: list[str], fixed: set[tuple[str, tuple]]) -> dict[str, Any]:
    """`start` moved, entry by entry, toward answers like those seen: each hidden entry not read
    (`fixed` are) whose move changes the answers is set to the number the answers show that brings
    the mismatch down most."""
    family, best = worlds.family, copy.deepcopy(start)
    score = _mismatch(worlds, best, read, explored, seen)
    entries = [(f, p) for f in family.hidden for p in _numbers(best[f]) if not _is_shown(f, p, fixed)][:SENSITIVE]
    proposals = _numbers_in(seen)[:PROPOSALS]
    for field, path in entries:
        if score == 0:
            break
        value = _at(best[field], path)
        moved = {**best, field: _put(best[field], path, value + 1 if isinstance(value, int) else value * 1.25 + 0.5)}
        if _answers_same(worlds, best, moved, read, explored):
            continue  # the answers do not depend on this entry
        for x in proposals:
            x = int(x) if isinstance(value, int) and float(x).is_integer() else x
            if isinstance(value, int) and not isinstance(x, int):
                continue
            trial = {**best, field: _put(best[field], path, x)}
            s = _mismatch(worlds, trial, read, explored, seen)
            if s < score:
                best, score = trial, s
    return best


def _answers_same(worlds: Worlds, a: dict[str, Any], b: dict[str, Any], read: list[dict[str, Any]],
                  explored: list[dict[str, Any]]) -> bool:
    def answers(theta: dict[str, Any]) -> list[str]:
        env = worlds.after(theta, read)
        return [_shown(worlds.call(env, call)) for call in explored]
    try:
        return answers(a) == answers(b)
    except (ValueError, KeyError, IndexError, TypeError):
        return False


def best_plan(family: Family, beliefs: list[dict[str, Any]], fallback: np.ndarray) -> np.ndarray:
    """The plan with the best mean exact utility over `beliefs`, among their optima and `fallback`
    (first: it wins ties). A plan a belief refuses is worth that belief's idle plan there."""
    options = [fallback]
    for belief in beliefs[:8]:
        try:
            options.append(family.solve(belief).policy)
        except (ValueError, VhdError):
            continue

    def worth(belief: dict[str, Any], plan: np.ndarray) -> float:
        try:
            return family.evaluate(belief, plan)
        except ValueError:
            return family.evaluate(belief, family.idle_policy(belief))

    means = [float(np.mean([worth(b, plan) for b in beliefs])) for plan in options]
    return options[int(np.argmax(means))]


def infer_then_play(family: Family, theta: dict[str, Any], knobs: dict[str, Any], turn_budget: int,
                    episode_seed: int, k: int = CANDIDATES) -> Run:
    """One A episode of the sidechannel agent (module docstring), in canonical calls."""
    if not reads_probes(family):
        raise InvalidParams(f"{family.name} does not declare probe_calls and belief; the sidechannel agent needs them")
    optimum = family.solve(theta).policy
    spare = max(turn_budget - reserved_turns(family, theta, optimum), 0)
    explore_turns = int(spare * EXPLORE_SHARE)
    worlds = Worlds(family, turn_budget, episode_seed)
    first = affordable(family, theta, spare - explore_turns)
    thetas, _ = candidates(family, theta, knobs, first, np.random.default_rng([episode_seed, 0x51DE]), k)
    thetas = [t for t in thetas if _starts(worlds, t)]
    chosen, undos = explore(worlds, thetas, first, blocks(family, family.belief(theta, first), episode_seed),
                            explore_turns)
    used = sum(turns_of(family, b) + sum(1 for c in b if undos.get(_key(c))) for b in chosen)
    read = affordable(family, theta, spare - used)
    env = worlds.after(theta, read)  # the true world: what the agent is answered
    explored, seen = [], []
    for block in chosen:
        before = worlds.state(env)
        issued, answers = worlds.block(env, block, undos)
        explored += issued
        seen += answers
        if worlds.state(env) != before:  # an undo that restored every candidate did not restore θ
            break
    rng = np.random.default_rng([episode_seed, 0x51DE])
    thetas, beliefs = candidates(family, theta, knobs, read, rng, k)
    kept = [(t, b) for t, b in zip(thetas, beliefs) if _starts(worlds, t)]
    guess = family.belief(theta, read)
    plan = family.solve(guess).policy
    told = worlds.told(theta)  # the instruction and the tool list: read for free, compared first
    misses = [(worlds.told(t) != told) + _mismatch(worlds, t, read, explored, seen) for t, _ in kept]
    survivors = [b for (t, b), m in zip(kept, misses) if m == 0]
    nearest = None
    if len(survivors) < len(kept):
        if not survivors:  # none fits: move the belief's guesses toward the answers
            shown = _shown_entries(family, theta, [t for t, _ in kept[1:]], read)
            nearest = refine(worlds, kept[0][0], read, explored, seen, shown)
            survivors = [{**nearest, **{f: _with(nearest[f], guess[f], f, shown) for f in family.hidden}}]
        plan = best_plan(family, survivors, plan)
    try:
        play = family.simulate(theta, plan, episode_seed).calls
    except ValueError:  # the true θ refuses the plan as a whole: offered call by call, as the prober does
        play = family.simulate(guess, plan, episode_seed).calls
    return Run(read, explored, chosen, play, len(kept), len(kept) - len(survivors), plan, nearest)


def _starts(worlds: Worlds, theta: dict[str, Any]) -> bool:
    try:
        worlds.create(theta)
        return True
    except (ValueError, KeyError, IndexError, TypeError):
        return False
