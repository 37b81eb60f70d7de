"""Trial timeouts from the model's size, its experts and the disk probe (appliance.runs.trial_time),
and the sweep's estimate from the same worst-case reads."""

from pathlib import Path

import pytest

from appliance.models.skeleton import write_skeleton
from appliance.runs.profile import load_profile
from appliance.runs.trial_time import (
    ASSUMED_READ_BPS,
    model_trial_timeout_s,
    prompt_token_bound,
    trial_read_bytes,
    trial_timeout_s,
)
from tests.conftest import REPO

GIB = 1 << 30


def test_the_worst_case_reads_the_file_once_and_k_of_n_experts_per_token() -> None:
    assert trial_read_bytes(GIB, 0, 8, 64) == GIB
    assert trial_read_bytes(GIB, 10, 8, 64) == 2.25 * GIB  # 1 + 10 x 8 / 64


def test_the_timeout_is_four_times_start_reads_and_compute() -> None:
    # 4 x (10 s start + 2.25 GiB at 1 GiB/s + 10 tokens x 1 s)
    assert trial_timeout_s(GIB, 10, 8, 64, read_bps=GIB) == pytest.approx(4 * (10 + 2.25 + 10))
    # no probe: the assumed 200 MiB/s
    assert ASSUMED_READ_BPS == 200 << 20
    assert trial_timeout_s(GIB, 10, 8, 64) == pytest.approx(4 * (10 + 2.25 * 1024 / 200 + 10))
    assert trial_timeout_s(GIB, 10, 8, 64, read_bps=0) == trial_timeout_s(GIB, 10, 8, 64)


def test_a_faster_disk_and_a_smaller_model_shorten_the_timeout() -> None:
    slow = trial_timeout_s(18 * GIB, 85, 8, 256, read_bps=200e6)
    fast = trial_timeout_s(18 * GIB, 85, 8, 256, read_bps=1e9)
    assert fast < slow
    assert trial_timeout_s(GIB, 85, 8, 256, read_bps=1e9) < fast


def test_prompt_tokens_are_bounded_by_its_bytes() -> None:
    assert prompt_token_bound("The quick brown fox") == 21
    assert prompt_token_bound("é") == 4


def test_a_model_file_gives_its_size_experts_and_the_schedule_tokens(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    write_skeleton(REPO / "evidence" / "plans" / "qwen3-30b-a3b-q4_k_m.input.json", model)
    with open(model, "r+b") as handle:  # a sparse file of a full model's size, the header first
        handle.truncate(18 * GIB)
    schedule = load_profile("tiny-oversub").schedule  # 32 tokens after "The quick brown fox"
    tokens = 21 + 32
    expected = 4 * (10 + 18 * GIB * (1 + tokens * 8 / 128) / 1e9 + tokens)
    assert model_trial_timeout_s(model, schedule, 1e9) == pytest.approx(expected)


def test_a_file_without_experts_counts_whole_per_token(tmp_path: Path) -> None:
    model = tmp_path / "dense.bin"
    model.write_bytes(b"\0" * 4096)
    schedule = load_profile("tiny-oversub").schedule
    assert model_trial_timeout_s(model, schedule, 4096.0) == pytest.approx(4 * (10 + (1 + 53) + 53))
