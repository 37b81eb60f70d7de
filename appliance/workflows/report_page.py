"""`appliance report RUN`: verify the bundle again, compare it with evidence/, and write the
self-contained HTML page (`appliance.analysis.html_report`) to RUN/report.html or --out.

The verification is `appliance bundle verify`'s (`verify_bundle`, the trust store or the one
key given); the comparison is `evidence compare`'s. A bundle whose verdict is tampered (or
unsigned / untrusted, unless allowed) still gets its page: the refusal and no figure.
"""

import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from securesystemslib.signer import SSlibKey

from appliance import __version__
from appliance.analysis.html_report import SealView, render_report
from appliance.attest.verify import Verdict, Verification, verify_bundle
from appliance.core import atomic
from appliance.core.errors import ConfigError
from appliance.evidence.bundle_facts import claimed_evidence
from appliance.evidence.compare import compare_with_evidence
from appliance.runs.run_dir import RunDir


@dataclass(frozen=True)
class ReportOutcome:
    """Where the page went and what the verification it shows said."""

    path: Path
    verification: Verification
    readable: bool
    verified_utc: str

    def as_json(self) -> dict[str, Any]:
        return {
            "report": str(self.path),
            "verdict": self.verification.verdict.label,
            "figures_shown": self.readable,
            "signer": self.verification.signer,
            "bundle_digest": self.verification.bundle_digest,
            "verified_utc": self.verified_utc,
            "summary": self.verification.summary(),
        }


def check_run_dir(run_dir: Path) -> None:
    """A directory `appliance run` or `sweep` wrote: it holds run.json or a seal."""
    layout = RunDir(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a directory: give a run directory (runs/NAME)")
    if not (layout.run_file.exists() or layout.manifest_file.exists()):
        raise ConfigError(
            f"{run_dir}: not a run directory (no {layout.run_file.name} or "
            f"{layout.manifest_file.name}): give a directory `appliance run` or `sweep` wrote"
        )


def check_output(out: Path, run_dir: Path) -> None:
    """The page's path: a regular file or a new name, in a directory that exists, and not a
    file of the bundle (any file there but report.html would be one it does not seal)."""
    default = RunDir(run_dir).report_file
    inside = out.absolute().parent.resolve().is_relative_to(run_dir.resolve())
    if inside and out.absolute().parent.resolve() / out.name != default.resolve():
        raise ConfigError(
            f"{out} is inside the run directory: the page goes to {default} there (any other "
            "file would make the bundle fail verification), or give --out outside it"
        )
    parent = out.parent
    if not parent.is_dir():
        raise ConfigError(f"{out}: its directory {parent} does not exist: create it or choose another --out")
    try:
        info = out.lstat()
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISFIFO(info.st_mode):
        raise ConfigError(f"{out} is a FIFO, not a regular file: choose a file path for --out")
    problem = atomic.output_problem(out, directory=False)
    if problem:
        raise ConfigError(f"{out} {problem} for --out")


def readable(verification: Verification) -> bool:
    """Whether the page may show the bundle's figures: what evidence reads (verified, or
    accepted by an --allow flag) and a faithful incomplete run, marked as partial."""
    return verification.accepted or verification.verdict is Verdict.INCOMPLETE


def make_report(
    run_dir: Path,
    out: Path | None = None,
    key: SSlibKey | Path | None = None,
    allow_untrusted: bool = False,
    now: datetime | None = None,
) -> ReportOutcome:
    """Verify run_dir, compare it with the findings it names, write the page whole (through
    core.atomic: a failure leaves no part of it) and say what it showed."""
    check_run_dir(run_dir)
    path = out if out is not None else RunDir(run_dir).report_file
    check_output(path, run_dir)
    verification = verify_bundle(
        run_dir, key, allow_untrusted=allow_untrusted, allow_unsigned=allow_untrusted
    )
    verified_utc = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    shown = readable(verification)
    comparisons = compare_with_evidence(run_dir, verification, claimed_evidence(run_dir)) if shown else []
    seal = SealView(
        verdict=verification.verdict.label,
        readable=shown,
        summary=verification.summary(),
        advice=verification.advice,
        signer=verification.signer,
        bundle_digest=verification.bundle_digest,
        verified_utc=verified_utc,
        checks=verification.checks,
        untrusted_input=verification.untrusted_input,
    )
    atomic.write_text(path, render_report(run_dir, seal, comparisons, f"appliance {__version__}"))
    return ReportOutcome(path, verification, shown, verified_utc)
