"""`appliance sweep`: a profile's variants at several memory limits, one run, one bundle.

The plan is the run's plan with one limit per trial (`appliance.runs.sweep.plan_sweep`); the
trials run through the same chain as `appliance run` (`appliance.workflows.run.run_prepared`),
whose hooks add the grid, one disk probe in the same image under the largest limit before the
trials, and, before the seal, every trial's own route trace replayed at the capacity its limit
leaves (`appliance.analysis.run_analyses.write_sweep_analysis`).
"""

import functools
from typing import Any

from rich.console import Console

from appliance.analysis.run_analyses import write_sweep_analysis
from appliance.analysis.sweep_report import print_sweep, print_sweep_outcome
from appliance.engine.lock import Lock
from appliance.runs.execute import RunOutcome
from appliance.runs.run_dir import RunDir
from appliance.runs.sweep import SweepPlan, print_grid, run_disk_probe
from appliance.runs.trial import RunContext
from appliance.workflows.run import RunKind, RunOptions, derived_trial_timeout, run_prepared


def probe_then_time(ctx: RunContext, plan: SweepPlan, options: RunOptions) -> None:
    """The disk probe; then, unless --trial-timeout fixed it, the trials' timeout from the
    probe's QD1 rate (appliance.runs.trial_time)."""
    run_disk_probe(ctx, plan)
    probe = RunDir(ctx.run_dir).read_probe()
    if options.trial_timeout is None and probe is not None:
        ctx.trial_timeout_s = derived_trial_timeout(plan.prepared, probe, ctx.console)


def execute_sweep(
    plan: SweepPlan,
    client: Any,
    lock: Lock,
    console: Console,
    options: RunOptions,
) -> tuple[RunOutcome, dict[str, Any]]:
    """The probe (on this machine), every trial (here or through `executor`, e.g. a cluster),
    the analysis, the seal; prints the sweep's table. With resume, only the trials the run
    directory lacks run, and the probe only if it has none."""
    prepared = plan.prepared
    probed = options.resume and RunDir(prepared.run_dir).read_probe() is not None
    kind = RunKind(
        analyze=functools.partial(write_sweep_analysis, model_path=prepared.model.path),
        announce=functools.partial(print_grid, plan=plan),
        before_trials=None if probed else functools.partial(probe_then_time, plan=plan, options=options),
        sweep=plan.run_record(),
    )
    outcome = run_prepared(prepared, client, lock, console, kind, options)
    sweep = RunDir(outcome.run_dir).read_results().get("sweep", {})
    print_sweep(console, sweep)
    print_sweep_outcome(console, outcome.results, outcome.run_dir, outcome.status, outcome.plots)
    return outcome, sweep
