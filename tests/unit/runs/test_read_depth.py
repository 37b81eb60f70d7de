"""The queue depth a variant reads at, from its definition (engine arguments), never its name."""

import pytest

from appliance.runs.profile import load_profile
from appliance.runs.read_depth import (
    DEEP_PROBE_DEPTH,
    FAULT_DEPTH,
    PROBE_DEPTHS,
    depth_probed,
    prefill_read_depth,
    probe_depth,
    read_depth,
)


@pytest.mark.parametrize(
    ("args", "depth", "probe"),
    [
        ((), 1, 1),  # a paging baseline or demand mmap: one faulting thread
        (("--no-repack",), 1, 1),
        (("--prefetch-experts",), 8, 8),  # WILLNEED: the kernel's asynchronous reads
        (("--expert-cache", "lru", "--expert-cache-capacity", "auto"), 8, 8),  # 8 readers by default
        (("--expert-cache", "lru", "--expert-io-depth", "16"), 16, 8),
        (("--expert-cache", "lru", "--expert-io-depth", "4"), 4, 8),
        (("--expert-cache", "lru", "--expert-io-depth", "1"), 1, 1),
        (("--expert-cache", "lru", "--expert-io-depth"), 8, 8),  # no value: the engine refuses it
        (("--expert-io-depth", "4"), 1, 1),  # without the cache the flag reads nothing
    ],
)
def test_read_depth_from_the_engine_arguments(args: tuple[str, ...], depth: int, probe: int) -> None:
    assert read_depth(args) == depth
    assert probe_depth(args) == probe
    assert probe in PROBE_DEPTHS == (FAULT_DEPTH, DEEP_PROBE_DEPTH)


def test_the_cache_profile_s_variants_read_at_their_depths() -> None:
    """tiny-oversub-cache: the baseline and demand mmap fault at depth 1; prefetch and every cache
    policy read deeper, whatever the variant is called."""
    profile = load_profile("tiny-oversub-cache")
    depths = {v.name: probe_depth([*profile.engine_args, *v.args]) for v in profile.variants}
    assert depths == {
        "baseline": 1,
        "demand-mmap": 1,
        "demand-prefetch": 8,
        "expert-lru": 8,
        "expert-least-stale": 8,
        "expert-belady": 8,
    }


@pytest.mark.parametrize(
    ("args", "depth"),
    [
        ((), 1),  # the prompt faults like decoding does
        (("--prefetch-experts",), 8),
        (("--prefetch-experts", "--prefill-readers", "4"), 4),  # the readers, not WILLNEED
        (("--prefill-readers", "16"), 16),
        (("--prefill-readers",), 1),  # no value: the engine refuses it
        (("--prefill-readers", "0"), 1),
    ],
)
def test_the_prompt_reads_at_its_readers_depth(args: tuple[str, ...], depth: int) -> None:
    assert prefill_read_depth(args) == depth
    assert depth_probed(depth) == (FAULT_DEPTH if depth <= 1 else DEEP_PROBE_DEPTH)
