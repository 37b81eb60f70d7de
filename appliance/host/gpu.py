"""NVIDIA GPUs seen through NVML, and which engine target fits them."""

from dataclasses import dataclass

from appliance.engine.lock import Lock


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: str
    driver: str
    memory_bytes: int
    free_bytes: int
    cuda_driver: str = ""  # highest CUDA version the driver supports, e.g. "12.8"

    def record(self) -> dict[str, object]:
        """The fields a run's provenance records (free memory changes by the second: left out)."""
        return {
            "index": self.index,
            "name": self.name,
            "compute_capability": self.compute_capability,
            "memory_bytes": self.memory_bytes,
            "driver_version": self.driver,
            "cuda_driver_version": self.cuda_driver,
        }


class NvmlUnavailable(Exception):
    """NVML (the NVIDIA driver's management library) could not be loaded or initialized."""


def detect_gpus() -> list[Gpu]:
    """All GPUs NVML reports; raises NvmlUnavailable where there is no NVIDIA driver."""
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable("nvidia-ml-py is not installed") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(str(exc)) from exc
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                Gpu(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else name,
                    compute_capability=f"{major}.{minor}",
                    driver=str(driver),
                    memory_bytes=int(memory.total),
                    free_bytes=int(memory.free),
                    cuda_driver=f"{cuda // 1000}.{(cuda % 1000) // 10}",
                )
            )
        return gpus
    finally:
        pynvml.nvmlShutdown()


def visible_gpus() -> list[Gpu]:
    """GPUs NVML reports; none where there is no NVIDIA driver."""
    try:
        return detect_gpus()
    except NvmlUnavailable:
        return []


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def target_for_capability(capability: str, lock: Lock) -> str | None:
    """The lock target built for exactly this compute capability ("8.9"), or None.

    Exact match only: `-real` SASS (and `120a` arch-specific code) runs on that capability
    alone, so an 8.6 card cannot use the sm89 build and a 12.1 card not the sm120 one.
    """
    return next(
        (
            target.name
            for target in lock.targets.values()
            if target.cuda is not None and target.cuda.compute_capability == capability
        ),
        None,
    )


def fitting_target(gpus: list[Gpu], lock: Lock) -> str:
    """The target of the first GPU that has one (target_for_capability), else cpu."""
    for gpu in gpus:
        target = target_for_capability(gpu.compute_capability, lock)
        if target is not None:
            return target
    return "cpu"


def driver_satisfies(driver: str, minimum: str) -> bool:
    return _version_tuple(driver) >= _version_tuple(minimum)
