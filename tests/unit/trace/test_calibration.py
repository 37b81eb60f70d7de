"""The range of real routing (`appliance.trace.calibration`): computed from the three vendored
traces, and which statistics of a trace fall outside it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from appliance.trace.calibration import (
    PER_LAYER_REUSE,
    TINY_OUTSIDE,
    decode_window,
    first_decode_tokens,
    layer_slice,
    layer_slices,
    outside,
    outside_names,
    real_range,
    real_traces,
    statistics,
    window_starts,
)
from appliance.trace.format import KIND_DECODE, Trace, write_trace
from appliance.trace.locality import locality
from appliance.trace.synth import TraceSynthSpec, synth_trace
from tests.conftest import run_cli
from tests.unit.trace.test_locality import TABLE, hand_trace
from tests.unit.trace.test_route_import import FIXTURES, cli_import


@pytest.fixture(scope="module")
def ranges() -> dict[str, tuple[float, float]]:
    return real_range()


def test_the_range_spans_issue_34s_table(ranges: dict[str, tuple[float, float]]) -> None:
    assert sorted(name for name, _ in real_traces()) == sorted(TABLE)
    touched, hottest, reuse = zip(*TABLE.values(), strict=True)
    low, high = ranges["pairs touched"]
    assert (round(100 * low, 1), round(100 * high, 1)) == (min(touched), max(touched))
    low, high = ranges["hottest / uniform"]
    assert (round(low, 1), round(high, 1)) == (min(hottest), max(hottest))
    low, high = ranges["next-token reuse"]
    assert (round(100 * low, 1), round(100 * high, 1)) == (min(reuse), max(reuse))
    # per layer: every layer of every trace (Qwen3-30B's layer 0 keeps 6.7%, its layer 30 67.1%)
    low, high = ranges[PER_LAYER_REUSE]
    assert low < 0.067 and round(high, 3) == 0.671
    assert len(ranges) == 19  # 4 + 9 distance buckets + 2 policies x 3 capacities
    assert set(ranges) >= TINY_OUTSIDE


def test_each_real_trace_lies_inside_the_range(ranges: dict[str, tuple[float, float]]) -> None:
    for _, trace in real_traces():
        assert outside(locality(trace), ranges) == []


def test_a_value_outside_is_one_line_naming_the_statistic() -> None:
    loc = locality(hand_trace())
    stats = statistics(loc)
    assert stats[PER_LAYER_REUSE] == [0.75, 0.0] and stats["pairs touched"] == [0.875]
    ranges = {name: (0.0, 1.0) for name in stats} | {"pairs touched": (0.2, 0.5), PER_LAYER_REUSE: (0.1, 0.8)}
    ranges["hottest / uniform"] = (1.0, 3.0)
    assert outside(loc, ranges) == [
        "pairs touched: 0.875 outside the real range 0.2 .. 0.5",
        "next-token reuse per layer: 0 outside the real range 0.1 .. 0.8",
    ]


def test_cli_prints_each_statistic_beside_the_range(tmp_path: Path) -> None:
    real = tmp_path / "qwen.moetrace"
    code, text = cli_import(FIXTURES / "qwen3-30b-a3b-q4_k_m.route.csv", real)
    assert code == 0, text
    inside = run_cli("trace", "calibration", str(real))
    assert inside.returncode == 0, inside.stderr
    lines = inside.stdout.splitlines()
    assert lines[0].split() == ["statistic", "this", "trace", "real", "range"]
    assert lines[1].split() == ["pairs", "touched", "49.8%", "28.0%", "..", "52.3%"]
    assert lines[2].split() == ["hottest", "/", "uniform", "20.8", "20.2", "..", "53.0"]
    assert lines[-1] == "all 19 statistics inside the real range"

    hand = tmp_path / "hand.moetrace"
    trace = hand_trace()
    write_trace(hand, trace.header, trace.rows)
    refused = run_cli("trace", "calibration", str(hand))
    assert refused.returncode == 1
    assert refused.stderr == "error: 16 of 19 statistics of hand.moetrace outside the real range\n"
    assert "pairs touched                         87.5%  28.0% .. 52.3%  OUTSIDE" in refused.stdout


def test_without_the_real_traces_the_range_is_one_line(tmp_path: Path) -> None:
    result = run_cli("trace", "calibration", str(tmp_path / "x"), env={"APPLIANCE_ROOT": str(tmp_path)})
    assert result.returncode == 2
    assert result.stderr == (
        f"error: {tmp_path}/tests/fixtures/real-routes/qwen3-30b-a3b-q4_k_m.route.csv: no such file; "
        "the real range needs the repository's real traces (run from a checkout, or set "
        "APPLIANCE_ROOT to one)\n"
    )


def test_the_range_at_a_length_cuts_each_real_trace_to_its_first_decode_tokens(
    ranges: dict[str, tuple[float, float]],
) -> None:
    _, qwen = next((name, t) for name, t in real_traces() if name.startswith("qwen3-30b"))
    cut = first_decode_tokens(qwen, 5)
    decode = qwen.rows[qwen.rows["kind"] == KIND_DECODE]
    assert len(np.unique(cut.steps)) == 5 and set(cut.rows["kind"]) == {KIND_DECODE}
    assert cut.rows.tobytes() == decode[: len(cut.rows)].tobytes()  # the first ones, in order
    assert len(first_decode_tokens(qwen, 10**6).rows) == len(decode)  # shorter: whole

    at_64 = real_range(decode_tokens=64)
    assert ranges["reuse distance >64"][1] > 0 and at_64["reuse distance >64"] == (0.0, 0.0)
    assert at_64["pairs touched"][1] < ranges["pairs touched"][1]  # fewer tokens touch fewer pairs
    assert real_range(decode_tokens=10**6) == ranges


def test_cli_same_length_shows_the_cut_range_beside_the_whole(tmp_path: Path) -> None:
    real = tmp_path / "qwen.moetrace"
    assert cli_import(FIXTURES / "qwen3-30b-a3b-q4_k_m.route.csv", real)[0] == 0
    shown = run_cli("trace", "calibration", str(real), "--same-length")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split()[-6:] == ["first", "128", "decode", "tokens", "of", "each"]
    # 128 decode tokens is every real trace's whole length: the same range twice
    assert lines[1].split() == ["pairs", "touched", "49.8%", "28.0%", "..", "52.3%", "28.0%", "..", "52.3%"]
    assert lines[-2] == "19 of 19 inside the range of the first 128 decode tokens of each"
    assert lines[-1] == "all 19 statistics inside the real range"

    hand = tmp_path / "hand.moetrace"
    trace = hand_trace()
    write_trace(hand, trace.header, trace.rows)
    result = run_cli("trace", "calibration", str(hand), "--same-length", "--json")
    assert result.returncode == 1
    out = json.loads(result.stdout)
    same = out["same_length"]
    assert same["decode_tokens"] == locality(trace)["decode_tokens"]
    assert same["ranges"]["reuse distance >64"] == [0.0, 0.0]
    assert len(out["outside"]) == 16 and all(line.split(":")[0] in same["ranges"] for line in same["outside"])


def qwen_trace() -> Trace:
    return next(t for name, t in real_traces() if name.startswith("qwen3-30b"))


def test_a_layer_slice_keeps_the_rows_of_its_layers_only() -> None:
    qwen = qwen_trace()
    piece = layer_slice(qwen, [7, 4, 5, 6])
    assert piece.moe_layers == [4, 5, 6, 7]
    assert piece.rows.tobytes() == qwen.rows[np.isin(qwen.rows["layer"], [4, 5, 6, 7])].tobytes()
    assert locality(piece)["pairs"] == 4 * 128
    drawn = layer_slices(qwen, 4, 3, np.random.default_rng(0))
    assert [len(p.moe_layers) for p in drawn] == [4, 4, 4] and len({tuple(p.moe_layers) for p in drawn}) == 3
    assert layer_slices(qwen, 48, 3, np.random.default_rng(0)) == [qwen]  # no fewer layers: whole


def test_the_range_of_slices_is_like_for_like_for_a_model_of_few_layers(
    ranges: dict[str, tuple[float, float]],
) -> None:
    # as many layers as the real traces have: one slice each, the whole range exactly
    assert real_range(layers=48) == ranges
    four = real_range(decode_tokens=64, layers=4)
    assert real_range(decode_tokens=64, layers=4) == four  # a seeded draw: the same every time
    whole_64 = real_range(decode_tokens=64)
    for name in ("reuse distance 3-4", "next-token reuse", "lru hits at 10%"):  # few layers spread more
        assert four[name][0] < whole_64[name][0] and four[name][1] > whole_64[name][1], name
    # a real model's own 4-layer slices (drawn afresh) lie inside on every statistic far more
    # often than in the whole range, where none does (measured: 23, 36 and 25 of 50)
    four_128 = real_range(layers=4)
    for _, trace in real_traces():
        fresh = [locality(p) for p in layer_slices(trace, 4, 20, np.random.default_rng(99))]
        assert sum(not outside(loc, ranges) for loc in fresh) == 0
        assert sum(not outside(loc, four_128) for loc in fresh) >= 5
    # it still tells routing unlike a real model's: next-token reuse of 88% (the old demo's)
    sticky = synth_trace(
        TraceSynthSpec(n_layers=4, n_experts=128, k=4, n_prompt=5, n_decode=64, correlation=0.9)
    )
    missed = {line.split(":")[0] for line in outside(locality(sticky), four)}
    assert {"next-token reuse", "reuse distance 1", "lru hits at 10%"} <= missed


def test_cli_same_shape_decides_by_the_slices_of_the_traces_layer_count(tmp_path: Path) -> None:
    piece = layer_slice(qwen_trace(), [4, 5, 6, 7])  # outside the whole range on 12 statistics
    path = tmp_path / "qwen-4-7.moetrace"
    write_trace(path, piece.header, piece.rows)
    whole = run_cli("trace", "calibration", str(path))
    assert whole.returncode == 1
    assert whole.stderr == "error: 12 of 19 statistics of qwen-4-7.moetrace outside the real range\n"
    shape = run_cli("trace", "calibration", str(path), "--same-shape")
    assert shape.returncode == 0, shape.stderr
    lines = shape.stdout.splitlines()
    assert lines[0].split()[-6:] == ["real", "4-layer", "slices,", "128", "decode", "tokens"]
    assert lines[2].split() == [
        "hottest",
        "/",
        "uniform",
        "18.5",
        "20.2",
        "..",
        "53.0",
        "OUTSIDE",
        "14.5",
        "..",
        "37.0",
    ]
    assert lines[-2] == "19 of 19 inside the range of the real 4-layer slices, 128 decode tokens"
    assert lines[-1] == "all 19 statistics inside the range of the real 4-layer slices, 128 decode tokens"

    as_json = run_cli("trace", "calibration", str(path), "--same-shape", "--json")
    assert as_json.returncode == 0, as_json.stderr
    out = json.loads(as_json.stdout)
    assert out["gate"] == "same_shape" and len(out["outside"]) == 12
    same = out["same_shape"]
    assert (same["layers"], same["decode_tokens"], same["outside"]) == (4, 128, [])
    assert same["ranges"] == {name: list(b) for name, b in real_range(decode_tokens=128, layers=4).items()}

    hand = tmp_path / "hand.moetrace"  # 2 layers: outside their range too, and then exit 1
    trace = hand_trace()
    write_trace(hand, trace.header, trace.rows)
    refused = run_cli("trace", "calibration", str(hand), "--same-shape")
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: ") and refused.stderr.endswith(
        "statistics of hand.moetrace outside the range of the real 2-layer slices, 3 decode tokens\n"
    )


@pytest.mark.parametrize("flags", [(), ("--same-length",), ("--same-shape",), ("--every-window",)])
def test_a_trace_without_decode_tokens_is_one_line(tmp_path: Path, flags: tuple[str, ...]) -> None:
    trace = hand_trace()
    prompt_only = tmp_path / "prompt.moetrace"
    write_trace(prompt_only, trace.header, trace.rows[trace.rows["kind"] != KIND_DECODE])
    result = run_cli("trace", "calibration", str(prompt_only), *flags)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: {prompt_only}: no decode tokens; the statistics are of decode routing: "
        "trace a run that decodes (-n 1 or more)\n"
    )


def test_windows_of_decode_tokens_start_every_half_window_and_end_with_the_trace() -> None:
    qwen = qwen_trace()  # 128 decode tokens
    gpt_oss = next(t for name, t in real_traces() if name.startswith("gpt-oss"))  # 64
    assert window_starts(qwen, 64) == [0, 32, 64]
    assert window_starts(qwen, 48) == [0, 24, 48, 72, 80]  # the last ends at the trace's end
    assert window_starts(qwen, 128) == window_starts(qwen, 10**6) == window_starts(gpt_oss, 64) == [0]
    decode = qwen.rows[qwen.rows["kind"] == KIND_DECODE]
    steps = np.unique(decode["step"])
    piece = decode_window(qwen, 32, 5)
    assert piece.rows.tobytes() == decode[np.isin(decode["step"], steps[32:37])].tobytes()
    assert decode_window(qwen, 0, 7).rows.tobytes() == first_decode_tokens(qwen, 7).rows.tobytes()


def test_a_real_models_later_windows_fall_outside_the_range_of_the_first_ones() -> None:
    first = real_range(decode_tokens=64)
    every = real_range(decode_tokens=64, every_window=True)
    later = {
        (name.split("-q4")[0], start): outside_names(locality(decode_window(trace, start, 64)), first)
        for name, trace in real_traces()
        for start in window_starts(trace, 64)[1:]
    }
    # measured: the real models' own decode tokens 32-95 and 64-127 against the three first 64s
    assert {key: len(names) for key, names in later.items()} == {
        ("qwen3-30b-a3b", 32): 8,
        ("qwen3-30b-a3b", 64): 4,
        ("gemma-4-26b-a4b", 32): 4,
        ("gemma-4-26b-a4b", 64): 3,
    }
    assert "reuse distance 3-4" in later[("qwen3-30b-a3b", 32)]
    for name, (low, high) in first.items():  # every window: never narrower
        assert every[name][0] <= low and every[name][1] >= high, name
    assert every["reuse distance 3-4"][1] - every["reuse distance 3-4"][0] > 3 * (
        first["reuse distance 3-4"][1] - first["reuse distance 3-4"][0]
    )
    for _, trace in real_traces():  # and each of them inside its range
        for start in window_starts(trace, 64):
            assert not outside(locality(decode_window(trace, start, 64)), every)
    assert real_range(decode_tokens=128, every_window=True) == real_range(decode_tokens=128)  # one each


def test_cli_every_window_shows_the_windows_range_and_with_same_shape_decides_by_it(tmp_path: Path) -> None:
    qwen = qwen_trace()
    later = tmp_path / "qwen-32-95.moetrace"
    piece = decode_window(qwen, 32, 64)
    write_trace(later, piece.header, piece.rows)
    first = run_cli("trace", "calibration", str(later), "--same-shape", "--json")
    assert first.returncode == 1
    assert len(json.loads(first.stdout)["same_shape"]["outside"]) == 8
    shown = run_cli("trace", "calibration", str(later), "--same-length", "--every-window")
    lines = shown.stdout.splitlines()
    assert lines[0].split()[-5:] == ["64-token", "decode", "windows", "of", "each"]
    row = next(line for line in lines if line.startswith("reuse distance 3-4"))
    assert row.split()[-7:] == ["12.4%", "..", "13.4%", "OUTSIDE", "11.3%", "..", "14.5%"]
    assert lines[-2] == "11 of 19 inside the range of the first 64 decode tokens of each"
    assert lines[-1] == "19 of 19 inside the range of the 64-token decode windows of each"
    assert shown.returncode == 1  # the whole range decides without --same-shape
    gate = run_cli("trace", "calibration", str(later), "--same-shape", "--every-window", "--json")
    assert gate.returncode == 0, gate.stderr
    out = json.loads(gate.stdout)
    assert out["gate"] == "same_shape" and out["same_shape"]["every_window"] is True
    assert out["same_shape"]["outside"] == out["every_window"]["outside"] == []
    assert out["every_window"]["ranges"] == {
        name: list(b) for name, b in real_range(decode_tokens=64, every_window=True).items()
    }
