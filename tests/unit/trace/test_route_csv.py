"""The route-trace CSV reader (`appliance.trace.route_csv`, through `trace import --from
route-trace-csv`): hand-written files in, every refusal one line naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.trace.interchange import import_trace
from tests.unit.trace.test_route_import import COLS, FIRST_ROW, HEAD, ROWS, SIZES, TINY, cli_import


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
