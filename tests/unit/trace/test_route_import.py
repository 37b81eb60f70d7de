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

from appliance.core.errors import ConfigError
from appliance.core.vendored import REAL_ROUTES, VENDORED
from appliance.trace.expert_bytes import expert_bytes_from_header
from appliance.trace.format import KIND_DECODE, KIND_PROMPT, read_trace
from appliance.trace.interchange import import_trace
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


def test_fixtures_are_the_vendored_bytes() -> None:
    readme = (FIXTURES / "README.md").read_text()
    assert sorted(e.path.rsplit("/", 1)[1] for e in VENDORED) == sorted(REAL)
    for entry in VENDORED:
        assert hashlib.sha256((REPO / entry.path).read_bytes()).hexdigest() == entry.sha256
        assert entry.sha256 in readme and entry.commit in readme
        assert (REPO / entry.licence_file).read_text().lstrip().startswith("Apache License")
    notices = (REPO / "THIRD_PARTY_NOTICES.md").read_text()
    assert all(e.sha256 in notices and e.path in notices for e in VENDORED)


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


def test_tiny_csv_rows(tmp_path: Path) -> None:
    src = tmp_path / "tiny.csv"
    src.write_text(TINY)
    trace = import_trace(src, "route-trace-csv", None)
    assert trace.rows["step"].tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert trace.rows["layer"].tolist() == [0, 0, 1, 0, 1, 0, 1]
    assert trace.rows["pos"].tolist() == [0, 1, 1, 2, 2, 3, 3]
    assert trace.rows["kind"].tolist() == [0, 0, 0, 1, 1, 1, 1]
    assert trace.ids.tolist() == [[3, 1], [2, 3], [5, 6], [3, 7], [5, 0], [7, 4], [0, 1]]
    assert trace.rows["weights"][0].tolist() == [pytest.approx(0.6), pytest.approx(0.4)]
    assert trace.header["model_file"] == "Tiny-Q4.gguf"
    assert trace.header["expert_bytes"] == {"0": 100, "1": 250}


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _replace_line(number: int, new: str) -> str:
    lines = _lines(TINY)
    lines[number - 1] = new
    return "".join(lines)


def _swap(number: int) -> str:
    lines = _lines(TINY)
    lines[number - 1], lines[number] = lines[number], lines[number - 1]
    return "".join(lines)


BAD = [
    ("no magic", TINY.replace("# route_trace v1\n", ""), "line 1: expected '# route_trace v1'"),
    (
        "no model line",
        TINY.replace(HEAD.splitlines(keepends=True)[1], ""),
        "line 2: field model: expected '# model=PATH",
    ),
    (
        "no layer line",
        TINY.replace("# layer=1 expert_bytes=250 dense_bytes=7\n", ""),
        "field expert_bytes: layer 1 has rows but no '# layer=1 expert_bytes=B dense_bytes=D' line",
    ),
    ("bad layer line", TINY.replace("dense_bytes=7\n# layer=1", "dense=7\n# layer=1"), "line 3: '# layer=0"),
    ("column line", TINY.replace(COLS, COLS.replace("weight", "w")), "line 5: expected the column line"),
    ("step backwards", _swap(FIRST_ROW + 9), f"line {FIRST_ROW + 10}: field step: 2 after 3"),
    ("layer backwards", _swap(FIRST_ROW + 7), f"line {FIRST_ROW + 8}: field layer: 0 after 1"),
    ("slot out of order", _swap(FIRST_ROW), f"line {FIRST_ROW + 1}: field slot: 0 after 1"),
    (
        "slot missing",
        _replace_line(FIRST_ROW + 1, ""),
        f"line {FIRST_ROW}: field slot: step 0, layer 0 has 1 slots, not the 2 of n_expert_used",
    ),
    (
        "expert out of range",
        _replace_line(FIRST_ROW + 2, "0,0,1,0,0,8,0.7,0,100\n"),
        f"line {FIRST_ROW + 2}: field expert: 8 is outside 0..7",
    ),
    (
        "layer out of range",
        _replace_line(FIRST_ROW + 4, "0,0,1,2,0,5,0.5,0,250\n"),
        f"line {FIRST_ROW + 4}: field layer: 2 is outside 0..1",
    ),
    (
        "column count",
        _replace_line(FIRST_ROW + 3, "0,0,1,0,1,3,0.3,1\n"),
        f"line {FIRST_ROW + 3}: 8 columns, expected 9",
    ),
    (
        "not a number",
        _replace_line(FIRST_ROW + 3, "0,0,1,0,1,x,0.3,1,0\n"),
        f"line {FIRST_ROW + 3}: field expert: 'x' is not a number",
    ),
    (
        "duplicate row",
        _replace_line(FIRST_ROW + 1, "0,0,0,0,0,3,0.6,0,100\n"),
        f"line {FIRST_ROW + 1}: a second row for step 0, layer 0, slot 0",
    ),
    ("no rows", HEAD + SIZES + COLS, "no routed row after the column line"),
    (
        "fraction in an integer column",
        _replace_line(FIRST_ROW + 2, "0,0,1,0,0,2.0,0.7,0,100\n"),
        f"line {FIRST_ROW + 2}: field expert: '2.0' is not a number of that column",
    ),
    (
        "malformed weight",
        _replace_line(FIRST_ROW + 2, "0,0,1,0,0,2,0.7.1,0,100\n"),
        f"line {FIRST_ROW + 2}: field weight: '0.7.1' is not a number of that column",
    ),
    ("empty line", TINY + "\n", f"line {FIRST_ROW + 14}: 1 columns, expected 9"),
    (
        "weight overflows",
        _replace_line(FIRST_ROW, "0,0,0,0,0,3,1e99,0,100\n"),
        f"line {FIRST_ROW}: field weight: not a finite 32-bit number",
    ),
]


