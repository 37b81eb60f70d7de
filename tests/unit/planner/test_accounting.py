"""GGUF accounting from headers: exact sizes, header-only files, damaged input."""

import json
import re
import shutil
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFReader

from appliance.core.errors import ApplianceError
from appliance.models.gguf_header import KEEP_ARRAY_MAX, ArrayInfo, GGUFHeader, TensorInfo
from appliance.models.skeleton import write_skeleton
from appliance.planner.accounting import (
    GROUPS,
    MAX_HPARAM,
    MAX_MODEL_EXPERTS,
    MAX_MODEL_LAYERS,
    account,
    account_file,
    account_source,
    classify,
    per_layer,
    whole_number,
)
from tests.conftest import REPO, run_cli
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


def _write_header(writer: Any, path: Path, shapes: list[tuple[str, tuple[int, ...]]]) -> Path:
    """The header of a GGUF with F32 tensors of these (name, shape) and no tensor data."""
    import numpy as np
    from gguf import GGMLQuantizationType

    for name, shape in shapes:
        size = 4 * int(np.prod(shape))
        writer.add_tensor_info(
            name, tuple(reversed(shape)), np.dtype(np.float32), size, raw_dtype=GGMLQuantizationType.F32
        )
    writer.write_header_to_file(path)
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path


def _nextn_skeleton(path: Path, block_count: int, nextn: int) -> Path:
    """A header-only qwen3moe GGUF of block_count blocks, the last `nextn` of them NextN/MTP
    blocks (`blk.N.nextn.*` beside their own experts), every tensor F32."""
    from gguf import GGUFWriter

    embd, vocab, experts, ff, heads, kv, head_dim = 64, 32, 8, 32, 4, 2, 16
    writer = GGUFWriter(None, "qwen3moe")
    for key, value in {
        "block_count": block_count,
        "nextn_predict_layers": nextn,
        "context_length": 1024,
        "embedding_length": embd,
        "expert_count": experts,
        "expert_used_count": 2,
        "expert_feed_forward_length": ff,
        "attention.head_count": heads,
        "attention.head_count_kv": kv,
        "attention.key_length": head_dim,
        "attention.value_length": head_dim,
        "vocab_size": vocab,
    }.items():
        writer.add_uint32(f"qwen3moe.{key}", value)
    shapes: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (embd, vocab))]
    for i in range(block_count):
        b = f"blk.{i}."
        shapes += [
            (b + "attn_q.weight", (embd, heads * head_dim)),
            (b + "attn_k.weight", (embd, kv * head_dim)),
            (b + "ffn_gate_inp.weight", (embd, experts)),
            (b + "ffn_gate_exps.weight", (embd, ff, experts)),
            (b + "ffn_down_exps.weight", (ff, embd, experts)),
        ]
        if i >= block_count - nextn:
            shapes += [(b + "nextn.eh_proj.weight", (2 * embd, embd))]
    return _write_header(writer, path, shapes)


@pytest.mark.parametrize("nextn", [0, 1, 2])
def test_nextn_mtp_blocks_are_not_decoder_layers(nextn: int, tmp_path: Path) -> None:
    acc = account_file(_nextn_skeleton(tmp_path / "skeleton.gguf", 6, nextn))
    f = acc.facts
    assert (f.layers, f.nextn_layers) == (6 - nextn, nextn)
    assert f.attention_layers == list(range(6 - nextn))  # KV cache only for decoder layers
    assert f.kv_bytes_per_token() == (6 - nextn) * 2 * (16 + 16) * 2
    assert acc.summary()["arch"]["layers"] == 6 - nextn
    assert acc.summary()["arch"]["nextn_layers"] == nextn
    # the MTP blocks' own tensors: experts are routed experts of their block, nextn.* "other"
    assert sorted(acc.expert_bytes_by_layer) == list(range(6))
    one_expert = 4 * (64 * 32 + 32 * 64)
    assert set(acc.expert_bytes_by_layer.values()) == {one_expert}
    assert acc.groups["other"] == nextn * 4 * 2 * 64 * 64
    assert {t.layer for t in acc.tensors if t.name.endswith("nextn.eh_proj.weight")} == set(
        range(6 - nextn, 6)
    )


