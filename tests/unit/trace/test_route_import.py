"""`trace import --from route-trace-csv | jsonl`: the three public real traces and hand-written
files in, every refusal one line naming file, line and field, nothing written.

Expected values are counted here from the CSV with the standard csv module, independently of
the importer's numpy parser."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from appliance.core.vendored import REAL_ROUTES
from appliance.trace.expert_bytes import expert_bytes_from_header
from appliance.trace.format import KIND_DECODE, KIND_PROMPT, read_trace
from tests.conftest import REPO, run_cli
from tests.unit.cli.test_trace import write_gguf

FIXTURES = REPO / REAL_ROUTES
REAL = {  # file: (arch, n_layers, k, prompt tokens, decode tokens)
    "qwen3-30b-a3b-q4_k_m.route.csv": ("qwen3moe", 48, 6, 28, 128),
    "gemma-4-26b-a4b-q4_k_m.route.csv": ("gemma4", 30, 6, 29, 128),
    "gpt-oss-120b-q4_k_m.route.csv": ("gpt-oss", 36, 2, 85, 64),
}
HEAD = "# route_trace v1\n# model=/srv/m/Tiny-Q4.gguf arch=qwen3moe n_layer=2 n_expert=8 n_expert_used=2\n"
SIZES = "# layer=0 expert_bytes=100 dense_bytes=7\n# layer=1 expert_bytes=250 dense_bytes=7\n"
COLS = "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n"
# 2 prompt tokens (layer 0 both, layer 1 only the last), then 2 decode tokens
ROWS = (
    "0,0,0,0,0,3,0.6,0,100\n0,0,0,0,1,1,0.4,0,100\n"
    "0,0,1,0,0,2,0.7,0,100\n0,0,1,0,1,3,0.3,1,0\n"
    "0,0,1,1,0,5,0.5,0,250\n0,0,1,1,1,6,0.5,0,250\n"
    "0,1,2,0,0,3,0.9,1,0\n0,1,2,0,1,7,0.1,0,100\n"
    "0,1,2,1,0,5,0.8,1,0\n0,1,2,1,1,0,0.2,0,250\n"
    "0,1,3,0,0,7,0.5,1,0\n0,1,3,0,1,4,0.5,0,100\n"
    "0,1,3,1,0,0,0.5,1,0\n0,1,3,1,1,1,0.5,0,250\n"
)
TINY = HEAD + SIZES + COLS + ROWS
FIRST_ROW = 6  # line number of ROWS' first line in TINY


def csv_rows(path: Path) -> list[dict[str, str]]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


def cli_import(src: Path, out: Path, *extra: str, fmt: str = "route-trace-csv") -> tuple[int, str]:
    result = run_cli("trace", "import", str(src), "--from", fmt, "--out", str(out), *extra)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_trace_imports_every_row(tmp_path: Path, name: str) -> None:
    src = FIXTURES / name
    arch, n_layers, k, n_prompt, n_decode = REAL[name]
    rows = csv_rows(src)
    out = tmp_path / "t.moetrace"
    code, text = cli_import(src, out)
    assert code == 0, text
    trace = read_trace(out)
    h = trace.header
    assert (h["arch"], h["n_layers"], h["n_experts"], h["n_expert_used"]) == (arch, n_layers, 128, k)
    assert h["moe_layers"] == sorted({int(r["layer"]) for r in rows}) == list(range(n_layers))
    assert (h["n_prompt_tokens"], h["n_predict"]) == (n_prompt, n_decode)
    assert h["has_weights"] is True and h["not_recorded"] == []
    assert h["source"] == {
        "format": "route-trace-csv",
        "file": name,
        "sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
    }
    model_line = next(line for line in src.read_text().splitlines() if line.startswith("# model="))
    host_path = model_line.split()[1].removeprefix("model=")
    assert h["model_file"] == host_path.rsplit("/", 1)[1]
    assert host_path not in out.read_bytes().decode("latin-1")  # the host path is never stored
    preamble = {
        line.split()[1].removeprefix("layer="): int(line.split()[2].removeprefix("expert_bytes="))
        for line in src.read_text().splitlines()
        if line.startswith("# layer=")
    }
    assert h["expert_bytes"] == preamble
    assert expert_bytes_from_header(h) == {int(layer): size for layer, size in preamble.items()}
    # one trace row per (token, layer) of the CSV, k slots each; prompt = one step
    assert len(trace.rows) * k == len(rows)
    assert trace.n_steps == 1 + n_decode
    assert int((trace.rows["kind"] == KIND_PROMPT).sum()) * k == sum(r["phase"] == "0" for r in rows)
    assert int((trace.rows["kind"] == KIND_DECODE).sum()) == n_decode * n_layers
    last = n_layers - 1
    last_prompt_rows = sum(r["phase"] == "0" and r["layer"] == str(last) for r in rows) // k
    assert int(((trace.layers == last) & (trace.rows["kind"] == KIND_PROMPT)).sum()) == last_prompt_rows
    # ids and weights in the CSV's order, read independently
    key = {(int(r["step"]), int(r["layer"]), int(r["slot"])): r for r in rows}
    ours = [
        (int(row["pos"]), int(row["layer"]), slot, int(row["ids"][slot]), float(row["weights"][slot]))
        for row in trace.rows
        for slot in range(k)
    ]
    assert len(ours) == len(key)
    for pos, layer, slot, expert, weight in ours:
        theirs = key[(pos, layer, slot)]
        assert expert == int(theirs["expert"])
        assert weight == float(np.float32(theirs["weight"]))


def test_replay_uses_the_trace_expert_bytes(tmp_path: Path) -> None:
    src = tmp_path / "tiny.csv"
    src.write_text(TINY)
    out = tmp_path / "t.moetrace"
    assert cli_import(src, out)[0] == 0
    result = run_cli("trace", "replay", str(out), "--capacity", "2", "--policy", "lru", "--json", check=True)
    report = json.loads(result.stdout)
    assert report["expert_bytes"] == {"0": 100, "1": 250}
    layers = report["results"][0]["layers"]
    assert [r["bytes_moved"] for r in layers] == [
        r["misses"] * s for r, s in zip(layers, (100, 250), strict=True)
    ]
    given = run_cli(
        "trace", "replay", str(out), "--capacity", "2", "--policy", "lru", "--expert-bytes", "7", "--json"
    )
    assert json.loads(given.stdout)["expert_bytes"] == {"0": 7, "1": 7}


def test_model_is_refused_for_route_csv_and_needed_for_jsonl(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "m.gguf", "qwen3moe", 2, 8, 2, [0, 1])
    src = tmp_path / "tiny.csv"
    src.write_text(TINY)
    code, output = cli_import(src, tmp_path / "t.moetrace", "--model", str(model))
    assert code != 0 and "--from route-trace-csv does not take --model GGUF" in output
    code, output = cli_import(src, tmp_path / "t.moetrace", fmt="jsonl")
    assert code != 0 and "--from jsonl needs --model GGUF" in output
    code, output = cli_import(src, tmp_path / "t.moetrace", "--turn", "1", "--model", str(model), fmt="jsonl")
    assert code != 0 and "--turn is for --from route-trace-csv" in output


# --- JSONL -----------------------------------------------------------------------------------


def test_export_to_libcachesim_takes_the_trace_expert_bytes(tmp_path: Path) -> None:
    src = tmp_path / "tiny.csv"
    src.write_text(TINY)
    trace_file = tmp_path / "t.moetrace"
    assert cli_import(src, trace_file)[0] == 0
    out = tmp_path / "t.oracleGeneral"
    run_cli("trace", "export", str(trace_file), "--to", "libcachesim", "--out", str(out), check=True)
    from appliance.trace.interchange import ORACLE_DTYPE

    records = np.frombuffer(out.read_bytes(), dtype=ORACLE_DTYPE)
    layer = (records["obj"].astype(np.int64) - 1) // 8
    assert records["size"].tolist() == np.where(layer == 0, 100, 250).tolist()
    assert len(records) == 3 + 2 + 2 + 2 + 2 + 2  # each (step, layer) event's distinct experts
