"""run.json as `RunRecord`: the run.json main sealed before the class reads and writes back byte
for byte, the runner's writer fills the same keys, the derived schema accepts it, and a key the
class lacks is refused by name: when read, when sealed and when verified."""

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
from rich.console import Console

from appliance.attest.bundle import finalize_bundle
from appliance.attest.verify import CheckName, verify_bundle
from appliance.core.checks import Status
from appliance.core.errors import ConfigError
from appliance.core.validation import schema_problems
from appliance.runs.memory_points import SweepLimit
from appliance.runs.plan import ContainerSettings, LlamaMoeTraceEngine, sweep_plan, trial_plan
from appliance.runs.profile import load_profile
from appliance.runs.record import run_record, write_run_record
from appliance.runs.records import Placement, RunRecord, RunSetup, SweepRecord
from appliance.runs.run_dir import RunDir
from appliance.runs.status import RunStatus
from appliance.runs.trial import RunContext
from tests.conftest import REPO
from tests.fake_run import make_run, resume_model

OLD_RUN = REPO / "tests" / "fixtures" / "sealed-main-daca34b" / "bundle" / "run.json"
SWEEP = [SweepLimit(104_337_408, "0.25"), SweepLimit(208_674_816, "0.5"), SweepLimit(500_826_112, "1.2")]


def _context(run_dir: Path, timeout: float | None = None) -> RunContext:
    return RunContext(
        None,  # type: ignore[arg-type]  # run.json needs no Docker client
        load_profile("tiny-oversub"),
        LlamaMoeTraceEngine("moe-expert-cache:cpu-test"),
        resume_model(),
        ContainerSettings(run_dir, None, 2, None),
        run_dir,
        "c28077c082cf",
        Console(quiet=True),
        trial_timeout_s=timeout,
    )


def test_the_run_json_main_sealed_reads_and_writes_back_byte_for_byte(tmp_path: Path) -> None:
    text = OLD_RUN.read_text()
    record = RunRecord.from_json(json.loads(text), str(OLD_RUN))
    assert record.status is RunStatus.COMPLETE and record.trial_count == 9 and record.trials_recorded == 2
    assert record.sweep is not None and record.sweep.limits == (104337408, 208674816, 500826112)
    assert record.limits is not None and record.limits.memory_bytes is None
    assert record.placement is not None and record.placement.gpu is None
    assert record.stand_in == "b10229" and record.trial_timeout_s is None
    write_run_record(tmp_path, record)
    assert RunDir(tmp_path).run_file.read_text() == text
    jsonschema.Draft7Validator(RunRecord.json_schema()).validate(json.loads(text))
    assert RunDir(tmp_path).run_record() == record


def test_the_runners_writer_fills_every_key_main_wrote(tmp_path: Path) -> None:
    old = json.loads(OLD_RUN.read_text())
    profile = load_profile("tiny-oversub")
    trials = sweep_plan(profile, SWEEP, repeats=1)
    setup = RunSetup(
        target="cpu",
        stand_in="b10229",
        image_id=old["image_id"],
        placement=Placement(mode="auto", vram_budget_bytes=None, gpu=None, warnings=()),
        sweep=SweepRecord.from_json(old["sweep"], "sweep"),
    )
    record = run_record(
        _context(tmp_path), RunStatus.COMPLETE, old["started_utc"], trials, setup, {"kind": "local"}
    )
    written = record.to_json()
    assert sorted(written) == sorted(old)
    for key in (
        "status",
        "profile",
        "limits",
        "placement",
        "sweep",
        "executor",
        "stand_in",
        "trial_timeout_s",
    ):
        assert written[key] == old[key], key
    assert written["trials_recorded"] == 0 and written["trial_count"] == 9
    assert written["engine"] == {"kind": "llama-moe-trace", "image": "moe-expert-cache:cpu-test"}


def test_a_canonical_source_is_written_as_null_and_a_bare_runner_names_none(tmp_path: Path) -> None:
    trials = trial_plan(load_profile("tiny-oversub"), 1)
    canonical = run_record(_context(tmp_path, 30), RunStatus.FAILED, "t0", trials, RunSetup(target="cpu"))
    assert canonical.to_json()["stand_in"] is None and canonical.to_json()["trial_timeout_s"] == 30
    assert canonical.records_source
    bare = run_record(_context(tmp_path), RunStatus.INCOMPLETE, "t0", trials, RunSetup()).to_json()
    assert "stand_in" not in bare and "target" not in bare and "executor" not in bare
    assert bare["trial_timeout_s"] is None
    assert bare["limits"] == {
        "memory_bytes": 200 * 2**20,
        "memswap_bytes": 200 * 2**20,
        "trials": [{"memory_bytes": 200 * 2**20, "memswap_bytes": 200 * 2**20}],
    }


def test_the_schema_is_derived_from_the_class() -> None:
    schema = RunRecord.json_schema()
    assert schema_problems(schema) == []
    assert schema["required"] == list(RunRecord.SIGNED) == ["status", "profile", "started_utc", "ended_utc"]
    assert schema["properties"]["status"]["enum"] == [str(s) for s in RunStatus]
    assert schema["properties"]["sweep"] == {**SweepRecord.json_schema(top=False), "type": ["object", "null"]}
    assert set(RunRecord.PROVENANCE) < set(RunRecord.json_keys())


def test_a_key_the_class_does_not_know_is_refused_by_file_and_name() -> None:
    data = json.loads(OLD_RUN.read_text())
    unknown = r"^x/run.json: unknown key 'memory_limit_bytes' \(a RunRecord has status, "
    with pytest.raises(ConfigError, match=unknown):
        RunRecord.from_json({**data, "memory_limit_bytes": 5}, "x/run.json")
    limits = {**data["limits"], "trials": [{"memory_bytes": "1", "memswap_bytes": 1}]}
    with pytest.raises(
        ConfigError, match=r"^r: limits: trials\[0\]: memory_bytes: must be an integer, got str '1'$"
    ):
        RunRecord.from_json({**data, "limits": limits}, "r")
    del data["ended_utc"]
    with pytest.raises(ConfigError, match=r"^r: missing key 'ended_utc'$"):
        RunRecord.from_json(data, "r")


def test_a_run_json_with_an_unknown_key_is_neither_sealed_nor_verified(tmp_path: Path) -> None:
    run = make_run(tmp_path / "a")
    path = run / "run.json"
    sealed = tmp_path / "sealed"
    shutil.copytree(run, sealed)
    finalize_bundle(sealed)
    path.write_text(json.dumps({**json.loads(path.read_text()), "comment": "hand-edited"}))
    with pytest.raises(
        ConfigError, match=rf"^{path}: unknown key 'comment' \(a RunRecord has status, profile, "
    ):
        finalize_bundle(run)
    assert not (run / "manifest.json").exists() and not (run / "provenance.json").exists()
    assert RunDir(run).read_run() is None  # the tolerant readers (report, resume) see no record
    shutil.copy(path, sealed / "run.json")
    check = next(
        c for c in verify_bundle(sealed, allow_unsigned=True).checks if c.name == CheckName.RUN_STATUS
    )
    assert check.status is Status.FAIL and check.files == ["run.json"]
    assert check.reason.startswith("run.json: unknown key 'comment' (a RunRecord has status, profile, ")
