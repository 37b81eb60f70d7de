import json
from pathlib import Path

import pytest
from rich.console import Console

from appliance.analysis.run_summary import print_outcome
from appliance.analysis.stats import describe, mad_outliers, summarize

# (variant, repeat, status, wall s, decode tok/s, text, bytes read)
TRIALS = [
    ("baseline", 1, "ok", 10.0, 1.0, b"the same words", 1000),
    ("demand-mmap", 1, "ok", 2.0, 5.0, b"the same words, and more", 400),
    ("baseline", 2, "ok", 12.0, 0.8, b"the same words", 1000),
    ("demand-mmap", 2, "ok", 3.0, 4.0, b"the same words", 300),
    ("baseline", 3, "oom-killed", None, None, None, 50),
    ("demand-mmap", 3, "ok", 2.5, 4.5, b"the same words", 500),
]


def _run_dir(tmp_path: Path, trials=TRIALS) -> Path:  # type: ignore[no-untyped-def]
    for index, (variant, repeat, status, wall, decode, text, read) in enumerate(trials, 1):
        d = tmp_path / "trials" / f"{index:03d}-{variant}-r{repeat}"
        d.mkdir(parents=True)
        record = {
            "variant": variant,
            "repeat": repeat,
            "status": status,
            "model_device": "8:0",
            "engine_wall_s": wall,
        }
        (d / "trial.json").write_text(json.dumps(record))
        (d / "cgroup.json").write_text(
            json.dumps(
                {
                    "peak_bytes": 100 * index,
                    "block_read_bytes": {"8:0": read, "9:0": 7},
                    "major_faults": index,
                }
            )
        )
        if decode is not None:
            (d / "timing.json").write_text(
                json.dumps({"decode_tokens_per_s": decode, "prefill_tokens_per_s": 50.0, "decode_tokens": 4})
            )
        if text is not None:
            (d / "output.txt").write_bytes(text)
    return tmp_path


def test_per_variant_statistics_keep_raw_samples_and_skip_failed_trials(tmp_path: Path) -> None:
    results = summarize(_run_dir(tmp_path), ["baseline", "demand-mmap"], n_predict=4)
    base = results["variants"]["baseline"]
    assert base["counts"] == {
        "ok": 2,
        "oom-killed": 1,
        "failed": 0,
        "timed-out": 0,
        "interrupted": 0,
        "over-budget": 0,
    }
    assert base["wall_s"]["samples"] == [10.0, 12.0]
    assert (base["wall_s"]["median"], base["wall_s"]["min"], base["wall_s"]["max"]) == (11.0, 10.0, 12.0)
    assert base["wall_s"]["spread"] == 2.0
    demand = results["variants"]["demand-mmap"]
    assert demand["decode_tps"]["median"] == 4.5
    assert demand["block_read_bytes"]["samples"] == [400, 300, 500]  # the model's device only
    assert demand["bytes_read_per_token"]["samples"] == [100.0, 75.0, 125.0]
    assert results["statuses"]["005-baseline-r3"] == "oom-killed"


def test_ratios_are_taken_pair_by_pair_within_each_round(tmp_path: Path) -> None:
    results = summarize(_run_dir(tmp_path), ["baseline", "demand-mmap"], n_predict=4)
    (ratio,) = results["ratios"]
    assert (ratio["numerator"], ratio["denominator"]) == ("demand-mmap", "baseline")
    wall = ratio["metrics"]["wall_s"]
    assert wall["pairs"] == [{"repeat": 1, "ratio": 0.2}, {"repeat": 2, "ratio": 0.25}]
    assert wall["median"] == pytest.approx(0.225)  # not median(demand) / median(baseline)
    assert ratio["metrics"]["decode_tps"]["samples"] == [5.0, 5.0]


def test_texts_agree_at_matched_length(tmp_path: Path) -> None:
    identity = summarize(_run_dir(tmp_path), ["baseline", "demand-mmap"], 4)["byte_identity"]
    assert identity["all_identical"] is True and identity["findings"] == []
    assert identity["reference"] == "001-baseline-r1"
    assert [c["matched_length"] for c in identity["comparisons"]] == [14, 14, 14, 14]


def test_a_differing_text_is_a_finding_with_its_offset(tmp_path: Path) -> None:
    trials = list(TRIALS)
    trials[3] = ("demand-mmap", 2, "ok", 3.0, 4.0, b"the sane words", 300)
    identity = summarize(_run_dir(tmp_path, trials), ["baseline", "demand-mmap"], 4)["byte_identity"]
    assert identity["all_identical"] is False
    assert identity["findings"] == [
        "004-demand-mmap-r2 differs from 001-baseline-r1 at byte 6 of 14 compared"
    ]


def test_mad_flags_the_one_far_sample_only() -> None:
    assert mad_outliers([10.0, 10.2, 9.9, 10.1, 30.0]) == [4]
    assert mad_outliers([10.0, 10.0, 10.0, 11.0]) == []  # MAD 0: nothing to scale by
    assert mad_outliers([1.0, 100.0]) == []  # too few samples to call anything an outlier
    assert describe([10.0, 10.2, 9.9, 10.1, 30.0])["outliers"] == [4]
    assert describe([])["n"] == 0


def test_a_timing_record_the_analyses_cannot_read_is_named_with_its_key(tmp_path: Path) -> None:
    """A newer engine's timing.json with a key TimingRecord lacks reads as no timing in the
    analyses (timing_of); the results say which trial and which key instead of dropping it."""
    run = _run_dir(tmp_path)
    trials = sorted((run / "trials").iterdir())
    engine = {"tool": "llama-moe-trace", "decode_tokens_per_s": 5.0, "router_fused": True}
    (trials[1] / "timing.json").write_text(json.dumps(engine))
    (trials[3] / "timing.json").write_text(json.dumps({**engine, "router_fused": None} | {"tool": "mine"}))
    unread = summarize(run, ["baseline", "demand-mmap"], 32)["timing_unread"]
    assert list(unread) == [trials[1].name]  # a command engine's own timing is not the record
    assert "router_fused" in unread[trials[1].name] and trials[1].name in unread[trials[1].name]
    console = Console(record=True, width=300)
    print_outcome(console, summarize(run, ["baseline", "demand-mmap"], 32), run, "complete")
    assert (
        f"trial {trials[1].name}: timing.json not read, its figures are left out of the tables:"
        in console.export_text()
    )
