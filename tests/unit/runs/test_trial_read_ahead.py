"""The runner and limits.read_ahead: the preparation refuses a run that could not set it, in one
line, before any trial; the dry run's header says what the trials will run at; and each trial
runs at the profile's value and gives the device its own back however it ends (success, engine
failure, a Docker error, an exception, Ctrl-C), on this machine's disk as root, with a Docker
client that stands in for the engine."""

import dataclasses
import os
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import yaml

from appliance.core.errors import ApplianceError
from appliance.host.cgroups import BlockDevice
from appliance.host.read_ahead import ReadAheadMode, current_kb, read_ahead_file
from appliance.runs.model_files import CheckedModel
from appliance.runs.plan import EXIT_FILE, ContainerSettings, LlamaMoeTraceEngine, trial_plan
from appliance.runs.prepare import check_read_ahead
from appliance.runs.preview import read_ahead_text
from appliance.runs.profile import PROFILES_DIR, Profile, load_profile
from appliance.runs.run_dir import RunDir
from appliance.runs.trial import RunContext, TrialInterrupted, run_trial
from tests.conftest import DiskModel, unavailable

KEY = "8:0"
DEVICE = BlockDevice(8, 0, "/dev/sda", 8192)
READ_ONLY_ATTRIBUTE = Path("/sys/devices/system/cpu/kernel_max")  # EACCES to root too
REFUSED = (
    "cannot set 128 KiB: {problem}; {fix}, or set limits.read_ahead_mode: observe to only record "
    "the device's read-ahead"
)


def profile_with(tmp_path: Path, **limits: Any) -> Profile:
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw["limits"].update(limits)
    raw["schedule"].update(repeats=1, cold_cache=False)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_profile(str(path))


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    read_ahead_file(KEY, root).parent.mkdir(parents=True)
    read_ahead_file(KEY, root).write_text("8192\n")
    return root


def test_a_run_that_can_write_the_read_ahead_passes_its_preparation(tmp_path: Path, sysfs: Path) -> None:
    profile = profile_with(tmp_path, read_ahead="128KiB")
    assert check_read_ahead(profile, DEVICE, tmp_path / "m.gguf", dry_run=False, sysfs=sysfs) == []
    assert read_ahead_file(KEY, sysfs).read_text() == "8192\n"  # written back unchanged


def test_a_run_that_may_not_write_it_is_refused_before_any_trial(tmp_path: Path, sysfs: Path) -> None:
    if not READ_ONLY_ATTRIBUTE.is_file():
        unavailable(f"no {READ_ONLY_ATTRIBUTE} (sysfs not mounted)")
    path = read_ahead_file(KEY, sysfs)
    path.unlink()
    path.symlink_to(READ_ONLY_ATTRIBUTE)
    profile = profile_with(tmp_path, read_ahead="128KiB")
    with pytest.raises(ApplianceError, match="/limits/read_ahead: ") as info:
        check_read_ahead(profile, DEVICE, tmp_path / "m.gguf", dry_run=False, sysfs=sysfs)
    problem = f"cannot write {path}: Permission denied"
    assert str(info.value) == f"{profile.source_path}: /limits/read_ahead: " + REFUSED.format(
        problem=problem, fix="run as root"
    )
    # a dry run writes nothing, so it cannot tell; observe mode never writes
    assert check_read_ahead(profile, DEVICE, tmp_path / "m.gguf", dry_run=True, sysfs=sysfs) == []
    observe = profile_with(tmp_path, read_ahead="8MiB", read_ahead_mode="observe")
    assert check_read_ahead(observe, DEVICE, tmp_path / "m.gguf", dry_run=False, sysfs=sysfs) == []


def test_a_model_whose_device_has_no_read_ahead_is_refused_naming_file_and_device(
    tmp_path: Path, sysfs: Path
) -> None:
    profile = profile_with(tmp_path, read_ahead="128KiB")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    dev = os.stat(model).st_dev
    key = f"{os.major(dev)}:{os.minor(dev)}"
    no_device = REFUSED.format(
        problem=f"model {model} is on device {key}, which has no {read_ahead_file(key, sysfs)}",
        fix="put the model on a block device",
    )
    unreadable = REFUSED.format(
        problem=f"cannot read {read_ahead_file(KEY, sysfs)} (/dev/sda, holding {model})",
        fix="check that device's sysfs entry",
    )
    for device, problem in ((None, no_device), (dataclasses.replace(DEVICE, read_ahead_kb=None), unreadable)):
        with pytest.raises(ApplianceError, match="/limits/read_ahead: ") as info:
            check_read_ahead(profile, device, model, dry_run=False, sysfs=sysfs)
        assert str(info.value) == f"{profile.source_path}: /limits/read_ahead: {problem}"
        # the dry run says what the real run will refuse
        warned = check_read_ahead(profile, device, model, dry_run=True, sysfs=sysfs)
        assert warned == [f"{profile.source_path}: /limits/read_ahead: {problem}"]


def test_observe_mode_warns_when_the_device_holds_another_value(tmp_path: Path, sysfs: Path) -> None:
    profile = profile_with(tmp_path, read_ahead="128KiB", read_ahead_mode="observe")
    model = tmp_path / "m.gguf"
    same = dataclasses.replace(DEVICE, read_ahead_kb=128)
    assert check_read_ahead(profile, same, model, dry_run=False, sysfs=sysfs) == []
    assert check_read_ahead(profile, DEVICE, model, dry_run=False, sysfs=sysfs) == [
        "limits.read_ahead is 128 KiB, but read_ahead_mode is observe and the model's device holds "
        "8192 KiB: the trials run at that and record it"
    ]
    assert check_read_ahead(profile_with(tmp_path), DEVICE, model, dry_run=False, sysfs=sysfs) == []


