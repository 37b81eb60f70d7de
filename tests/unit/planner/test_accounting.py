"""GGUF accounting from headers: exact sizes, header-only files, damaged input."""

import shutil
import struct
from pathlib import Path

import pytest
from gguf import GGUFReader

from appliance.core.errors import ApplianceError
from appliance.planner.accounting import account_file
from tests.conftest import run_cli
from tests.models import tiny_model


@pytest.fixture(scope="module", params=["qwen3moe", "qwen35moe"])
def model(request: pytest.FixtureRequest) -> Path:
    return tiny_model(request.param, size="24MiB", experts=32, used=4)


def test_sizes_match_the_gguf_package_reader(model: Path) -> None:
    acc = account_file(model)
    reader = GGUFReader(model)
    by_name = {t.name: t for t in reader.tensors}
    assert len(acc.tensors) == len(by_name)
    for t in acc.tensors:
        assert t.nbytes == int(by_name[t.name].n_bytes), t.name
        assert t.offset == by_name[t.name].data_offset, t.name
    assert acc.header_bytes == min(t.data_offset for t in reader.tensors)
    assert not acc.partial and acc.file_size == model.stat().st_size
    assert sum(acc.groups.values()) == acc.tensor_data_bytes
    assert acc.tensor_data_bytes + acc.padding_bytes == acc.file_size - acc.header_bytes
    assert acc.groups["routed_experts"] == sum(int(t.n_bytes) for t in reader.tensors if "_exps." in t.name)


def test_expert_bytes_per_layer_and_arch_facts(model: Path) -> None:
    acc = account_file(model)
    f = acc.facts
    assert (f.layers, f.experts, f.experts_used, f.embedding, f.vocab) == (4, 32, 4, 256, 260)
    assert sorted(acc.expert_bytes_by_layer) == [0, 1, 2, 3]
    for layer, one_expert in acc.expert_bytes_by_layer.items():
        assert one_expert * 32 == acc.routed_by_layer[layer]
    assert acc.routed_bytes_per_token == 4 * sum(acc.expert_bytes_by_layer.values())
    if f.arch == "qwen35moe":
        assert f.attention_layers == [3] and f.recurrent_layers == [0, 1, 2]
        assert acc.groups["shared_experts"] > 0
        # conv state (4-1) x (128 + 2*2*32) + SSM state 32 x 128, f32, three recurrent layers
        assert f.recurrent_state_bytes == 3 * (3 * 256 + 32 * 128) * 4
    else:
        assert f.attention_layers == [0, 1, 2, 3] and acc.groups["shared_experts"] == 0
    assert f.kv_bytes_per_token() == len(f.attention_layers) * 2 * (64 + 64) * 2


def test_header_only_file_plans_like_the_full_file(model: Path, tmp_path: Path) -> None:
    full = account_file(model)
    partial_path = tmp_path / "header.gguf"
    with open(model, "rb") as src:
        partial_path.write_bytes(src.read(full.header_bytes))
    partial = account_file(partial_path)
    assert partial.partial
    assert partial.groups == full.groups
    assert partial.expert_bytes_by_layer == full.expert_bytes_by_layer
    assert partial.file_size == full.file_size


def test_truncated_header_is_refused(model: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    with open(model, "rb") as src:
        cut.write_bytes(src.read(account_file(model).header_bytes - 200))
    with pytest.raises(
        ApplianceError,
        match=r"truncated GGUF header: it ends at byte \d+ while "
        r"reading tensor info \d+ of \d+",
    ):
        account_file(cut)


def test_not_a_gguf_is_refused_by_plan(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04" + bytes(100))
    result = run_cli("plan", str(bogus), "--ram", "8GiB", "--vram", "0")
    assert result.returncode == 1
    assert result.stderr == f"error: {bogus}: not a GGUF file (magic b'PK\\x03\\x04', expected b'GGUF')\n"


def test_unknown_tensor_type_is_named(model: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "odd.gguf"
    shutil.copy(model, damaged)
    data = bytearray(damaged.read_bytes()[: account_file(model).header_bytes])
    name = b"blk.1.ffn_down_exps.weight"
    at = data.find(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    struct.pack_into("<I", data, at + 4 + 8 * n_dims, 99)
    with open(damaged, "r+b") as handle:
        handle.write(data)
    with pytest.raises(
        ApplianceError,
        match="tensor 'blk.1.ffn_down_exps.weight' has ggml type id 99, which this planner does not know",
    ):
        account_file(damaged)
