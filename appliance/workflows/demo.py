"""`make demo`: the whole pipeline at miniature scale on the cpu image, as one sweep."""

from pathlib import Path

from rich.console import Console

from appliance.core.errors import ApplianceError
from appliance.core.paths import cache_dir
from appliance.core.progress import ProgressFn
from appliance.engine.lock import Lock
from appliance.evidence.bundle_facts import claimed_evidence
from appliance.runs.profile import load_profile
from appliance.runs.status import RunStatus
from appliance.runs.sweep import DEFAULT_MAX_HOURS, plan_sweep
from appliance.workflows.report_page import make_report
from appliance.workflows.resume_check import signing_public_key
from appliance.workflows.run import (
    PipelineReport,
    RunOptions,
    ensure_synth_model,
    obtain_engine_image,
    print_report,
    signing_key,
    verify_and_compare,
)
from appliance.workflows.sweep import execute_sweep

DEMO_REPEATS = 1  # the demo sweeps 3 limits x 3 variants; one round keeps it within minutes
# `make demo` runs the first; `make demo-cache` the second (the engine's expert cache, 0004);
# `make demo-gpu` the third (the GPU half on the stand-in device: planned placement, RAM limit)
DEMO_PROFILES = (
    "tiny-oversub",
    "tiny-oversub-cache",
    "tiny-oversub-prefill",
    "tiny-stand-in",
    "qwen35-shape-slice-stand-in",
)


def demo(
    lock: Lock,
    console: Console,
    *,
    source: str = "auto",
    out: Path | None = None,
    models_dir: Path | None = None,
    repeats: int | None = None,
    progress: ProgressFn | None = None,
    profile_name: str = DEMO_PROFILES[0],
) -> PipelineReport:
    """The whole pipeline at miniature scale on the cpu image (with the experimental patches
    the profile names): a demo profile swept over its `sweep.memory` limits, one bundle,
    verified and compared with evidence/, and its HTML report (RUN/report.html); `progress`
    gets the image build, model synthesis and hashing steps."""
    profile = load_profile(profile_name)
    models_dir = models_dir or cache_dir() / "models" / "demo"
    tag = obtain_engine_image(lock, "cpu", source, console, progress, profile.experimental)
    ensure_synth_model(profile, models_dir, console, progress)
    key = signing_key(None, False, console)
    plan, client = plan_sweep(
        profile,
        models_dir,
        lock,
        memory=None,
        repeats=repeats or DEMO_REPEATS,
        out=out,
        dry_run=False,
        max_hours=DEFAULT_MAX_HOURS,
        image=tag,
    )
    outcome, _ = execute_sweep(plan, client, lock, console, RunOptions(key=key))
    report = verify_and_compare(
        outcome, plan.profile, key, console, evidence=claimed_evidence(outcome.run_dir)
    )
    print_report(report, console)
    page = make_report(outcome.run_dir, key=signing_public_key(key) if key is not None else None)
    console.print(f"report: {page.path}  (open it in a browser; it fetches nothing)", soft_wrap=True)
    if outcome.status != RunStatus.COMPLETE:
        raise ApplianceError(f"run incomplete: {outcome.run_dir}", exit_code=130)
    return report
