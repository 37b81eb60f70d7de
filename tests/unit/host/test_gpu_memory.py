"""GPU memory sampling during a trial, against a STAND-IN NVML module (no GPU exists on the
build machines: this stand-in for pynvml is the one part of the check that cannot be real).
The sampler, the record, and the `over-budget` verdict are the real code."""

import sys
import time
import types
from typing import Any

import pytest

from appliance.host.gpu_memory import GpuMemorySampler
from appliance.runs.status import TrialStatus
from appliance.runs.trial import _status

GiB = 1 << 30


class StandInNvml(types.ModuleType):
    """A stand-in for pynvml: device 0's used memory follows `script`, one value per read,
    then stays at the last value."""

    def __init__(self, script: list[int], fail_init: str | None = None) -> None:
        super().__init__("pynvml")
        self.script, self.reads, self.fail_init, self.shut = script, 0, fail_init, False

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        if self.fail_init:
            raise RuntimeError(self.fail_init)

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut = True

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        assert index == 0
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:  # noqa: N802
        used = self.script[min(self.reads, len(self.script) - 1)]
        self.reads += 1
        return types.SimpleNamespace(used=used, total=32 * GiB, free=32 * GiB - used)


def sample(monkeypatch: pytest.MonkeyPatch, nvml: StandInNvml, device: int | None) -> GpuMemorySampler:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with GpuMemorySampler(device, interval_s=0.05) as sampler:
        deadline = time.monotonic() + 10
        while sampler.reason is None and nvml.reads < len(nvml.script) and time.monotonic() < deadline:
            time.sleep(0.01)
    return sampler


# before the start (baseline), load, decode at its peak, the end of decode, the engine gone
SCRIPT = [1 * GiB, 2 * GiB, 4 * GiB, 3 * GiB, 1 * GiB]


def test_stand_in_nvml_sampling_records_baseline_load_peak_and_end(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = StandInNvml(SCRIPT)
    record = sample(monkeypatch, nvml, 0).record(load_s=0.0, budget_bytes=4 * GiB)
    assert nvml.shut
    assert record["sampled"] and record["device_index"] == 0 and record["samples"] >= 4
    assert record["baseline_bytes"] == 1 * GiB
    assert record["load_end_bytes"] == 2 * GiB  # the first sample after the start
    assert record["peak_bytes"] == 4 * GiB and record["trial_peak_bytes"] == 3 * GiB
    assert record["end_bytes"] == 3 * GiB  # the last sample above the baseline
    assert record["budget_bytes"] == 4 * GiB and record["over_budget"] is False


def test_stand_in_nvml_peak_over_the_budget_is_over_budget_not_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    record = sample(monkeypatch, StandInNvml(SCRIPT), 0).record(load_s=None, budget_bytes=2 * GiB)
    assert record["over_budget"] is True and record["load_end_bytes"] is None
    ran = {"exit_code": 0, "gpu_memory": record}
    assert _status(ran) is TrialStatus.OVER_BUDGET and TrialStatus.OVER_BUDGET.value == "over-budget"
    assert _status({"exit_code": 0, "gpu_memory": {**record, "over_budget": False}}) is TrialStatus.OK
    # a failure or an OOM kill says more than the budget does
    assert _status({"exit_code": 1, "gpu_memory": record}) is TrialStatus.FAILED
    assert _status({"exit_code": 137, "oom_killed": True, "gpu_memory": record}) is TrialStatus.OOM_KILLED


def test_stand_in_nvml_no_budget_is_never_over_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    record = sample(monkeypatch, StandInNvml(SCRIPT), 0).record(load_s=None, budget_bytes=None)
    assert record["over_budget"] is False and record["trial_peak_bytes"] == 3 * GiB


def test_without_a_gpu_nothing_is_sampled_and_the_record_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = StandInNvml(SCRIPT)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with GpuMemorySampler(None) as sampler:
        pass
    assert nvml.reads == 0
    assert sampler.record(1.0, 4 * GiB) == {
        "sampled": False,
        "reason": "no GPU requested: nothing sampled",
        "budget_bytes": 4 * GiB,
    }
    assert _status({"exit_code": 0, "gpu_memory": sampler.record(1.0, 4 * GiB)}) is TrialStatus.OK


def test_stand_in_nvml_that_cannot_start_is_recorded_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    sampler = sample(monkeypatch, StandInNvml(SCRIPT, fail_init="Driver Not Loaded"), 0)
    assert sampler.record(None, None) == {
        "sampled": False,
        "reason": "NVML unavailable: Driver Not Loaded",
        "budget_bytes": None,
    }
