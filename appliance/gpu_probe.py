"""NVIDIA GPUs visible on this host, through NVML; an empty list when there is no driver."""

import functools
from dataclasses import dataclass

# Image targets by compute capability major version: RTX 40xx is 8.9, RTX 50xx is 12.0.
TARGET_BY_CAPABILITY = {(8, 9): "sm89", (12, 0): "sm120"}


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    capability: tuple[int, int]

    @property
    def target(self) -> str | None:
        return TARGET_BY_CAPABILITY.get(self.capability)


@functools.cache
def gpus() -> tuple[Gpu, ...]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library, no driver, no device: no GPU
        return ()
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            found.append(Gpu(index, name if isinstance(name, str) else name.decode(),
                             (major, minor)))
        return tuple(found)
    finally:
        pynvml.nvmlShutdown()
