"""Corrupt and hostile GGUF headers end in one line naming the problem, fast, in bounded memory.

Each header is a real one written by `appliance.models.synth`, changed in one place the way a
corrupt download or a hostile file would be (fuzz.gguf_cases parses and re-encodes it).
"""

import re
import struct
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.core.errors import ApplianceError
from appliance.models.gguf_header import HEADER_BUDGET, FileSource, read_header
from appliance.planner.accounting import account_file
from fuzz import gguf_cases
from fuzz.gguf_cases import ARRAY, F32, F64, STRING, U32, U64, Entry, Header
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    work = tmp_path_factory.mktemp("seeds")
    qwen3, qwen35 = gguf_cases.seed_headers(work)
    return {"qwen3moe": qwen3, "qwen35moe": qwen35}


def _set(header: Header, key: bytes, vtype: int, raw: bytes) -> None:
    for entry in header.entries:
        if entry.key == key:
            entry.vtype, entry.raw = vtype, raw
            return
    header.entries.append(Entry(key, vtype, raw))


def _u32(value: int) -> tuple[int, bytes]:
    return U32, struct.pack("<I", value)


def _huge_string(h: Header) -> None:
    name = next(e for e in h.entries if e.key == b"general.name")
    name.raw = struct.pack("<Q", 1 << 40) + name.raw[8:]


def _huge_array(h: Header) -> None:
    tokens = next(e for e in h.entries if e.key == b"tokenizer.ggml.tokens")
    tokens.raw = tokens.raw[:4] + struct.pack("<Q", (1 << 64) - 1) + tokens.raw[12:]


def _zero_expert_dim(h: Header) -> None:
    experts = next(t for t in h.tensors if t.name.endswith(b"ffn_up_exps.weight"))
    experts.dims[-1] = 0


def _arch(name: str, key: str, vtype: int, raw: bytes) -> Callable[[Header], None]:
    return lambda h: _set(h, f"{name}.{key}".encode(), vtype, raw)


CASES = {
    "string of 2^40 bytes": ("qwen3moe", _huge_string, "truncated GGUF header"),
    "array of 2^64-1 strings": ("qwen3moe", _huge_array, "an array of 18446744073709551615"),
    "2^40 tensor infos": (
        "qwen3moe",
        lambda h: setattr(h, "n_tensors", 1 << 40),
        "1099511627776 tensor infos",
    ),
    "alignment 0": (
        "qwen3moe",
        lambda h: _set(h, b"general.alignment", *_u32(0)),
        "general.alignment is 0, not a positive power of two",
    ),
    "alignment 48": (
        "qwen3moe",
        lambda h: _set(h, b"general.alignment", *_u32(48)),
        "general.alignment is 48",
    ),
    "alignment NaN": (
        "qwen3moe",
        lambda h: _set(h, b"general.alignment", F32, struct.pack("<f", float("nan"))),
        "general.alignment is nan",
    ),
    "alignment inf": (
        "qwen3moe",
        lambda h: _set(h, b"general.alignment", F64, struct.pack("<d", float("inf"))),
        "general.alignment is inf",
    ),
    "alignment a string": (
        "qwen3moe",
        lambda h: _set(h, b"general.alignment", STRING, struct.pack("<Q", 2) + b"32"),
        "general.alignment is '32'",
    ),
    "zero expert dimension": ("qwen3moe", _zero_expert_dim, "0 experts"),
    "full_attention_interval 0": (
        "qwen35moe",
        _arch("qwen35moe", "full_attention_interval", *_u32(0)),
        "qwen35moe.full_attention_interval is 0, not a whole number from 1",
    ),
    "block_count 3e7": (
        "qwen3moe",
        _arch("qwen3moe", "block_count", *_u32(30_000_000)),
        "qwen3moe.block_count is 30000000, not a whole number from 0 to 512",
    ),
    "block_count 2^32-1": (
        "qwen3moe",
        _arch("qwen3moe", "block_count", *_u32((1 << 32) - 1)),
        "qwen3moe.block_count is 4294967295",
    ),
    "qwen35moe block_count 1e6": (
        "qwen35moe",
        _arch("qwen35moe", "block_count", *_u32(1_000_000)),
        "qwen35moe.block_count is 1000000",
    ),
    "expert_count 2^40": (
        "qwen3moe",
        _arch("qwen3moe", "expert_count", U64, struct.pack("<Q", 1 << 40)),
        "qwen3moe.expert_count is 1099511627776",
    ),
    "head counts as floats": (
        "qwen3moe",
        _arch("qwen3moe", "attention.head_count", F32, struct.pack("<f", float("inf"))),
        "qwen3moe.attention.head_count is inf",
    ),
    "per-layer array too long to keep": (
        "qwen3moe",
        _arch("qwen3moe", "attention.head_count_kv", ARRAY, struct.pack("<IQ", U32, 5000) + bytes(4 * 5000)),
        "qwen3moe.attention.head_count_kv is an array of 5000",
    ),
    "tensor of 2^64-1 x 2^64-1 elements": (
        "qwen3moe",
        lambda h: h.tensors[0].dims.__setitem__(slice(None), [(1 << 64) - 1, (1 << 64) - 1]),
        "more elements than ggml can address",
    ),
    "layer number of 5000 digits": (
        "qwen3moe",
        lambda h: setattr(h.tensors[-1], "name", b"blk." + b"9" * 5000 + b".ffn_up_exps.weight"),
        None,
    ),
}


