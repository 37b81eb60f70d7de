"""trial.json as `TrialRecord` and inputs/schedule.json as `ScheduleRecord`: records written by
main before the classes read and write back unchanged, the derived schema accepts them, a key the
class lacks is refused by name."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from appliance.core.errors import ConfigError
from appliance.core.validation import schema_problems
from appliance.host.read_ahead import ReadAheadMode
from appliance.runs.plan import trial_plan
from appliance.runs.profile import load_profile
from appliance.runs.record import schedule_record
from appliance.runs.records import Attempt, ScheduleRecord, TrialRecord
from appliance.runs.status import TrialStatus
from tests.conftest import REPO
from tests.fake_run import make_run

OLD_BUNDLE = REPO / "tests" / "fixtures" / "sealed-main-daca34b" / "bundle"
OLD_RECORDS = sorted(OLD_BUNDLE.glob("*/*/trial.json"))


def test_the_fixture_holds_the_probe_and_two_trials() -> None:
    assert [p.parent.name for p in OLD_RECORDS] == [
        "000-477.6MiB-disk-probe-r1",
        "001-99.5MiB-baseline-r1",
        "002-99.5MiB-demand-mmap-r1",
    ]


@pytest.mark.parametrize("path", OLD_RECORDS, ids=lambda p: p.parent.name)
def test_a_record_main_wrote_reads_and_writes_back_unchanged(path: Path) -> None:
    data = json.loads(path.read_text())
    record = TrialRecord.from_json(data, str(path))
    assert record.to_json() == data
    assert record.status is TrialStatus.OK and record.exit_code == 0 and record.oom_killed is False
    assert record.name == path.parent.name
    jsonschema.Draft7Validator(TrialRecord.json_schema()).validate(data)


def test_the_minimal_records_of_older_runs_read(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    for path in sorted(run.glob("trials/*/trial.json")):
        record = TrialRecord.from_json(json.loads(path.read_text()), str(path))
        assert record.name is None and record.memory_limit is None
        assert record.to_json() == {
            **json.loads(path.read_text()),
            "model_device": None,
            "engine_backend": None,
        }


def test_the_read_ahead_field_is_optional_and_typed() -> None:
    """A field added after bundles were sealed: absent there, an integer when written."""
    base = {"index": 1, "variant": "baseline", "repeat": 1, "status": "ok"}
    assert TrialRecord.from_json(base, "t.json").model_device_read_ahead_kb is None
    record = TrialRecord.from_json({**base, "model_device_read_ahead_kb": 8192}, "t.json")
    assert record.model_device_read_ahead_kb == 8192
    assert record.to_json()["model_device_read_ahead_kb"] == 8192
    with pytest.raises(ConfigError, match="model_device_read_ahead_kb"):
        TrialRecord.from_json({**base, "model_device_read_ahead_kb": "8 MiB"}, "t.json")


def test_how_the_read_ahead_was_obtained_and_what_came_back_are_optional_and_typed() -> None:
    base = {"index": 1, "variant": "baseline", "repeat": 1, "status": "ok"}
    old = TrialRecord.from_json({**base, "model_device_read_ahead_kb": 8192}, "t.json")
    assert old.model_device_read_ahead_mode is None and old.model_device_read_ahead_restored_kb is None
    written = {
        **base,
        "model_device_read_ahead_kb": 128,
        "model_device_read_ahead_mode": "set",
        "model_device_read_ahead_restored_kb": 8192,
    }
    record = TrialRecord.from_json(written, "t.json")
    assert record.model_device_read_ahead_mode is ReadAheadMode.SET
    assert record.to_json() == {**written, "model_device": None, "exit_code": None, "engine_backend": None}
    jsonschema.Draft7Validator(TrialRecord.json_schema()).validate(written)
    with pytest.raises(ConfigError, match="model_device_read_ahead_mode: must be one of set, observe"):
        TrialRecord.from_json({**written, "model_device_read_ahead_mode": "recorded"}, "t.json")


def test_the_schema_is_derived_from_the_class() -> None:
    schema = TrialRecord.json_schema()
    assert schema_problems(schema) == []
    assert schema["required"] == ["index", "variant", "repeat", "status"]
    assert list(schema["properties"]) == list(TrialRecord.json_keys())
    assert schema["properties"]["status"]["enum"] == [str(s) for s in TrialStatus]
    assert schema["properties"]["attempts"]["items"] == {**Attempt.json_schema(top=False)}
    assert schema["additionalProperties"] is False


def test_a_key_the_class_does_not_know_is_refused_by_file_and_name() -> None:
    path = OLD_RECORDS[1]
    data = {**json.loads(path.read_text()), "exit_status": 0}
    with pytest.raises(ConfigError, match=rf"^{path}: unknown key 'exit_status' \(a TrialRecord has index, "):
        TrialRecord.from_json(data, str(path))
    del data["exit_status"], data["variant"]
    with pytest.raises(ConfigError, match=rf"^{path}: missing key 'variant'$"):
        TrialRecord.from_json(data, str(path))
    with pytest.raises(ConfigError, match=rf"^{path}: attempts\[0\]: missing key 'ended_utc'$"):
        TrialRecord.from_json(
            {**json.loads(path.read_text()), "attempts": [{"node_id": "n", "started_utc": "t"}]}, str(path)
        )


def test_the_schedule_is_written_through_its_class_and_reads_back(tmp_path: Path) -> None:
    profile = load_profile("tiny-oversub")
    plan = trial_plan(profile, 2)
    written = schedule_record(profile, plan)
    schedule = ScheduleRecord.from_json(written, "schedule.json")
    assert schedule.to_json() == written
    assert schedule.trials == tuple(t.name for t in plan) and schedule.repeats == 2
    assert [v.name for v in schedule.variants] == [v.name for v in profile.variants]
    assert "memory_limits" not in written  # one limit: no sweep's list
    assert schema_problems(ScheduleRecord.json_schema()) == []
    jsonschema.Draft7Validator(ScheduleRecord.json_schema()).validate(written)
    old = json.loads((make_run(tmp_path) / "inputs" / "schedule.json").read_text())
    assert ScheduleRecord.from_json(old, "schedule.json").to_json() == old
    with pytest.raises(ConfigError, match=r"^s.json: variants\[0\]: args: must be a JSON array, got int 5$"):
        ScheduleRecord.from_json({**old, "variants": [{"name": "b", "env": {}, "args": 5}]}, "s.json")


def test_importing_the_records_loads_neither_docker_nor_ray() -> None:
    probe = (
        "import sys\n"
        "import appliance.core.records, appliance.runs.records, appliance.attest.manifest\n"
        "import appliance.runs.run_dir\n"
        "print(sorted(m for m in ('docker', 'ray') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
