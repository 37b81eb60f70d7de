"""`appliance trace import / export` and `replay --engine libcachesim`: upstream llama.cpp's
moe-trace CSV in and out, libCacheSim's oracleGeneral out, libCacheSim's policies beside ours.

Fixtures are written here by hand to the upstream formats' own specifications: the moe-trace
CSV (llama.cpp PR 28544) is one `layer,expert` row per routed activation, k per token, tokens
of one layer in a row, layers ascending within one evaluation; oracleGeneral
(libCacheSim/traceReader/customizedReader/oracle/oracleGeneralBin.h) is 24-byte records of
u32 time, u64 object id, u32 size, i64 next access vtime (-1: none).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.trace import kernels
from appliance.trace.events import single_item_stream, trace_events
from appliance.trace.expert_bytes import gguf_trace_fields
from appliance.trace.format import read_trace
from appliance.trace.interchange import import_trace, request_stream
from appliance.trace.replay import pool_hits
from tests.conftest import run_cli
from tests.unit.cli.test_trace import SYNTH, write_gguf

# 3 MoE blocks (0, 1, 2), 16 experts, k = 2: a prompt micro-batch of 2 tokens, then 2 decode
# tokens, the last layer routing only the prompt's last token (as llama.cpp does).
CSV = (
    "0,3\n0,7\n0,1\n0,15\n"  # step 0, layer 0: token 0 -> 3, 7; token 1 -> 1, 15
    "1,2\n1,4\n1,9\n1,0\n"
    "2,5\n2,6\n"  # last layer: one token
    "0,3\n0,8\n1,2\n1,11\n2,5\n2,12\n"  # step 1 (decode)
    "0,1\n0,7\n1,4\n1,9\n2,6\n2,13\n"  # step 2 (decode)
)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("model") / "m.gguf", "qwen3moe", 3, 16, 2, [0, 1, 2])


def imported(tmp_path: Path, model: Path, text: str) -> Path:
    src = tmp_path / "routes.csv"
    src.write_text(text)
    out = tmp_path / "t.moetrace"
    run_cli(
        "trace",
        "import",
        str(src),
        "--from",
        "llamacpp-csv",
        "--model",
        str(model),
        "--out",
        str(out),
        check=True,
    )
    return out


def test_import_places_every_route(tmp_path: Path, model: Path) -> None:
    trace = read_trace(imported(tmp_path, model, CSV))
    h = trace.header
    assert h["not_recorded"] == ["gate_weights", "step_boundaries", "prompt_decode_split", "positions"]
    assert h["source"]["format"] == "llamacpp-csv" and h["source"]["file"] == "routes.csv"
    assert h["model_file"] == "m.gguf" and h["model_bytes"] == model.stat().st_size
    assert (h["n_layers"], h["moe_layers"], h["n_experts"], h["n_expert_used"]) == (3, [0, 1, 2], 16, 2)
    assert trace.steps.tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert trace.layers.tolist() == [0, 0, 1, 1, 2, 0, 1, 2, 0, 1, 2]
    assert trace.ids.tolist() == [[3, 7], [1, 15], [2, 4], [9, 0], [5, 6], [3, 8], [2, 11], [5, 12]] + [
        [1, 7],
        [4, 9],
        [6, 13],
    ]
    assert trace.rows["kind"].tolist() == [0] * 5 + [1] * 6  # inferred: one-token steps decode
    assert trace.rows["pos"].tolist() == [0, 1, 0, 1, 0, 2, 2, 2, 3, 3, 3]


def test_import_export_import_preserves_every_route(tmp_path: Path, model: Path) -> None:
    first = imported(tmp_path, model, CSV)
    csv = tmp_path / "again.csv"
    run_cli("trace", "export", str(first), "--to", "llamacpp-csv", "--out", str(csv), check=True)
    assert csv.read_text() == CSV  # byte for byte what upstream wrote
    second = tmp_path / "second.moetrace"
    run_cli(
        "trace",
        "import",
        str(csv),
        "--from",
        "llamacpp-csv",
        "--model",
        str(model),
        "--out",
        str(second),
        check=True,
    )
    a, b = read_trace(first), read_trace(second)
    assert a.rows.tobytes() == b.rows.tobytes()
    assert {k: v for k, v in a.header.items() if k != "source"} == {
        k: v for k, v in b.header.items() if k != "source"
    }


def test_synth_trace_round_trips_through_the_csv(tmp_path: Path, model: Path) -> None:
    synth = tmp_path / "s.moetrace"
    run_cli("trace", "synth", str(synth), *SYNTH, check=True)
    csv = tmp_path / "s.csv"
    run_cli("trace", "export", str(synth), "--to", "llamacpp-csv", "--out", str(csv), check=True)
    assert len(csv.read_text().splitlines()) == (12 + 40) * 3 * 2
    back = read_trace(imported(tmp_path, model, csv.read_text()))
    s = read_trace(synth)
    for field in ("step", "layer", "kind", "pos", "ids"):
        assert s.rows[field].tolist() == back.rows[field].tolist(), field


def test_oracle_general_records_and_libcachesim_lru(tmp_path: Path, model: Path) -> None:
    import libcachesim as lcs

    synth = tmp_path / "s.moetrace"
    run_cli("trace", "synth", str(synth), *SYNTH, check=True)
    out = tmp_path / "s.oracleGeneral"
    run_cli(
        "trace",
        "export",
        str(synth),
        "--to",
        "libcachesim",
        "--model",
        str(model),
        "--out",
        str(out),
        check=True,
    )
    data = out.read_bytes()
    trace = read_trace(synth)
    stream = request_stream(trace)
    assert len(data) == 24 * stream.n_requests
    per_expert = 8 * (4 + 4 + 8) * 4  # f32 gate, up, down slices of one expert (write_gguf)
    records = [struct.unpack_from("<IQIq", data, 24 * i) for i in range(stream.n_requests)]
    blocks = stream.item_layer_index()  # MoE blocks 0, 1, 2 are layer indices 0, 1, 2
    for i, (time, obj, size, nxt) in enumerate(records):
        expert = int(stream.items[i]) - int(blocks[i]) * 16
        assert time == int(stream.step[i]) and size == per_expert
        assert obj == int(blocks[i]) * 16 + expert + 1
        later = [j for j in range(i + 1, len(records)) if records[j][1] == obj]
        assert nxt == (later[0] if later else -1)
    reader = lcs.TraceReader(str(out), lcs.TraceType.ORACLE_GENERAL_TRACE)
    for capacity in (2, 5, 9, 20, 48):
        flags = pool_hits(stream, kernels.CODES["lru"], capacity, None, None)
        ours = int(len(flags) - flags.sum())
        miss_ratio, _ = lcs.LRU(capacity * per_expert, hashpower=12).process_trace(reader)
        assert round(miss_ratio * stream.n_requests) == ours, capacity


def test_replay_engine_libcachesim_beside_ours(tmp_path: Path, model: Path) -> None:
    synth = tmp_path / "s.moetrace"
    run_cli("trace", "synth", str(synth), *SYNTH, check=True)
    args = ["trace", "replay", str(synth), "--capacity", "4,20", "--engine", "libcachesim"]
    report = json.loads(run_cli(*args, "--policy", "lru,arc,sieve", "--json", check=True).stdout)
    theirs = report["libcachesim"]
    assert theirs["view"] == "request-level (no MoE-atomic events, no pins)"
    events = trace_events(read_trace(synth))
    pools = events.pools("per-layer")
    lru4 = sum(
        int(len(f) - f.sum())
        for f in (pool_hits(single_item_stream(p), kernels.CODES["lru"], 4, None, None) for p in pools)
    )
    got = {(r["policy"], r["capacity"]): r["total"] for r in theirs["results"]}
    assert set(got) == {(p, c) for p in ("lru", "arc", "sieve") for c in (4, 20)}
    assert got[("lru", 4)]["misses"] == lru4
    assert all(t["requests"] == events.stream.n_requests for t in got.values())
    assert {r["policy"] for r in report["appliance"]["results"]} == set(kernels.POLICIES)
    text = run_cli(*args[:4], "20", "--engine", "libcachesim", "--policy", "sieve", check=True).stdout
    assert "libCacheSim, request-level (no MoE-atomic events, no pins)" in text


def last_line(result: object) -> str:
    return result.stderr.strip().splitlines()[-1]  # type: ignore[attr-defined]


def test_bad_input_one_line_each(tmp_path: Path, model: Path) -> None:
    fields = gguf_trace_fields(model)
    for text, match in (
        (
            "0,3\n0,7\n5,1\n5,2\n",
            r"line 3: layer 5 is not a MoE layer of m\.gguf \(its MoE layers are 0\.\.2\)",
        ),
        ("0,3\n0,16\n", r"line 2: expert 16 is outside 0\.\.15"),
        (
            "0,3\n0,7\n0,1\n1,2\n1,4\n",
            r"line 1: layer 0 has 3 activations in a row, not a whole number of tokens",
        ),
        ("0,3\nlayer 0 expert 7\n", r"line 2: 'layer 0 expert 7' is not a 'layer,expert' row"),
    ):
        src = tmp_path / "bad.csv"
        src.write_text(text)
        with pytest.raises(ConfigError, match=match):
            import_trace(src, "llamacpp-csv", fields)
    out = tmp_path / "t.moetrace"
    src = tmp_path / "bad.csv"
    src.write_text("0,3\n0,99\n")
    result = run_cli(
        "trace", "import", str(src), "--from", "llamacpp-csv", "--model", str(model), "--out", str(out)
    )
    assert result.returncode == 2 and "expert 99 is outside" in last_line(result)
    assert not out.exists() and not list(tmp_path.glob(".t.moetrace.*"))
    good = tmp_path / "good.csv"
    good.write_text(CSV)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target, says in (
        (fifo, "is a special file, not a regular file; choose a file path"),
        (tmp_path, "is a directory."),
    ):
        result = run_cli(
            "trace",
            "import",
            str(good),
            "--from",
            "llamacpp-csv",
            "--model",
            str(model),
            "--out",
            str(target),
        )
        line = last_line(result)
        assert (
            result.returncode == 2
            and "Invalid value for '--out'" in line
            and str(target) in line
            and says in line
        )
        result = run_cli(
            "trace",
            "export",
            str(imported(tmp_path, model, CSV)),
            "--to",
            "llamacpp-csv",
            "--out",
            str(target),
        )
        line = last_line(result)
        assert (
            result.returncode == 2
            and "Invalid value for '--out'" in line
            and str(target) in line
            and says in line
        )
    result = run_cli(
        "trace", "import", str(fifo), "--from", "llamacpp-csv", "--model", str(model), "--out", str(out)
    )
    assert result.returncode == 2 and "is not a regular file (a device, pipe or socket)" in last_line(result)
    trace = imported(tmp_path, model, CSV)
    result = run_cli("trace", "export", str(trace), "--to", "libcachesim", "--out", str(tmp_path / "x.bin"))
    assert result.returncode == 2 and last_line(result).endswith(
        "object sizes are the model's expert bytes, and this trace's header carries none (expert_bytes)"
    )
    args = ["trace", "replay", str(trace), "--capacity", "4", "--engine", "libcachesim", "--policy"]
    result = run_cli(*args, "arc,nope")
    assert result.returncode == 2
    assert last_line(result) == "error: unknown libCacheSim policy 'nope'; choose from " + ", ".join(
        __import__("appliance.trace.lcs_replay", fromlist=["POLICIES"]).POLICIES
    )
    result = run_cli(*args, "s3fifo")
    assert result.returncode == 2 and "s3fifo needs a capacity of at least 20 experts" in last_line(result)


def vllm_record(prompt: int, routed: list[list[list[int]]]) -> dict[str, object]:
    """One request as vLLM returns it with --enable-return-routed-experts (PR 28284):
    `routed_experts` of shape [token][layer][k], beside the prompt's token ids."""
    return {"prompt_token_ids": list(range(100, 100 + prompt)), "routed_experts": routed}