def hostile(seeds: dict[str, bytes], case: str) -> bytes:
    arch, edit, _ = CASES[case]
    header = gguf_cases.parse(seeds[arch])
    edit(header)
    return gguf_cases.encode(header)


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_header_is_one_line_from_plan(seeds: dict[str, bytes], case: str, tmp_path: Path) -> None:
    path = tmp_path / "hostile.gguf"
    path.write_bytes(hostile(seeds, case))
    before = sorted(tmp_path.iterdir())
    result = run_cli("plan", str(path), "--ram", "8GiB", "--vram", "0")
    message = CASES[case][2]
    if message is None:  # a name the planner does not read as a layer: planned, not refused
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith(f"error: {path}: ") and result.stderr.count("\n") == 1
    assert message in result.stderr
    assert result.stdout == ""
    assert sorted(tmp_path.iterdir()) == before


def test_a_huge_string_is_refused_before_reading(seeds: dict[str, bytes], tmp_path: Path) -> None:
    path = tmp_path / "hostile.gguf"
    path.write_bytes(hostile(seeds, "string of 2^40 bytes"))
    source = FileSource(path)
    try:
        with pytest.raises(ApplianceError, match="where a string of 1099511627776 bytes"):
            read_header(source)
    finally:
        source.close()
    assert source.bytes_read <= path.stat().st_size


class EndlessSource:
    """A source that does not know its size and has as many bytes as asked for."""

    name = "endless"

    def __init__(self, prefix: bytes) -> None:
        self.prefix, self.bytes_read = prefix, 0

    def read(self, offset: int, size: int) -> bytes:
        self.bytes_read += size
        data = self.prefix[offset : offset + size]
        return data + bytes(size - len(data))

    def total_size(self) -> int | None:
        return None


def test_without_a_size_the_budget_bounds_what_is_read(seeds: dict[str, bytes]) -> None:
    header = gguf_cases.parse(seeds["qwen3moe"])
    name = next(e for e in header.entries if e.key == b"general.name")
    name.raw = struct.pack("<Q", 100 << 20) + name.raw[8:]  # 100 MiB: inside a 1 TB file
    source = EndlessSource(gguf_cases.encode(header))
    with pytest.raises(ApplianceError, match="over the 8388608-byte header budget"):
        read_header(source, budget=8 << 20)
    assert source.bytes_read <= 8 << 20
    assert HEADER_BUDGET >= 64 << 20  # real headers (250k-token vocabularies) fit


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--ctx", "-1", "Invalid value for '--ctx': -1 is not in the range 1<=x"),
        ("--ctx", "0", "Invalid value for '--ctx': 0 is not in the range 1<=x"),
        ("--ubatch", "-5", "Invalid value for '--ubatch': -5 is not in the range 1<=x"),
        ("--ssd-gbps", "-1", "Invalid value for '--ssd-gbps': -1.0 is not in the range x>0"),
        ("--ram-gbps", "nan", "Invalid value for '--ram-gbps': 'nan' is not a finite number"),
        ("--pcie-gbps", "inf", "Invalid value for '--pcie-gbps': 'inf' is not a finite number"),
        ("--hit-rate", "nan", "Invalid value for '--hit-rate': 'nan' is not a finite number"),
    ],
)
def test_plan_options_out_of_range_are_refused(
    seeds: dict[str, bytes], tmp_path: Path, option: str, value: str, message: str
) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(seeds["qwen3moe"])
    assert run_cli("plan", str(path), "--ram", "8GiB", "--vram", "0").returncode == 0
    result = run_cli("plan", str(path), "--ram", "8GiB", "--vram", "0", option, value)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert message in result.stderr


def test_the_seed_headers_plan_as_before(seeds: dict[str, bytes], tmp_path: Path) -> None:
    for arch, data in seeds.items():
        path = tmp_path / f"{arch}.gguf"
        path.write_bytes(data)
        acc = account_file(path)
        assert acc.partial and acc.facts.arch == arch and acc.facts.experts == 8


MEMORY_BOUND = 32 << 20  # peak Python allocation while refusing one header (seeds: ~100 KiB)
TIME_BOUND_S = 2.0  # the fuzz harness's per-case limit


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_header_is_refused_fast_in_bounded_memory(
    seeds: dict[str, bytes], case: str, tmp_path: Path
) -> None:
    """In process, so that what the reader allocates is measured (tracemalloc peak) with the
    time it takes; the hostile counts (2^40 bytes, 2^64-1 strings) would otherwise cost
    terabytes or hours."""
    path = tmp_path / "hostile.gguf"
    path.write_bytes(hostile(seeds, case))
    message = CASES[case][2]
    tracemalloc.start()
    start = time.perf_counter()
    try:
        if message is None:
            account_file(path)
        else:
            with pytest.raises(ApplianceError, match=f"^{re.escape(str(path))}: .*{re.escape(message)}"):
                account_file(path)
    finally:
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < MEMORY_BOUND, f"{case}: peak {peak} bytes"
    assert elapsed < TIME_BOUND_S, f"{case}: {elapsed:.2f} s"
