"""Progress without a terminal: a line when a task starts and every few percent, with its log."""

from pathlib import Path

import pytest

from appliance.cli.progress import LINE_EVERY_PERCENT, LinePrinter, progress_display
from appliance.core.progress import BYTES, Progress, byte_counter


def test_a_line_every_few_percent_with_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    show = LinePrinter(min_seconds=0)
    log = Path("/var/log/build.log")
    show(Progress("compiling cpu", 0, None, log=log))
    for step in range(1, 151):
        show(Progress("compiling cpu", step, 150, log=log))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "compiling cpu: running, 0 s; log /var/log/build.log"
    assert len(lines) == 1 + 100 // LINE_EVERY_PERCENT + 1
    assert lines[-1].startswith("compiling cpu: 150/150 (100%), ")
    assert all(line.endswith("; log /var/log/build.log") for line in lines)


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
