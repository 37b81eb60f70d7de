"""Locality statistics (`appliance.trace.locality`): issue 34's table on the three public real
traces, and every value of a hand-built trace worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from appliance.trace.format import (
    KIND_DECODE,
    KIND_PROMPT,
    VERSION,
    Trace,
    read_trace,
    row_dtype,
    write_trace,
)
from appliance.trace.locality import locality
from tests.conftest import run_cli
from tests.unit.trace.test_route_import import FIXTURES, cli_import

# Issue 34's table (decode steps only): pairs touched %, hottest / uniform, next-token reuse %
TABLE = {
    "qwen3-30b-a3b-q4_k_m.route.csv": (49.8, 20.8, 38.0),
    "gemma-4-26b-a4b-q4_k_m.route.csv": (52.3, 20.2, 35.7),
    "gpt-oss-120b-q4_k_m.route.csv": (28.0, 53.0, 17.9),
}


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name in TABLE:
        path = tmp_path_factory.mktemp("real") / f"{name}.moetrace"
        code, text = cli_import(FIXTURES / name, path)
        assert code == 0, text
        out[name] = path
    return out


@pytest.mark.parametrize("name", sorted(TABLE))
def test_issue_table_is_reproduced(real: dict[str, Path], name: str) -> None:
    loc = locality(read_trace(real[name]))
    touched, hottest, reuse = TABLE[name]
    assert round(100 * loc["pairs_touched"], 1) == touched
    assert round(loc["hottest_over_uniform"], 1) == hottest
    assert round(100 * loc["next_token_reuse"]["overall"], 1) == reuse
    shares = [b["share"] for b in loc["reuse_distance"]]
    assert sum(shares) == pytest.approx(1.0, abs=1e-5)
    assert [r["share"] for r in loc["hit_rates"]] == [0.1, 0.25, 0.5]
    for row in loc["hit_rates"]:
        assert row["belady"] >= row["lru"]  # Belady is optimal at one object size


def hand_trace() -> Trace:
    """MoE layers 1 and 3 of 4 blocks, 4 experts, k = 2: one prompt token (pos 0, which no
    statistic reads), then decode tokens at pos 1, 2, 3."""
    routes = [  # (step, layer, kind, pos, ids)
        (0, 1, KIND_PROMPT, 0, (0, 1)),
        (0, 3, KIND_PROMPT, 0, (3, 0)),
        (1, 1, KIND_DECODE, 1, (0, 1)),
        (1, 3, KIND_DECODE, 1, (3, 0)),
        (2, 1, KIND_DECODE, 2, (1, 2)),
        (2, 3, KIND_DECODE, 2, (2, 1)),
        (3, 1, KIND_DECODE, 3, (1, 2)),
        (3, 3, KIND_DECODE, 3, (0, 3)),
    ]
    rows = np.zeros(len(routes), dtype=row_dtype(2, False))
    for i, (step, layer, kind, pos, ids) in enumerate(routes):
        rows[i]["step"], rows[i]["layer"], rows[i]["kind"], rows[i]["pos"] = step, layer, kind, pos
        rows[i]["ids"] = ids
    header = {
        "format": "moetrace",
        "version": VERSION,
        "n_layers": 4,
        "moe_layers": [1, 3],
        "n_experts": 4,
        "n_expert_used": 2,
        "has_weights": False,
    }
    return Trace(header=header, rows=rows)


def test_hand_built_trace() -> None:
    loc = locality(hand_trace())
    # counts: layer 1: e0 1, e1 3, e2 2, e3 0; layer 3: e0 2, e1 1, e2 1, e3 2 (12 activations)
    assert (loc["decode_tokens"], loc["activations"], loc["pairs"]) == (3, 12, 8)
    assert loc["pairs_touched"] == 0.875  # 7 of 8
    assert loc["hottest_count"] == 3
    assert loc["hottest_over_uniform"] == 2.0  # 3 / (12 / 8)
    # layer 1 keeps 1 then 2 of 2; layer 3 keeps 0 then 0
    assert loc["next_token_reuse"] == {
        "overall": 0.375,
        "per_layer": [{"layer": 1, "reuse": 0.75}, {"layer": 3, "reuse": 0.0}],
    }
    shares = {b["distance"]: b["share"] for b in loc["reuse_distance"]}
    assert shares == {
        "1": 0.25,  # layer 1: e1 at 2 and 3, e2 at 3
        "2": 0.166667,  # layer 3: e3 and e0 at 3
        "3-4": 0.0,
        "5-8": 0.0,
        "9-16": 0.0,
        "17-32": 0.0,
        "33-64": 0.0,
        ">64": 0.0,
        "first": 0.583333,  # the other 7
    }
    # capacities max(k, floor(share x 8)): 2, 2, 4. At 2 every event evicts the previous one's
    # experts; at 4 both LRU and Belady keep layer 1's {1, 2} for token 3 (3 hits of 12).
    assert loc["hit_rates"] == [
        {"share": 0.1, "capacity": 2, "lru": 0.0, "belady": 0.0},
        {"share": 0.25, "capacity": 2, "lru": 0.0, "belady": 0.0},
        {"share": 0.5, "capacity": 4, "lru": 0.25, "belady": 0.25},
    ]


def test_prompt_only_trace_has_no_statistics() -> None:
    trace = hand_trace()
    prompt = Trace(header=trace.header, rows=trace.rows[:2])
    loc = locality(prompt)
    assert (loc["decode_tokens"], loc["activations"], loc["pairs_touched"]) == (0, 0, 0.0)
    assert loc["hottest_over_uniform"] is None and loc["next_token_reuse"]["overall"] is None
    assert loc["hit_rates"] == []


def test_info_and_compare(tmp_path: Path, real: dict[str, Path]) -> None:
    hand = write_trace(tmp_path / "hand.moetrace", hand_trace().header, hand_trace().rows)
    info = json.loads(run_cli("trace", "info", str(hand), "--json", check=True).stdout)
    assert info["locality"] == locality(hand_trace())
    text = run_cli("trace", "info", str(hand), check=True).stdout
    assert "  next-token reuse             37.5%\n" in text
    assert "  next-token reuse per layer   1:75.0%  3:0.0%\n" in text
    qwen, gpt = real["qwen3-30b-a3b-q4_k_m.route.csv"], real["gpt-oss-120b-q4_k_m.route.csv"]
    both = json.loads(run_cli("trace", "compare", str(qwen), str(gpt), "--json", check=True).stdout)
    assert both["a"]["locality"] == locality(read_trace(qwen))
    assert both["b"]["locality"]["pairs_touched"] == locality(read_trace(gpt))["pairs_touched"]
    assert (both["a"]["shape"], both["b"]["shape"]) == ("48 x 128, k = 6", "36 x 128, k = 2")
    lines = run_cli("trace", "compare", str(qwen), str(gpt), check=True).stdout.splitlines()

    def row(label: str) -> list[str]:
        return next(line for line in lines if line.startswith(label)).split()

    assert row("pairs touched")[-6:] == ["49.8%", "of", "6144", "28.0%", "of", "4608"]
    assert row("hottest / uniform")[-2:] == ["20.8", "53.0"]
    assert row("next-token reuse")[-2:] == ["38.0%", "17.9%"]