@pytest.mark.parametrize(("case", "text", "message"), BAD, ids=[c[0] for c in BAD])
def test_bad_csv_is_one_line_naming_file_line_field(
    tmp_path: Path, case: str, text: str, message: str
) -> None:
    src = tmp_path / "bad.csv"
    src.write_text(text)
    out = tmp_path / "t.moetrace"
    code, output = cli_import(src, out)
    assert code != 0
    assert output.count("\n") == 1, output
    assert f"{src}: " in output and message in output, output
    assert not out.exists() and list(tmp_path.iterdir()) == [src]


def test_turns(tmp_path: Path) -> None:
    second = "".join("1" + line[1:] for line in _lines(ROWS))
    src = tmp_path / "turns.csv"
    src.write_text(TINY + second)
    first = import_trace(src, "route-trace-csv", None)
    other = import_trace(src, "route-trace-csv", None, turn=1)
    assert first.ids.tolist() == other.ids.tolist() and len(first.rows) == 7
    assert (first.header["turn"], other.header["turn"]) == (0, 1)
    with pytest.raises(ConfigError, match=r"no row of turn 2 \(the file has turns 0, 1\); pass --turn N"):
        import_trace(src, "route-trace-csv", None, turn=2)


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

RECORDS = [  # 2 prompt tokens, 2 decode tokens, over MoE layers 0 and 1, k = 2
    {"layer": 0, "token": 0, "phase": "prompt", "experts": [3, 1], "weights": [0.6, 0.4]},
    {"layer": 0, "token": 1, "phase": "prompt", "experts": [2, 3], "weights": [0.7, 0.3]},
    {"layer": 1, "token": 1, "phase": "prompt", "experts": [5, 6], "weights": [0.5, 0.5]},
    {"layer": 1, "token": 2, "phase": "decode", "experts": [5, 0], "weights": [0.8, 0.2]},
    {"layer": 0, "token": 2, "phase": "decode", "experts": [3, 7], "weights": [0.9, 0.1]},
    {"layer": 0, "token": 3, "phase": "decode", "experts": [7, 4], "weights": [0.5, 0.5]},
    {"layer": 1, "token": 3, "phase": "decode", "experts": [0, 1], "weights": [0.5, 0.5]},
]


@pytest.fixture(scope="module")
def jmodel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("m") / "m.gguf", "qwen3moe", 2, 8, 4, [0, 1])


