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
    encode_header,
    encode_trace_bytes,
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


@pytest.mark.parametrize(("has_weights", "n_rows"), [(False, 6), (True, 6), (False, 0)])
def test_encoder_defaults_are_the_bytes_write_trace_writes(
    tmp_path: Path, has_weights: bool, n_rows: int
) -> None:
    header, rows = sample_header(has_weights=has_weights), sample_rows(has_weights=has_weights)[:n_rows]
    path = write_trace(tmp_path / "t.moetrace", header, rows)
    assert encode_trace_bytes(header, rows) == path.read_bytes()
    text = encode_header(header)
    assert encode_trace_bytes(text, rows.tobytes(), row_count=n_rows) == path.read_bytes()


def test_encoder_unpadded_text_and_missing_trailer_are_what_was_asked() -> None:
    text = b'{"a":1}'  # 7 bytes: padding would add one space
    assert encode_trace_bytes(text, pad=False) == MAGIC + struct.pack(
        "<II", 1, 7
    ) + text + TRAILER_MAGIC + bytes(8)
    assert encode_trace_bytes(text) == MAGIC + struct.pack("<II", 1, 8) + text + b" " + TRAILER_MAGIC + bytes(
        8
    )
    assert encode_trace_bytes(text, b"xyz", trailer=None) == MAGIC + struct.pack("<II", 1, 8) + text + b" xyz"


def _broken(**layout: object) -> bytes:
    return encode_trace_bytes(sample_header(), **layout)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            _broken(rows=sample_rows(), magic=b"NOTTRACE"),
            r"^t: not a route trace \(magic b'NOTTRACE', expected b'MOETRACE'\)$",
        ),
        (
            _broken(rows=sample_rows(), version=2),
            "^t: trace format version 2, but this reader understands version 1",
        ),
        (
            _broken(rows=sample_rows(), header_len=len(encode_header(sample_header())) - 1),
            "^t: header length .* does not fit the file",
        ),
        (
            _broken(rows=sample_rows().tobytes()[:-4], row_count=6),
            "^t: trailer says 6 rows of 20 bytes but the file holds 116 bytes of rows",
        ),
        (_broken(rows=sample_rows(), trailer=None), "^t: trailer missing; the trace is truncated"),
        (_broken(rows=sample_rows(), trailer=b"MOETEND!"), "^t: trailer missing; the trace is truncated"),
        (
            _broken(rows=sample_rows(), row_count=7),
            "^t: trailer says 7 rows of 20 bytes but the file holds 120 bytes of rows",
        ),
        (
            encode_trace_bytes(encode_header(sample_header()).rstrip(), pad=False),
            "^t: header length .* does not fit the file",
        ),
    ],
)
def test_broken_layouts_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_trace(data, where="t")


def test_wrong_magic_and_version() -> None:
    with pytest.raises(ConfigError, match="not a route trace"):
        parse_trace(encode_trace_bytes(sample_header(), sample_rows(), magic=b"NOTTRACE"))
    with pytest.raises(ConfigError, match="version 2"):
        parse_trace(encode_trace_bytes(sample_header(), sample_rows(), version=2))


def test_corrupt_contents_refused() -> None:
    garbled = bytearray(encode_trace_bytes(sample_header(), sample_rows()))
    garbled[16] = ord("[")
    with pytest.raises(ConfigError, match="header"):
        parse_trace(bytes(garbled))
    bad_id = sample_rows()
    bad_id["ids"][0, 0] = 99
    with pytest.raises(ConfigError, match="expert id"):
        parse_trace(encode_trace_bytes(sample_header(), bad_id))
    with pytest.raises(ConfigError, match="truncated or corrupt"):
        parse_trace(encode_trace_bytes(sample_header(), sample_rows(), row_count=7))


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
