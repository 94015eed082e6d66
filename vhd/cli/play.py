"""Commands that play environments: score a trajectory, play one, serve it, and evaluate agents."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from vhd.cli.common import (
    _csv, _emit, _fail, _output_directory, _prefect, _reader, app, console, DbOption,
    handles_errors, JsonOption
)


@app.command(rich_help_panel="Play, score and train")
@handles_errors
def score(env_id: str = typer.Argument(..., help="environment id (or a unique prefix)"),
          trajectories: Path = typer.Option(..., "--trajectories", help="JSONL file: one list of {tool, arguments} per line"),
          corpus_version: Optional[str] = typer.Option(None, "--corpus-version", help="verify the environment "
                                                       "against this published version (default: the latest that "
                                                       "holds it; its own rows only when none does)"),
          db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """Replay trajectories through an environment in the sandbox and print their rewards: the
    decision reward (exact advantages of the decisions), the outcome reward (realised utility) and,
    with --json, one step reward per call; the environment, its model, solution and module are
    verified first (ids, field digests, corpus digest)."""
    from vhd.mechanisms import registry
    from vhd.schemas.errors import TrajectoryFormatError
    from vhd.schemas.records import ModelRecord, SetterOutputRecord, SolutionRecord
    from vhd.tasks.grading.score import parse_trajectories, score as score_stage

    try:
        text = trajectories.read_text(encoding="utf-8")
    except OSError as exc:
        raise TrajectoryFormatError(f"cannot read {trajectories}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise TrajectoryFormatError(f"{trajectories}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                                    f"{exc.start}); expected JSONL of tool-call lists") from None
    parsed = parse_trajectories(text, str(trajectories))
    with _reader(db) as wh:
        full = wh.resolve_env_id(env_id)
        env = _scored_environment(wh, full, corpus_version)
        if not env.admitted:  # its u*, default and module were never shown to agree: no reward to trust
            from vhd.schemas.errors import UnknownEnvironment

            raise UnknownEnvironment(f"environment {full[:16]} was rejected by the gates ({env.reason or 'no reason stored'}); "
                                     "expected an admitted environment from `vhd envs` (see `vhd check` for why)")
        model = wh.verified(ModelRecord, [env.model_id], complete=True)[env.model_id]
        output = wh.verified(SetterOutputRecord, [env.setter_output_id], complete=True)[env.setter_output_id]
        solution = wh.verified(SolutionRecord, [env.solution_id], complete=True)[env.solution_id]
    rows = score_stage(env, output, model.theta, registry.get(env.family), solution, parsed)
    if as_json:
        return _emit(rows)
    table = Table("#", "utility", "reward", "outcome reward", "error")
    for k, row in enumerate(rows, start=1):
        table.add_row(str(k), f"{row['utility']}", f"{row['reward']:.4f}", f"{row['outcome_reward']:.4f}",
                      row["error"] or "")
    console.print(table)


def _scored_environment(wh, env_id: str, corpus_version: Optional[str]):
    """The environment `vhd score` grades, verified: through `--corpus-version` V (it must be in V),
    else through the latest version that holds it, else through its own row's id and digests; in
    every case what decides its grade and verdict recomputed first (`publish.admissible`)."""
    from vhd.schemas.records import EnvironmentRecord
    from vhd.tasks.corpus.publish import admissible, holding_version

    held = holding_version(wh, env_id, corpus_version)  # recomputes the environment it returns
    if held is not None:
        return held[1]
    return admissible(wh, wh.verified(EnvironmentRecord, [env_id], complete=True)[env_id])


def _adapter_env(env_id: str, db: Optional[Path]):
    from vhd.adapters.gym import TextToolEnv

    with _reader(db) as wh:
        full = wh.resolve_env_id(env_id)
    return TextToolEnv.from_warehouse(full, db)


@app.command("serve-env", rich_help_panel="Play, score and train")
@handles_errors
def serve_env(env_id: str = typer.Argument(..., help="environment id (or a unique prefix)"),
              port: int = typer.Option(8765, "--port", help="TCP port (0 = any free port)"),
              host: str = typer.Option("127.0.0.1", "--host", help="address to bind (loopback by default)"),
              idle_timeout: float = typer.Option(600.0, "--idle-timeout", metavar="SECONDS",
                                                 help="a session unused this long expires (its id then answers 410)"),
              read_timeout: float = typer.Option(60.0, "--read-timeout", metavar="SECONDS",
                                                 help="a connection has this long to send each request, else it is closed"),
              max_sessions: int = typer.Option(4096, "--max-sessions", help="sessions open at once (unexpired)"),
              db: Optional[Path] = DbOption) -> None:
    """Serve one environment over HTTP to many concurrent sessions: POST /reset (returns a
    session_id), POST /step {"session_id", "action"}, POST /finish, GET /state?session_id=,
    GET /health (JSON; every error too).

    The generated module runs inside this server process (see docs/TRAINING.md, trust model)."""
    import math

    from vhd.adapters.http import make_server

    if not 0 <= port <= 65535:
        _fail(f"--port {port}: a TCP port is 0–65535 (0 = any free port)")
    for name, value in (("--idle-timeout", idle_timeout), ("--read-timeout", read_timeout)):
        if not (math.isfinite(value) and value > 0):
            _fail(f"{name} {value:g}: expected a positive number of seconds")
    if max_sessions < 1:
        _fail(f"--max-sessions {max_sessions}: expected at least 1")
    try:
        server = make_server(_adapter_env(env_id, db), host, port, idle_timeout=idle_timeout,
                             read_timeout=read_timeout, max_sessions=max_sessions)
    except OSError as exc:  # the port is taken, the host is not ours
        _fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}")
    console.print(f"serving {env_id} on http://{server.server_address[0]}:{server.server_address[1]} "
                  f"(sessions expire after {idle_timeout:g} s unused; read timeout {read_timeout:g} s; "
                  f"at most {max_sessions} sessions)", highlight=False, soft_wrap=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # pragma: no cover
        pass
    finally:
        server.server_close()


@app.command("serve-openenv", rich_help_panel="Play, score and train")
@handles_errors
def serve_openenv(env_id: str = typer.Argument(..., help="environment id (or a unique prefix)"),
                  port: int = typer.Option(8000, "--port", help="TCP port (1–65535)"),
                  host: str = typer.Option("127.0.0.1", "--host", help="address to bind (loopback by default)"),
                  db: Optional[Path] = DbOption) -> None:
    """Serve one environment with OpenEnv's own server (openenv 0.10's create_app over its
    MCPEnvironment) to OpenEnv's clients (MCPToolClient, GenericEnvClient): one episode per /ws or
    /mcp session; list_tools = the player's tools, call_tool = one step, {"type": "finish"} stops
    early; reward 0.0 until done, then the decision reward (docs/TRAINING.md, "OpenEnv").

    The generated module runs inside this server process (see docs/TRAINING.md, trust model)."""
    from vhd.adapters import load_row
    from vhd.adapters.openenv import serve

    if not 1 <= port <= 65535:
        _fail(f"--port {port}: a TCP port is 1–65535")
    with _reader(db) as wh:
        full = wh.resolve_env_id(env_id)
    console.print(f"serving {full[:16]} with OpenEnv on http://{host}:{port} (WebSocket /ws, MCP /mcp)",
                  highlight=False)
    serve(load_row(full, db), host, port)


@app.command(rich_help_panel="Play, score and train")
@handles_errors
def play(env_id: str = typer.Argument(..., help="environment id (or a unique prefix)"),
         db: Optional[Path] = DbOption) -> None:
    """Play an environment in the terminal: type `TOOL {json arguments}`, `tools`, `help` or `quit`;
    the reward is shown when the episode ends. In presentation F the instruction states the whole
    model and the one tool is `submit_plan {"plan": ...}`: one submission ends the episode, graded
    as `vhd score` grades it."""
    from vhd.adapters import load_row
    from vhd.adapters.play import play_row

    with _reader(db) as wh:
        full = wh.resolve_env_id(env_id)
    play_row(load_row(full, db), sys.stdin, lambda text: print(text, flush=True))


@app.command("eval", rich_help_panel="Play, score and train")
@handles_errors
def eval_(
    agent: str = typer.Option(..., "--agent", help="scripted: oracle (π*'s calls), default, idle, random (seeded "
                              "valid random policy), greedy (a myopic heuristic per family), prober (in A reads "
                              "the probes it can afford, then plays the optimum of what it read), sidechannel (in A also learns θ from "
                              "refusals, decision answers and observations, then plays the optimum of what it "
                              "inferred); or an LLM: "
                              "anthropic:MODEL (Messages tool use) or openai:BASE_URL:MODEL (chat completions)"),
    preset_name: str = typer.Option("diagnostic", "--preset", help="which families to evaluate (diagnostic: "
                                    "inventory_dp, knapsack, lp, qp, routing)"),
    presentations: Optional[str] = typer.Option(None, "--presentations", help="comma list among F, I, A "
                                                "(default: the preset's, F,I,A for diagnostic)"),
    episodes: int = typer.Option(1, "--episodes", help="episodes per environment (K); only random varies across them"),
    per_cell: int = typer.Option(0, "--per-cell", help="at most this many environments per family × presentation "
                                 "(the first by env id); 0 = all"),
    corpus_version: Optional[str] = typer.Option(None, "--corpus-version", help="evaluate this published version "
                                                 "(default: the latest; all admitted environments if none)"),
    flow: bool = typer.Option(False, "--flow", help="run through the `evaluate` Prefect flow and publish its "
                              "artifacts (slower: Prefect's server starts unless PREFECT_API_URL is set)"),
    batch_size: int = typer.Option(8, "--batch-size", help="with --flow: environments per task run"),
    report_dir: Optional[Path] = typer.Option(None, "--report-dir", help="with --flow: also write the report of "
                                              "this run's episodes to DIR and publish it as artifact eval-<agent>-report"),
    db: Optional[Path] = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Play an agent on the admitted environments of a preset, store every episode, print mean
    reward per family × presentation with a 95 % interval, the family mean and the F→I, I→A gaps.

    Runs in this process without Prefect (fast). With --flow it runs the `evaluate` Prefect flow
    (episodes in batched tasks, Prefect artifacts eval-<agent>-fia/-families/-report); Prefect's
    server takes seconds to start unless PREFECT_API_URL names a running one."""
    from vhd.agents.evaluate import check_request, evaluate, select_envs
    from vhd.schemas.errors import WarehouseMissing
    from vhd.warehouse import Warehouse, default_path

    families, chosen = check_request(agent, preset_name, _csv(presentations) if presentations is not None else None,
                                     episodes, per_cell)
    if batch_size < 1:
        _fail(f"--batch-size must be ≥ 1, got {batch_size}")
    if report_dir is not None and not flow:
        _fail("--report-dir needs --flow (the report artifact is published by the evaluate flow); "
              "use `vhd report --out DIR` otherwise")
    if report_dir is not None:
        _output_directory(report_dir, "--report-dir")
    path = Path(db) if db is not None else default_path()
    if not path.exists():
        raise WarehouseMissing(f"no warehouse at {path}; run `vhd refresh --preset diagnostic` first")
    Warehouse.preflight(path)  # a damaged warehouse refused before any episode is played or stored
    if not flow:
        out = evaluate(lambda: Warehouse.open(path), agent, families, chosen, episodes, per_cell, corpus_version,
                       preset_name)
        return _print_eval(agent, chosen, out, as_json)
    with _reader(path) as wh:  # fail fast (busy, no environments) before Prefect starts
        select_envs(wh, families, chosen, corpus_version, per_cell, preset_name)
    with _prefect():
        from vhd.flows.evaluate import evaluate as evaluate_flow

        out = evaluate_flow(agent=agent, preset=preset_name, presentations=list(chosen), episodes=episodes,
                            per_cell=per_cell, corpus_version=corpus_version, db_path=str(path),
                            batch_size=batch_size, report_dir=str(report_dir) if report_dir else None)
    _print_eval(agent, chosen, out, as_json)


