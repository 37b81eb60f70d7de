"""Progress without a terminal: a line when a task starts and every few percent, with its log;
however many records a task sends, a log gets a few lines, and the last says where it stopped."""

import io
from pathlib import Path

import pytest

from appliance.cli.progress import (
    LINE_EVERY_PERCENT,
    LINE_EVERY_SECONDS,
    LINE_MIN_SECONDS,
    LinePrinter,
    progress_display,
)
from appliance.core.progress import BYTES, Progress, byte_counter
from appliance.planner.remote import HEADER_TASK


def test_a_line_every_few_percent_with_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    show = LinePrinter(min_seconds=0, every_seconds=0)
    log = Path("/var/log/build.log")
    show(Progress("compiling cpu", 0, None, log=log))
    for step in range(1, 151):
        show(Progress("compiling cpu", step, 150, log=log))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "compiling cpu: running, 0 s; log /var/log/build.log"
    assert len(lines) == 1 + 100 // LINE_EVERY_PERCENT + 1
    assert lines[-1].startswith("compiling cpu: 150/150 (100%), ")
    assert all(line.endswith("; log /var/log/build.log") for line in lines)
    show.finish()  # the last step is printed already
    assert capsys.readouterr().err == ""


def test_quick_work_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    count = byte_counter("sha256 m.gguf", 10_000_000, LinePrinter(min_seconds=3600))
    for _ in range(10):
        count(1_000_000)
    assert capsys.readouterr().err == ""


def test_quiet_display_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with progress_display(quiet=True) as show:
        show(Progress("fetching x", 5, 10, BYTES))
    assert capsys.readouterr() == ("", "")


def test_without_a_terminal_the_display_prints_lines(capsys: pytest.CaptureFixture[str]) -> None:
    with progress_display() as show:
        assert isinstance(show, LinePrinter)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_server_answering_one_byte_per_request_costs_two_lines_not_thousands() -> None:
    """The records `appliance plan URL` gets from a server that answers each range request
    with one byte (6,586 in 13 s, once one line each), printed to a stream that is not a
    terminal: a line once the read has run LINE_MIN_SECONDS, none again within
    LINE_EVERY_SECONDS_UNKNOWN_TOTAL, and where it stopped when the display ends."""
    out, clock = io.StringIO(), FakeClock()
    show = LinePrinter(file=out, clock=clock)
    for fetched in range(1, 6587):
        clock.now = fetched / 512  # 512 requests a second
        show(Progress(HEADER_TASK, fetched, None, BYTES))
    assert not out.isatty()
    assert out.getvalue() == f"{HEADER_TASK}: 1 KiB, 2 s\n"  # byte 1025, 1024/512 s after byte 1
    show.finish()
    assert out.getvalue().splitlines() == [f"{HEADER_TASK}: 1 KiB, 2 s", f"{HEADER_TASK}: 6.43 KiB, 13 s"]


def test_unknown_total_a_line_every_interval_and_the_end() -> None:
    out, clock = io.StringIO(), FakeClock()
    show = LinePrinter(file=out, clock=clock)
    for second in range(0, 95):
        clock.now = float(second)
        show(Progress("download", second * 1024, None, BYTES))
    show.finish()
    seconds = [line.rsplit(", ", 1)[1] for line in out.getvalue().splitlines()]
    assert seconds == ["2 s", "32 s", "62 s", "92 s", "94 s"]


def test_finish_is_silent_for_quick_work_and_for_a_task_already_shown_at_its_end() -> None:
    out, clock = io.StringIO(), FakeClock()
    show = LinePrinter(file=out, clock=clock)
    show(Progress("quick", 1, 10))
    clock.now = 1.0
    show(Progress("quick", 5, 10))  # under LINE_MIN_SECONDS: nothing, not even at the end
    show(Progress("slow", 0, None))
    clock.now = 3.5
    show(Progress("slow", 7, None))
    show.finish()
    show.finish()
    assert out.getvalue() == "slow: 7, 2 s\n"


def _steady(seconds: float, updates: int, out: io.StringIO) -> list[str]:
    """`updates` records of one task with a total, evenly over `seconds` of a fake clock,
    into a stream that is not a terminal; the lines it got, finish included."""
    clock = FakeClock()
    show = LinePrinter(file=out, clock=clock)
    for step in range(1, updates + 1):
        clock.now = seconds * step / updates
        show(Progress("sha256 model.gguf", step, updates))
    show.finish()
    assert not out.isatty()
    return out.getvalue().splitlines()


def test_a_thousand_updates_in_five_seconds_are_at_most_two_lines_the_last_the_end() -> None:
    lines = _steady(5.0, 1000, io.StringIO())  # the clock starts at the first record, 0.005 s
    assert lines == ["sha256 model.gguf: 401/1000 (40%), 2 s", "sha256 model.gguf: 1000/1000 (100%), 5 s"]


def test_a_minute_of_updates_is_a_line_every_ten_seconds_and_the_end() -> None:
    lines = _steady(60.0, 6000, io.StringIO())
    seconds = [int(line.rsplit(", ", 1)[1].removesuffix(" s")) for line in lines]
    # the first once the task has run LINE_MIN_SECONDS, then one per LINE_EVERY_SECONDS
    assert seconds == [2, 12, 22, 32, 42, 52, 60], lines
    assert all(b - a >= LINE_EVERY_SECONDS for a, b in zip(seconds[1:-2], seconds[2:-1], strict=True))
    assert seconds[0] == LINE_MIN_SECONDS
    assert lines[-1] == "sha256 model.gguf: 6000/6000 (100%), 60 s"


def test_the_last_line_is_written_even_when_it_comes_within_the_interval() -> None:
    """A task that stops short of its total, a second after its last line: finish writes where
    it stopped."""
    out, clock = io.StringIO(), FakeClock()
    show = LinePrinter(file=out, clock=clock)
    for step in range(0, 31):
        clock.now = step / 10
        show(Progress("fetching x", step, 100))
    show.finish()
    assert out.getvalue().splitlines() == ["fetching x: 20/100 (20%), 2 s", "fetching x: 30/100 (30%), 3 s"]
