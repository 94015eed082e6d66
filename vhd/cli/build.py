"""Commands that build the corpus: refresh (the nightly flow), backfill, serve, instances, passages and
family-check."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import typer
from rich.table import Table

from vhd.cli.common import (
    _App, _batch, _emit, _fail, _families, _per_family, _prefect, _presentations, _progress,
    _reader, app, console, DbOption, handles_errors, JsonOption, VerboseOption, WorkersOption
)


@app.command(rich_help_panel="Build the corpus")
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
    seals: Optional[Path] = typer.Option(None, "--seals", envvar="VHD_SEALS", metavar="PATH", help=(
        "the seal file this refresh appends each new corpus version's seal to, and checks the published "
        "versions against before it trusts them (default: <db>.seals.jsonl; keep it outside the warehouse, "
        "e.g. under version control; docs/RELIABILITY.md, 'The anchor')")),
    db: Optional[Path] = DbOption,
    as_json: bool = JsonOption,
    verbose: bool = VerboseOption,
) -> None:
    """Sample, solve, synthesize, check and annotate environments (runs the Prefect flow).

    Shows one progress row per family (admitted, rejected, elapsed, ETA) while it runs, then the
    summary table; Prefect's own log lines go to $PREFECT_HOME/logs/vhd.log (--verbose: stderr)."""
    from vhd.mechanisms import registry
    from vhd.tasks.corpus.presets import preset as find_preset
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
    from vhd.warehouse import seals as seal_store

    seal_store.read_anchors(seal_store.seals_path(path, seals))  # a malformed seal file: one line, nothing written
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
                            follow=str(follow) if follow is not None else None, follow_band=target_band,
                            seals=str(seals) if seals is not None else None)
    _report(summary, path, as_json)


def _band(text: str, option: str) -> tuple[float, float]:
    from vhd.tasks.stages.difficulty import parse_band

    return parse_band(text, option)


def _followed(results: Path, path: Path, families: Optional[list[str]]) -> tuple[str, ...]:
    """Check a --follow RESULTS file before Prefect starts (it is read, every env id is one of the
    warehouse's, some family can be aimed at); the presentations the learner played."""
    from vhd.schemas.errors import WarehouseMissing
    from vhd.schemas.records import EnvironmentRecord
    from vhd.tasks.corpus import follow as follow_stage
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
    for warning in ((audit or {}).get("seal") or {}).get("warnings", []):  # a version the seal file contradicts
        typer.echo(f"warning: {warning}; the publish gate recomputed every environment", err=True)
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


@app.command("import-instances", rich_help_panel="Build the corpus")
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
    from vhd.tasks.corpus.instances import import_file
    from vhd.warehouse import Warehouse, default_path

    chosen, path = _presentations(presentations), db or default_path()
    Warehouse.preflight(path)  # a damaged warehouse refused before the instances are solved
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


app.add_typer(passages_app, name="passages", rich_help_panel="Build the corpus")


@passages_app.callback(invoke_without_command=True)
@handles_errors
def passages(ctx: typer.Context, db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """List the built-in passages, then those stored in the warehouse (if it exists) that are not built in."""
    if ctx.invoked_subcommand is not None:
        return
    from vhd.tasks.setters.passages import builtin_passages
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
    from vhd.tasks.setters.passages import load_passages
    from vhd.warehouse import Warehouse, default_path

    records, errors = load_passages(file)
    for error in errors:
        typer.echo(f"rejected {error}", err=True)
    if not records:
        _fail(f"{file}: no passage could be loaded ({len(errors)} rejected); nothing written")
    path = db or default_path()
    with Warehouse.open(path, check_blocks=True) as wh:  # a corrupted block refused before anything is written
        known = wh.store(records)  # one transaction; rows already stored are kept
    summary = {"file": str(file), "db": str(path), "loaded": len(records),
               "new": sum(r.passage_id not in known for r in records), "rejected": errors,
               "passages": [{"passage_id": r.passage_id, "domain": r.domain, "source": r.source,
                             "stored_before": r.passage_id in known} for r in records]}
    if as_json:
        return _emit(summary)
    console.print(f"{summary['loaded']} passages loaded ({summary['new']} new), {len(errors)} rejected → {path}")


@app.command("family-check", rich_help_panel="Build the corpus")
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


@app.command(rich_help_panel="Build the corpus")
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


@app.command(rich_help_panel="Build the corpus")
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
    verify_cron: str = typer.Option("0 4 * * 0", "--verify-cron", help=(
        "when the weekly full audit (`vhd verify --full`: every environment replayed and re-solved) runs, a "
        "5-field cron expression in the same time zone; 'off' serves the refresh alone")),
    db: Optional[Path] = DbOption,
) -> None:
    """Serve the nightly refresh and the weekly full audit against the Prefect API (PREFECT_API_URL);
    blocks until Ctrl-C.

    Each scheduled refresh is `vhd refresh` over every registered family with today's date as the
    batch; each scheduled audit is `vhd verify --full` of the same warehouse (a problem fails the
    run). See docs/OPERATIONS.md for running against a Prefect server and watching runs in the UI."""
    from vhd.warehouse import Warehouse, default_path

    _per_family(per_family)
    path = (db or default_path()).resolve()
    Warehouse.preflight(path)  # fail fast (busy, unreadable, foreign, no such directory) before Prefect starts
    target_band = _band(follow_band, "--follow-band") if follow_band is not None else None
    if follow_band is not None and follow is None:
        _fail("--follow-band needs --follow RESULTS (the learner whose reward it bands)")
    with _prefect(api=False):  # `serve` talks to the server PREFECT_API_URL names, not a temporary one
        from vhd.flows.serve import nightly, serve as serve_deployment, weekly_verify

        try:
            deployment = nightly(cron=cron, db_path=str(path), per_family=per_family, timezone=timezone,
                                 follow=str(follow.resolve()) if follow is not None else None, follow_band=target_band)
        except ValueError as exc:
            _fail(f"--cron {cron!r} / --timezone {timezone!r}: {str(exc).splitlines()[0]}; expected e.g. '0 3 * * *'")
        deployments = [deployment]
        if verify_cron != "off":
            try:
                deployments.append(weekly_verify(cron=verify_cron, db_path=str(path), timezone=timezone))
            except ValueError as exc:
                _fail(f"--verify-cron {verify_cron!r}: {str(exc).splitlines()[0]}; expected e.g. '0 4 * * 0', or 'off'")
        console.print(f"serving deployment refresh/{deployment.name} on {cron!r} ({timezone}) → {path}")
        if len(deployments) > 1:
            console.print(f"serving deployment verify/{deployments[1].name} on {verify_cron!r} ({timezone}) → {path}")
        serve_deployment(*deployments)
