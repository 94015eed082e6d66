"""What every `vhd` command shares: the app, the console, common options, option checks,
error handling, and the Prefect and progress contexts."""

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
            from vhd.warehouse import default_path
            from vhd.warehouse.files import database_error

            path = (kwargs["db"] or default_path()) if "db" in kwargs else None  # the file the command used
            message = database_error(exc, path)
            if message is None:
                raise
            _fail(message)

    return wrapper


def _emit(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


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
    from vhd.tasks.stages.sample import MAX_PER_FAMILY

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


def _reader(db: Optional[Path]):
    from vhd.warehouse import Warehouse

    return Warehouse.open(db, read_only=True)