def test_the_dry_run_header_shows_the_read_ahead_the_trials_run_at(tmp_path: Path) -> None:
    assert read_ahead_text(profile_with(tmp_path, read_ahead="128KiB").limits, DEVICE) == (
        ", read-ahead 128 KiB during each trial (limits.read_ahead: set, 8192 KiB now and written "
        "back after each)"
    )
    observed = ", read-ahead 8192 KiB (observed, not set)"
    assert read_ahead_text(profile_with(tmp_path).limits, DEVICE) == observed
    observing = profile_with(tmp_path, read_ahead="4KiB", read_ahead_mode="observe")
    assert read_ahead_text(observing.limits, DEVICE) == observed


class FakeContainer:
    """The engine's container: starting it reads the device's read-ahead (what the engine would
    fault under), then ends as told: an exit status written as the wrapper writes it, or an
    exception raised from the start."""

    def __init__(self, queue: Path, results: Path, ending: int | BaseException) -> None:
        self.queue, self.results, self.ending = queue, results, ending
        self.id, self.status = "c0ffee", "created"
        self.seen: list[int] = []
        self.attrs: dict[str, Any] = {"State": {"Pid": 0, "ExitCode": 0, "OOMKilled": False}}

    def start(self) -> None:
        self.seen.append(int(self.queue.read_text()))
        if isinstance(self.ending, BaseException):
            raise self.ending
        (self.results / EXIT_FILE).write_text(f"{self.ending} 0 1000000\n")
        self.status = "exited"
        self.attrs["State"]["ExitCode"] = self.ending

    def wait(self) -> None:
        pass

    def reload(self) -> None:
        pass

    def logs(self, stdout: bool, stderr: bool) -> bytes:
        return b""


class FakeClient:
    def __init__(self, container: FakeContainer) -> None:
        self.container = container
        self.containers = self
        self.api = self

    def create(self, **spec: Any) -> FakeContainer:
        return self.container

    def get(self, name: str) -> FakeContainer:
        if self.container.status == "created":
            raise docker.errors.NotFound(name)
        return self.container

    def remove_container(self, target: str, force: bool) -> None:
        pass


def run_one(tmp_path: Path, disk_model: DiskModel, profile: Profile, ending: int | BaseException) -> int:
    """Run the profile's first trial on the disk model's device; returns the read-ahead the
    engine's container started under."""
    trial = trial_plan(profile, 1)[0]
    run_dir = tmp_path / "run"
    queue = read_ahead_file(disk_model.device.key)
    container = FakeContainer(queue, RunDir(run_dir).scratch_for(trial.name), ending)
    ctx = RunContext(
        FakeClient(container),  # type: ignore[arg-type]
        profile,
        LlamaMoeTraceEngine("img:tag"),
        CheckedModel(disk_model.path, disk_model.path.name, 4096, None, "skipped", False),
        ContainerSettings(disk_model.path.parent, disk_model.device, 2, None),
        run_dir,
        "test",
        console=None,  # type: ignore[arg-type]
    )
    if isinstance(ending, RuntimeError):
        with pytest.raises(RuntimeError):
            run_trial(ctx, trial)
    elif isinstance(ending, KeyboardInterrupt):
        with pytest.raises(TrialInterrupted):
            run_trial(ctx, trial)
    else:
        run_trial(ctx, trial)
    [started_under] = container.seen
    return started_under


@pytest.mark.parametrize(
    "ending",
    [0, 1, docker.errors.APIError("engine image missing"), RuntimeError("bug"), KeyboardInterrupt()],
    ids=["success", "engine-failure", "docker-error", "exception", "ctrl-c"],
)
def test_each_trial_runs_at_the_profiles_read_ahead_and_the_device_gets_its_own_back(
    tmp_path: Path, disk_model: DiskModel, ending: int | BaseException
) -> None:
    before, wanted = disk_model.device.read_ahead_kb, disk_model.other_kb
    profile = profile_with(tmp_path, read_ahead=f"{wanted}KiB")
    assert run_one(tmp_path, disk_model, profile, ending) == wanted
    assert current_kb(disk_model.device.key) == before
    if isinstance(ending, RuntimeError):
        return  # the trial left no record
    record = RunDir(tmp_path / "run").trial(trial_plan(profile, 1)[0].name).record()
    assert (record.model_device_read_ahead_kb, record.model_device_read_ahead_mode) == (
        wanted,
        ReadAheadMode.SET,
    )
    assert record.model_device_read_ahead_restored_kb == before


def test_observe_mode_runs_the_trial_at_the_devices_own_read_ahead(
    tmp_path: Path, disk_model: DiskModel
) -> None:
    before = disk_model.device.read_ahead_kb
    profile = profile_with(tmp_path, read_ahead=f"{disk_model.other_kb}KiB", read_ahead_mode="observe")
    assert run_one(tmp_path, disk_model, profile, 0) == before
    record = RunDir(tmp_path / "run").trial(trial_plan(profile, 1)[0].name).record()
    assert (record.model_device_read_ahead_kb, record.model_device_read_ahead_mode) == (
        before,
        ReadAheadMode.OBSERVE,
    )
    assert record.model_device_read_ahead_restored_kb is None