def _print_eval(agent: str, chosen: tuple[str, ...], out: dict[str, Any], as_json: bool) -> None:
    """`out` of the evaluate flow or of agents.evaluate.evaluate: the F/I/A table, or JSON."""
    from vhd.agents.evaluate import as_json as to_json

    result, version = out["summary"], out["corpus_version"]
    if as_json:
        extra = {key: out[key] for key in ("artifacts", "report") if key in out}
        return _emit({**to_json(agent, result), "corpus_version": version, **extra})
    table = Table("family", *[f"{p} (95 % CI)" for p in chosen], "family mean", title=f"agent {agent}: mean reward")
    for family, row in result["families"].items():
        table.add_row(family, *[f"{row[p]['mean']:.3f} ± {row[p]['ci95']:.3f} (n={row[p]['n']})" if p in row else "—"
                                for p in chosen], f"{row['mean']:.3f}")
    table.add_row("mean", *[f"{result['mean'][p]:.3f}" if p in result["mean"] else "—" for p in chosen], "")
    console.print(table)
    gaps = ", ".join(f"{k} gap {v:+.3f}" for k, v in result["gaps"].items())
    console.print(f"{out['episodes']} episodes stored{'; ' + gaps if gaps else ''}")
    for kind, key in out.get("artifacts", {}).items():
        console.print(f"Prefect artifact {key} ({kind})", highlight=False)


