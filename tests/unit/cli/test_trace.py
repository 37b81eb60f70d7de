"""`appliance trace` as a user runs it: synth, info, replay, curves, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from appliance.trace.format import read_trace, write_trace
from tests.conftest import run_cli

SYNTH = [
    "--layers",
    "3",
    "--experts",
    "16",
    "--k",
    "2",
    "--prompt",
    "12",
    "--ubatch",
    "6",
    "--decode",
    "40",
    "--seed",
    "4",
]


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "s.moetrace"
    run_cli("trace", "synth", str(path), *SYNTH, check=True)
    return path


def write_gguf(path: Path, arch: str, n_layers: int, n_experts: int, k: int, moe_layers: list[int]) -> Path:
    """A tiny GGUF whose expert tensors give each layer a known expert size."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(n_layers)
    writer.add_expert_count(n_experts)
    writer.add_expert_used_count(k)
    for layer in moe_layers:
        for part, rows in (("gate", 4), ("up", 4), ("down", 8)):
            # numpy shape (experts, rows, 8) -> GGUF ne [8, rows, experts]; f32
            data = np.zeros((n_experts, rows, 8), dtype=np.float32)
            writer.add_tensor(f"blk.{layer}.ffn_{part}_exps.weight", data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_synth_is_deterministic(tmp_path: Path, trace_path: Path) -> None:
    again = tmp_path / "again.moetrace"
    run_cli("trace", "synth", str(again), *SYNTH, check=True)
    assert again.read_bytes() == trace_path.read_bytes()
    other = tmp_path / "other.moetrace"
    run_cli("trace", "synth", str(other), *SYNTH[:-1], "5", check=True)
    assert other.read_bytes() != trace_path.read_bytes()


def test_replay_json_is_byte_identical(trace_path: Path) -> None:
    args = (
        "trace",
        "replay",
        str(trace_path),
        "--capacity",
        "2,5,9",
        "--scope",
        "global",
        "--expert-bytes",
        "1000",
        "--json",
    )
    first = run_cli(*args, check=True).stdout
    assert run_cli(*args, check=True).stdout == first
    report = json.loads(first)
    assert len(report["results"]) == 7 * 3
    for result in report["results"]:
        total = result["total"]
        assert total["hits"] + total["misses"] == report["requests"]
        assert total["bytes_moved"] == total["misses"] * 1000
        assert sum(layer["misses"] for layer in result["layers"]) == total["misses"]
    belady = {r["capacity"]: r["total"]["misses"] for r in report["results"] if r["policy"] == "belady"}
    assert all(r["total"]["misses"] >= belady[r["capacity"]] for r in report["results"])


def test_expert_bytes_auto_from_gguf(tmp_path: Path, trace_path: Path) -> None:
    trace = read_trace(trace_path)
    model = write_gguf(tmp_path / "m.gguf", "qwen3moe", 3, 16, 2, [0, 1, 2])
    header = dict(trace.header) | {
        "arch": "qwen3moe",
        "model_file": "m.gguf",
        "model_bytes": model.stat().st_size,
    }
    matched = write_trace(tmp_path / "m.moetrace", header, np.array(trace.rows))
    report = json.loads(
        run_cli(
            "trace",
            "replay",
            str(matched),
            "--capacity",
            "4",
            "--policy",
            "lru",
            "--model",
            str(model),
            "--json",
            check=True,
        ).stdout
    )
    per_expert = (4 + 4 + 8) * 8 * 4  # rows x 8 floats x 4 bytes, three tensors
    assert report["expert_bytes"] == {"0": per_expert, "1": per_expert, "2": per_expert}
    total = report["results"][0]["total"]
    assert total["bytes_moved"] == total["misses"] * per_expert

    wrong = write_gguf(tmp_path / "w.gguf", "qwen3moe", 3, 32, 2, [0, 1, 2])
    result = run_cli("trace", "replay", str(matched), "--capacity", "4", "--model", str(wrong))
    assert result.returncode == 2
    assert "expert count is 32 in the GGUF but 16 in the trace header" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_bad_inputs_are_one_line_errors(tmp_path: Path, trace_path: Path) -> None:
    data = trace_path.read_bytes()
    cases = {}
    (tmp_path / "cut.moetrace").write_bytes(data[:-5])
    cases["cut.moetrace"] = "truncated"
    (tmp_path / "magic.moetrace").write_bytes(b"XXXXXXXX" + data[8:])
    cases["magic.moetrace"] = "not a route trace"
    (tmp_path / "ver.moetrace").write_bytes(data[:8] + (9).to_bytes(4, "little") + data[12:])
    cases["ver.moetrace"] = "version 9"
    for name, needle in cases.items():
        result = run_cli("trace", "replay", str(tmp_path / name), "--capacity", "4")
        assert result.returncode == 2, name
        assert needle in result.stderr and result.stderr.startswith("error: ")
        assert len(result.stderr.strip().splitlines()) == 1
    low = run_cli("trace", "replay", str(trace_path), "--capacity", "1")
    assert low.returncode == 2
    assert "capacity 1 is below the 2 experts each token needs" in low.stderr
    bad_policy = run_cli("trace", "replay", str(trace_path), "--capacity", "4", "--policy", "mru")
    assert bad_policy.returncode == 2 and "unknown policy 'mru'" in bad_policy.stderr
    no_model = run_cli("trace", "replay", str(trace_path), "--capacity", "4", "--expert-bytes", "auto")
    assert no_model.returncode == 2 and "--model" in no_model.stderr
