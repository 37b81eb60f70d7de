"""Route trace format v1: round trip, zero-copy reading, refusal of damaged files."""

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from appliance.core.errors import ConfigError
from appliance.trace.format import (
    MAGIC,
    TRAILER_MAGIC,
    parse_trace,
    read_trace,
    row_dtype,
    write_trace,
)


def sample_header(k: int = 2, has_weights: bool = False) -> dict:
    return {
        "format": "moetrace",
        "version": 1,
        "arch": "qwen3moe",
        "model_file": "tiny.gguf",
        "model_bytes": 1234,
        "model_sha256": None,
        "n_layers": 3,
        "moe_layers": [0, 2],
        "n_experts": 8,
        "n_expert_used": k,
        "has_weights": has_weights,
        "engine": {"tool": "test", "llama_build": "0", "backend": "cpu"},
        "n_prompt_tokens": 2,
        "n_predict": 1,
        "n_ubatch": 2,
    }


def sample_rows(k: int = 2, has_weights: bool = False) -> np.ndarray:
    # step 0: prompt of 2 tokens, step 1: one decode token; layers 0 and 2.
    spec = [
        (0, 0, 0, 0, [1, 2]),
        (0, 0, 0, 1, [2, 3]),
        (0, 2, 0, 0, [4, 5]),
        (0, 2, 0, 1, [5, 6]),
        (1, 0, 1, 2, [7, 1]),
        (1, 2, 1, 2, [0, 4]),
    ]
    rows = np.zeros(len(spec), dtype=row_dtype(k, has_weights))
    for i, (step, layer, kind, pos, ids) in enumerate(spec):
        rows[i]["step"], rows[i]["layer"], rows[i]["kind"], rows[i]["pos"] = step, layer, kind, pos
        rows[i]["ids"] = ids
        if has_weights:
            rows[i]["weights"] = [0.75, 0.25]
    return rows


def test_row_size_matches_spec() -> None:
    assert row_dtype(8, False).itemsize == 12 + 4 * 8
    assert row_dtype(8, True).itemsize == 12 + 8 * 8


@pytest.mark.parametrize("has_weights", [False, True])
def test_round_trip(tmp_path: Path, has_weights: bool) -> None:
    path = tmp_path / "t.moetrace"
    rows = sample_rows(has_weights=has_weights)
    write_trace(path, sample_header(has_weights=has_weights), rows)
    trace = read_trace(path)
    assert trace.header["arch"] == "qwen3moe"
    assert trace.k == 2 and trace.has_weights is has_weights
    assert trace.rows.tobytes() == rows.tobytes()
    assert trace.n_steps == 2
    assert trace.tokens_per_step().tolist() == [2, 1]
    data = path.read_bytes()
    assert data[:8] == MAGIC and data[-16:-8] == TRAILER_MAGIC
    assert struct.unpack("<Q", data[-8:])[0] == 6
    header_len = struct.unpack_from("<I", data, 12)[0]
    assert (16 + header_len) % 8 == 0
    assert len(data) == 16 + header_len + 6 * rows.dtype.itemsize + 16
    assert not list(tmp_path.glob(".*.tmp"))


def test_rows_share_memory_with_mapping(tmp_path: Path) -> None:
    path = tmp_path / "t.moetrace"
    write_trace(path, sample_header(), sample_rows())
    trace = read_trace(path)
    assert not trace.rows.flags.owndata
    assert not trace.rows.flags.writeable
    base = trace.rows.base
    while base is not None and not isinstance(base, __import__("mmap").mmap):
        base = getattr(base, "base", None) or getattr(base, "obj", None)
    assert base is not None, "rows must view the file mapping, not a copy"


def test_every_truncation_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.moetrace"
    write_trace(path, sample_header(), sample_rows())
    data = path.read_bytes()
    for cut in range(len(data)):
        with pytest.raises(ConfigError, match=r"^cut: "):
            parse_trace(data[:cut], where="cut")
        broken = tmp_path / "cut.moetrace"
        if cut % 17 == 0:  # through the file path too, a sample of cuts
            broken.write_bytes(data[:cut])
            with pytest.raises(ConfigError, match=f"^{broken}: ") as info:
                read_trace(broken)
            assert "\n" not in str(info.value)


def test_wrong_magic_and_version(tmp_path: Path) -> None:
    path = tmp_path / "t.moetrace"
    write_trace(path, sample_header(), sample_rows())
    data = bytearray(path.read_bytes())
    bad_magic = b"NOTTRACE" + bytes(data[8:])
    with pytest.raises(ConfigError, match="not a route trace"):
        parse_trace(bad_magic)
    bad_version = bytes(data[:8]) + struct.pack("<I", 2) + bytes(data[12:])
    with pytest.raises(ConfigError, match="version 2"):
        parse_trace(bad_version)


def test_corrupt_contents_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.moetrace"
    write_trace(path, sample_header(), sample_rows())
    data = bytearray(path.read_bytes())
    header_len = struct.unpack_from("<I", data, 12)[0]
    garbled = bytearray(data)
    garbled[16] = ord("[")
    with pytest.raises(ConfigError, match="header"):
        parse_trace(bytes(garbled))
    bad_id = bytearray(data)
    struct.pack_into("<i", bad_id, 16 + header_len + 12, 99)
    with pytest.raises(ConfigError, match="expert id"):
        parse_trace(bytes(bad_id))
    bad_count = bytearray(data)
    struct.pack_into("<Q", bad_count, len(data) - 8, 7)
    with pytest.raises(ConfigError, match="truncated or corrupt"):
        parse_trace(bytes(bad_count))


def test_header_keys_checked(tmp_path: Path) -> None:
    header = sample_header()
    del header["n_experts"]
    with pytest.raises(ConfigError, match="n_experts"):
        write_trace(tmp_path / "x.moetrace", header, sample_rows())
    header = sample_header()
    header["moe_layers"] = [2, 0]
    with pytest.raises(ConfigError, match="moe_layers"):
        write_trace(tmp_path / "x.moetrace", header, sample_rows())
    assert not (tmp_path / "x.moetrace").exists()


def test_unknown_header_keys_ignored(tmp_path: Path) -> None:
    header = sample_header() | {"seed": 7, "prompt_sha256": "ab"}
    path = write_trace(tmp_path / "t.moetrace", header, sample_rows())
    assert read_trace(path).header["seed"] == 7
    assert json.loads(json.dumps(read_trace(path).header))["prompt_sha256"] == "ab"


def test_missing_file_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read trace"):
        read_trace(tmp_path / "absent.moetrace")
