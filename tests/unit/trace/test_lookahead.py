"""Predicting an lru expert cache's misses one layer ahead (appliance/trace/lookahead.py)."""

import json
from pathlib import Path

import numpy as np
import pytest

from appliance.core.errors import ConfigError
from appliance.trace import kernels
from appliance.trace.events import trace_events
from appliance.trace.format import KIND_DECODE, KIND_PROMPT, Trace, row_dtype, write_trace
from appliance.trace.interchange import import_trace
from appliance.trace.lookahead import _events, _Lru, score_predictors
from appliance.trace.replay import pool_hits
from appliance.trace.synth import TraceSynthSpec, synth_header
from tests.conftest import run_cli

REAL = Path(__file__).parents[2] / "fixtures" / "real-routes" / "qwen3-30b-a3b-q4_k_m.route.csv"
CYCLE = [1, 2, 3, 1, 2, 3, 1, 2]  # decode steps 1-8: both layers choose the same expert


def cycling_trace() -> Trace:
    """2 layers x 4 experts, k = 1: the prompt (step 0) chooses expert 0 at both layers, then
    decode step t chooses CYCLE[t - 1] at both, so layer 1's expert always equals layer 0's."""
    records = [(0, layer, KIND_PROMPT, 0, 0, [0]) for layer in (0, 1)]
    for step, expert in enumerate(CYCLE, start=1):
        records += [(step, layer, KIND_DECODE, 0, step, [expert]) for layer in (0, 1)]
    rows = np.array(records, dtype=row_dtype(1, False))
    return Trace(header=synth_header(TraceSynthSpec(n_layers=2, n_experts=4, k=1)), rows=rows)


def test_each_predictor_on_a_trace_worked_by_hand() -> None:
    # Capacity 2: after each event the pool holds the last two objects, so every decode event
    # misses (16 misses, 8 at layer 1). Layer 1 is predicted once layer 0 of its step is served.
    scores = {s.predictor: s for s in score_predictors(cycling_trace(), capacity=2, predicted=1)}
    assert {s.decode_misses for s in scores.values()} == {16}
    assert {s.decode_tokens for s in scores.values()} == {8}
    # the oracle reads every layer-1 miss ahead; layer 0 is never predicted
    assert (scores["oracle"].misses_read_ahead, scores["oracle"].wasted) == (8, 0)
    assert scores["oracle"].recall == 0.5
    # the previous step's layer-1 expert is still resident when layer 1 is predicted: nothing read
    assert (scores["previous-token"].misses_read_ahead, scores["previous-token"].wasted) == (0, 0)
    # the most chosen layer-1 expert so far (ties: lowest id): 0 at steps 2-4 (not resident: wasted),
    # 1 at 5 (resident), 1 at 6 (wasted), 1 at 7 (the miss), 1 at 8 (resident)
    assert (scores["popularity"].misses_read_ahead, scores["popularity"].wasted) == (1, 4)
    # co-occurrence knows each pair after the first cycle: steps 4-8 right; steps 2 and 3 fall
    # back to popularity (expert 0, wasted); step 1 too, but expert 0 is resident then
    assert (scores["co-occurrence"].misses_read_ahead, scores["co-occurrence"].wasted) == (5, 2)
    assert scores["co-occurrence"].recall == 5 / 16
    assert scores["co-occurrence"].wasted_per_token == 2 / 8


@pytest.mark.parametrize("capacity", [614, 2457])
def test_its_lru_misses_what_the_replay_kernel_misses_on_a_real_trace(capacity: int) -> None:
    trace = import_trace(REAL, "route-trace-csv", None)
    lru, n, misses = _Lru(capacity), trace.n_experts, 0
    for _step, j, _decode, ids in _events(trace):
        misses += len(lru.event(sorted({j * n + int(e) for e in np.unique(ids)})))
    hits = pool_hits(trace_events(trace).stream, kernels.LRU, capacity, None, None)
    assert misses == int((hits == 0).sum()) > 0


def test_an_event_larger_than_the_capacity_and_a_bad_prediction_size_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"an event needs 2 experts, more than the capacity 1"):
        _Lru(1).event([0, 1])
    with pytest.raises(ConfigError, match=r"--predict must be 1 to 4 experts \(got 5\)"):
        score_predictors(cycling_trace(), capacity=2, predicted=5)


def test_the_command_prints_every_predictor_and_json(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "cycle.moetrace", cycling_trace().header, cycling_trace().rows)
    # 8 pairs x 0.25 = capacity 2, as worked by hand above
    done = run_cli("trace", "lookahead", str(path), "--capacity", "0.25", "--json", check=True)
    report = json.loads(done.stdout)
    by = {s["predictor"]: s for s in report["scores"]}
    assert report["pairs"] == 8 and by["co-occurrence"]["misses_read_ahead"] == 5
    assert by["oracle"]["recall"] == 0.5 and by["popularity"]["wasted"] == 4
    text = run_cli("trace", "lookahead", str(path), "--capacity", "0.25", check=True).stdout
    assert "lru at 2 of 8 pairs, 16 decode misses in 8 tokens" in text
    assert [line.split()[0] for line in text.splitlines()[2:]] == [
        "oracle",
        "previous-token",
        "popularity",
        "co-occurrence",
    ]
    bad = run_cli("trace", "lookahead", str(path), "--predict", "5")
    assert bad.returncode != 0 and bad.stderr.strip().splitlines() == [
        "error: --predict must be 1 to 4 experts (got 5)"
    ]
