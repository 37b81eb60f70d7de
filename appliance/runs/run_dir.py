"""The layout of a run directory, in one place: every file name a run writes, reads or seals.

    RUN/run.json                      status complete|incomplete|failed, profile, times, version,
                                      limits, executor (local, or the cluster and each trial's node),
                                      resumed_from (the bundles a resumed run carried trials over from)
    RUN/inputs/{profile.yaml,lock.json,schedule.json,model.json}
    RUN/trials/<trial name>/{trial.json,stdout.txt,stderr.txt,timing.json,
                             output.txt,trace.moetrace,cgroup.json}
    RUN/probe/<probe name>/...        a sweep's disk probe, laid out as a trial
    RUN/results.json                  statistics over the trials (appliance.analysis.stats)
    RUN/plots/*.png
    RUN/analysis/paging.json          a run's measured reads against the LRU prediction
    RUN/provenance.json               collected when the run is sealed (appliance.attest)
    RUN/manifest.json, RUN/attestation.dsse.json   the seal; not part of the bundle's contents
    RUN/.scratch/                     outputs in flight, empty once a run ends
    RUN/report.html                   derived by `appliance report` from the bundle; not sealed

Readers and writers of run directories, in every package, name files through `RunDir` and
`TrialDir` (or the constants below), never by spelling them.
"""

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.core.errors import ConfigError
from appliance.core.strict_load import load_json, read_bytes
from appliance.runs.records import RunRecord, TrialRecord
from appliance.runs.timing import TimingRecord, load_timing

RUN_FILE = "run.json"
RESULTS_FILE = "results.json"
PROVENANCE_FILE = "provenance.json"
MANIFEST_FILE = "manifest.json"
ATTESTATION_FILE = "attestation.dsse.json"
# Seal a bundle: written last, and not part of the contents they seal.
SEALING_FILES = (MANIFEST_FILE, ATTESTATION_FILE)
REPORT_FILE = "report.html"
# Derived from a bundle after it is sealed (and re-made at will): neither sealed nor counted as
# an unexpected file by the verifier, while they are regular files.
DERIVED_FILES = (REPORT_FILE,)
# Written when a run directory is sealed; a resumed run keeps the old seal until its new one
# is complete and has provenance.json collected afresh.
WRITTEN_AT_SEALING = (*SEALING_FILES, PROVENANCE_FILE)

INPUTS_DIR = "inputs"
PROFILE_INPUT = "profile.yaml"
LOCK_INPUT = "lock.json"
SCHEDULE_INPUT = "schedule.json"
MODEL_INPUT = "model.json"
TRIALS_DIR = "trials"
PROBE_DIR = "probe"
PLOTS_DIR = "plots"
ANALYSIS_DIR = "analysis"
PAGING_ANALYSIS = "paging.json"
SCRATCH_DIR = ".scratch"

TRIAL_FILE = "trial.json"
TIMING_FILE = "timing.json"
OUTPUT_FILE = "output.txt"
TRACE_FILE = "trace.moetrace"
CGROUP_FILE = "cgroup.json"
STREAMS = ("stdout", "stderr")
# Files the engine writes under its results mount, kept in the trial directory by these names.
ENGINE_OUTPUTS = (TIMING_FILE, OUTPUT_FILE, TRACE_FILE)


def _json_or(path: Path, default: Any) -> Any:
    """A record read strictly (a regular file, bounded), or `default` when it is missing or
    not one the strict reader accepts."""
    try:
        return load_json(path)
    except ConfigError:
        return default


