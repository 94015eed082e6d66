"""Play an agent on admitted environments, score each episode, summarise per family × presentation.

    >>> from vhd.agents import Table
    >>> episodes = play([Table(env, model, solution, setter_output, family)], "greedy", episodes=3, corpus_version="v1")
    >>> summary(episodes)["families"]["inventory_dp"]["I"]["mean"]
    0.32...

Where the generated module runs: every trajectory is scored by `tasks/score.score`, which
replays it in a fresh sandboxed child process (`tasks/sandbox`: rlimits, no network, scratch
dir, dropped uid where possible), one process per environment for all K episodes of an agent.
The agent process never imports or executes a generated module. Presentation F has no module:
its one `submit_plan` call is graded in process by the family's exact evaluator.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from statistics import mean, stdev
from typing import Any, Callable

from vhd.agents import Table, check_agent, trajectory
from vhd.mechanisms import registry
from vhd.schemas.errors import InvalidParams
from vhd.schemas.records import EnvironmentRecord, EpisodeRecord
from vhd.tasks.corpus.publish import open_version
from vhd.tasks.grading.score import score

PRESENTATIONS = ("F", "I", "A")
Z95 = 1.959963984540054


def check_request(agent: str, preset_name: str, presentations: list[str] | None, episodes: int,
                  per_cell: int) -> tuple[list[str], tuple[str, ...]]:
    """Validate an eval request before anything is opened: (the preset's families, the chosen
    presentations). Raises InvalidParams (one line) for an unknown agent, preset or presentation,
    `episodes` < 1 or `per_cell` < 0."""
    from vhd.tasks.corpus.presets import preset

    if ":" in agent:
        from vhd.agents.live import parse_agent

        parse_agent(agent)
    else:
        check_agent(agent)
    plan = preset(preset_name, registry.all())
    families = sorted({slot.family for slot in plan.slots})
    chosen = tuple(presentations) if presentations is not None else plan.presentations
    bad = [p for p in chosen if p not in PRESENTATIONS]
    if bad or not chosen:
        raise InvalidParams(f"unknown presentations {bad or list(chosen)!r}; expected a comma list among F, I, A")
    if episodes < 1 or per_cell < 0:
        raise InvalidParams(f"--episodes must be ≥ 1 and --per-cell ≥ 0, got {episodes} and {per_cell}")
    return families, chosen


def select_envs(wh: Any, families: list[str], presentations: tuple[str, ...], corpus_version: str | None,
                per_cell: int, preset_name: str = "diagnostic") -> tuple[str, list[EnvironmentRecord]]:
    """The environments an eval plays, read from an open warehouse `wh`: admitted, current, of
    `families` in `presentations`; members of `corpus_version` (default: the latest published
    version; every admitted environment if none is published), the version verified first (`open_version`:
    a row changed since publication is a one-line IntegrityError); the first `per_cell` by env id of
    each family × presentation (0 = all). Returns (the version evaluated or "", environments)."""
    version = None
    if corpus_version is not None or wh.version_names():  # verified against its digest before any use
        version, members = open_version(wh, corpus_version)
    envs = [e for e in wh.environments() if e.family in families and e.presentation in presentations]
    if version is not None:
        ids = {e.env_id for e in members}
        envs = [e for e in envs if e.env_id in ids]
    if per_cell:
        kept, seen = [], {}
        for e in envs:
            key = (e.family, e.presentation)
            if seen.get(key, 0) < per_cell:
                kept.append(e)
                seen[key] = seen.get(key, 0) + 1
        envs = kept
    if not envs:
        raise InvalidParams(f"no admitted environments of {families} in presentations {list(presentations)}; "
                            f"run `vhd refresh --preset {preset_name}` first")
    return (version.version if version else ""), envs


def batches(envs: list[EnvironmentRecord], size: int) -> list[list[EnvironmentRecord]]:
    """`envs` grouped by family (in order of first appearance) and cut into batches of at most
    `size`: one batch is one task run of the evaluate flow."""
    by_family: dict[str, list[EnvironmentRecord]] = {}
    for e in envs:
        by_family.setdefault(e.family, []).append(e)
    return [group[i:i + size] for group in by_family.values() for i in range(0, len(group), size)]


def play(tables: list[Table], agent: str, episodes: int = 1, corpus_version: str = "") -> list[EpisodeRecord]:
    """K episodes of `agent` on every table: scripted (no messages, zero tokens) or an LLM agent
    (`anthropic:MODEL`, `openai:BASE_URL:MODEL`, played turn by turn by vhd/agents/live.py)."""
    if ":" in agent:
        from vhd.agents.live import play_llm

        return [play_llm(t, agent, k, corpus_version) for t in tables for k in range(episodes)]
    now = datetime.now(timezone.utc).isoformat()
    out = []
    for t in tables:
        calls = [trajectory(agent, t, k) for k in range(episodes)]
        rows = score(t.env, t.setter_output, t.model.theta, t.family, t.solution, calls)
        for k, (played, row) in enumerate(zip(calls, rows)):
            observations = {key: row.get(key) for key in ("error", "terminal", "rejected_calls", "first_error",
                                                         "obs_digest", "turns_used") if key in row}
            out.append(EpisodeRecord.build(
                env_id=t.env.env_id, corpus_version=corpus_version, agent=agent, presentation=t.env.presentation,
                family=t.env.family, episode_seed=t.env.episode_seed, episode_index=k, messages=[],
                tool_calls=played, observations=observations, tokens={"input": 0, "output": 0},
                utility=row["utility"], reward=row["reward"], created_at=now))
    return out


def evaluate(open_warehouse: Callable[[], Any], agent: str, families: list[str], presentations: tuple[str, ...],
             episodes: int = 1, per_cell: int = 0, corpus_version: str | None = None,
             preset_name: str = "diagnostic") -> dict[str, Any]:
    """`vhd eval` in this process: the environments `select_envs` chooses, `episodes` episodes of
    `agent` on each (`play`), every episode stored in one transaction. The warehouse is opened
    with `open_warehouse()` twice, to read and to write, and is not held while the agent plays.
    Returns {"summary", "corpus_version", "episodes"}, as the evaluate flow does."""
    with open_warehouse() as wh:
        version, envs = select_envs(wh, families, presentations, corpus_version, per_cell, preset_name)
        inputs = wh.eval_inputs([e.env_id for e in envs])
    played = play([Table(e, *inputs[e.env_id], registry.get(e.family)) for e in envs], agent, episodes, version)
    with open_warehouse() as wh:
        wh.store(played)
    return {"summary": summary(played), "corpus_version": version, "episodes": len(played)}


def interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of the normal 95 % interval); half-width 0 for fewer than two values."""
    m = mean(values)
    return m, (Z95 * stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0)


