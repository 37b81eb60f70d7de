"""Synthetic traces: valid v1 layout, step structure, and the knobs doing what they say."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from appliance.core.errors import ConfigError
from appliance.trace.format import KIND_DECODE, KIND_PROMPT, read_trace, write_trace
from appliance.trace.synth import TraceSynthSpec, synth_trace


def test_layout_round_trips_and_follows_spec_order(tmp_path: Path) -> None:
    spec = TraceSynthSpec(n_layers=3, n_experts=10, k=3, n_prompt=10, n_ubatch=4, n_decode=5, seed=9)
    trace = synth_trace(spec)
    path = write_trace(tmp_path / "s.moetrace", trace.header, trace.rows)  # checks order too
    back = read_trace(path)
    assert back.rows.tobytes() == trace.rows.tobytes()
    assert back.tokens_per_step().tolist() == [4, 4, 2, 1, 1, 1, 1, 1]
    rows = back.rows
    assert (rows["kind"][rows["pos"] < 10] == KIND_PROMPT).all()
    assert (rows["kind"][rows["pos"] >= 10] == KIND_DECODE).all()
    ids = rows["ids"]
    assert all(len(set(row)) == 3 for row in ids.tolist())  # k distinct experts per token
    for layer in range(3):
        assert (np.bincount(rows["layer"]) == 15).all()
        assert rows["pos"][rows["layer"] == layer].tolist() == list(range(15))


def test_same_seed_same_trace_other_seed_differs() -> None:
    a = synth_trace(TraceSynthSpec(seed=3)).rows.tobytes()
    assert synth_trace(TraceSynthSpec(seed=3)).rows.tobytes() == a
    assert synth_trace(TraceSynthSpec(seed=4)).rows.tobytes() != a


def test_correlation_raises_reuse_of_previous_token() -> None:
    def reuse(correlation: float) -> float:
        spec = TraceSynthSpec(
            n_layers=1, n_experts=64, k=4, n_prompt=0, n_decode=400, skew=0.0, correlation=correlation, seed=1
        )
        ids = synth_trace(spec).rows["ids"]
        return float(
            np.mean([len(set(a) & set(b)) for a, b in zip(ids[:-1].tolist(), ids[1:].tolist(), strict=True)])
        )

    low, high = reuse(0.0), reuse(0.8)
    assert low < 0.6 < 2.5 < high


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (dict(k=0), "1 <= k <= experts, got layers=4, experts=32, k=0"),
        (dict(k=40), "1 <= k <= experts, got layers=4, experts=32, k=40"),
        (dict(n_ubatch=0), "n_ubatch must be >= 1, got 0"),
        (dict(correlation=1.5), "correlation in [0, 1], got skew=1.0, correlation=1.5"),
        (dict(n_prompt=0, n_decode=0), "needs at least one prompt or decode token"),
        (dict(skew=-1.0), "skew must be >= 0 and correlation in [0, 1], got skew=-1.0"),
    ],
)
def test_bad_specs_refused(bad: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        synth_trace(TraceSynthSpec(**bad))


def test_recall_reaches_further_back_than_the_previous_token() -> None:
    """Recall re-uses experts of earlier tokens: far more activations come back after 2-16
    tokens than from popularity alone (no skew: a flat popularity brings few back soon)."""
    from appliance.trace.locality import locality

    def near_share(recall: float) -> float:
        spec = TraceSynthSpec(
            n_layers=2, n_experts=256, k=4, n_prompt=0, n_decode=300, skew=0.0, correlation=0.0,
            recall=recall, recall_exponent=1.0, recall_window=16, seed=2,
        )  # fmt: skip
        buckets = {b["distance"]: b["share"] for b in locality(synth_trace(spec))["reuse_distance"]}
        return sum(buckets[label] for label in ("2", "3-4", "5-8", "9-16"))

    low, high = near_share(0.0), near_share(0.6)
    assert low < 0.25 < 0.35 < high


def test_skew_spread_gives_layers_different_hottest_experts() -> None:
    def hottest_shares(spread: float) -> list[float]:
        spec = TraceSynthSpec(n_layers=8, n_experts=64, k=2, n_prompt=0, n_decode=400, correlation=0.0,
                              skew=1.0, skew_spread=spread, seed=3)  # fmt: skip
        rows = synth_trace(spec).rows
        return [
            np.bincount(rows["ids"][rows["layer"] == layer].ravel(), minlength=64).max() / 400
            for layer in range(8)
        ]

    flat, spread = hottest_shares(0.0), hottest_shares(0.9)
    assert max(flat) - min(flat) < 0.1 < 0.3 < max(spread) - min(spread)


def test_new_knobs_off_keep_the_old_bytes_and_header() -> None:
    """recall 0 and skew_spread 0 are the synth before them: same ids, no new header keys."""
    trace = synth_trace(TraceSynthSpec(seed=5, recall_exponent=2.0, recall_window=9))
    assert trace.header["synthetic"] == {"skew": 1.0, "correlation": 0.3, "seed": 5}
    assert trace.rows.tobytes() == synth_trace(TraceSynthSpec(seed=5)).rows.tobytes()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (dict(recall=1.5), "recall must be in [0, 1] and recall_exponent >= 0, got recall=1.5"),
        (dict(recall_exponent=-1.0), "got recall=0.0, recall_exponent=-1.0"),
        (dict(recall_window=-1), "recall_window must be >= 0 (0: the whole sequence), got -1"),
        (dict(skew_spread=1.5), "skew_spread must be in [0, 1], got 1.5"),
    ],
)
def test_bad_recall_and_spread_refused(bad: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        synth_trace(TraceSynthSpec(**bad))
