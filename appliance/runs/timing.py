"""timing.json as a typed record: what the engine (`llama-moe-trace`, patches/llama.cpp) writes
under its results mount, every key it may hold spelled once.

The engine writes one of three shapes into the one file: a trial's run (load, prompt and decode
times, the residency, placement and I/O counters; `expert_cache` with patch 0004, null
without a cache), a disk probe (`probe`, `file`, `measurements`) and a cache replay (`replay`,
`events`, `requests`, `hit_flags`). Every field is optional: a shape holds only its own keys,
and engines built before a key existed still read. Strict like trial.json (`TrialRecord`): a
key the class lacks is refused by name, so a newer engine's new key is added here first (the
lock pins engine and appliance together); `read_timing` is the tolerant reader the runner and
the analyses use, for which such a file (or a command engine's own timing.json) has no record.
Importing this module loads neither docker nor ray.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.core.errors import ConfigError
from appliance.core.records import Record
from appliance.core.strict_load import load_json
from appliance.engine.tools import TRACER


@dataclass(frozen=True)
class IoCounters(Record):
    """The engine process's /proc/self/io and fault counts at one point (`io.<phase>`)."""

    read_bytes: int  # bytes the block layer read for the process (-1: not readable)
    rchar: int | None = None
    majflt: int | None = None
    minflt: int | None = None


@dataclass(frozen=True)
class EngineIo(Record):
    """timing.json `io`: the counters at the end of each phase, cumulative (the engine writes
    all three; a phase it did not reach is absent)."""

    load_end: IoCounters | None = None
    prefill_end: IoCounters | None = None
    decode_end: IoCounters | None = None


@dataclass(frozen=True)
class Residency(Record):
    """The engine process's memory at one point (`residency_after_load`, `residency_at_end`)."""

    model_mapped_rss_bytes: int | None = None  # resident pages of the model's mapping
    rss_bytes: int | None = None
    anon_bytes: int | None = None  # anonymous memory: what the limit holds besides the model


# timing.json kernel_path.router_fusion: what the eval callback's cuts leave of a router's fused
# kernel (CUDA fuses softmax, argsort, get_rows and the weights' normalisation into one)
ROUTER_FUSION = {
    "not-cut": "no eval callback: the backend fuses as it would untraced",
    "prevented": "each router's top-k view ends the CUDA graph: the fused router kernel never runs",
    "server-backend": "the RPC server's backend decides, on graphs cut at each router's top-k view",
    "no-fused-kernel": "the backend that routed has no fused router kernel",
}


@dataclass(frozen=True)
class KernelPath(Record):
    """timing.json `kernel_path`: what observing the router did to the graphs the engine ran
    (patch 0001). The scheduler ends a backend's graph at every node the eval callback asks for,
    so a traced run (or one whose prefetch, readers or cache need the routes) never runs a kernel
    fused across a router's top-k view."""

    eval_callback: bool  # installed: tracing, prefetch, prefill readers or the expert cache
    graph_cuts: int  # nodes the callback asked for over the run
    graph_cuts_per_decode_token: float
    cut_buffer: str | None  # the buffer of the first node asked for: CPU, CUDA0, RPC0[HOST:PORT]
    router_fusion: str  # a key of ROUTER_FUSION


@dataclass(frozen=True)
class ProbeMeasurement(Record):
    """One disk probe pass (`measurements[]`): cold random reads of one size at one depth."""

    block_bytes: int
    queue_depth: int
    bytes: int  # requested
    seconds: float
    reads: int | None = None
    device_read_bytes: int | None = None  # what the device read; -1: its counters were not readable


@dataclass(frozen=True)
class TimingRecord(Record):
    """timing.json, keys in the order the engine writes them (a trial's run, then the disk
    probe's and the replay's own)."""

    tool: str | None = None  # "llama-moe-trace"
    llama_build: str | None = None
    model_file: str | None = None
    model_bytes: int | None = None
    backend: str | None = None  # CPU, CUDA
    devices: str | None = None
    trace: bool | None = None
    no_repack: bool | None = None
    op_offload: bool | None = None  # llama.cpp's op_offload (--no-op-offload: false)
    mmap_demand: str | None = None  # LLAMA_MMAP_DEMAND as the engine saw it ("" when unset)
    n_threads: int | None = None
    n_ubatch: int | None = None
    load_s: float | None = None
    n_prompt_tokens: int | None = None
    prompt_s: float | None = None
    prompt_tokens_per_s: float | None = None
    n_decode_tokens: int | None = None
    decode_s: float | None = None
    decode_tokens_per_s: float | None = None
    prefetch_experts: bool | None = None  # patch 0003
    prefetch_bytes: int | None = None
    prefetch_calls: int | None = None
    prefill_readers: dict[str, Any] | None = None  # patch 0006: the prompt's readers, budget and bytes
    expert_cache: dict[str, Any] | None = None  # patch 0004: the cache's policy and counters
    trace_rows: int | None = None
    trace_steps: int | None = None
    residency_after_load: Residency | None = None
    residency_at_end: Residency | None = None
    # demand mmap: the whole pages of tensors llama.cpp copied to a device, dropped after load
    uploaded_pages_dropped_bytes: int | None = None
    kernel_path: KernelPath | None = None
    placement: dict[str, Any] | None = None  # appliance.analysis.placement reads it
    io: EngineIo | None = None
    probe: str | None = None  # the disk probe: "disk"
    file: str | None = None
    file_bytes: int | None = None
    advice: str | None = None
    measurements: tuple[ProbeMeasurement, ...] | None = None
    replay: str | None = None  # a cache replay: the trace replayed
    events: int | None = None
    requests: int | None = None
    hit_flags: str | None = None  # one 0 or 1 per request


def load_timing(path: Path) -> TimingRecord:
    """timing.json read strictly: a one-line ConfigError naming the file otherwise."""
    return TimingRecord.from_json(load_json(path), str(path))


def timing_of(trial: dict[str, Any]) -> TimingRecord:
    """The timing.json attached to a loaded trial (`TrialDir.load`'s `timing`) as a record; an
    empty one when the trial has none, or one the class does not accept (a command's own)."""
    try:
        return TimingRecord.from_json(trial.get("timing") or {}, "the trial's timing")
    except ConfigError:
        return TimingRecord()


def timing_problem(trial: dict[str, Any]) -> str | None:
    """Why a loaded trial's timing.json reads as none in the analyses (`timing_of`), naming the
    key `TimingRecord` refused (a newer engine's, say); None when it reads or there is none."""
    timing = trial.get("timing")
    if not timing or timing.get("tool") != TRACER:  # a command engine's own is not the record
        return None
    try:
        TimingRecord.from_json(timing, f"trial {trial.get('dir')}'s timing record")
    except ConfigError as exc:
        return str(exc)
    return None


def read_timing(path: Path) -> TimingRecord | None:
    """timing.json, or None when it is missing or not a record `load_timing` accepts."""
    try:
        return load_timing(path)
    except ConfigError:
        return None
