"""How a trial and a run ended: the values trial.json, run.json and results.json carry."""

from enum import StrEnum


class TrialStatus(StrEnum):
    OK = "ok"
    OOM_KILLED = "oom-killed"
    FAILED = "failed"
    TIMED_OUT = "timed-out"
    INTERRUPTED = "interrupted"
    OVER_BUDGET = "over-budget"  # ran, but the GPU held more than the profile's limits.vram


class RunStatus(StrEnum):
    COMPLETE = "complete"  # every trial ran (each with its own TrialStatus)
    INCOMPLETE = "incomplete"  # interrupted before the last trial
    FAILED = "failed"  # the runner itself failed
