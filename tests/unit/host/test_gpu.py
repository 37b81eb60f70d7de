"""Target selection from compute capability. No GPU exists on these machines: the Gpu records
below are hand-made stand-ins for what NVML would report (a mock, named as such)."""

from pathlib import Path

import pytest

from appliance.core.errors import ApplianceError
from appliance.engine.lock import load_lock
from appliance.host.gpu import Gpu, driver_satisfies, fitting_target, target_for_capability
from appliance.workflows.repro import preflight


def mock_gpu(cc: str, driver: str = "575.51.03") -> Gpu:
    return Gpu(0, "mock", cc, driver, 24 << 30, 23 << 30)


def test_mock_gpus_pick_the_matching_target() -> None:
    lock = load_lock()
    assert fitting_target([mock_gpu("8.9")], lock) == "sm89"
    assert fitting_target([mock_gpu("12.0")], lock) == "sm120"
    assert fitting_target([mock_gpu("7.5")], lock) == "cpu"
    assert fitting_target([mock_gpu("8.6")], lock) == "cpu"  # 89-real SASS does not run on 8.6
    assert fitting_target([mock_gpu("12.1")], lock) == "cpu"
    assert fitting_target([], lock) == "cpu"


def test_driver_minimum_compares_numerically() -> None:
    assert driver_satisfies("575.51.03", "570.124.06")
    assert driver_satisfies("570.124.06", "570.124.06")
    assert not driver_satisfies("570.86.10", "570.124.06")
    assert not driver_satisfies("565.57.01", "570.124.06")


def test_one_capability_table_for_doctor_runs_and_reproductions() -> None:
    """host.gpu.target_for_capability is the table; the run's target choice and the repro
    preflight's hint follow it, for every target of the lock."""
    lock = load_lock()
    table = {t.cuda.compute_capability: t.name for t in lock.targets.values() if t.cuda}
    assert table == {"8.9": "sm89", "12.0": "sm120"}
    for cc, name in table.items():
        assert target_for_capability(cc, lock) == name
        assert fitting_target([mock_gpu(cc)], lock) == name
        other = next(n for n in table.values() if n != name)
        with pytest.raises(ApplianceError, match=f"this machine fits repro-{name}"):
            preflight(lock, other, [mock_gpu(cc)], Path("/"), None)
    assert target_for_capability("8.6", lock) is None


def test_provenance_records_the_gpu_record() -> None:
    gpu = mock_gpu("8.9")
    assert gpu.record() == {
        "index": 0,
        "name": "mock",
        "compute_capability": "8.9",
        "memory_bytes": 24 << 30,
        "driver_version": "575.51.03",
        "cuda_driver_version": "",
    }
