"""Bytes per expert have one definition: the trace's replay and the planner's accounting give
the same numbers, from the header alone (a header-only skeleton gives what the full file does)."""

from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.models.skeleton import write_skeleton
from appliance.planner.accounting import account_file
from appliance.trace.expert_bytes import expert_slice_bytes, gguf_expert_layout, routed_expert_layer
from tests.conftest import REPO
from tests.models import tiny_model

SKELETON_INPUT = REPO / "evidence" / "plans" / "qwen35-35b-a3b-ud-iq4_nl.input.json"


@pytest.mark.parametrize("arch", ["qwen3moe", "qwen35moe"])
def test_trace_and_planner_agree_on_a_synthesized_model(arch: str) -> None:
    model = tiny_model(arch, size="64MiB")
    n_experts, k, per_layer = gguf_expert_layout(model)
    acc = account_file(model)
    assert (n_experts, k) == (acc.facts.experts, acc.facts.experts_used)
    assert per_layer == acc.expert_bytes_by_layer
    assert {layer: b * n_experts for layer, b in per_layer.items()} == acc.routed_by_layer


def test_trace_and_planner_agree_on_a_header_only_skeleton(tmp_path: Path) -> None:
    skeleton = tmp_path / "qwen35.gguf"
    write_skeleton(SKELETON_INPUT, skeleton)
    n_experts, k, per_layer = gguf_expert_layout(skeleton)
    acc = account_file(skeleton)
    assert acc.partial and (n_experts, k) == (256, 8)
    assert per_layer == acc.expert_bytes_by_layer
    assert sorted(set(per_layer.values())) == [1490944]  # measured before the two were merged
    assert sorted(per_layer) == list(range(40))


def test_routed_expert_tensors_are_named_once() -> None:
    assert routed_expert_layer("blk.7.ffn_gate_exps.weight") == 7
    assert routed_expert_layer("blk.7.ffn_gate_up_exps.weight") == 7
    assert routed_expert_layer("blk.7.ffn_down_exps.bias") == 7
    assert routed_expert_layer("blk.7.ffn_gate_shexp.weight") is None
    assert routed_expert_layer("blk.7.ffn_gate_inp.weight") is None
    assert routed_expert_layer("token_embd.weight") is None
    assert expert_slice_bytes("t", (64, 32, 8), 8 * 4096, 16, "m") == 4096  # its own expert axis
    assert expert_slice_bytes("t", (32, 8), 8 * 64, 8, "m") == 64  # 2-d: the model's count


def test_a_file_that_is_not_gguf_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope" * 16)
    with pytest.raises(ConfigError, match=r"^cannot read GGUF: .*bad\.gguf: not a GGUF file"):
        gguf_expert_layout(bad)