def test_more_nextn_layers_than_blocks_is_a_one_line_refusal(tmp_path: Path) -> None:
    path = _nextn_skeleton(tmp_path / "skeleton.gguf", 2, 2)
    # rewrite the key's value: 3 NextN layers of 2 blocks
    data = bytearray(path.read_bytes())
    key = b"qwen3moe.nextn_predict_layers"
    at = data.index(key) + len(key) + 4  # after the key and its u32 value type
    data[at : at + 4] = struct.pack("<I", 3)
    path.write_bytes(bytes(data))
    with pytest.raises(
        ApplianceError,
        match=r"corrupt GGUF header: qwen3moe.nextn_predict_layers is 3, not a whole number from 0 to 2$",
    ):
        account_file(path)


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("token_embd.weight", ("embeddings", -1)),
        ("per_layer_token_embd.weight", ("embeddings", -1)),
        ("output.weight", ("output", -1)),
        ("output_norm.weight", ("output", -1)),
        ("rope_freqs.weight", ("other", -1)),
        ("blk.3.ffn_gate_shexp.weight", ("shared_experts", 3)),
        ("blk.3.ffn_up_exps.weight", ("routed_experts", 3)),
        ("blk.12.ffn_down_exps.weight", ("routed_experts", 12)),
        ("blk.3.ffn_gate_inp.weight", ("router", 3)),
        ("blk.3.exp_probs_b.bias", ("router", 3)),
        ("blk.3.ffn_norm.weight", ("attention_ssm", 3)),
        ("blk.3.ffn_up.weight", ("dense_ffn", 3)),
        ("blk.3.ffn_down.weight", ("dense_ffn", 3)),
        ("blk.3.nextn.eh_proj.weight", ("other", 3)),
        ("blk.3.attn_q.weight", ("attention_ssm", 3)),
        ("blk.3.ssm_conv1d.weight", ("attention_ssm", 3)),
    ],
)
def test_each_tensor_name_has_its_group_and_layer(name: str, group: tuple[str, int]) -> None:
    assert classify(name) == group


@pytest.mark.parametrize(
    ("value", "low", "high", "shown"),
    [
        (-1, 0, 10, "-1"),
        (11, 0, 10, "11"),
        (0, 1, 10, "0"),
        (2.5, 0, 10, "2.5"),
        (True, 0, 10, "True"),
        ("7", 0, 10, "'7'"),
        ("x" * 70, 0, 10, repr("x" * 70)[:57] + "..."),
        ("x" * 58, 0, 10, repr("x" * 58)),  # 60 characters with its quotes: shown whole
        ("x" * 59, 0, 10, repr("x" * 59)[:57] + "..."),
    ],
)
def test_a_metadata_number_out_of_range_is_one_line_naming_it(
    value: object, low: int, high: int, shown: str
) -> None:
    with pytest.raises(
        ApplianceError, match="^m.gguf: corrupt GGUF header: qwen3moe.block_count is "
    ) as refused:
        whole_number(value, "qwen3moe.block_count", "m.gguf", low, high)
    assert str(refused.value) == (
        f"m.gguf: corrupt GGUF header: qwen3moe.block_count is {shown}, "
        f"not a whole number from {low} to {high}"
    )


def test_metadata_numbers_at_their_edges_and_per_layer_lists() -> None:
    assert whole_number(0, "n", "s") == 0
    assert whole_number(MAX_HPARAM, "n", "s") == MAX_HPARAM
    assert whole_number(4.0, "n", "s", 4, 4) == 4 and type(whole_number(4.0, "n", "s")) is int
    with pytest.raises(
        ApplianceError, match=rf"is {MAX_HPARAM + 1}, not a whole number from 0 to {MAX_HPARAM}$"
    ):
        whole_number(MAX_HPARAM + 1, "n", "s")
    assert per_layer([1, 2], 4, "n", "s") == [1, 2, 0, 0]
    assert per_layer([1, 2], 4, "n", "s", default=9) == [1, 2, 9, 9]
    assert per_layer([1, 2, 3], 2, "n", "s") == [1, 2]
    assert per_layer(5, 3, "n", "s") == [5, 5, 5]
    assert per_layer(None, 3, "n", "s") == [0, 0, 0]
    assert per_layer(None, 2, "n", "s", default=7) == [7, 7]
    with pytest.raises(
        ApplianceError, match=r"^s: corrupt GGUF header: n is -1, not a whole number from 0 to "
    ):
        per_layer([1, -1], 2, "n", "s")