def test_vllm_import_places_prompt_and_decode(tmp_path: Path, model: Path) -> None:
    routed = [[[3, 7], [2, 4], [5, 6]], [[1, 15], [9, 0], [5, 6]], [[3, 8], [2, 11], [5, 12]]]
    src = tmp_path / "vllm.json"
    src.write_text(json.dumps([vllm_record(2, routed), vllm_record(1, routed[:2])]))
    out = tmp_path / "v.moetrace"
    run_cli(
        "trace", "import", str(src), "--from", "vllm", "--model", str(model), "--out", str(out), check=True
    )
    trace = read_trace(out)
    assert trace.header["not_recorded"] == ["gate_weights", "step_boundaries"]
    assert trace.steps.tolist() == [0] * 6 + [1] * 3 + [2] * 3 + [3] * 3
    assert trace.layers.tolist() == [0, 0, 1, 1, 2, 2] + [0, 1, 2] * 3
    assert trace.rows["kind"].tolist() == [0] * 6 + [1] * 3 + [0] * 3 + [1] * 3
    assert trace.ids.tolist()[:6] == [[3, 7], [1, 15], [2, 4], [9, 0], [5, 6], [5, 6]]
    csv = tmp_path / "v.csv"
    run_cli("trace", "export", str(out), "--to", "llamacpp-csv", "--out", str(csv), check=True)
    back = read_trace(imported(tmp_path, model, csv.read_text()))
    assert back.ids.tolist() == trace.ids.tolist() and back.layers.tolist() == trace.layers.tolist()
    src.write_text(json.dumps([vllm_record(2, routed), {"prompt_token_ids": [1, 2], "text": "hi"}]))
    result = run_cli("trace", "import", str(src), "--from", "vllm", "--model", str(model), "--out", str(out))
    assert result.returncode == 2
    assert last_line(result) == (
        f"error: {src}: request 1 has no routed_experts; run vLLM with "
        "--enable-return-routed-experts and keep each output's routed_experts"
    )
