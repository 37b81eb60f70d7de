"""Route traces with hostile headers are refused in one line by every trace verb; what the
reader refuses, write_trace refuses too; a valid trace without rows replays in text mode."""

import json
import re
from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.trace.format import MAX_HEADER_BYTES, encode_trace_bytes, row_dtype, write_trace
from appliance.trace.synth import TraceSynthSpec, synth_trace
from tests.conftest import run_cli


def _valid_header() -> dict[str, object]:
    return dict(synth_trace(TraceSynthSpec(n_layers=2, n_experts=8, k=2, n_prompt=0, n_decode=4)).header)


def _with(**fields: object) -> bytes:
    header = _valid_header()
    header.update(fields)
    return encode_trace_bytes(json.dumps(header).encode())


CASES = {
    "header nested 100k deep": (
        encode_trace_bytes(
            json.dumps(_valid_header()).encode()[:-1] + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        ),
        "nests deeper than 64 levels",
    ),
    "an integer of 5000 digits": (
        encode_trace_bytes(json.dumps(_valid_header()).encode()[:-1] + b', "x": ' + b"7" * 5000 + b"}"),
        "trace header: line 1: a number with more than 100 digits; the file is corrupt",
    ),
    "n_expert_used 2^40": (
        _with(n_expert_used=1 << 40, n_experts=1 << 41),
        "header n_experts=2199023255552 is outside 1..4096",
    ),
    "moe_layers with 10^20": (
        _with(moe_layers=[0, 10**20]),
        "moe_layers must be ascending block indices below n_layers=2",
    ),
    "n_experts 2^62": (_with(n_experts=1 << 62), "n_experts=4611686018427387904 is outside"),
    "n_layers 2^40": (_with(n_layers=1 << 40), "n_layers=1099511627776 is outside 1..4096"),
    "4096 layers of 4096 experts": (
        _with(n_layers=4096, moe_layers=list(range(4096)), n_experts=4096),
        "is over the 1048576 experts a replay can track",
    ),
    "model_bytes a string": (
        _with(model_bytes="many"),
        "trace header /model_bytes: expected integer, got string; the file is corrupt",
    ),
    "n_predict -5": (_with(n_predict=-5), "trace header /n_predict: must be at least 0 (got -5)"),
    "n_layers a float": (_with(n_layers=2.0), "trace header /n_layers: expected integer, got number"),
    "engine.backend a number": (_with(engine={"backend": 7}), "/engine/backend: expected string or null"),
    "Infinity in the header": (
        encode_trace_bytes(json.dumps(_valid_header()).encode()[:-1] + b', "x": Infinity}'),
        "trace header: line 1: Infinity is not a JSON number; the file is corrupt",
    ),
    "a lone surrogate in the header": (
        encode_trace_bytes(json.dumps(_valid_header()).encode().replace(b'"synthetic"', b'"syn\\udc80"', 1)),
        "trace header: line 1: a lone surrogate (a \\u escape) is not Unicode text",
    ),
    "a duplicate key in the header": (
        encode_trace_bytes(json.dumps(_valid_header()).encode()[:-1] + b', "n_layers": 2}'),
        "trace header: line 1: duplicate key 'n_layers'",
    ),
    "header length over the limit": (
        encode_trace_bytes(bytes(MAX_HEADER_BYTES + 8), bytes(16), trailer=bytes(8)),
        f"header length {MAX_HEADER_BYTES + 8} is over",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("verb", ["info", "replay", "curves"])
def test_hostile_trace_is_one_line(case: str, verb: str, tmp_path: Path) -> None:
    data, message = CASES[case]
    path = tmp_path / "hostile.moetrace"
    path.write_bytes(data)
    args = {"info": [], "replay": ["--capacity", "4"], "curves": ["--out", str(tmp_path / "curves")]}[verb]
    result = run_cli("trace", verb, str(path), *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"error: {path}: ") and result.stderr.count("\n") == 1
    assert message in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostile.moetrace"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"n_experts": 1 << 62}, "header n_experts=4611686018427387904 is outside 1..4096"),
        ({"n_expert_used": 1 << 40, "n_experts": 1 << 41}, "header n_experts=2199023255552 is outside"),
        ({"n_layers": 1 << 40}, "header n_layers=1099511627776 is outside 1..4096"),
        ({"moe_layers": [0, 10**20]}, "header moe_layers must be ascending block indices below"),
        ({"note": "x" * (MAX_HEADER_BYTES + 1)}, f"the header is over {MAX_HEADER_BYTES} bytes"),
        ({"model_bytes": "many"}, "trace header /model_bytes: expected integer, got string"),
        ({"n_predict": -5}, "trace header /n_predict: must be at least 0 (got -5)"),
        (
            {"arch": "syn\udc80"},
            "trace header holds a number that is not finite or a string that is not Unicode text",
        ),
        (
            {"x": float("nan")},
            "trace header holds a number that is not finite or a string that is not Unicode text",
        ),
        (
            {"x": float("inf")},
            "trace header holds a number that is not finite or a string that is not Unicode text",
        ),
    ],
)
def test_write_trace_refuses_what_the_reader_would(
    fields: dict[str, object], message: str, tmp_path: Path
) -> None:
    header = _valid_header()
    header.update(fields)
    import numpy as np

    with pytest.raises(ConfigError, match=re.escape(message)):
        write_trace(tmp_path / "t.moetrace", header, np.zeros(0, row_dtype(2, False)))
    assert list(tmp_path.iterdir()) == []