def _field(reader: GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


def test_the_summary_against_the_gguf_package_reader(model: Path) -> None:
    """Every field of the accounting summary (plan --json, evidence/plans) from another
    reader of the same file: the gguf package's tensors and metadata."""
    reader = GGUFReader(model)
    arch = str(_field(reader, "general.architecture"))
    data = sum(int(t.n_bytes) for t in reader.tensors)
    start = min(t.data_offset for t in reader.tensors)
    types: dict[str, int] = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + int(t.n_bytes)
    routed = {
        str(layer): sum(
            int(t.n_bytes)
            for t in reader.tensors
            if t.name.startswith(f"blk.{layer}.") and "_exps." in t.name
        )
        for layer in range(4)
    }
    experts, used = (
        int(_field(reader, f"{arch}.expert_count")),
        int(_field(reader, f"{arch}.expert_used_count")),
    )
    one = {layer: n // experts for layer, n in routed.items()}
    summary = account_file(model).summary()
    groups = summary.pop("groups")
    assert sum(groups.values()) == data
    attention = 4 if arch == "qwen3moe" else 1  # qwen35moe: one full-attention layer in four
    assert summary == {
        "source": str(model),
        "file_size": model.stat().st_size,
        "partial": False,
        "header_bytes": start,
        "tensor_data_bytes": data,
        "padding_bytes": model.stat().st_size - start - data,
        "types": types,
        "routed_bytes_by_layer": routed,
        "expert_bytes_by_layer": one,
        "routed_bytes_per_token": used * sum(one.values()),
        "arch": {
            "name": arch,
            "layers": int(_field(reader, f"{arch}.block_count")),
            "nextn_layers": 0,
            "experts": experts,
            "experts_used": used,
            "expert_ff": int(_field(reader, f"{arch}.expert_feed_forward_length")),
            "context_length": int(_field(reader, f"{arch}.context_length")),
            "embedding": int(_field(reader, f"{arch}.embedding_length")),
            "vocab": len(reader.fields["tokenizer.ggml.tokens"].contents()),
            "attention_layers": attention,
            "recurrent_layers": 4 - attention,
            # K and V of 2 KV heads of 64 dims, f16, per attention layer
            "kv_bytes_per_token": attention * 2 * (64 + 64) * 2,
            # conv state (4-1) x (128 + 2*2*32) + SSM state 32 x 128, f32, per recurrent layer
            "recurrent_state_bytes": (4 - attention) * (3 * 256 + 32 * 128) * 4,
        },
    }


def test_bytes_after_the_last_tensor_count_in_the_file_size(model: Path, tmp_path: Path) -> None:
    longer = tmp_path / "trailing.gguf"
    shutil.copy(model, longer)
    with open(longer, "ab") as out:
        out.write(b"\0" * 100)
    full, trailing = account_file(model), account_file(longer)
    assert trailing.file_size == model.stat().st_size + 100
    assert trailing.padding_bytes == full.padding_bytes + 100
    assert trailing.tensor_data_bytes == full.tensor_data_bytes


def _header_only(path: Path, arch: str, keys: dict[str, object], layers: int) -> Path:
    """A header-only GGUF of `layers` blocks with exactly these metadata keys (arrays for
    lists), each block one routed-expert tensor; every tensor F32."""
    from gguf import GGUFWriter

    writer = GGUFWriter(None, arch)
    for key, value in keys.items():
        if isinstance(value, list):
            writer.add_array(f"{arch}.{key}", value)
        else:
            writer.add_uint32(f"{arch}.{key}", int(value))  # type: ignore[call-overload]
    shapes = [("token_embd.weight", (64, 32))]
    shapes += [(f"blk.{i}.ffn_gate_exps.weight", (64, 8, 4)) for i in range(layers)]
    return _write_header(writer, path, shapes)


BASE_KEYS: dict[str, object] = {
    "block_count": 3,
    "context_length": 1234,
    "embedding_length": 64,
    "expert_count": 4,
    "expert_used_count": 2,
    "attention.head_count": 4,
    "vocab_size": 32,
}


def test_arch_facts_read_each_key_by_its_name(tmp_path: Path) -> None:
    """Values unlike the defaults, so a key read under another name shows (worked by hand)."""
    keys = {
        **BASE_KEYS,
        "feed_forward_length": 77,
        "attention.head_count_kv": [2, 0, 3],  # layer 1 keeps no KV cache: not an attention layer
        "attention.key_length": 24,
        "attention.value_length": 40,
    }
    f = account_file(_header_only(tmp_path / "a.gguf", "qwen3moe", keys, 3)).facts
    assert (f.layers, f.context_length, f.embedding, f.vocab, f.experts, f.experts_used) == (
        3,
        1234,
        64,
        32,
        4,
        2,
    )
    assert f.expert_ff == 77  # no expert_feed_forward_length: the dense one
    assert f.head_count == [4, 4, 4] and f.head_count_kv == [2, 0, 3]
    assert (f.key_length, f.value_length) == (24, 40)
    assert f.attention_layers == [0, 2] and f.recurrent_layers == []
    assert f.kv_bytes_per_token() == (2 + 3) * (24 + 40) * 2


def test_arch_facts_defaults_by_hand(tmp_path: Path) -> None:
    """Without KV heads every head keeps KV; without key/value lengths, embedding / heads."""
    keys = {**BASE_KEYS, "feed_forward_length": 77, "expert_feed_forward_length": 12}
    f = account_file(_header_only(tmp_path / "b.gguf", "qwen3moe", keys, 3)).facts
    assert f.expert_ff == 12  # the expert length wins over the dense one
    assert f.head_count_kv == [4, 4, 4]
    assert (f.key_length, f.value_length) == (16, 16)  # 64 // 4
    assert f.kv_bytes_per_token() == 3 * 4 * (16 + 16) * 2


def test_hybrid_layers_follow_the_full_attention_interval(tmp_path: Path) -> None:
    keys = {
        **BASE_KEYS,
        "block_count": 6,
        "full_attention_interval": 3,
        "ssm.conv_kernel": 1,  # no conv state: (1 - 1) previous inputs
        "ssm.inner_size": 8,
        "ssm.state_size": 5,
        "ssm.group_count": 2,
    }
    f = account_file(_header_only(tmp_path / "h.gguf", "qwen35moe", keys, 6)).facts
    assert f.recurrent_layers == [0, 1, 3, 4] and f.attention_layers == [2, 5]
    assert f.recurrent_state_bytes == 4 * (0 + 5 * 8) * 4
    default = {k: v for k, v in keys.items() if k != "full_attention_interval"}
    f = account_file(_header_only(tmp_path / "d.gguf", "qwen35moe", default, 6)).facts
    assert f.attention_layers == [3]  # every 4th layer by default
    with pytest.raises(ApplianceError, match=r"full_attention_interval is 0, not a whole number from 1 to "):
        account_file(
            _header_only(tmp_path / "z.gguf", "qwen35moe", {**keys, "full_attention_interval": 0}, 6)
        )


PUBLISHED = sorted((REPO / "evidence" / "plans").glob("*.plan.json"))


@pytest.mark.parametrize("published", PUBLISHED, ids=lambda p: p.name)
def test_the_published_plans_accounting_reproduces(published: Path, tmp_path: Path) -> None:
    """evidence/plans publishes each reference model's accounting summary: the header-only
    GGUF rebuilt from its input gives the same one, field for field."""
    doc = json.loads(published.read_text())
    skeleton = tmp_path / doc["accounting"]["source"]
    write_skeleton(published.parent / doc["input"], skeleton)
    acc = account_file(skeleton)
    acc.source = skeleton.name  # evidence names the skeleton, not a host path
    assert acc.summary() == doc["accounting"]


def test_a_layer_with_one_kv_head_is_an_attention_layer(tmp_path: Path) -> None:
    keys = {**BASE_KEYS, "attention.head_count_kv": [1, 0, 1], "attention.key_length": 8}
    f = account_file(_header_only(tmp_path / "one.gguf", "qwen3moe", keys, 3)).facts
    assert f.attention_layers == [0, 2]
    assert f.kv_bytes_per_token() == (1 + 1) * (8 + 16) * 2  # value length: 64 // 4


@pytest.mark.parametrize(
    ("edit", "refusal"),
    [
        ({"expert_used_count": 5}, "qwen3moe.expert_used_count is 5, not a whole number from 0 to 4"),
        (
            {"expert_count": MAX_MODEL_EXPERTS + 1},
            f"expert_count is {MAX_MODEL_EXPERTS + 1}, not a whole number from 0 to {MAX_MODEL_EXPERTS}",
        ),
        (
            {"block_count": MAX_MODEL_LAYERS + 1},
            f"block_count is {MAX_MODEL_LAYERS + 1}, not a whole number from 0 to {MAX_MODEL_LAYERS}",
        ),
        ({"block_count": [1, 2, 3]}, "qwen3moe.block_count is [1, 2, 3], not a whole number from 0 to "),
        (  # too long to keep: the reader keeps its length only
            {"block_count": [1] * (KEEP_ARRAY_MAX + 1)},
            f"qwen3moe.block_count is an array of {KEEP_ARRAY_MAX + 1}, not a whole number from 0 to ",
        ),
    ],
    ids=["used-over-count", "experts", "layers", "array", "long-array"],
)
def test_counts_past_their_bounds_are_refused(edit: dict[str, object], refusal: str, tmp_path: Path) -> None:
    path = _header_only(tmp_path / "bad.gguf", "qwen3moe", {**BASE_KEYS, **edit}, 3)
    with pytest.raises(ApplianceError, match=re.escape(refusal)):
        account_file(path)


def _hand_header(
    metadata: dict[str, Any],
    tensors: Sequence[tuple[str, tuple[int, ...], int]] = (),
    data_offset: int = 96,
    file_size: int | None = None,
) -> GGUFHeader:
    """A qwen3moe header as the reader would return it: F32 tensors (name, shape in ggml
    order, relative offset), a data section at `data_offset`, source "m.gguf"."""
    meta = {"general.architecture": "qwen3moe", **{f"qwen3moe.{k}": v for k, v in metadata.items()}}
    infos = [TensorInfo(name, shape, 0, offset) for name, shape, offset in tensors]
    return GGUFHeader("m.gguf", 3, meta, infos, 32, data_offset, file_size)


@pytest.mark.parametrize("file_size", [96, None], ids=["whole", "unknown-size"])
def test_a_header_without_tensors_is_all_header(file_size: int | None) -> None:
    acc = account(_hand_header({}, [], data_offset=96, file_size=file_size))
    assert (acc.file_size, acc.partial, acc.header_bytes) == (96, file_size is None, 96)
    assert (acc.tensor_data_bytes, acc.padding_bytes) == (0, 0)
    assert acc.groups == dict.fromkeys(GROUPS, 0) and acc.expert_bytes_by_layer == {}


def test_no_layers_means_no_heads_and_no_head_dimension() -> None:
    f = account(_hand_header({"block_count": 0, "embedding_length": 64})).facts
    assert (f.layers, f.head_count, f.head_count_kv) == (0, [], [])
    assert (f.key_length, f.value_length) == (0, 0)  # no heads to divide the embedding by
    assert f.expert_ff == 0 and f.kv_bytes_per_token() == 0


def test_missing_head_counts_are_zero_heads_without_kv_cache() -> None:
    f = account(_hand_header({"block_count": 3, "embedding_length": 64})).facts
    assert f.head_count == [0, 0, 0] and f.head_count_kv == [0, 0, 0]
    assert (f.key_length, f.value_length) == (0, 0)
    assert f.attention_layers == [] and f.kv_bytes_per_token() == 0
    assert f.expert_ff == 0  # neither feed-forward length: none


def test_the_head_dimension_rounds_down() -> None:
    f = account(
        _hand_header({"block_count": 2, "embedding_length": 70, "attention.head_count": [4, 2]})
    ).facts
    assert (f.key_length, f.value_length) == (17, 17)  # 70 // 4, the most heads of any layer


def test_the_expert_length_of_mtp_blocks_is_not_counted() -> None:
    keys = {"block_count": 2, "nextn_predict_layers": 1, "expert_feed_forward_length": [3, 9]}
    f = account(_hand_header(keys)).facts
    assert (f.layers, f.expert_ff) == (1, 3)  # block 1 is the NextN block: its 9 is not read


def test_a_token_list_kept_whole_is_the_vocabulary() -> None:
    header = _hand_header({"block_count": 1, "vocab_size": 32})
    header.metadata["tokenizer.ggml.tokens"] = [0, 1, 2]
    assert account(header).facts.vocab == 3
    header.metadata["tokenizer.ggml.tokens"] = ArrayInfo(8, 5)
    assert account(header).facts.vocab == 5


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("context_length", "x", "'x'"),
        ("attention.head_count", "x", "'x'"),
        ("attention.head_count", [4, -1], "-1"),
        ("feed_forward_length", "x", "'x'"),
        ("expert_feed_forward_length", [-2], "-2"),
    ],
    ids=["number", "per-layer", "per-layer-list", "ff", "expert-ff-list"],
)
def test_a_bad_metadata_value_is_refused_naming_file_and_key(key: str, value: object, shown: str) -> None:
    with pytest.raises(ApplianceError, match=r"^m\.gguf: corrupt GGUF header: qwen3moe\.") as refused:
        account(_hand_header({"block_count": 2, key: value}))
    assert str(refused.value) == (
        f"m.gguf: corrupt GGUF header: qwen3moe.{key} is {shown}, not a whole number from 0 to {MAX_HPARAM}"
    )


