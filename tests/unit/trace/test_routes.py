"""Routes files (`appliance trace routes`): the exact bytes llama-moe-trace --routes-from reads."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import numpy as np
import pytest

from appliance.analysis.sweep_analysis import trace_equals_routes
from appliance.core.digests import sha256_bytes
from appliance.core.errors import ConfigError
from appliance.trace.format import KIND_DECODE, Trace, read_trace
from appliance.trace.routes import (
    ROUTES_MAGIC,
    follows_routes,
    last_layer_prompt_gap,
    read_routes,
    routes_bytes,
)
from appliance.trace.synth import TraceSynthSpec, synth_trace
from tests.conftest import run_cli

SPEC = TraceSynthSpec(n_layers=3, n_experts=16, k=2, n_prompt=7, n_ubatch=3, n_decode=5, seed=9)


def test_layout_is_header_layers_then_ids_by_position_layer_slot() -> None:
    trace = synth_trace(SPEC)
    data = routes_bytes(trace)
    n_tokens, n_moe, k = 12, 3, 2
    fixed = struct.calcsize("<8s7I")
    assert len(data) == fixed + 4 * n_moe + 4 * n_tokens * n_moe * k
    assert struct.unpack_from("<8s7I", data) == (ROUTES_MAGIC, 1, 3, 16, 2, 3, 7, 5)
    assert list(np.frombuffer(data, "<u4", n_moe, fixed)) == [0, 1, 2]
    ids = np.frombuffer(data, "<i4", offset=fixed + 4 * n_moe).reshape(n_tokens, n_moe, k)
    rows = trace.rows
    for index, layer in enumerate(trace.moe_layers):
        mine = rows[rows["layer"] == layer]
        assert np.array_equal(ids[mine["pos"], index], mine["ids"])  # position-major, per layer


def test_cli_writes_the_same_bytes_and_names_their_sha256(tmp_path: Path) -> None:
    source = tmp_path / "a.moetrace"
    run_cli("trace", "synth", str(source), "--layers", "3", "--experts", "16", "--k", "2", check=True)
    out = tmp_path / "a.routes"
    result = run_cli("trace", "routes", str(source), "--out", str(out), check=True)
    data = routes_bytes(read_trace(source))
    assert out.read_bytes() == data
    assert result.stdout.strip() == f"wrote {out}: {len(data)} bytes, sha256 {sha256_bytes(data)}"


def _with_rows(trace: Trace, rows: np.ndarray) -> Trace:
    return dataclasses.replace(trace, rows=rows)


def test_refuses_traces_that_do_not_route_one_sequence_at_every_layer() -> None:
    trace = synth_trace(SPEC)
    rows = trace.rows.copy()
    with pytest.raises(ConfigError, match="^t: the trace has no rows, so there are no routes to force$"):
        routes_bytes(_with_rows(trace, rows[:0]), "t")

    gap = rows[rows["pos"] != 4]
    with pytest.raises(
        ConfigError, match=r"^t: MoE layer 0 does not route token positions 0, 1, 2, \.\.\. once"
    ):
        routes_bytes(_with_rows(trace, gap), "t")

    short = rows[~((rows["layer"] == 2) & (rows["pos"] == 11))]
    with pytest.raises(
        ConfigError, match=r"^t: MoE layers route different numbers of tokens \(layer 0: 12, "
    ):
        routes_bytes(_with_rows(trace, short), "t")

    decode_first = rows.copy()
    decode_first["kind"][decode_first["pos"] == 0] = KIND_DECODE
    with pytest.raises(
        ConfigError, match="^t: route forcing needs the prompt's tokens first, and at least one$"
    ):
        routes_bytes(_with_rows(trace, decode_first), "t")

    twice = rows.copy()
    at = np.nonzero((twice["layer"] == 1) & (twice["pos"] == 3))[0][0]
    twice["ids"][at, 1] = twice["ids"][at, 0]
    with pytest.raises(
        ConfigError, match="^t: token 3 chose an expert twice at MoE layer 1; a router chooses"
    ):
        routes_bytes(_with_rows(trace, twice), "t")


def test_k_of_one_has_no_repeats_to_find() -> None:
    trace = synth_trace(dataclasses.replace(SPEC, k=1))
    assert len(routes_bytes(trace)) == struct.calcsize("<8s7I") + 4 * 3 + 4 * 12 * 3


def test_layers_keeps_the_first_layers_of_the_model_as_a_slice_would(tmp_path: Path) -> None:
    trace = synth_trace(SPEC)
    full, first2 = routes_bytes(trace), routes_bytes(trace, "t", layers=2)
    fixed, n_tokens, k = struct.calcsize("<8s7I"), 12, 2
    assert struct.unpack_from("<8s7I", first2) == (ROUTES_MAGIC, 1, 2, 16, 2, 2, 7, 5)
    assert list(np.frombuffer(first2, "<u4", 2, fixed)) == [0, 1]
    ids = np.frombuffer(full, "<i4", offset=fixed + 4 * 3).reshape(n_tokens, 3, k)
    kept = np.frombuffer(first2, "<i4", offset=fixed + 4 * 2).reshape(n_tokens, 2, k)
    assert np.array_equal(kept, ids[:, :2])
    assert routes_bytes(trace, "t", layers=3)[fixed:] == full[fixed:]

    source, out = tmp_path / "a.moetrace", tmp_path / "a.routes"
    run_cli("trace", "synth", str(source), "--layers", "3", "--experts", "16", "--k", "2", check=True)
    run_cli("trace", "routes", str(source), "--out", str(out), "--layers", "2", check=True)
    assert out.read_bytes() == routes_bytes(read_trace(source), "t", layers=2)


def test_layers_refuses_a_count_outside_the_model_or_without_a_moe_layer() -> None:
    trace = synth_trace(SPEC)
    with pytest.raises(ConfigError, match=r"^--layers 4 is outside 1\.\.3, the layers of t's model$"):
        routes_bytes(trace, "t", layers=4)
    rows = trace.rows.copy()
    rows["layer"] += 1  # a dense first layer: MoE layers 1, 2, 3 of 4
    shifted = dataclasses.replace(
        trace, rows=rows, header={**trace.header, "n_layers": 4, "moe_layers": [1, 2, 3]}
    )
    with pytest.raises(
        ConfigError, match="^t: no MoE layer among the first 1; there are no routes to force$"
    ):
        routes_bytes(shifted, "t", layers=1)
    assert struct.unpack_from("<8s7I", routes_bytes(shifted, "t", layers=2))[2:5] == (2, 16, 2)


def test_a_last_layer_that_routes_only_the_prompts_last_token_gives_its_experts_to_the_prompt() -> None:
    """llama.cpp computes only the prompt's last token at the last layer when it needs only its
    logits (the public route traces were recorded so): the earlier prompt tokens get its experts."""
    trace = synth_trace(SPEC)  # 3 layers, 7 prompt tokens
    rows = trace.rows
    gap = rows[(rows["layer"] != 2) | (rows["pos"] >= 6)]
    short = _with_rows(trace, gap)
    assert last_layer_prompt_gap(short) == 6 and last_layer_prompt_gap(trace) == 0
    fixed, n_tokens, k = struct.calcsize("<8s7I"), 12, 2
    got = np.frombuffer(routes_bytes(short), "<i4", offset=fixed + 4 * 3).reshape(n_tokens, 3, k)
    full = np.frombuffer(routes_bytes(trace), "<i4", offset=fixed + 4 * 3).reshape(n_tokens, 3, k)
    assert np.array_equal(got[:, :2], full[:, :2]) and np.array_equal(got[6:, 2], full[6:, 2])
    assert np.array_equal(got[:6, 2], np.tile(full[6, 2], (6, 1)))
    # any other gap is still refused: a middle layer, or the last layer missing a decode token
    for hole in ((rows["layer"] != 1) | (rows["pos"] >= 6), (rows["layer"] != 2) | (rows["pos"] != 9)):
        with pytest.raises(ConfigError, match="does not route token positions 0, 1, 2"):
            routes_bytes(_with_rows(trace, rows[hole]), "t")


def test_read_routes_and_follows_routes_tell_a_forced_trace_from_another(tmp_path: Path) -> None:
    trace = synth_trace(SPEC)
    data = routes_bytes(trace)
    layers, ids = read_routes(data)
    assert layers == [0, 1, 2] and ids.shape == (12, 3, 2)
    assert follows_routes(trace, data)
    rows = trace.rows.copy()
    rows["ids"][5, 0] = (rows["ids"][5, 0] + 1) % 16  # one id differs from the routes
    assert not follows_routes(_with_rows(trace, rows), data)
    assert not follows_routes(trace, routes_bytes(trace, layers=2))  # other layers
    with pytest.raises(ConfigError, match="^r: not a routes file \\(no MOEROUTE header\\)$"):
        read_routes(b"GGUF" + data[4:], "r")
    with pytest.raises(ConfigError, match=f"^r: {len(data) - 4} bytes, not the size its header gives$"):
        read_routes(data[:-4], "r")
    with pytest.raises(ConfigError, match="^r: routes version 2, this appliance reads 1$"):
        read_routes(data[:8] + struct.pack("<I", 2) + data[12:], "r")

    # the sweep's check of a forced trial: its trace against the routes file beside the model
    (tmp_path / "r.routes").write_bytes(data)
    trial = {"routes": {"file": "r.routes", "sha256": sha256_bytes(data)}}
    assert trace_equals_routes(trial, trace, tmp_path) is True
    assert trace_equals_routes(trial, _with_rows(trace, rows), tmp_path) is False
    assert trace_equals_routes(trial, None, tmp_path) is None
    stale = {"routes": {"file": "r.routes", "sha256": "0" * 64}}  # not the file the trial used
    assert trace_equals_routes(stale, trace, tmp_path) is None