def _record(path: Path) -> dict[str, Any]:
    """A JSON object read strictly; anything else is a one-line ConfigError."""
    record = load_json(path)
    if not isinstance(record, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return record


@dataclass(frozen=True)
class TrialDir:
    """One trial's directory: RUN/trials/<name>/ (or RUN/probe/<name>/)."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def record_file(self) -> Path:
        return self.path / TRIAL_FILE

    @property
    def timing(self) -> Path:
        return self.path / TIMING_FILE

    @property
    def output(self) -> Path:
        return self.path / OUTPUT_FILE

    @property
    def trace(self) -> Path:
        return self.path / TRACE_FILE

    @property
    def cgroup(self) -> Path:
        return self.path / CGROUP_FILE

    def stream(self, stream: str) -> Path:
        """stdout.txt or stderr.txt."""
        return self.path / f"{stream}.txt"

    def read_record(self) -> dict[str, Any] | None:
        """trial.json, or None when it is missing or not JSON."""
        record = _json_or(self.record_file, None)
        return record if isinstance(record, dict) else None

    def record(self) -> TrialRecord:
        """trial.json as a `TrialRecord`, read strictly (a one-line ConfigError otherwise)."""
        return TrialRecord.from_json(load_json(self.record_file), str(self.record_file))

    def attached(self, path: Path) -> dict[str, Any]:
        """timing.json or cgroup.json: the JSON object, {} when the trial has none."""
        return _record(path) if path.exists() else {}

    def load(self) -> dict[str, Any]:
        """trial.json with its directory name (`dir`), timing.json, output.txt (bytes) and
        cgroup.json attached."""
        record = _record(self.record_file)
        record["dir"] = self.name
        record["timing"] = self.attached(self.timing)
        record["text"] = read_bytes(self.output) if self.output.exists() else None
        record["cgroup"] = self.attached(self.cgroup)
        return record


@dataclass(frozen=True)
class RunDir:
    """A run directory: where each of its files lives, and its trials loaded."""

    path: Path

    @property
    def run_file(self) -> Path:
        return self.path / RUN_FILE

    @property
    def results_file(self) -> Path:
        return self.path / RESULTS_FILE

    @property
    def provenance_file(self) -> Path:
        return self.path / PROVENANCE_FILE

    @property
    def manifest_file(self) -> Path:
        return self.path / MANIFEST_FILE

    @property
    def attestation_file(self) -> Path:
        return self.path / ATTESTATION_FILE

    @property
    def report_file(self) -> Path:
        """report.html: the page `appliance report` derives from the bundle."""
        return self.path / REPORT_FILE

    @property
    def inputs(self) -> Path:
        return self.path / INPUTS_DIR

    def input(self, name: str) -> Path:
        """inputs/profile.yaml, lock.json, schedule.json or model.json."""
        return self.inputs / name

    @property
    def plots(self) -> Path:
        return self.path / PLOTS_DIR

    @property
    def scratch(self) -> Path:
        return self.path / SCRATCH_DIR

    def trial(self, name: str, subdir: str = TRIALS_DIR) -> TrialDir:
        return TrialDir(self.path / subdir / name)

    def scratch_for(self, name: str) -> Path:
        """Where a trial's outputs land while its container runs."""
        return self.scratch / name

    def recorded(self, subdir: str = TRIALS_DIR) -> Iterator[TrialDir]:
        """Trial directories holding a trial.json, in run order (their names sort so)."""
        for record in sorted((self.path / subdir).glob(f"*/{TRIAL_FILE}")):
            yield TrialDir(record.parent)

    def load_trials(self) -> list[dict[str, Any]]:
        """Each trial.json with its timing, output and cgroup attached, in run order."""
        return [trial.load() for trial in self.recorded()]

    def traces(self) -> dict[str, Path]:
        """Trial directory name -> its route trace, for the trials that recorded one."""
        return {t.name: t.trace for t in self.recorded() if t.trace.is_file()}

    def read_probe(self) -> TimingRecord | None:
        """The sweep's disk probe figures (its timing.json, read strictly), or None when it has
        none."""
        for timing in sorted((self.path / PROBE_DIR).glob(f"*/{TIMING_FILE}")):
            return load_timing(timing)
        return None

    def run_record(self) -> RunRecord:
        """run.json as a `RunRecord`, read strictly (a one-line ConfigError otherwise)."""
        return RunRecord.from_json(load_json(self.run_file), str(self.run_file))

    def read_run(self) -> RunRecord | None:
        """run.json, or None when it is missing or not a record `run_record` accepts."""
        try:
            return self.run_record()
        except ConfigError:
            return None

    @property
    def paging_analysis(self) -> Path:
        """analysis/paging.json: a run's measured reads against the LRU prediction."""
        return self.path / ANALYSIS_DIR / PAGING_ANALYSIS

    def read_results(self) -> dict[str, Any]:
        return _record(self.results_file)

    def discard_trial(self, name: str) -> None:
        """A trial's directory and its scratch outputs, before it runs again."""
        shutil.rmtree(self.path / TRIALS_DIR / name, ignore_errors=True)
        shutil.rmtree(self.scratch_for(name), ignore_errors=True)
