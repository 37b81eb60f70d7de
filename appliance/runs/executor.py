"""Where trials run: the executor interface, and the local executor (one trial after another).

An executor takes the one-trial callable (`appliance.runs.trial.TrialJob`: picklable, so it
can travel to another machine) and the trials still to run, and yields each trial's record
once the trial's directory is in place under `RUN/trials/`. The Ray executor
(`appliance.cluster`, an optional extra) implements the same interface; the run loop
(`execute_run`) does not know which one it drives.
"""

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from appliance.engine.lock import Lock
from appliance.runs.plan import Trial
from appliance.runs.prepare import PreparedRun

# Runs one trial against the local Docker engine, writes WORK_DIR/trials/<trial>/, returns
# the trial.json record.
OneTrial = Callable[[Trial, Path], dict[str, Any]]
OnStart = Callable[[Trial, str], None]


class TrialExecutor(Protocol):
    """Runs trials somewhere and yields their records as they complete (in any order).

    Ctrl-C (KeyboardInterrupt) while iterating stops what runs, records it as interrupted,
    starts nothing more and propagates."""

    def run(
        self, job: OneTrial, trials: Sequence[Trial], run_dir: Path, on_start: OnStart | None = None
    ) -> Iterator[dict[str, Any]]: ...

    def describe(self) -> dict[str, Any]:
        """What run.json records under `executor`: the kind and, on a cluster, where each
        trial ran."""
        ...


class LocalExecutor:
    """Today's behaviour: every trial on this machine, one after another, in plan order."""

    def run(
        self, job: OneTrial, trials: Sequence[Trial], run_dir: Path, on_start: OnStart | None = None
    ) -> Iterator[dict[str, Any]]:
        for trial in trials:
            if on_start is not None:
                on_start(trial, "this machine")
            yield job(trial, run_dir)

    def describe(self) -> dict[str, Any]:
        return {"kind": "local"}


# Connects the executor for a prepared run (a cluster admits its nodes here, before any trial).
ExecutorFactory = Callable[[PreparedRun, Lock, Console], TrialExecutor]
