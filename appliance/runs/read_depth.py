"""The queue depth at which a variant reads the model while it decodes, decided from its engine
arguments (its definition, never its name), and the disk probe's depth its decode read bandwidth
is compared with (`disk_fraction`, docs/sweeps.md). The one home of that mapping.

- Without either flag below (a plain mmap that pages, the baseline; demand mmap, patch 0002) a
  decode thread faults and waits on one read at a time: queue depth 1.
- `--prefetch-experts` (patch 0003) advises WILLNEED on the routed experts' slices before they
  are used: the kernel reads them asynchronously, many at once.
- `--expert-cache` (patch 0004) reads missing experts whole from a pool of `--expert-io-depth`
  reader threads (8 when not given).
- `--prefill-readers N` (patch 0006) reads the prompt's chosen experts whole with N reader
  threads; it changes how the prompt reads (`prefill_read_depth`), not how decoding does.

The probe (`llama-moe-trace --probe-disk`) reads expert-size blocks at queue depth 1 and 8: a
variant that reads at depth 1 is compared with the first, any that reads deeper with the second,
so that a variant reading ahead is never measured against one thread's waits.
"""

from collections.abc import Sequence

FAULT_DEPTH = 1  # one faulting thread, one read in flight
DEEP_PROBE_DEPTH = 8  # the probe's deeper queue depth (its expert_qd8_bytes_per_s)
PROBE_DEPTHS = (FAULT_DEPTH, DEEP_PROBE_DEPTH)
PREFETCH_FLAG = "--prefetch-experts"  # patch 0003
EXPERT_CACHE_FLAG = "--expert-cache"  # patch 0004
EXPERT_IO_DEPTH_FLAG = "--expert-io-depth"  # patch 0004's reader threads
DEFAULT_EXPERT_IO_DEPTH = 8  # patch 0004 without --expert-io-depth
PREFILL_READERS_FLAG = "--prefill-readers"  # patch 0006's reader threads for the prompt


def _count_after(argv: list[str], flag: str) -> int | None:
    """The positive integer given after `flag`, or None (absent, no value, not a count: the
    engine refuses those)."""
    at = argv.index(flag) + 1 if flag in argv else len(argv)
    value = argv[at] if at < len(argv) else ""
    return int(value) if value.isdigit() and int(value) > 0 else None


def read_depth(args: Sequence[str]) -> int:
    """The queue depth at which an engine given `args` reads experts while decoding; for
    prefetch (no depth of its own: the kernel's asynchronous reads) the probe's deeper depth."""
    argv = list(args)
    if EXPERT_CACHE_FLAG in argv:
        return _count_after(argv, EXPERT_IO_DEPTH_FLAG) or DEFAULT_EXPERT_IO_DEPTH
    if PREFETCH_FLAG in argv:
        return DEEP_PROBE_DEPTH
    return FAULT_DEPTH


def probe_depth(args: Sequence[str]) -> int:
    """The probe depth (one of PROBE_DEPTHS) that an engine given `args` is compared with: 1 for
    reads at depth 1, else the deeper one."""
    return depth_probed(read_depth(args))


def prefill_read_depth(args: Sequence[str]) -> int:
    """The queue depth at which an engine given `args` reads the prompt's experts: its prefill
    readers when it has them (patch 0006), else the depth it decodes at."""
    return _count_after(list(args), PREFILL_READERS_FLAG) or read_depth(args)


def depth_probed(depth: int) -> int:
    """The probe depth (one of PROBE_DEPTHS) that reads at `depth` are compared with."""
    return FAULT_DEPTH if depth <= FAULT_DEPTH else DEEP_PROBE_DEPTH
