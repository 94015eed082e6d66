"""What a person at the terminal sees of a refresh: one progress row per family, fed by the flow,
and Prefect's own log lines in a file instead of on the screen.

For example (it draws on a terminal and starts Prefect, so not a doctest):

    with prefect_logs_to(log_file()), listening(RefreshDisplay(Console(), live=True)):
        refresh(families=["inventory_dp"], per_family=1, db_path="data/vhd.duckdb")

The refresh flow calls `report` in its own process: `planned` for every slot before the first
starts, `started`, `advanced` after each check task (counts so far), `finished` with the slot's
counts. Whoever listens (`listening`) gets those calls; nobody listening costs nothing. On a
terminal `RefreshDisplay` is a live table (rich); elsewhere (CI, a pipe) it prints a few plain
lines: one at each quarter of the families done (the summary follows the last).
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

_listeners: list[Any] = []


@contextmanager
def listening(listener: Any) -> Iterator[Any]:
    """`listener` gets every `report` of the flows run inside the block (in this process)."""
    _listeners.append(listener)
    try:
        yield listener
    finally:
        _listeners.remove(listener)


def report(event: str, key: str, **counts: int) -> None:
    """Tell every listener: `event` (planned, started, advanced, finished) of slot `key`, with
    `total` (planned), or `admitted`, `rejected`, `done` (advanced, finished; `done` of `total`)."""
    for listener in list(_listeners):
        getattr(listener, event)(key, **counts)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class RefreshDisplay:
    """Per family: admitted, rejected, done of total, elapsed and ETA; a live table when `live`,
    else a plain line at each quarter of the families finished but the last."""

    def __init__(self, console: Console, live: bool) -> None:
        self.console, self.live = console, live
        self.rows: dict[str, TaskID] = {}
        self.totals: dict[str, int] = {}
        self.finished_keys: set[str] = set()
        self.admitted = self.rejected = 0
        self.began = time.monotonic()
        self.progress = Progress(
            TextColumn("{task.description:<22}"), BarColumn(bar_width=24),
            TextColumn("{task.fields[admitted]:>5} admitted {task.fields[rejected]:>4} rejected "
                       "{task.completed:>5.0f}/{task.total:<5.0f}"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True,
            auto_refresh=live, disable=not live)

    def __enter__(self) -> RefreshDisplay:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live:
            self.progress.stop()

    def planned(self, key: str, total: int) -> None:
        self.totals[key] = total
        self.rows[key] = self.progress.add_task(key, total=max(total, 1), start=False, admitted=0, rejected=0)

    def started(self, key: str) -> None:
        self.progress.start_task(self.rows[key])

    def advanced(self, key: str, admitted: int, rejected: int, done: int) -> None:
        self.progress.update(self.rows[key], completed=min(done, self.totals[key]), admitted=admitted,
                             rejected=rejected)

    def finished(self, key: str, admitted: int, rejected: int, done: int) -> None:
        row = self.rows[key]
        self.progress.start_task(row)  # a slot found complete never started
        self.progress.update(row, completed=max(done, self.totals[key], 1), admitted=admitted, rejected=rejected)
        self.finished_keys.add(key)
        self.admitted, self.rejected = self.admitted + admitted, self.rejected + rejected
        if not self.live:
            self._line()

    def _line(self) -> None:
        done, count = len(self.finished_keys), len(self.rows)
        if done == count or done * 4 // count == (done - 1) * 4 // count:
            return  # the last family's end is the summary's to say
        spent = time.monotonic() - self.began
        self.console.print(f"{done}/{count} families done: {self.admitted} admitted, {self.rejected} rejected, "
                           f"{_clock(spent)} elapsed, ETA {_clock(spent / done * (count - done))}",
                           highlight=False, soft_wrap=True)


def log_file() -> Path:
    """Where Prefect's log lines go when they are not shown: `$PREFECT_HOME/logs/vhd.log`."""
    from prefect.settings import get_current_settings

    return Path(get_current_settings().home) / "logs" / "vhd.log"


@contextmanager
def prefect_logs_to(path: Path) -> Iterator[Path]:
    """Prefect's log lines (and those of every logger that writes to the screen through the root
    logger, the server's included) appended to `path` instead of stderr, for the block. The
    file is created at the first line, in Prefect's own format."""
    import prefect.main  # noqa: F401  (Prefect configures its logging here: the handlers to swap exist after it)
    from prefect.logging.handlers import PrefectConsoleHandler

    path.parent.mkdir(parents=True, exist_ok=True)
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    screens = {id(h): h for lg in loggers for h in lg.handlers
               if isinstance(h, PrefectConsoleHandler) or (isinstance(h, logging.StreamHandler)
                                                           and getattr(h, "stream", None) in (sys.stderr, sys.stdout))}
    to_file = logging.FileHandler(path, encoding="utf-8", delay=True)
    console = next((h for h in screens.values() if isinstance(h, PrefectConsoleHandler)), None)
    to_file.setFormatter(console.formatter if console and console.formatter else
                         logging.Formatter("%(asctime)s | %(levelname)-7s | %(name)s - %(message)s"))
    swapped = [(lg, h) for lg in loggers for h in lg.handlers if id(h) in screens]
    for lg, h in swapped:
        lg.removeHandler(h)
        if to_file not in lg.handlers:
            lg.addHandler(to_file)
    try:
        yield path
    finally:
        for lg, h in swapped:
            lg.removeHandler(to_file)
            lg.addHandler(h)
        to_file.close()


def flush_api_logs() -> None:
    """Send the flow's log lines still queued for Prefect's API now, while the server is up (else
    they are sent after a temporary server stopped, and Prefect prints the failure on stderr)."""
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=5)
