"""`appliance sweep`: a profile's variants at several memory limits, one run, one bundle.

The plan is the run's plan with one limit per trial (`appliance.runs.sweep.plan_sweep`); trials
run through the same `run_trial` as `appliance run`, preceded by one disk probe in the same
image under the largest limit. Before sealing, every trial's own route trace is replayed at
the capacity its limit leaves (`appliance.analysis.sweep_analysis`) and the result lands in the run's results.
"""

import functools
import secrets
from pathlib import Path
from typing import Any

from rich.console import Console

from appliance.analysis.results import analyze_run
from appliance.analysis.sweep_report import print_sweep, print_sweep_outcome
from appliance.attest.bundle import finalize_bundle
from appliance.core import atomic
from appliance.core.errors import ApplianceError
from appliance.engine.lock import Lock
from appliance.runs.execute import RunOutcome, execute_run
from appliance.runs.executor import ExecutorFactory
from appliance.runs.memory_points import (
    limit_label,
)
from appliance.runs.plan import LlamaMoeTraceEngine
from appliance.runs.report import print_header, print_stand_in
from appliance.runs.run_dir import RunDir
from appliance.runs.sweep import SweepPlan, print_grid, run_disk_probe
from appliance.runs.trial import RunContext
from appliance.workflows.resume_check import resume_verifier


def write_sweep_analysis(run_dir: Path, model_path: Path) -> dict[str, Any]:
    """results.json gains `sweep`; plots/ gains the sweep's three pictures."""
    from appliance.analysis.sweep_analysis import analyze_sweep  # numba loads only for analysis
    from appliance.analysis.sweep_plots import write_sweep_plots  # and matplotlib

    layout = RunDir(run_dir)
    try:
        sweep = analyze_sweep(layout.load_trials(), layout.traces(), model_path, layout.read_probe())
    except ApplianceError as exc:  # an analysis that cannot run must not block the seal
        sweep = {"error": str(exc)}
    results = layout.read_results()
    results["sweep"] = sweep
    atomic.write_json(layout.results_file, results)
    if "error" not in sweep:
        write_sweep_plots(sweep, layout.plots)
    return sweep


def execute_sweep(
    plan: SweepPlan,
    client: Any,
    lock: Lock,
    console: Console,
    *,
    key: Path | None,
    trial_timeout: float | None = None,
    executor: ExecutorFactory | None = None,
    resume: bool = False,
) -> tuple[RunOutcome, dict[str, Any]]:
    """The probe (on this machine), every trial (here or through `executor`, e.g. a cluster),
    the analysis, the seal; prints the sweep's table. With resume, only the trials the run
    directory lacks run, and the probe only if it has none."""
    prepared = plan.prepared
    print_header(console, prepared)
    trial_executor = executor(prepared, lock, console) if executor is not None else None
    stand_in = print_stand_in(console, prepared, lock)
    print_grid(console, plan)
    ctx = RunContext(
        client,
        plan.profile,
        LlamaMoeTraceEngine(prepared.image),
        prepared.model,
        prepared.settings,
        prepared.run_dir,
        secrets.token_hex(6),
        console,
        trial_timeout_s=trial_timeout,
    )
    seal = functools.partial(finalize_bundle, key=key, docker_client=client)

    def finalize(run_dir: Path) -> None:
        write_sweep_analysis(run_dir, prepared.model.path)
        seal(run_dir)

    extra = {
        "target": prepared.choice.target,
        "stand_in": stand_in,
        "image_id": client.images.get(prepared.image).id,
        "sweep": {
            "memory": [p.text for p in plan.points],
            "limits": [limit.bytes for limit in plan.limits],
            "labels": [limit_label(limit.bytes) for limit in plan.limits],
            "n_predict": plan.profile.schedule.n_predict,
            "probe_block_bytes": plan.expert_bytes,
        },
    }
    probed = resume and RunDir(prepared.run_dir).read_probe() is not None
    outcome = execute_run(
        ctx,
        prepared.trials,
        lock.raw,
        extra,
        finalize=finalize,
        analyze=functools.partial(analyze_run, profile=plan.profile),
        before_trials=None if probed else functools.partial(run_disk_probe, plan=plan),
        executor=trial_executor,
        resume=resume,
        verify_resume=resume_verifier(key),
    )
    sweep = RunDir(outcome.run_dir).read_results().get("sweep", {})
    print_sweep(console, sweep)
    print_sweep_outcome(console, outcome.results, outcome.run_dir, outcome.status, outcome.plots)
    return outcome, sweep
