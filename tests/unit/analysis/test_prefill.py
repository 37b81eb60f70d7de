"""The prompt against its bound: distinct chosen experts plus non-expert tensors, reads over it,
and the bandwidth while reading over the probe at the depth the prompt read at."""

import numpy as np
import pytest

from appliance.analysis.capacity import ModelExperts
from appliance.analysis.prefill import prefill_row, prompt_union_bytes
from appliance.runs.timing import TimingRecord
from appliance.trace.format import KIND_DECODE, KIND_PROMPT, Trace, row_dtype
from appliance.trace.synth import TraceSynthSpec, synth_header

K = 2
LAYERS = {0: 1_000, 1: 3_000}  # one expert's bytes per MoE layer: the layers differ
EXPERTS = ModelExperts(file_bytes=16 * 4_000 + 500, expert_bytes=LAYERS, n_experts=16, k=K)


def trace_of(prompt: list[list[list[int]]], decode: list[list[int]]) -> Trace:
    """prompt[step][token] and decode[step]: the k experts a token chose, the same in each layer
    but shifted by 8 in layer 1, so that the layers' unions are told apart by their sizes."""
    records = []
    pos = 0
    for step, tokens in enumerate(prompt):
        for ids in tokens:
            for layer in LAYERS:
                records.append((step, layer, KIND_PROMPT, 0, pos, [i + 8 * layer for i in ids]))
            pos += 1
    for j, ids in enumerate(decode):
        for layer in LAYERS:
            records.append((len(prompt) + j, layer, KIND_DECODE, 0, pos, [i + 8 * layer for i in ids]))
        pos += 1
    header = synth_header(TraceSynthSpec(n_layers=2, n_experts=16, k=K))
    return Trace(header=header, rows=np.array(records, dtype=row_dtype(K, False)))


def test_the_union_counts_each_chosen_expert_once_per_layer_and_ignores_decode() -> None:
    # two prompt steps choosing {0, 1, 2} (expert 1 twice, across steps); decode chooses 5 and 6
    trace = trace_of([[[0, 1], [1, 2]], [[2, 1]]], [[5, 6], [5, 6]])
    assert prompt_union_bytes(trace, EXPERTS) == 3 * 1_000 + 3 * 3_000


def timing(**fields: object) -> TimingRecord:
    base = {"n_prompt_tokens": 3, "prompt_s": 2.0, "prompt_tokens_per_s": 1.5}
    return TimingRecord.from_json({**base, **fields}, "timing.json")


PROBE = {1: 100.0, 8: 1_000.0}


def test_a_faulting_prompt_is_its_reads_over_its_seconds_against_the_depth_1_probe() -> None:
    trace = trace_of([[[0, 1], [1, 2]]], [[5, 6]])
    bound = 3 * 1_000 + 3 * 3_000 + 500  # the union and the non-expert bytes
    row = prefill_row(timing(), 13_000, trace, EXPERTS, PROBE, ["--no-repack"])
    assert row["union_bytes"] == bound - 500 and row["bound_bytes"] == bound
    assert row["read_over_bound"] == pytest.approx(13_000 / bound)
    assert row["read_bytes_per_s"] == 6_500.0 and row["read_depth"] == 1 and row["disk_probe_depth"] == 1
    assert row["disk_fraction"] == 65.0 and row["readers"] is None
    assert (row["tokens"], row["seconds"], row["tps"]) == (3, 2.0, 1.5)


def test_prefill_readers_are_their_bytes_over_their_busy_seconds_at_their_depth() -> None:
    trace = trace_of([[[0, 1]]], [[5, 6]])
    readers = {"readers": 4, "read_bytes": 8_000, "read_busy_s": 0.5, "queued_bytes": 8_000}
    row = prefill_row(
        timing(prefill_readers=readers),
        9_000,
        trace,
        EXPERTS,
        PROBE,
        ["--prefetch-experts", "--prefill-readers", "4"],
    )
    assert row["read_bytes_per_s"] == 16_000.0  # not the prompt's 9,000 bytes over 2 s
    assert row["read_depth"] == 4 and row["disk_probe_depth"] == 8 and row["disk_fraction"] == 16.0
    assert row["readers"] == readers
    # a record without a busy time, or a prompt without reads, says so rather than guessing
    idle = prefill_row(timing(prefill_readers={**readers, "read_busy_s": 0}), None, trace, EXPERTS, PROBE, [])
    assert (
        idle["read_bytes_per_s"] is None and idle["disk_fraction"] is None and idle["read_over_bound"] is None
    )