def jsonl(records: list[object]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_jsonl_matches_the_csv_import(tmp_path: Path, jmodel: Path) -> None:
    src = tmp_path / "r.jsonl"
    src.write_text(jsonl(list(RECORDS)))
    out = tmp_path / "t.moetrace"
    code, text = cli_import(src, out, "--model", str(jmodel), fmt="jsonl")
    assert code == 0, text
    trace = read_trace(out)
    csv_src = tmp_path / "tiny.csv"
    csv_src.write_text(TINY)
    reference = import_trace(csv_src, "route-trace-csv", None)
    for field in ("step", "layer", "kind", "pos", "ids", "weights"):
        assert trace.rows[field].tolist() == reference.rows[field].tolist(), field
    h = trace.header
    assert (h["n_expert_used"], h["n_prompt_tokens"], h["n_predict"]) == (2, 2, 2)
    assert h["not_recorded"] == ["step_boundaries"]
    assert "expert_bytes" not in h and h["model_file"] == "m.gguf"


def test_jsonl_aliases_and_what_is_not_recorded(tmp_path: Path, jmodel: Path) -> None:
    records = [{"layer_id": r["layer"], "pos": r["token"], "topk_ids": r["experts"]} for r in RECORDS]
    src = tmp_path / "r.jsonl"
    src.write_text(jsonl(list(records)))
    trace = import_trace(src, "jsonl", _fields(jmodel))
    assert trace.header["not_recorded"] == ["gate_weights", "step_boundaries", "prompt_decode_split"]
    assert trace.n_steps == 4 and trace.has_weights is False
    assert set(trace.rows["kind"].tolist()) == {KIND_DECODE}


def _fields(model: Path) -> dict[str, object]:
    from appliance.trace.expert_bytes import gguf_trace_fields

    return gguf_trace_fields(model)


JSONL_BAD = [
    ("not an object", [RECORDS[0], [1, 2]], "line 2: a list, not a JSON object"),
    ("missing field", [{"layer": 0, "experts": [1, 2]}], "line 1: field token is missing"),
    (
        "field twice",
        [{**RECORDS[0], "expert_ids": [1, 2]}],
        "line 1: field experts is given twice (experts and expert_ids)",
    ),
    ("expert out of range", [{**RECORDS[0], "experts": [1, 8]}], "line 1: field experts: 8 is outside 0..7"),
    ("layer not MoE", [{**RECORDS[0], "layer": 2}], "line 1: field layer: 2 is not a MoE layer"),
    ("k changes", [RECORDS[0], {**RECORDS[1], "experts": [1]}], "line 2: field experts: 1 ids"),
    (
        "phase dropped",
        [RECORDS[0], {k: v for k, v in RECORDS[1].items() if k != "phase"}],
        "line 2: field phase",
    ),
    ("bad phase", [{**RECORDS[0], "phase": "later"}], "line 1: field phase: 'later' is not one of"),
    ("token twice", [RECORDS[0], RECORDS[0]], "line 2: a second record for token 0 at layer 0"),
    (
        "decode before prompt ends",
        [RECORDS[1], {**RECORDS[0], "phase": "decode"}],
        "line 2: field token: decode token 0 is not after the prompt's last token 1",
    ),
    ("weights short", [{**RECORDS[0], "weights": [1.0]}], "line 1: field weights: not a list of 2 finite"),
]


@pytest.mark.parametrize(("case", "records", "message"), JSONL_BAD, ids=[c[0] for c in JSONL_BAD])
def test_bad_jsonl_is_one_line(
    tmp_path: Path, jmodel: Path, case: str, records: list[object], message: str
) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text(jsonl(records))
    out = tmp_path / "t.moetrace"
    code, output = cli_import(src, out, "--model", str(jmodel), fmt="jsonl")
    assert code != 0
    assert output.count("\n") == 1, output
    assert f"{src}: " in output and message in output, output
    assert not out.exists()


def test_jsonl_line_that_is_not_json(tmp_path: Path, jmodel: Path) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text(jsonl([RECORDS[0]]) + "{nope\n")
    with pytest.raises(ConfigError, match=r"bad\.jsonl: line 2: not valid JSON"):
        import_trace(src, "jsonl", _fields(jmodel))


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