def test_replay_text_mode_on_a_trace_without_rows(tmp_path: Path) -> None:
    import numpy as np

    path = write_trace(tmp_path / "empty.moetrace", _valid_header(), np.zeros(0, dtype=row_dtype(2, False)))
    result = run_cli("trace", "replay", str(path), "--capacity", "2,4", "--policy", "lru,belady")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "0 requests in 0 events, scope per-layer, admission during-event"
    assert [line.split() for line in lines[2:]] == [
        ["lru", "2", "0", "0", "-", "-", "-"],
        ["lru", "4", "0", "0", "-", "-", "-"],
        ["belady", "2", "0", "0", "-", "-", "-"],
        ["belady", "4", "0", "0", "-", "-", "-"],
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--skew", "nan"], "Invalid value for '--skew': 'nan' is not a finite number"),
        (["--skew", "-1"], "Invalid value for '--skew': -1.0 is not in the range x>=0"),
        (["--seed", "-1"], "Invalid value for '--seed': -1 is not in the range 0<=x<=4294967295"),
        (["--correlation", "nan"], "'nan' is not a finite number"),
        (["--experts", "0"], "Invalid value for '--experts': 0 is not in the range 1<=x"),
    ],
)
def test_trace_synth_refuses_out_of_range_options(args: list[str], message: str, tmp_path: Path) -> None:
    out = tmp_path / "t.moetrace"
    result = run_cli("trace", "synth", str(out), *args, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert message in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("capacity", ["0", "-3", str(10**30)])
def test_replay_capacity_out_of_range_is_one_line(capacity: str, tmp_path: Path) -> None:
    import numpy as np

    path = write_trace(tmp_path / "empty.moetrace", _valid_header(), np.zeros(0, dtype=row_dtype(2, False)))
    result = run_cli("trace", "replay", str(path), "--capacity", capacity)
    assert result.returncode == 2
    assert "capacity must be from 1 to 2147483648 experts" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("verb", ["info", "replay"])
def test_a_fifo_is_refused_without_blocking(verb: str, tmp_path: Path) -> None:
    import os
    import time

    path = tmp_path / "pipe.moetrace"
    os.mkfifo(path)
    args = {"info": [], "replay": ["--capacity", "4"]}[verb]
    start = time.monotonic()
    result = run_cli("trace", verb, str(path), *args, timeout=60)
    assert time.monotonic() - start < 30  # opening the FIFO for reading would wait for a writer forever
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == f"error: {path}: is not a regular file (a device, pipe or socket)\n"
