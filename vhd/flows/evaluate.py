"""The `evaluate` flow: play an agent on a preset's admitted environments, store the episodes,
publish the tables (and optionally the report) as Prefect artifacts; and the `report` flow.

For example (a Prefect flow run, not a doctest):

    out = evaluate(agent="greedy", preset="diagnostic", db_path="data/vhd.duckdb", report_dir="report")
    out["artifacts"]  # {'fia': 'eval-greedy-fia', 'families': 'eval-greedy-families', 'report': 'eval-greedy-report'}

It wires the computation of `vhd eval` (vhd/agents/evaluate.py), nothing more: the environments
are chosen as `vhd eval` chooses them, episodes are played and scored in tasks over batches of
at most `batch_size` environments of one family (one sandbox child per I/A environment, as in
process), and only a sandbox that could not be started is retried (a bad trajectory is a
reward of 0, not an error). Workers return episode records; the flow process is the
warehouse's only writer and stores them in one transaction, with the same episode ids as
`vhd eval` (a rerun adds no rows).

Artifacts (keys are lowercase, `<agent>` is the agent name made key-safe):

| key | type | what |
|---|---|---|
| `eval-<agent>-fia` | markdown | the F/I/A table: per family mean ± 95 % half-width (n) per presentation, family mean, mean over families, F→I and I→A gaps |
| `eval-<agent>-families` | table | the per-family table: `family`, `P mean`, `P ci95`, `P n` per presentation P, `family mean` |
| `eval-<agent>-report` | markdown | with `report_dir`: the report's tables and the paths of its PNGs and index.html |
| `eval-<agent>-<plot>` | image | with `report_dir` and `image_url`: one per PNG, at `image_url/<plot>.png` |

The `report` flow (`vhd report --flow`) writes the report of every stored episode and publishes
it as `eval-report` (and image artifacts `eval-report-<plot>` with `image_url`). Prefect's
image artifact shows an image from a URL the browser can fetch; a path on this machine is not
one, so without `image_url` the markdown lists the files instead.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_image_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from vhd.agents import Table
from vhd.agents import evaluate as evaluate_stage
from vhd.agents import report as report_stage
from vhd.flows.refresh import transient
from vhd.mechanisms import registry
from vhd.schemas.errors import WarehouseMissing
from vhd.schemas.records import EnvironmentRecord, EpisodeRecord
from vhd.warehouse import Warehouse


def artifact_key(agent: str, suffix: str) -> str:
    """`eval-<agent>-<suffix>` in Prefect's key alphabet (lowercase letters, digits, dashes)."""
    slug = re.sub(r"[^a-z0-9]+", "-", agent.lower()).strip("-")[:60].strip("-") or "agent"
    return f"eval-{slug}-{suffix}"


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=1, retry_condition_fn=transient)
def play_task(family: str, rows: list[tuple], agent: str, episodes: int, corpus_version: str) -> list[EpisodeRecord]:
    """K episodes of `agent` on a batch of one family's environments, each scored in the sandbox."""
    tables = [Table(env, model, solution, output, registry.get(family)) for env, model, solution, output in rows]
    return evaluate_stage.play(tables, agent, episodes, corpus_version)


@task(cache_policy=NO_CACHE)
def summary_task(episodes: list[EpisodeRecord]) -> dict[str, Any]:
    return evaluate_stage.summary(episodes)


@task(cache_policy=NO_CACHE)
def report_task(episodes: list[EpisodeRecord], envs: dict[str, EnvironmentRecord], out: str) -> list[str]:
    return [str(p) for p in report_stage.write_report(episodes, envs, Path(out))]


def _publish_report(key: str, episodes: list[EpisodeRecord], files: list[str], image_url: str | None) -> dict[str, str]:
    paths = [Path(f) for f in files]
    keys = {"report": key}
    create_markdown_artifact(key=key, markdown=report_stage.report_markdown(report_stage.tables(episodes), paths,
                                                                            image_url),
                             description=f"vhd report of {len(episodes)} episodes")
    if image_url:
        for p in paths:
            if p.suffix == ".png":
                keys[p.stem] = f"{key}-{p.stem.replace('_', '-')}"
                create_image_artifact(image_url=f"{image_url.rstrip('/')}/{p.name}", key=keys[p.stem],
                                      description=f"{p.name} of the vhd report")
    return keys


@flow(name="evaluate", log_prints=True)
def evaluate(
    agent: str,
    preset: str = "diagnostic",
    presentations: list[str] | None = None,
    episodes: int = 1,
    per_cell: int = 0,
    corpus_version: str | None = None,
    db_path: str = "data/vhd.duckdb",
    batch_size: int = 8,
    report_dir: str | None = None,
    image_url: str | None = None,
) -> dict[str, Any]:
    """`vhd eval` as a flow; returns {"summary", "corpus_version", "episodes", "artifacts"[, "report"]}."""
    families, chosen = evaluate_stage.check_request(agent, preset, presentations, episodes, per_cell)
    if not Path(db_path).exists():
        raise WarehouseMissing(f"no warehouse at {db_path}; run `vhd refresh --preset {preset}` first")
    with Warehouse.open(db_path) as wh:
        version, envs = evaluate_stage.select_envs(wh, families, chosen, corpus_version, per_cell, preset)
        inputs = wh.eval_inputs([e.env_id for e in envs])
    futures = [play_task.submit(batch[0].family, [(e, *inputs[e.env_id]) for e in batch], agent, episodes, version)
               for batch in evaluate_stage.batches(envs, max(1, batch_size))]
    played = [e for f in futures for e in f.result()]
    with Warehouse.open(db_path) as wh, wh.transaction():
        wh.insert(played)
    result = summary_task(played)
    artifacts = {"fia": artifact_key(agent, "fia"), "families": artifact_key(agent, "families")}
    create_markdown_artifact(key=artifacts["fia"], markdown=report_stage.fia_markdown(agent, result),
                             description=f"vhd eval {agent}: F/I/A table")
    create_table_artifact(key=artifacts["families"], table=report_stage.family_rows(result),
                          description=f"vhd eval {agent}: mean reward per family and presentation")
    out: dict[str, Any] = {"summary": result, "corpus_version": version, "episodes": len(played)}
    if report_dir is not None:
        files = report_task(played, {e.env_id: e for e in envs}, report_dir)
        artifacts.update(_publish_report(artifact_key(agent, "report"), played, files, image_url))
        out["report"] = files
    print(f"{len(played)} episodes of {agent} stored; artifacts {', '.join(artifacts.values())}")
    return {**out, "artifacts": artifacts}


@flow(name="report", log_prints=True)
def report(out: str, agents: list[str] | None = None, db_path: str = "data/vhd.duckdb",
           image_url: str | None = None) -> dict[str, Any]:
    """`vhd report` as a flow: the report of the stored episodes (of `agents`, default all) in
    `out`, published as artifact `eval-report`; returns {"files", "episodes", "artifacts"}."""
    with Warehouse.open(db_path, read_only=True) as wh:
        episodes = wh.episodes()
        envs = {e.env_id: e for e in wh.environments(admitted=None, include_superseded=True)}
    episodes = report_stage.select_episodes(episodes, agents)
    files = report_task(episodes, envs, out)
    artifacts = _publish_report("eval-report", episodes, files, image_url)
    return {"files": files, "episodes": len(episodes), "artifacts": artifacts}
