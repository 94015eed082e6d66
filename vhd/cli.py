"""`vhd`: the command line. Thin: parse, call a flow or the warehouse, print (rich) or --json.

    $ vhd refresh --families inventory_dp --per-family 20
    $ vhd envs --json | head
    $ vhd audit ENV_ID

Only the commands that run a flow import Prefect (its embedded server takes seconds to start):
`refresh`, `backfill`, `serve`, and `eval`/`report` with `--flow`, each through `_prefect`. The
others never load it. The pipeline's work is done where it belongs (flows, tasks, agents,
warehouse); a command validates its options (one function each, below), calls, and prints.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperCommand, TyperGroup

from vhd.schemas.errors import VhdError


class _Flags:
    """A flag takes no value, so its help shows none: typer 0.29 labels every flag (and --help)
    `<bool>` unless it has a metavar, so a flag gets the empty one."""

    def get_params(self, ctx: Any) -> list:
        params = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params


class _Command(_Flags, TyperCommand):
    """A `vhd` command (see `_Flags`)."""


class _Group(_Flags, TyperGroup):
    """`vhd` and its command groups (see `_Flags`)."""


class _App(typer.Typer):
    """typer.Typer whose commands and groups are `_Command` and `_Group`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=_Group, **kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Callable:
        return super().command(*args, cls=kwargs.pop("cls", None) or _Command, **kwargs)


app = _App(help="VHD-Play corpus factory: solved mechanisms rendered as stateful tool environments.",
           no_args_is_help=True, add_completion=False)
console = Console()
if not console.is_terminal and "COLUMNS" not in os.environ:
    console.width = 160  # a pipe, a file, CI: no screen to fit, so names and paths are not cut at 80 columns
DB_HELP = "warehouse file (default: $VHD_DB or data/vhd.duckdb)"
DbOption = typer.Option(None, "--db", help=DB_HELP, envvar="VHD_DB")
JsonOption = typer.Option(False, "--json", help="print machine-readable JSON instead of tables")
VerboseOption = typer.Option(False, "--verbose", help="show Prefect's log lines (one per task run) on stderr instead "
                             "of writing them to $PREFECT_HOME/logs/vhd.log; the progress display is then plain lines")
