"""Target selection from compute capability. No GPU exists on these machines: the Gpu records
below are hand-made stand-ins for what NVML would report (a mock, named as such)."""

from appliance.engine.lock import load_lock
from appliance.host.gpu import Gpu, driver_satisfies, fitting_target


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
