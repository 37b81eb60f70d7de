"""GPU memory used during a trial, sampled through NVML (the NVIDIA driver's library).

Docker cannot cap GPU memory, so a trial's placement is fixed in advance and what the GPU held
is observed: a thread reads the device's used memory every `interval_s` from just before the
container starts until the engine has exited. The record keeps the memory in use before the
start (`baseline_bytes`, what other processes held), the peak, the end (the last sample above
the baseline: the engine frees the GPU when it exits) and the sample nearest the engine's load
end (its timing.json `load_s` after the start), and the peak less the baseline. A
trial whose peak less the baseline exceeds `limits.vram` is `over-budget`. Where no GPU was
requested or NVML cannot be loaded nothing is sampled, and the record says why.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from types import ModuleType
from typing import Any

INTERVAL_S = 0.25


def load_nvml() -> ModuleType:
    """pynvml (nvidia-ml-py), initialized; raises ImportError or pynvml.NVMLError."""
    nvml = importlib.import_module("pynvml")
    nvml.nvmlInit()
    return nvml


class GpuMemorySampler:
    """`with GpuMemorySampler(index) as sampler: ...` then `sampler.record(load_s, budget)`."""

    def __init__(self, device_index: int | None, interval_s: float = INTERVAL_S) -> None:
        self.device_index = device_index
        self.interval_s = interval_s
        self.samples: list[tuple[float, int]] = []
        self.reason: str | None = None
        self.baseline: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._handle: Any = None
        self._t0 = 0.0

    def __enter__(self) -> GpuMemorySampler:
        if self.device_index is None:
            self.reason = "no GPU requested: nothing sampled"
            return self
        try:
            self._nvml = load_nvml()
            self._handle = self._nvml.nvmlDeviceGetHandleByIndex(self.device_index)
            self.baseline = self._used()
        except Exception as exc:  # noqa: BLE001 - ImportError or any NVMLError: recorded, not raised
            self.reason = f"NVML unavailable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            self._nvml = None
            return self
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="gpu-memory", daemon=True)
        self._thread.start()
        return self

    def _used(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def _run(self) -> None:
        while True:
            try:
                self.samples.append((time.monotonic() - self._t0, self._used()))
            except Exception as exc:  # noqa: BLE001 - a failing read ends the sampling, said in the record
                self.reason = f"NVML read failed: {exc}"
                return
            if self._stop.wait(self.interval_s):
                return

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            with contextlib.suppress(Exception):  # the samples so far stand
                self.samples.append((time.monotonic() - self._t0, self._used()))
        if self._nvml is not None:
            with contextlib.suppress(Exception):  # shutting down a library that worked
                self._nvml.nvmlShutdown()

    def record(self, load_s: float | None, budget_bytes: int | None) -> dict[str, Any]:
        """trial.json `gpu_memory`."""
        if not self.samples or self.baseline is None:
            return {
                "sampled": False,
                "reason": self.reason or "no sample taken",
                "budget_bytes": budget_bytes,
            }
        peak = max(used for _, used in self.samples)
        at_load = None
        if load_s is not None:
            at_load = min(self.samples, key=lambda s: abs(s[0] - load_s))[1]
        held = peak - self.baseline
        # the engine frees the GPU when it exits: the end is its last sample above the baseline
        end = next((used for _, used in reversed(self.samples) if used > self.baseline), self.samples[-1][1])
        return {
            "sampled": True,
            "device_index": self.device_index,
            "interval_s": self.interval_s,
            "samples": len(self.samples),
            "baseline_bytes": self.baseline,
            "load_end_bytes": at_load,
            "peak_bytes": peak,
            "end_bytes": end,
            "trial_peak_bytes": held,
            "budget_bytes": budget_bytes,
            "over_budget": budget_bytes is not None and held > budget_bytes,
            **({"note": self.reason} if self.reason else {}),
        }
