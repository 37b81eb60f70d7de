"""The route-trace JSONL reader (`appliance.trace.route_jsonl`, through `trace import --from
route-trace-jsonl`): the same routes as the CSV, its aliases, every refusal one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.trace.format import KIND_DECODE, read_trace
from appliance.trace.interchange import import_trace
from tests.unit.cli.test_trace import write_gguf
from tests.unit.trace.test_route_import import TINY, cli_import

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