def test_a_bad_scalar_per_layer_value_names_file_and_key() -> None:
    with pytest.raises(
        ApplianceError, match=r"^s: corrupt GGUF header: n is -1, not a whole number"
    ) as refused:
        per_layer(-1, 2, "n", "s")
    assert str(refused.value) == f"s: corrupt GGUF header: n is -1, not a whole number from 0 to {MAX_HPARAM}"


def test_an_unknown_tensor_type_names_the_file() -> None:
    header = _hand_header({"block_count": 1}, [("blk.0.attn_q.weight", (4, 4), 0)])
    header.tensors[0] = TensorInfo("blk.0.attn_q.weight", (4, 4), 99, 0)
    with pytest.raises(
        ApplianceError, match=r"^m\.gguf: tensor 'blk\.0\.attn_q\.weight' has ggml type id 99,"
    ):
        account(header)


def test_a_routed_expert_tensor_of_no_experts_is_refused_by_name() -> None:
    header = _hand_header(
        {"block_count": 1, "expert_count": 4}, [("blk.0.ffn_gate_exps.weight", (64, 8, 0), 0)]
    )
    with pytest.raises(ApplianceError, match=r"^m\.gguf: corrupt GGUF header: routed expert") as refused:
        account(header)
    assert str(refused.value) == (
        "m.gguf: corrupt GGUF header: routed expert tensor 'blk.0.ffn_gate_exps.weight' "
        "has shape [64, 8, 0], 0 experts"
    )


def test_a_two_dimensional_routed_tensor_splits_by_the_expert_count() -> None:
    header = _hand_header({"block_count": 1, "expert_count": 4}, [("blk.0.ffn_gate_exps.weight", (64, 8), 0)])
    acc = account(header)
    assert acc.routed_by_layer == {0: 64 * 8 * 4}
    assert acc.expert_bytes_by_layer == {0: 64 * 8 * 4 // 4}


class _MemorySource:
    """A byte source over bytes in memory, as a remote reader would hand them out."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self.data = name, data

    def read(self, offset: int, size: int) -> bytes:
        return self.data[offset : offset + size]

    def total_size(self) -> int | None:
        return len(self.data)


def test_accounting_from_a_byte_source_is_the_files(model: Path) -> None:
    acc = account_source(_MemorySource("remote.gguf", model.read_bytes()))
    expected = account_file(model).summary()
    expected["source"] = "remote.gguf"
    assert acc.summary() == expected