WorkersOption = typer.Option(None, "--workers", min=1, help="run the check stage on a local Dask cluster of N worker "
                             "processes (default: threads in this process); this process stays the only writer")


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def handles_errors(command: Callable) -> Callable:
    """Turn the project's own errors into one line on stderr and exit code 1."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except VhdError as exc:
            _fail(str(exc))
        except Exception as exc:  # a damaged warehouse met mid-command: one line, not DuckDB's traceback
            from vhd.warehouse.files import database_error

            message = database_error(exc)
            if message is None:
                raise
            _fail(message)

    return wrapper


def _emit(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


# --- options: each validated by one function here, a bad value is one line and exit 1 ---------


def _families(text: str) -> list[str]:
    """--families: a comma list of registered families (UnknownFamily names the first that is
    not); [] when empty (the command's default)."""
    from vhd.mechanisms import registry

    names = _csv(text)
    if text.strip() and not names:  # "," or " , ": a list that names nothing, not "every family"
        _fail(f"--families {text!r} names no family; expected a comma list such as knapsack,lp (or leave it out "
              "for every family)")
    for name in names:
        registry.get(name)
    return names


def _presentations(text: str) -> tuple[str, ...]:
    """--presentations: a comma list of F, I and/or A, each once."""
    chosen = tuple(_csv(text))
    if not chosen or any(p not in ("F", "I", "A") for p in chosen) or len(set(chosen)) != len(chosen):
        _fail(f"--presentations must list F, I and/or A once each, got {text!r}")
    return chosen


def _batch(batch: Optional[str]) -> Optional[str]:
    """--batch: a non-empty key that is not an imported file's (`import:`)."""
    if batch is not None and (batch.startswith("import:") or not batch.strip()):
        _fail(f"--batch {batch!r}: batch keys must be non-empty and may not start with 'import:' (imported instances)")
    return batch


def _per_family(per_family: int) -> int:
    """--per-family: at most MAX_PER_FAMILY (a round holds all of its θ in memory)."""
    from vhd.tasks.sample import MAX_PER_FAMILY

    if per_family > MAX_PER_FAMILY:
        _fail(f"--per-family {per_family}: at most {MAX_PER_FAMILY:,} θ draws per family and run; "
              "run several batches (--batch) for more")
    return per_family


def _output_directory(out: Path, option: str = "--out") -> Path:
    """--out (of export and report), --report-dir: a directory, or a path where one can be made
    (not an existing file, nor under one)."""
    for path in (out, *out.parents):
        if path.exists() and not path.is_dir():
            _fail(f"{option} {out}: {path} is a file, not a directory; pass a directory to write into")
        if path.exists():
            break
    return out


@contextmanager
def _prefect(api: bool = True, quiet: bool = False) -> Iterator[None]:
    """The Prefect preamble of every command that runs a flow, entered after its fail-fast checks;
    import the flow inside the block. Prefect's analytics off, with `quiet` Prefect's log lines in
    `vhd.flows.progress.log_file()` instead of on stderr, then (with `api`) Prefect's API for the
    block: the server PREFECT_API_URL names, or a temporary one (vhd/flows/server.py). The
    commands that run no flow never enter it, so never load Prefect."""
    from contextlib import ExitStack

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")  # the client's analytics too (and its first-run notice on a terminal)
    with ExitStack() as stack:
        if quiet:
            from vhd.flows.progress import log_file, prefect_logs_to

            stack.enter_context(prefect_logs_to(log_file()))
        if api:
            from vhd.flows.progress import flush_api_logs
            from vhd.flows.server import prefect_api

            stack.enter_context(prefect_api())
            stack.callback(flush_api_logs)  # before the server stops
        yield


@contextmanager
def _progress(what: str, as_json: bool, verbose: bool) -> Iterator[None]:
    """Inside `_prefect()`: the progress display of a refresh or backfill on stdout, live on a
    terminal and a few plain lines elsewhere (CI, a pipe) or with --verbose; none with --json."""
    from vhd.flows.progress import RefreshDisplay, listening, log_file

    if as_json:
        yield
        return
    live = console.is_terminal and not verbose
    logs = "on stderr" if verbose else f"in {log_file()}"
    console.print(f"{what}; Prefect's log lines {logs}", highlight=False, soft_wrap=True)
    with RefreshDisplay(console, live) as display, listening(display):
        yield


@app.command()
@handles_errors
def families(as_json: bool = JsonOption,
             markdown: bool = typer.Option(False, "--markdown", help="print the docs/FAMILIES.md table")) -> None:
    """List the registered mechanism families with group, split, solver and knobs."""
    from vhd.mechanisms import registry

    rows = [_family_row(f) for f in registry.all()]
    if as_json:
        return _emit(rows)
    if markdown:
        return sys.stdout.write(_families_markdown(rows))
    table = Table("family", "group", "split", "model class", "solver", "knobs")
    for r in rows:
        table.add_row(r["name"], r["group"], r["split"], r["model_class"], r["solver"],
                      ", ".join(f"{k} {lo}–{hi}" for k, (lo, hi) in r["knobs"].items()))
    console.print(table)


def _family_row(f) -> dict[str, Any]:
    return {"name": f.name, "version": f.version, "group": f.group, "split": f.split, "model_class": f.model_class,
            "solver": f.solver, "knobs": {k: list(v) for k, v in f.knob_ranges.items()},
            "knob_units": {k: f.Params.model_fields[k].description for k in f.knob_ranges},
            "tools": len(f.tools), "roles": {role: [t.name for t in f.tools if t.role == role]
                                             for role in ("probe", "decision", "clock", "observe")},
            "hidden": list(f.hidden), "noisy_probes": [t.name for t in f.tools if t.noisy],
            "per_entry_probes": [t.name for t in f.tools if t.role == "probe" and t.input_schema.get("required")],
            "probes": [{"name": t.name, "turn_cost": t.turn_cost, "reveals": list(t.reveals), "noisy": t.noisy,
                        "per_entry": bool(t.input_schema.get("required")),
                        "arguments": list(t.input_schema.get("required", []))}
                       for t in f.tools if t.role == "probe"],
            "stochastic": f.stochastic, "plan_format": f.plan_format, "presentations": ["F", "I", "A"]}


def _probe_cell(probe: dict[str, Any]) -> str:
    """"`inspect_item` (per item, noisy, 1 turn)": a probe of the FAMILIES.md table."""
    kind = [f"per {', '.join(probe['arguments'])}"] if probe["per_entry"] else []
    kind += ["noisy"] if probe["noisy"] else []
    turns = f"{probe['turn_cost']} turn{'s' if probe['turn_cost'] != 1 else ''}"
    return f"`{probe['name']}` ({', '.join(kind + [turns])})"


def _families_markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| family | group | model | solver | knobs | tools | what A hides (through which probes) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        knobs = "; ".join(f"`{k}` {lo}–{hi}" for k, (lo, hi) in r["knobs"].items())
        tools = ", ".join(f"{n} {role}" for role, names in r["roles"].items() for n in [len(names)] if n)
        probes = ", ".join(_probe_cell(probe) for probe in r["probes"])
        lines.append(f"| {r['name']} | {r['group']} | {r['model_class']} | {r['solver']} | {knobs} | "
                     f"{r['tools']} ({tools}) | {', '.join(r['hidden'])} (through {probes}) |")
    return "\n".join(lines) + "\n"


@app.command()
@handles_errors
def refresh(
    families: str = typer.Option("", help="comma-separated family names (default: all registered)"),
    per_family: int = typer.Option(20, min=1, help="θ draws per family; each yields one environment per presentation"),
    seed: int = typer.Option(0, min=0, help="run seed: the same seed and batch give the same corpus"),
    batch: Optional[str] = typer.Option(None, help="batch key the model seeds derive from (default: today's date); "
                                        "rerunning a batch finds its work done"),
    presentations: Optional[str] = typer.Option(None, help="presentations to build, among F (written out), I "
                                                "(informed) and A (agentic, parameters hidden); default I,A (with "
                                                "--follow: those the learner played)"),
    preset: Optional[str] = typer.Option(None, help="build a preset instead of --families/--per-family: 'paper' "
                                         "(2,200 train / 300 held-out / 800 unseen-family environments, "
                                         "presentation A), 'diagnostic' (five families in F, I and A) or 'scaling' (knapsack's "
                                         "lots × resources grid and routing's stops, one cell per knob pair)"),
    scale: float = typer.Option(1.0, help="multiply a preset's targets, e.g. 0.01 for a quick look at its mix"),
    difficulty: Optional[str] = typer.Option(None, "--difficulty", metavar="LO:HI", help=(
        "fill every slot (each family's --per-family θ × presentations, or each preset slot) only with "
        "environments whose difficulty score (docs/EVAL.md, 'Difficulty': 0 easiest, 1 hardest) lies in "
        "LO:HI, e.g. 0.4:0.7; θ are drawn in seed order until the slot is full or a bounded number of tries "
        "is spent, and the summary says how many candidates the band cost or why a slot is short")),
    follow: Optional[Path] = typer.Option(None, "--follow", metavar="RESULTS", help=(
        "make the next version for a learner: RESULTS is its rewards on environments of this warehouse "
        "(JSON Lines objects with env_id and reward, e.g. episodes of `vhd eval`, or a CSV with the "
        "header env_id,reward); per family it played, θ are chosen where its predicted reward lies in "
        "--follow-band, and the run and the version's manifest record why (docs/EVAL.md, 'Following a learner')")),
    follow_band: Optional[str] = typer.Option(None, "--follow-band", metavar="LO:HI", help=(
        "with --follow: the learner's target reward band (default 0.3:0.7)")),
    setter: str = typer.Option("template", help="who writes the modules: 'template' (offline, deterministic) or "
                               "'anthropic' (a Claude model; settings from ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, "
                               "VHD_LLM_*; see docs/SETTERS.md; without a key the template setter is used)"),
    workers: Optional[int] = WorkersOption,
    db: Optional[Path] = DbOption,
    as_json: bool = JsonOption,
    verbose: bool = VerboseOption,
) -> None:
    """Sample, solve, synthesize, check and annotate environments (runs the Prefect flow).

    Shows one progress row per family (admitted, rejected, elapsed, ETA) while it runs, then the
    summary table; Prefect's own log lines go to $PREFECT_HOME/logs/vhd.log (--verbose: stderr)."""
    from vhd.mechanisms import registry
    from vhd.tasks.presets import preset as find_preset
    from vhd.warehouse import Warehouse, default_path

    names, chosen = _families(families) or registry.names(), _presentations(presentations or "I,A")
    _batch(batch)
    if setter not in ("template", "anthropic"):
        _fail(f"--setter must be 'template' or 'anthropic', got {setter!r}")
    if preset is not None:
        if families:
            _fail("--preset chooses the families itself; drop --families")
        chosen = find_preset(preset, registry.all(), scale).presentations
    _per_family(per_family)
    path = db or default_path()
    Warehouse.preflight(path)  # fail fast (busy, unreadable, foreign, no such directory) before Prefect starts
    band = _band(difficulty, "--difficulty") if difficulty is not None else None
    target_band = _band(follow_band, "--follow-band") if follow_band is not None else None
    if follow_band is not None and follow is None:
        _fail("--follow-band needs --follow RESULTS (the learner whose reward it bands)")
    if follow is not None:
        if difficulty is not None or preset is not None:
            _fail("--follow chooses each family's θ from the learner's results; drop --difficulty and --preset")
        chosen = _followed(follow, path, names if families else None)
    what = f"refresh of preset {preset}" if preset else f"refresh of {len(names)} famil{'y' if len(names) == 1 else 'ies'}"
    with _prefect(quiet=not verbose):
        from vhd.flows.refresh import refresh as refresh_flow
        from vhd.flows.refresh import with_workers

        flow_ = with_workers(refresh_flow, workers)
        with _progress(f"{what} → {path}", as_json, verbose):
            summary = flow_(families=names, per_family=per_family, seed=seed, batch=batch, db_path=str(path),
                            presentations=chosen, preset=preset, scale=scale, setter=setter, difficulty=band,
                            follow=str(follow) if follow is not None else None, follow_band=target_band)
    _report(summary, path, as_json)


def _band(text: str, option: str) -> tuple[float, float]:
    from vhd.tasks.difficulty import parse_band

    return parse_band(text, option)


def _followed(results: Path, path: Path, families: Optional[list[str]]) -> tuple[str, ...]:
    """Check a --follow RESULTS file before Prefect starts (it is read, every env id is one of the
    warehouse's, some family can be aimed at); the presentations the learner played."""
    from vhd.schemas.errors import WarehouseMissing
    from vhd.schemas.records import EnvironmentRecord
    from vhd.tasks import follow as follow_stage
    from vhd.warehouse import Warehouse

    rows = follow_stage.read_results(results)
    if not Path(path).exists():
        raise WarehouseMissing(f"no warehouse at {path}; --follow needs the warehouse whose environments the "
                               "learner played")
    with Warehouse.open(path) as wh:  # a writer: it migrates a warehouse written before the difficulty column
        played = wh.verified(EnvironmentRecord, list(rows))
    follow_stage.check_results(rows, played, str(results))
    return follow_stage.played_presentations(played.values(), rows)


def _report(summary: dict, path: Path, as_json: bool) -> None:
    """Print a refresh/backfill summary (a table, or JSON); exit 1 when the audit or the quality gate failed."""
    quality_failed = bool(summary.get("quality")) and not summary["quality"]["passed"]
    audit = summary.get("audit")
    if audit and not audit["verified"]:  # one line: how many problems, the first (env, table, row, field)
        more = f" (and {audit['count'] - 1} more; `vhd verify` lists them)" if audit["count"] > 1 else ""
        if as_json:
            _emit(summary)
        hint = f". {audit['hint']}" if audit.get("hint") else ""  # rows the current code no longer derives
        _fail(f"the audit found {audit['count']} problems, so no corpus version was published: "
              f"{audit['lines'][0]}{more}{hint}")
    if as_json:
        _emit(summary)
        if quality_failed:
            raise typer.Exit(1)
        return
    table = Table("family", "split", "admitted", "rejected", "rate", "rejected by", "already there",
                  title=f"refresh {summary['run_id']}")
    table.columns[0].no_wrap = True  # family names whole, on a narrow screen too
    for name, row in summary["families"].items():
        seen = row["admitted"] + row["rejected"]
        table.add_row(name, row["split"], str(row["admitted"]), str(row["rejected"]),
                      f"{row['admitted'] / seen:.0%}" if seen else "–",
                      ", ".join(f"{gate} {n}" for gate, n in sorted(row["reasons"].items())) or "–", str(row["reused"]))
    console.print(table)
    short = {name: row["short"] for name, row in summary["families"].items() if row.get("short")}
    if short:
        console.print(f"[yellow]short of the slots' targets: {short}[/yellow]")
    band = summary.get("difficulty")
    if band:
        console.print(f"difficulty band {band['band'][0]:g}–{band['band'][1]:g}: {band['tried']} candidates tried, "
                      f"{band['outside']} outside the band (not checked, not stored)", soft_wrap=True)
        for name, why in band["short"].items():
            console.print(f"[yellow]{name}: {why}[/yellow]", soft_wrap=True)
    followed = summary.get("follow")
    if followed:
        console.print(f"following {followed['results']} (target reward {followed['band'][0]:g}–{followed['band'][1]:g},"
                      f" presentations {','.join(followed['presentations'])}):", soft_wrap=True)
        for name, row in followed["families"].items():
            mean = "–" if row["mean_reward"] is None else f"{row['mean_reward']:.3f}"
            console.print(f"  {name}: learner's mean reward {mean} on {row['played']}; {row['status']}; "
                          f"{len(row['env_ids'])} made", soft_wrap=True)
    console.print(f"setter: {summary.get('setter', 'template')}")
    for name, why in (summary.get("failed") or {}).items():
        console.print(f"[red]{name}: the LLM setter failed, nothing of its last round was stored: {why}[/red]")
    console.print(f"{summary['admitted']} admitted, {summary['rejected']} rejected in {summary['seconds']} s → {path}",
                  soft_wrap=True)
    if summary["nothing_to_do"]:
        console.print(f"nothing to do: batch {summary['batch']!r} was already complete")
    worlds = summary.get("worlds")
    if worlds and worlds["worlds"]:
        console.print(f"{worlds['worlds']} distinct (family, domain) worlds over {worlds['domains']} passage domains")
    quality = summary.get("quality")
    if quality and not quality["passed"]:
        failed = [f"{e['expectation']} on {e['column']} ({e['unexpected']} rows, e.g. {', '.join(e['rows'][:3])})"
                  for e in quality["expectations"] if not e["passed"]]
        _fail("the data-quality suite failed, so no corpus version was published: " + "; ".join(failed))
    version = summary["corpus_version"]
    console.print(f"corpus version {version}" + (" published" if summary["published"] else " (unchanged)") if version
                  else "no corpus version: nothing admitted yet")


def _reader(db: Optional[Path]):
    from vhd.warehouse import Warehouse

    return Warehouse.open(db, read_only=True)


@app.command()
@handles_errors
def envs(family: Optional[str] = typer.Option(None, help="only this family"), db: Optional[Path] = DbOption,
         as_json: bool = JsonOption) -> None:
    """List admitted environments: on a terminal a table whose id prefixes `vhd audit` resolves,
    elsewhere (a pipe, a file) whole ids, one tab-separated row a line."""
    if family is not None:
        from vhd.mechanisms import registry

        registry.get(family)
    with _reader(db) as wh:
        rows = [{"env_id": e.env_id, "family": e.family, "presentation": e.presentation, "split": e.split,
                 "knobs": e.knobs, "u_star": e.u_star, "u_default": e.u_default, "turn_budget": e.turn_budget,
                 "difficulty": e.difficulty or None}
                for e in wh.environments(family)]
        shown = {r["env_id"]: _shown_id(wh, r["env_id"]) for r in rows} if console.is_terminal and not as_json else {}
    if as_json:
        return _emit(rows)
    if not console.is_terminal:  # a pipe, a file: whole ids, one tab-separated row a line
        sys.stdout.write("\t".join(("env_id", "family", "presentation", "split", "knobs", "u_star", "u_default")) + "\n")
        for r in rows:
            sys.stdout.write("\t".join((r["env_id"], r["family"], r["presentation"], r["split"],
                                        " ".join(f"{k}={v}" for k, v in r["knobs"].items()), f"{r['u_star']:g}",
                                        f"{r['u_default']:g}")) + "\n")
        return
    table = Table("env_id", "family", "pres.", "split", "knobs", "u*", "u0")
    table.columns[0].no_wrap = True
    table.columns[0].min_width = max((len(v) for v in shown.values()), default=16)
    for r in rows:
        table.add_row(shown[r["env_id"]], r["family"], r["presentation"], r["split"],
                      " ".join(f"{k}={v}" for k, v in r["knobs"].items()), f"{r['u_star']:g}", f"{r['u_default']:g}")
    console.print(table)
    console.print(f"{len(rows)} admitted environments")


def _shown_id(wh, env_id: str, length: int = 16) -> str:
    """The shortest prefix of `env_id`, 16 hex digits or more, that `vhd audit` (resolve_env_id)
    resolves to it among every stored environment."""
    from vhd.schemas.errors import UnknownEnvironment

    while length < len(env_id):
        try:
            if wh.resolve_env_id(env_id[:length]) == env_id:
                return env_id[:length]
        except UnknownEnvironment:
            pass
        length += 4
    return env_id


@app.command()
@handles_errors
def audit(env_id: str = typer.Argument(..., help="environment id (or a unique prefix)"),
          db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """Walk the lineage from an environment back to θ and its seed, recompute and re-hash it all."""
    from vhd.tasks.audit import verify
    from vhd.warehouse.lineage import load_chain

    with _reader(db) as wh:
        report = verify(load_chain(wh, wh.resolve_env_id(env_id)))
    if as_json:
        _emit(report)
    else:
        table = Table("kind", "id", "relation", "code version", "run", "hash")
        for link in report["chain"]:
            table.add_row(link["kind"], link["id"][:16], link["relation"], link["code_version"], link["run_id"][:8],
                          "ok" if link["hash_ok"] else "[red]MISMATCH[/red]")
        console.print(table)
        console.print(f"seed {report['seed']}, knobs {report['knobs']}; {report['why']}", soft_wrap=True)
        _print_findings(report)
        console.print("[green]verified[/green]" if report["verified"] else "[red]NOT verified[/red]")
    if not report["verified"]:
        raise typer.Exit(1)


def _print_findings(report: dict[str, Any]) -> None:
    """An audit's problems (one ✗ line each), what to do about them (when the audit knows) and notes."""
    for problem in report["lines"]:
        console.print(f"[red]✗[/red] {problem}", highlight=False, soft_wrap=True)
    if report.get("hint"):
        console.print(f"hint: {report['hint']}", highlight=False, soft_wrap=True)
    for note in report["notes"]:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)


@app.command("verify")
@handles_errors
def verify_(db: Optional[Path] = DbOption, as_json: bool = JsonOption,
            resolve: bool = typer.Option(True, "--resolve/--no-resolve", help="also re-solve every θ and compare "
                                         "its solution row (the slow part)"),
            seal: bool = typer.Option(False, "--seal", help="write field digests for rows written before migration "
                                      "006, once the rest of the audit passes (opens the warehouse for writing)")) -> None:
    """Audit the whole warehouse: every environment's chain (admitted or not), every published
    corpus version and every other stored row; exit 1 on any problem, each named by
    environment, table, row and field (docs/RELIABILITY.md, "What is verified where")."""
    from vhd.tasks.gate import whole
    from vhd.tasks.marks import mark_findings
    from vhd.warehouse import Warehouse
    from vhd.warehouse.lineage import audit_inputs, seal_rows, unsealed

    with _reader(db) as wh:
        report = whole(**audit_inputs(wh), marks=mark_findings(wh), resolve=resolve)
    if seal:
        rows = unsealed(report)  # one line and nothing sealed when the audit found anything else
        with Warehouse.open(db) as wh:
            console.print(f"sealed {seal_rows(wh, rows)} rows")
        return
    if as_json:
        _emit(report)
    else:
        _print_findings(report)
        console.print(f"{report['envs']} environments, {report['versions']} corpus versions in {report['seconds']} s: "
                      + ("[green]verified[/green]" if report["verified"] else f"[red]{len(report['findings'])} "
                                                                              "problems[/red]"))
    if not report["verified"]:
        raise typer.Exit(1)


@app.command()
@handles_errors
def check(env_id: str = typer.Argument(..., help="environment id (or a unique prefix)"),
          code: Optional[Path] = typer.Option(None, "--code", help="check this module file instead of the stored one"),
          db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """Re-run every admission gate on an environment (exit 1 when it would not be admitted)."""
    from vhd.mechanisms import registry
    from vhd.schemas.errors import SetterError
    from vhd.schemas.records import EnvironmentRecord, ModelRecord, SetterOutputRecord, SolutionRecord
    from vhd.tasks.recheck import recheck

    module = None
    if code is not None:
        try:
            module = code.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SetterError(f"cannot read module {code}: {exc}") from None
    with _reader(db) as wh:
        env = wh.get(EnvironmentRecord, wh.resolve_env_id(env_id))
        model, solution = wh.get(ModelRecord, env.model_id), wh.get(SolutionRecord, env.solution_id)
        output = wh.get(SetterOutputRecord, env.setter_output_id)
    report = recheck(env, model, solution, output, registry.get(env.family), module)
    if as_json:
        _emit(report)
    else:
        table = Table("gate", "passed", "message")
        for gate in report["gates"]:
            table.add_row(gate["name"], "[green]yes[/green]" if gate["passed"] else "[red]no[/red]", gate["message"])
        console.print(table)
        console.print("[green]admitted[/green]" if report["admitted"] else "[red]rejected[/red]")
    if not report["admitted"]:
        raise typer.Exit(1)


@app.command()
@handles_errors
def selftest(families: str = typer.Option("", help="comma-separated families (default: every family with admitted "
                                          "environments)"),
             modules: int = typer.Option(2, min=1, help="admitted modules mutated per family"),
             envs: int = typer.Option(3, min=1, help="admitted environments each mutant is checked on"),
             seed: int = typer.Option(0, min=0, help="seed of the mutation-site choice"),
             db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """Mutate admitted modules (flipped operators, scaled costs, dropped checks, shifted horizon,
    free probes, leaked θ, constant utility), run every gate on each mutant, report survivors.
    Exit 1 if an unmutated module is rejected."""
    from rich.progress import Progress

    from vhd.mechanisms import registry
    from vhd.tasks.selftest import selftest as run_selftest
    from vhd.tasks.selftest import selftest_groups

    wanted = _families(families)
    with _reader(db) as wh:
        groups = selftest_groups(wh, wanted, modules, envs)
    if not groups:
        _fail("no admitted environments to mutate; run `vhd refresh` first")
    with Progress(console=console, transient=True, disable=as_json) as progress:
        bar = progress.add_task("mutating families", total=len(groups))
        report = run_selftest(groups, {name: registry.get(name) for name in groups}, seed,
                              progress=lambda name: progress.advance(bar))
    if as_json:
        _emit(report)
    else:
        table = Table("family", "modules", "mutants", "rejected", "survivors", "false rejections", "rate")
        for name, row in report["families"].items():
            rate = f"{row['rejection_rate']:.1%}" if row["rejection_rate"] is not None else "–"
            table.add_row(name, str(row["modules"]), str(row["mutants"]), str(row["rejected"]),
                          str(len(row["survivors"])), str(row["false_rejections"]), rate)
        console.print(table)
        for name, row in report["families"].items():
            for survivor in row["survivors"]:
                console.print(f"[yellow]survivor[/yellow] {name} {survivor['operator']} in {survivor['where']}")
                console.print(survivor["diff"], markup=False, highlight=False)
        rate = report["rejection_rate"]
        console.print(f"{report['rejected']}/{report['mutants']} mutants rejected"
                      + (f" ({rate:.1%})" if rate is not None else "") + f"; {report['false_rejections']} false rejections"
                      + f"; {report['equivalent_skipped']} equivalent sites not mutated (listed under --json)")
    if report["false_rejections"]:
        raise typer.Exit(1)


@app.command()
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
    from vhd.tasks.score import parse_trajectories, score as score_stage

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


@app.command("import-instances")
@handles_errors
def import_instances(
    family: str = typer.Argument(..., help="family to import into (one with an importer: knapsack)"),
    file: Path = typer.Argument(..., help="instance file, e.g. tests/data/knapsack/mknap1.txt"),
    fmt: str = typer.Option("auto", "--format", help="auto, pisinger ('n W' then 'value weight' lines) or orlib "
                            "(OR-Library mknap)"),
    presentations: str = typer.Option("I,A", help="presentations to build, among F, I and A"),
    db: Path | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Import public benchmark instances: each must solve to its published optimum, then the gates decide."""
    from vhd.tasks.instances import import_file
    from vhd.warehouse import Warehouse, default_path

    chosen, path = _presentations(presentations), db or default_path()
    summary = import_file(family, file, fmt, chosen, lambda: Warehouse.open(path))
    if as_json:
        return _emit(summary)
    table = Table("instance", "n", "m", "published", "u*", *chosen, "note", title=f"import {summary['batch']}")
    for r in summary["instances"]:
        cells = [("[green]yes[/green]" if r["admitted"][p] else f"[red]no[/red] {r['reasons'][p].split(':')[0]}")
                 for p in chosen] if r["status"] == "imported" else ["–"] * len(chosen)
        note = r.get("reason", "") or ("" if r.get("verified") else "no published optimum: not compared")
        table.add_row(r["name"], str(r["n"]), str(r["m"]), "unknown" if r["published"] is None else f"{r['published']:g}",
                      f"{r['u_star']:g}" if "u_star" in r else "–", *cells, note)
    console.print(table)
    console.print(f"{summary['admitted']} admitted, {summary['rejected']} rejected, {summary['reused']} already there"
                  f" → {path}")


passages_app = _App(help="The passage corpus: the built-in passages and those added with `vhd passages add` "
                           "(added passages are stored but not yet used by `vhd refresh`).",
                           add_completion=False)
app.add_typer(passages_app, name="passages")


@passages_app.callback(invoke_without_command=True)
@handles_errors
def passages(ctx: typer.Context, db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """List the built-in passages, then those stored in the warehouse (if it exists) that are not built in."""
    if ctx.invoked_subcommand is not None:
        return
    from vhd.tasks.passages import builtin_passages
    from vhd.warehouse import default_path

    rows, seen = [], set()
    for p in builtin_passages():
        seen.add(p.passage_id)
        rows.append({"passage_id": p.passage_id, "domain": p.domain, "source": p.source, "origin": "builtin"})
    if (db or default_path()).exists():
        with _reader(db) as wh:
            for p in wh.passages():
                if p.passage_id not in seen:
                    seen.add(p.passage_id)
                    rows.append({"passage_id": p.passage_id, "domain": p.domain, "source": p.source,
                                 "origin": "warehouse"})
    if as_json:
        return _emit(rows)
    table = Table("passage_id", "domain", "source", "origin")
    for r in rows:
        table.add_row(r["passage_id"][:16], r["domain"], r["source"], r["origin"])
    console.print(table)
    console.print(f"{len(rows)} passages in {len({r['domain'] for r in rows})} domains")


@passages_app.command("add")
@handles_errors
def passages_add(file: Path = typer.Argument(..., help="a passage file: .jsonl (one object a line) or .parquet"),
                 db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """Validate a passage file (JSONL or Parquet) and store its valid rows in the warehouse.

    One transaction; rows already stored are kept; rejected rows go to stderr with row number and reason.

    Added passages are listed by `vhd passages` but not yet used by `vhd refresh` (built-in passages only).
    """
    from vhd.tasks.passages import load_passages
    from vhd.warehouse import Warehouse, default_path

    records, errors = load_passages(file)
    for error in errors:
        typer.echo(f"rejected {error}", err=True)
    if not records:
        _fail(f"{file}: no passage could be loaded ({len(errors)} rejected); nothing written")
    path = db or default_path()
    with Warehouse.open(path) as wh:
        known = wh.store(records)  # one transaction; rows already stored are kept
    summary = {"file": str(file), "db": str(path), "loaded": len(records),
               "new": sum(r.passage_id not in known for r in records), "rejected": errors,
               "passages": [{"passage_id": r.passage_id, "domain": r.domain, "source": r.source,
                             "stored_before": r.passage_id in known} for r in records]}
    if as_json:
        return _emit(summary)
    console.print(f"{summary['loaded']} passages loaded ({summary['new']} new), {len(errors)} rejected → {path}")


@app.command()
@handles_errors
def versions(db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """List published corpus versions (immutable manifests of admitted environments)."""
    with _reader(db) as wh:
        rows = [{"version": v.version, "created_at": v.created_at, "admitted": v.admitted, "run_id": v.run_id,
                 "counts": v.manifest["counts"]} for v in wh.versions()]
    if as_json:
        return _emit(rows)
    table = Table("version", "created at", "admitted", "per family")
    for r in rows:
        table.add_row(r["version"], r["created_at"], str(r["admitted"]),
                      ", ".join(f"{k} {n}" for k, n in r["counts"]["family"].items()))
    console.print(table)


@app.command()
@handles_errors
def export(out: Path = typer.Option(..., "--out", help="directory to write the export into: "
                                     "data/<split>-<digest>.jsonl|.parquet and README.md (or the OpenEnv "
                                     "packages)"),
           format: str = typer.Option("jsonl", "--format", help="jsonl, parquet, or openenv: one OpenEnv package "
                                      "(openenv.yaml, Dockerfile, server/app.py, validation/runtime.json) per "
                                      "environment, in OUT/vhd-<env_id[:16]>"),
           corpus_version: Optional[str] = typer.Option(None, "--corpus-version",
                                                        help="export exactly this version (default: the latest)"),
           tool_names: str = typer.Option("skinned", "--tool-names", help="skinned: the passage's tool names "
                                          "(order_loaves…); canonical: the family's (place_order…), one tool set "
                                          "per family for training, the passage's words kept elsewhere"),
           env_ids: Optional[list[str]] = typer.Option(None, "--env", help="--format openenv: this environment "
                                                       "only (an id or unique prefix; repeatable; default: each "
                                                       "I and A environment of the version)"),
           wheelhouse: Optional[Path] = typer.Option(None, "--wheelhouse", help="--format openenv: wheels to put "
                                                     "in each package's wheels/ (vhd-play's dependencies, for an "
                                                     "offline image build; default: the project wheel only)"),
           db: Optional[Path] = DbOption) -> None:
    """Export a published corpus version, verified against its digest first: module, player view,
    grader view, the environment's grading digest and the corpus digest, one row each; or, with
    --format openenv, one OpenEnv package per environment that `openenv validate` checks."""
    from vhd.tasks.export import TOOL_NAMES, rows_of, with_canonical_tool_names, write
    from vhd.tasks.publish import open_version, pinned

    if format not in ("jsonl", "parquet", "openenv"):
        _fail(f"--format must be jsonl, parquet or openenv, got {format!r}")
    if tool_names not in TOOL_NAMES:
        _fail(f"--tool-names must be one of {', '.join(TOOL_NAMES)}, got {tool_names!r}")
    if format != "openenv" and (env_ids or wheelhouse is not None):
        _fail("--env and --wheelhouse are options of --format openenv")
    if wheelhouse is not None and not wheelhouse.is_dir():
        _fail(f"--wheelhouse {wheelhouse}: not a directory of wheels")
    _output_directory(out)
    with _reader(db) as wh:
        version, envs = open_version(wh, corpus_version)  # a row changed since publication: one line, exit 1
        rows = rows_of(wh, envs, lambda e: pinned(e, version))
    if tool_names == "canonical":
        rows = [with_canonical_tool_names(row) for row in rows]
    if format != "openenv":
        target = write(rows, out, format)
        console.print(f"{len(rows)} environments → {target}")
        return
    from vhd.tasks.openenv_package import package_name, write_package

    if env_ids:
        chosen = []
        for wanted in env_ids:
            found = [row for row in rows if row["env_id"].startswith(wanted)]
            if len(found) != 1:
                _fail(f"--env {wanted}: {'no' if not found else len(found)} environments of version "
                      f"{version.version} match; expected one env_id or unique prefix (see `vhd envs`)")
            chosen.append(found[0])
    else:
        chosen = [row for row in rows if row["presentation"] != "F"]  # F is played by a written answer
    for row in chosen:
        target = write_package(row, out / package_name(row), wheelhouse)
        console.print(f"{row['env_id'][:16]} → {target}", highlight=False)
    console.print(f"{len(chosen)} OpenEnv packages → {out} (check one: openenv validate {out}/<package>)",
                  highlight=False)


def _scored_environment(wh, env_id: str, corpus_version: Optional[str]):
    """The environment `vhd score` grades, verified: through `--corpus-version` V (it must be in V),
    else through the latest version that holds it, else through its own row's id and digests."""
    from vhd.schemas.records import EnvironmentRecord
    from vhd.tasks.publish import holding_version

    held = holding_version(wh, env_id, corpus_version)
    return held[1] if held is not None else wh.verified(EnvironmentRecord, [env_id], complete=True)[env_id]


# --- issue 5, LLM setter: vhd yield ----------------------------------------------------------


@app.command(name="yield")
@handles_errors
def yield_(db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """How well the LLM setter writes modules, per setter and model, from the warehouse:
    first-try admission rate, mean attempts, rate of rewritten tool interfaces, and dollars
    per admitted environment (see docs/SETTERS.md). Does not start Prefect."""
    with _reader(db) as wh:
        rows = wh.setter_yield()
    if as_json:
        _emit(rows)
        return
    if not rows:
        console.print("no LLM setter outputs yet: run `vhd refresh --setter anthropic`")
        return
    table = Table("setter", "model", "runs", "modules", "admitted envs", "first try", "mean attempts", "rewritten",
                  "$ / admitted", title="setter yield")
    for r in rows:
        cost = f"{r['cost_per_admitted_usd']:.4f}" if r["cost_per_admitted_usd"] is not None else "–"
        table.add_row(r["setter"], r["model"], str(r["runs"]), str(r["outputs"]), str(r["admitted"]),
                      f"{r['first_try_rate']:.1%}", f"{r['mean_attempts']:.2f}", f"{r['rewrite_rate']:.1%}", cost)
    console.print(table)


# --- issue 7 (adapters): vhd serve-env, vhd play -------------------------------------------------


def _adapter_env(env_id: str, db: Optional[Path]):
    from vhd.adapters.gym import TextToolEnv

    with _reader(db) as wh:
        full = wh.resolve_env_id(env_id)
    return TextToolEnv.from_warehouse(full, db)


@app.command("serve-env")
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


@app.command("serve-openenv")
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


@app.command()
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


# --- issue 7 (agents/eval): vhd eval -------------------------------------------------------------


@app.command("eval")
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


@app.command("report")
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


@app.command()
@handles_errors
def stats(db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """How varied the corpus's interfaces are: over the admitted, current I and A environments, the
    distinct tool names, the distinct tool sets of each family and the distinct argument names (a
    family with one tool set exposes one API in every passage)."""
    from vhd.tasks.stats import interface_stats

    with _reader(db) as wh:
        found = interface_stats(wh.environments(admitted=True))
    if as_json:
        return _emit(found)
    console.print(f"{found['environments']} environments of {found['families']} families: "
                  f"{found['tool_names']} distinct tool names, {found['argument_names']} distinct argument names; "
                  f"{len(found['one_tool_set'])} of {found['families']} families with one tool set", highlight=False)
    table = Table("family", "tool sets")
    for family, n in found["tool_sets"].items():
        table.add_row(family, str(n))
    console.print(table)


@app.command("family-check")
@handles_errors
def family_check(name: Optional[str] = typer.Argument(None, help="the registered family to check"),
                 every: bool = typer.Option(False, "--all", help="check every registered family"),
                 draws: int = typer.Option(24, "--draws", min=1, max=1000, help="θ draws solved, fuzzed and measured"),
                 seed: int = typer.Option(0, min=0, help="seed of the θ draws"),
                 as_json: bool = JsonOption) -> None:
    """Check a family before anything else (Gymnasium's check_env): the contract every family meets,
    z of seeded draws against DEFAULT_BAND, random calls against the call limit, the turn budget,
    the module-level names. Each problem is one line saying what to fix; exit 1 if any."""
    from rich.progress import Progress

    from vhd.tasks.family_check import check_named

    if (name is None) == (not every):
        _fail("name one family (vhd family-check NAME) or pass --all, not both" if name else
              "name the family to check (vhd family-check NAME) or pass --all")
    with Progress(console=console, transient=True, disable=as_json or not console.is_terminal) as progress:
        def bar(family: str, total: int) -> Callable[[str], None]:
            task = progress.add_task(f"checking {family}", total=total)
            return lambda step: progress.update(task, advance=1, description=f"{family}: {step}")

        reports = check_named(None if every else [name], draws, seed, bar)
    if as_json:
        _emit(reports if every else reports[0] if len(reports) == 1 else reports)
    else:
        for report in reports:
            checks = {c["name"]: c for c in report["checks"]}
            console.print(f"[bold]{report['family']}[/bold] "
                          + ("[green]passed[/green]" if report["passed"] else "[red]failed[/red]"))
            if "names" in checks:
                d = checks["names"]["details"]
                console.print(f"  names: declares {', '.join(d['declared']) or 'none'}; left to defaults: "
                              f"{', '.join(d['defaults']) or 'none'}", highlight=False, soft_wrap=True)
            contract = [c for c in report["checks"] if c["name"].startswith("contract: ")]
            if contract:
                console.print(f"  contract: {sum(c['passed'] for c in contract)} of {len(contract)} checks pass",
                              highlight=False)
            if "default band" in checks:
                z = checks["default band"]["details"]
                shown = " / ".join(f"{q:.2f}" for q in z["quantiles"]) or "–"
                console.print(f"  z over {z['draws']} draws (min / quartiles / max {shown}) vs DEFAULT_BAND "
                              f"{tuple(z['band'])}: {z['inside']} inside, {z['below']} below, {z['above']} above, "
                              f"{z['no_span']} with no span", highlight=False, soft_wrap=True)
            if "fuzz" in checks:
                console.print(f"  fuzz: {checks['fuzz']['details']['calls']} random calls on the reference World",
                              highlight=False)
            if "budget" in checks:
                b = checks["budget"]["details"]
                console.print(f"  budget: binds on {b['binding']} of {b['in_band']} in-band draws" if b["budget_binds"]
                              else f"  budget: π*'s play fits on {b['fits']} of {b['draws']} draws", highlight=False)
            for check in report["checks"]:
                for problem in check["problems"]:
                    console.print(f"  ✗ {check['name']}: {problem}", markup=False, highlight=False, soft_wrap=True)
    if not all(report["passed"] for report in reports):
        raise typer.Exit(1)


# --- issue 6: backfill, serve ------------------------------------------------------------------


@app.command()
@handles_errors
def backfill(
    family: str = typer.Argument(..., help="the family to fill, e.g. a newly added one"),
    per_family: int = typer.Option(20, min=1, help="θ draws; each yields one environment per presentation"),
    seed: int = typer.Option(0, min=0, help="run seed"),
    batch: Optional[str] = typer.Option(None, help="batch key (default: 'backfill', so a rerun finds its work done)"),
    presentations: str = typer.Option("I,A", help="presentations to build, among F, I and A"),
    workers: Optional[int] = WorkersOption,
    db: Optional[Path] = DbOption,
    as_json: bool = JsonOption,
    verbose: bool = VerboseOption,
) -> None:
    """Give one family its environments without touching any other family (runs the backfill flow)."""
    from vhd.mechanisms import registry
    from vhd.warehouse import Warehouse, default_path

    registry.get(family)
    chosen = _presentations(presentations)
    _batch(batch)
    _per_family(per_family)
    path = db or default_path()
    Warehouse.preflight(path)  # fail fast (busy, unreadable, foreign, no such directory) before Prefect starts
    with _prefect(quiet=not verbose):
        from vhd.flows.backfill import backfill as backfill_flow
        from vhd.flows.refresh import with_workers

        flow_ = with_workers(backfill_flow, workers)
        with _progress(f"backfill of {family} → {path}", as_json, verbose):
            summary = flow_(family=family, per_family=per_family, seed=seed, batch=batch, db_path=str(path),
                            presentations=chosen)
    _report(summary, path, as_json)


@app.command()
@handles_errors
def serve(
    cron: str = typer.Option("0 3 * * *", help="when the refresh runs, a 5-field cron expression"),
    timezone: str = typer.Option("UTC", help="time zone the cron is read in, e.g. Europe/Berlin"),
    per_family: int = typer.Option(20, min=1, help="θ draws per family in each nightly batch"),
    follow: Optional[Path] = typer.Option(None, "--follow", metavar="RESULTS", help=(
        "each nightly run follows a learner: RESULTS is the file of env_id, reward rows its trainer "
        "rewrites between runs (as `vhd refresh --follow`)")),
    follow_band: Optional[str] = typer.Option(None, "--follow-band", metavar="LO:HI", help=(
        "with --follow: the learner's target reward band (default 0.3:0.7)")),
    db: Optional[Path] = DbOption,
) -> None:
    """Serve the nightly refresh deployment against the Prefect API (PREFECT_API_URL); blocks until Ctrl-C.

    Each scheduled run is `vhd refresh` over every registered family with today's date as the batch.
    See docs/OPERATIONS.md for running against a Prefect server and watching runs in the UI."""
    from vhd.warehouse import Warehouse, default_path

    _per_family(per_family)
    path = (db or default_path()).resolve()
    Warehouse.preflight(path)  # fail fast (busy, unreadable, foreign, no such directory) before Prefect starts
    target_band = _band(follow_band, "--follow-band") if follow_band is not None else None
    if follow_band is not None and follow is None:
        _fail("--follow-band needs --follow RESULTS (the learner whose reward it bands)")
    with _prefect(api=False):  # `serve` talks to the server PREFECT_API_URL names, not a temporary one
        from vhd.flows.serve import nightly, serve as serve_deployment

        try:
            deployment = nightly(cron=cron, db_path=str(path), per_family=per_family, timezone=timezone,
                                 follow=str(follow.resolve()) if follow is not None else None, follow_band=target_band)
        except ValueError as exc:
            _fail(f"--cron {cron!r} / --timezone {timezone!r}: {str(exc).splitlines()[0]}; expected e.g. '0 3 * * *'")
        console.print(f"serving deployment refresh/{deployment.name} on {cron!r} ({timezone}) → {path}")
        serve_deployment(deployment)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