@app.command("report", rich_help_panel="Play, score and train")
@handles_errors
def report(
    out: Path = typer.Option(..., "--out", help="directory for tables.json, the PNG plots and index.html"),
    agent: Optional[str] = typer.Option(None, "--agent", help="comma list of agents to include (default: every "
                                        "agent with stored episodes)"),
    flow: bool = typer.Option(False, "--flow", help="run through the `report` Prefect flow and publish the report "
                              "as artifact eval-report (slower: Prefect's server starts unless PREFECT_API_URL is set)"),
    image_url: Optional[str] = typer.Option(None, "--image-url", help="with --flow: the URL where DIR is served; the "
                                            "PNGs are then embedded and published as image artifacts"),
    db: Optional[Path] = DbOption,
) -> None:
    """Write the eval tables (F/I/A per family, as `vhd eval` prints them) and plots (F/I/A bars,
    reward per family, reward vs size and vs horizon) of the stored episodes as PNG + one HTML page."""
    from vhd.agents.report import select_episodes, write_report
    from vhd.warehouse.store import default_path

    if image_url is not None and not flow:
        _fail("--image-url needs --flow (it is where the Prefect artifacts find the PNGs)")
    _output_directory(out)
    agents = _csv(agent) if agent is not None else None
    with _reader(db) as wh:
        episodes = select_episodes(wh.episodes(), agents)  # fail fast, before Prefect starts
        envs = {e.env_id: e for e in wh.environments(admitted=None, include_superseded=True)} if not flow else {}
    if flow:
        with _prefect():
            from vhd.flows.evaluate import report as report_flow

            result = report_flow(out=str(out), agents=agents, db_path=str(db or default_path()), image_url=image_url)
        files = result["files"]
        console.print(f"{result['episodes']} episodes → {', '.join(files)}; Prefect artifacts "
                      f"{', '.join(result['artifacts'].values())}", highlight=False)
        return
    files = write_report(episodes, envs, out)
    console.print(f"{len(episodes)} episodes → {', '.join(str(f) for f in files)}")