def summary(episodes: list[EpisodeRecord]) -> dict[str, Any]:
    """Per family and presentation: mean reward, 95 % CI half-width, n; the family mean over
    presentations; per presentation the mean over families; the F→I and I→A gaps
    (mean(F) − mean(I), mean(I) − mean(A): positive means the reward drops)."""
    cells: dict[str, dict[str, list[float]]] = {}
    for e in episodes:
        cells.setdefault(e.family, {}).setdefault(e.presentation, []).append(e.reward)
    families = {}
    for family in sorted(cells):
        row = {}
        for p in PRESENTATIONS:
            if p in cells[family]:
                m, half = interval(cells[family][p])
                row[p] = {"mean": m, "ci95": half, "n": len(cells[family][p])}
        row["mean"] = mean(v["mean"] for v in row.values())
        families[family] = row
    overall = {p: mean(r[p]["mean"] for r in families.values() if p in r)
               for p in PRESENTATIONS if any(p in r for r in families.values())}
    gaps = {}
    if "F" in overall and "I" in overall:
        gaps["F-I"] = overall["F"] - overall["I"]
    if "I" in overall and "A" in overall:
        gaps["I-A"] = overall["I"] - overall["A"]
    return {"families": families, "mean": overall, "gaps": gaps, "episodes": len(episodes)}


def as_json(agent: str, summary_: dict[str, Any]) -> dict[str, Any]:
    """The issue's shape: {"agent", "families": {NAME: {"F": mean, ...}}, "mean": {...}}, plus detail."""
    return {
        "agent": agent,
        "families": {f: {p: row[p]["mean"] for p in PRESENTATIONS if p in row} for f, row in summary_["families"].items()},
        "mean": summary_["mean"],
        "gaps": summary_["gaps"],
        "ci95": {f: {p: row[p]["ci95"] for p in PRESENTATIONS if p in row} for f, row in summary_["families"].items()},
        "n": {f: {p: row[p]["n"] for p in PRESENTATIONS if p in row} for f, row in summary_["families"].items()},
        "episodes": summary_["episodes"],
    }
