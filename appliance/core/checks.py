"""Named checks, MLPerf-checker style: each passes, warns or fails with a reason.

One type for every list of checks the appliance reports (doctor, bundle verification, release
check) and one printer, so a check reads the same wherever it appears.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    """A check's outcome; the value is what JSON output carries."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


def one_line(text: str) -> str:
    """text with every unprintable character escaped (a newline becomes `\\n`): reasons quote
    names read from untrusted files, and a name must not forge a line of the report."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


@dataclass
class Check:
    """One named step and its outcome: why, which files it concerns, and the fix if any.

    The reason and the fix are always one line (see one_line)."""

    name: str
    status: Status
    reason: str
    files: list[str] = field(default_factory=list)
    fix: str = ""

    def __post_init__(self) -> None:
        self.reason = one_line(self.reason)
        self.fix = one_line(self.fix)

    @property
    def ok(self) -> bool:
        return self.status is not Status.FAIL

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "reason": self.reason,
            "files": list(self.files),
            "fix": self.fix,
        }


def failed(checks: Iterable[Check]) -> list[Check]:
    return [check for check in checks if check.status is Status.FAIL]


def worst(checks: Iterable[Check]) -> Status:
    """FAIL if any check fails, else WARN if any warns, else PASS."""
    statuses = {check.status for check in checks}
    for status in (Status.FAIL, Status.WARN):
        if status in statuses:
            return status
    return Status.PASS


def check_lines(checks: list[Check]) -> list[str]:
    """One line per check: `PASS  name  reason`, and `  fix: ...` when a check that did not pass
    has one."""
    if not checks:
        return []
    width = max(len(check.name) for check in checks)
    lines = []
    for check in checks:
        fix = f"  fix: {check.fix}" if check.fix and check.status is not Status.PASS else ""
        lines.append(f"{check.status.value.upper()}  {check.name:<{width}}  {check.reason}{fix}")
    return lines
