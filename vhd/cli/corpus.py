"""Commands that read the corpus: list, inspect, audit, verify and re-check environments, and export them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from vhd.cli.common import (
    _emit, _fail, _families, _output_directory, _reader, app, console, DbOption,
    handles_errors, JsonOption
)

SealsOption = typer.Option(None, "--seals", envvar="VHD_SEALS", metavar="PATH", help=(
    "the seal file: one JSON line per published corpus version (its seal, chained on the previous one) that "
    "`vhd refresh` appends when it publishes; keep it outside the warehouse (e.g. under version control): a "
    "forger who rewrites the warehouse file cannot make its rows match it (default: <db>.seals.jsonl)"))


@app.command(rich_help_panel="Inspect and verify")
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


@app.command(rich_help_panel="Inspect and verify")
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


@app.command(rich_help_panel="Inspect and verify")
@handles_errors
def audit(env_id: str = typer.Argument(..., help="environment id (or a unique prefix)"),
          db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """Walk the lineage from an environment back to θ and its seed, recompute and re-hash it all."""
    from vhd.tasks.corpus.audit import verify
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


@app.command("verify", rich_help_panel="Inspect and verify")
@handles_errors
def verify_(db: Optional[Path] = DbOption, as_json: bool = JsonOption,
            resolve: bool = typer.Option(True, "--resolve/--no-resolve", help="also re-solve every θ and compare "
                                         "its solution row (the slow part)"),
            full: bool = typer.Option(False, "--full", help="replay (and re-solve) every environment, whatever the "
                                      "seal file says; by default the environments of published versions whose seals "
                                      "match the seal file are audited row by row (ids, field digests, edges, "
                                      "manifests) but not replayed, unless that finds a problem"),
            seals: Optional[Path] = SealsOption,
            seal: bool = typer.Option(False, "--seal", help="write field digests for rows written before migration "
                                      "006, once the rest of the audit passes (opens the warehouse for writing)")) -> None:
    """Audit the warehouse: each published version's seal, recomputed from the stored rows, against
    the seal file (anchored and matching, mismatching, or not anchored); then every environment's
    chain (admitted or not), every published version and every other stored row; the
    environments that matching anchored seals cover are audited row by row but not replayed or
    re-solved (--full: they are too). Exit 1 on any problem, each named by environment, table, row
    and field, or on a seal that does not match (docs/RELIABILITY.md, "What is verified where")."""
    from vhd.flows.verification import verify_warehouse
    from vhd.warehouse import Warehouse
    from vhd.warehouse.lineage import seal_rows, unsealed

    report = verify_warehouse(db, seals, full=full or seal, resolve=resolve)
    plan_versions = report["seals"]["versions"]
    if seal:
        rows = unsealed(report)  # one line and nothing sealed when the audit found anything else
        with Warehouse.open(db) as wh:
            console.print(f"sealed {seal_rows(wh, rows)} rows")
        return
    if as_json:
        _emit(report)
    else:
        _print_findings(report)
        for row in plan_versions:
            shown = {"match": "[green]anchored, matches[/green]",
                     "mismatch": "[red]does not match the seal file[/red]",
                     "missing": "[red]anchored but not in the warehouse[/red]",
                     "unanchored": "[yellow]not anchored[/yellow]"}[row["status"]]
            console.print(f"{row['version']}: seal {str(row['seal'] or '–')[:16]}… {shown}"
                          + (f" ({row['why']})" if row["why"] else ""), highlight=False)
        if not report["seals"]["present"]:
            console.print(f"no seal file at {report['seals']['file']}: nothing is anchored (`vhd refresh` writes one when it "
                          "publishes)", highlight=False)
        covered = report["seals"]["covered_envs"]
        scope = f"{covered} environments covered by anchored seals (not replayed), " if covered else ""
        console.print(f"{scope}{report['envs']} environments audited, {report['versions']} corpus versions in "
                      f"{report['seconds']} s: " + ("[green]verified[/green]" if report["verified"] else
                                                    f"[red]{len(report['findings'])} problems[/red]"))
    if not report["verified"]:
        raise typer.Exit(1)


@app.command(rich_help_panel="Inspect and verify")
@handles_errors
def check(env_id: str = typer.Argument(..., help="environment id (or a unique prefix)"),
          code: Optional[Path] = typer.Option(None, "--code", help="check this module file instead of the stored one"),
          db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """Re-run every admission gate on an environment (exit 1 when it would not be admitted)."""
    from vhd.mechanisms import registry
    from vhd.schemas.errors import SetterError
    from vhd.schemas.records import EnvironmentRecord, ModelRecord, SetterOutputRecord, SolutionRecord
    from vhd.tasks.stages.check.recheck import recheck

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


@app.command(rich_help_panel="Inspect and verify")
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
    from vhd.tasks.stages.check.selftest import selftest as run_selftest
    from vhd.tasks.stages.check.selftest import selftest_groups

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


@app.command(rich_help_panel="Inspect and verify")
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


@app.command(rich_help_panel="Inspect and verify")
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
           seals: Optional[Path] = SealsOption,
           db: Optional[Path] = DbOption) -> None:
    """Export a published corpus version, verified against its digest first: module, player view,
    grader view, the environment's grading digest and the corpus digest, one row each; or, with
    --format openenv, one OpenEnv package per environment that `openenv validate` checks. The
    version's seal (recomputed from the stored rows; refused when it does not match the seal file)
    is written beside the export as OUT/SEAL, one JSON object a trainer can pin."""
    from vhd.tasks.corpus.export import TOOL_NAMES, rows_of, with_canonical_tool_names, write, write_seal
    from vhd.tasks.corpus.publish import open_version, pinned
    from vhd.tasks.corpus.publish_audit import seal_plan, version_seal
    from vhd.warehouse import seals as seal_store
    from vhd.warehouse.lineage import load_versions

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
        seal_file = seal_store.seals_path(wh.path, seals)
        anchors = seal_store.read_anchors(seal_file)  # an unreadable seal file: one line, nothing written
        version, envs = open_version(wh, corpus_version)  # a row changed since publication: one line, exit 1
        plan = seal_plan(seal_store.sealed_chain(wh), anchors, load_versions(wh))
        sealed = version_seal(plan, version, seal_file)  # a seal the seal file contradicts: one line, exit 1
        rows = rows_of(wh, envs, lambda e: pinned(e, version))
    if tool_names == "canonical":
        rows = [with_canonical_tool_names(row) for row in rows]
    if format != "openenv":
        target = write(rows, out, format)
        write_seal(out, sealed)
        console.print(f"{len(rows)} environments → {target} (seal {sealed['seal'][:16]}… in {out / 'SEAL'})")
        return
    from vhd.tasks.corpus.openenv_package import package_name, write_package

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
    write_seal(out, sealed)
    console.print(f"{len(chosen)} OpenEnv packages → {out} (check one: openenv validate {out}/<package>)",
                  highlight=False)


@app.command(name="yield", rich_help_panel="Inspect and verify")
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


@app.command(rich_help_panel="Inspect and verify")
@handles_errors
def stats(db: Optional[Path] = DbOption, as_json: bool = JsonOption) -> None:
    """How varied the corpus's interfaces are: over the admitted, current I and A environments, the
    distinct tool names, the distinct tool sets of each family, the distinct argument names and the
    styles each family writes ids in (a family with one tool set exposes one API in every passage)."""
    from vhd.tasks.corpus.stats import interface_stats

    with _reader(db) as wh:
        found = interface_stats(wh.environments(admitted=True))
    if as_json:
        return _emit(found)
    console.print(f"{found['environments']} environments of {found['families']} families: "
                  f"{found['tool_names']} distinct tool names, {found['argument_names']} distinct argument names; "
                  f"{len(found['one_tool_set'])} of {found['families']} families with one tool set", highlight=False)
    table = Table("family", "tool sets", "id styles")
    for family, n in found["tool_sets"].items():
        table.add_row(family, str(n), ", ".join(found["id_styles"].get(family, [])) or "(no ids)")
    console.print(table)
