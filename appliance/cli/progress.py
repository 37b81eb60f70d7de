"""Draws the library's Progress records: a rich bar on a terminal, a line every few percent
and at most one every LINE_EVERY_SECONDS elsewhere (CI logs, pipes), always on stderr so
that --json output stays clean."""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import click

from appliance.core.progress import BYTES, Progress, ProgressFn
from appliance.core.units import format_size

LINE_EVERY_PERCENT = 5
LINE_EVERY_SECONDS = 10.0  # without a terminal, at most one line of a task this often
LINE_EVERY_SECONDS_UNKNOWN_TOTAL = 30.0
LINE_MIN_SECONDS = 2.0


def _amount(value: int, unit: str) -> str:
    return format_size(value, trim=True) if unit == BYTES else str(value)


class LinePrinter:
    """Lines for a task once it has run `min_seconds` (quick work prints nothing): then one
    line each time it crosses another LINE_EVERY_PERCENT, at most one every `every_seconds`,
    and its last step; without a total, one line every LINE_EVERY_SECONDS_UNKNOWN_TOTAL.
    `finish` prints the last record of a task that printed a line and has advanced since,
    so a log ends with where each long task stopped, however many records it was sent."""

    def __init__(
        self,
        min_seconds: float = LINE_MIN_SECONDS,
        file: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        every_seconds: float = LINE_EVERY_SECONDS,
    ) -> None:
        self.min_seconds = min_seconds
        self.every_seconds = every_seconds
        self.file = file  # None: stderr
        self.clock = clock
        self.started: dict[str, float] = {}
        self.last_mark: dict[str, int] = {}
        self.last_time: dict[str, float] = {}
        self.latest: dict[str, Progress] = {}  # the last record of each task
        self.shown: dict[str, Progress] = {}  # the last record printed of each task

    def _due(self, p: Progress, now: float) -> bool:
        if now - self.started[p.task] < self.min_seconds:
            return False
        last = self.last_time.get(p.task)
        if p.total:
            mark = min(100, p.done * 100 // p.total) // LINE_EVERY_PERCENT
            if last is not None and mark <= self.last_mark.get(p.task, -1):
                return False
            if last is not None and now - last < self.every_seconds and p.done < p.total:
                return False
            self.last_mark[p.task] = mark
            return True
        return last is None or now - last >= LINE_EVERY_SECONDS_UNKNOWN_TOTAL

    def __call__(self, p: Progress) -> None:
        now = self.clock()
        self.started.setdefault(p.task, now)
        self.latest[p.task] = p
        if self._due(p, now):
            self._line(p, now)

    def finish(self) -> None:
        now = self.clock()
        for task, p in self.latest.items():
            if task in self.shown and self.shown[task] != p:
                self._line(p, now)

    def _line(self, p: Progress, now: float) -> None:
        self.last_time[p.task] = now
        self.shown[p.task] = p
        if p.total:
            where = f"{_amount(p.done, p.unit)}/{_amount(p.total, p.unit)} ({p.done * 100 // p.total}%)"
        else:
            where = _amount(p.done, p.unit) if p.done else "running"
        log = f"; log {p.log}" if p.log else ""
        click.echo(f"{p.task}: {where}, {now - self.started[p.task]:.0f} s{log}", file=self.file, err=True)


@contextmanager
def progress_display(quiet: bool = False) -> Iterator[ProgressFn]:
    """A ProgressFn for the duration of a long verb: a bar on a terminal, lines otherwise."""
    if quiet:
        yield lambda _: None
        return
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        printer = LinePrinter()
        try:
            yield printer
        finally:
            printer.finish()
        return
    from rich import progress as rp

    tasks: dict[str, Any] = {}
    with rp.Progress(
        rp.TextColumn("{task.description}"),
        rp.BarColumn(),
        rp.TextColumn("{task.fields[amount]}"),
        rp.TimeElapsedColumn(),
        rp.TextColumn("[dim]{task.fields[log]}"),
        console=console,
    ) as bars:
        counts = {BYTES: rp.DownloadColumn(), "steps": rp.MofNCompleteColumn()}

        def show(p: Progress) -> None:
            if p.task not in tasks:
                tasks[p.task] = bars.add_task(p.task, total=p.total, amount="", log="")
            task = tasks[p.task]
            bars.update(task, completed=p.done, total=p.total, log=f"log {p.log}" if p.log else "")
            column = counts.get(p.unit, counts["steps"])
            bars.update(task, amount=column.render(bars.tasks[task]))
            if p.total is not None and p.done >= p.total:
                bars.update(task, completed=p.total)

        yield show
