"""`appliance model synth --like`: the skeleton's tensor plan with random bounded weights,
deterministic bytes, one-line refusals that leave nothing behind."""

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGUFReader, quants
from gguf.constants import GGMLQuantizationType

from appliance.core.errors import ApplianceError
from appliance.models import full_synth, skeleton
from tests.conftest import REPO, run_cli

PLANS = REPO / "evidence" / "plans"
QWEN3 = PLANS / "qwen3-30b-a3b-q4_k_m.input.json"
QWEN35 = PLANS / "qwen35-35b-a3b-ud-iq4_nl.input.json"
SMALL = {  # the published inputs' recipes (types, overrides) on narrow shapes: seconds, not minutes
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 256,
    "shared_expert_intermediate_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 128,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 2,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "vocab_size": 600,
}


def small_input(tmp_path: Path, published: Path, **changes: Any) -> Path:
    doc = json.loads(published.read_text())
    doc["config"].update({k: v for k, v in SMALL.items() if k in doc["config"]})
    for entry in doc.get("type_overrides", []):
        entry["layers"] = [0, 3]
    doc.update(changes)
    path = tmp_path / f"small-{published.name}"
    path.write_text(json.dumps(doc))
    return path


def synth(input_path: Path, out: Path, *args: str) -> dict[str, Any]:
    result = run_cli("model", "synth", "--like", str(input_path), str(out), "--json", *args, check=True)
    record: dict[str, Any] = json.loads(result.stdout)
    return record


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix in (".gguf", ".tmp"))


def test_same_input_and_seed_same_sha256_on_a_layer_slice(tmp_path: Path) -> None:
    like = small_input(tmp_path, QWEN3)
    first = synth(like, tmp_path / "a.gguf", "--layers", "2", "--seed", "5")
    second = synth(like, tmp_path / "b.gguf", "--layers", "2", "--seed", "5")
    assert first["sha256"] == second["sha256"] == sha256(tmp_path / "a.gguf") == sha256(tmp_path / "b.gguf")
    assert first["size_bytes"] == (tmp_path / "a.gguf").stat().st_size
    other = synth(like, tmp_path / "c.gguf", "--layers", "2", "--seed", "6")
    assert other["sha256"] != first["sha256"]
    skewless = synth(like, tmp_path / "d.gguf", "--layers", "2", "--seed", "5", "--skew", "0")
    assert skewless["sha256"] != first["sha256"]
    assert [p.name for p in leftovers(tmp_path)] == ["a.gguf", "b.gguf", "c.gguf", "d.gguf"]


def dequantized(tensor: Any) -> np.ndarray:
    qtype = GGMLQuantizationType(tensor.tensor_type)
    data = np.asarray(tensor.data)
    if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        return data.astype(np.float32).reshape(-1)
    return quants.dequantize(data.reshape(-1).view(np.uint8), qtype).reshape(-1)


@pytest.mark.parametrize("published", [QWEN3, QWEN35], ids=["qwen3-30b", "qwen35-35b"])
def test_reads_back_with_exactly_the_skeleton_plan_and_bounded_values(
    tmp_path: Path, published: Path
) -> None:
    like = small_input(tmp_path, published)
    out = tmp_path / "m.gguf"
    layers = 4 if published == QWEN35 else 3  # a hybrid's slice holds its first attention layer
    record = synth(like, out, "--layers", str(layers), "--router", "zipf")
    doc = skeleton.load_input(like)
    specs = skeleton.tensor_specs(doc, str(like), layers)
    reader = GGUFReader(out)
    got = [
        (t.name, tuple(int(n) for n in t.shape), GGMLQuantizationType(t.tensor_type), int(t.n_bytes))
        for t in reader.tensors
    ]
    assert got == [(n, s, q, skeleton.nbytes(s, q)) for n, s, q in specs]
    assert record["tensors"] == len(specs) and record["layers"] == layers
    assert int(reader.fields[f"{doc['arch']}.block_count"].parts[-1][0]) == layers
    types = {q.name for _, _, q in specs}
    expected = {"Q4_K", "Q6_K", "F32"} if published == QWEN3 else {"IQ3_S", "IQ4_NL", "Q8_0", "F32"}
    assert types == expected
    for tensor in reader.tensors:
        values = dequantized(tensor)
        name = tensor.name
        assert np.isfinite(values).all(), name
        role = full_synth.role(name)
        if role == "ones":
            assert (values == 1).all(), name
        elif role == "ssm_a":
            assert (values < 0).all(), name
        elif role == "token_embd":  # dimension 0 is the routers' constant, the rest in [-1, 1]
            rows = values.reshape(-1, SMALL["hidden_size"])
            assert np.allclose(rows[:, 0], full_synth.EMBED_SHARED, rtol=1e-2), name
            assert np.abs(rows[:, 1:]).max() <= full_synth.EMBED_AMAX
        elif role == "dense":
            shape = tuple(int(n) for n in tensor.shape)
            bound = full_synth.amax_for(name, shape)
            assert 0.5 * bound <= np.abs(values).max() <= bound, name


def test_the_full_qwen3_recipe_gives_the_route_traces_bytes_per_layer() -> None:
    """The public route trace of the real Q4_K_M file lists, per layer, one expert's bytes and
    the dense bytes: 3,059,712 / 11,953,152 where ffn_down and attn_v are Q6_K, else
    2,654,208 / 11,682,816. The skeleton reproduces every layer exactly."""
    doc = skeleton.load_input(QWEN3)
    q6k = set(doc["type_overrides"][0]["layers"])
    assert len(q6k) == 24
    per_layer: dict[int, list[int]] = {}
    for name, shape, qtype in skeleton.tensor_specs(doc, str(QWEN3)):
        if name.startswith("blk."):
            layer = int(name.split(".")[1])
            slot = 0 if name.endswith("_exps.weight") else 1
            per_layer.setdefault(layer, [0, 0])[slot] += skeleton.nbytes(shape, qtype)
    assert len(per_layer) == 48
    for layer, (experts, dense) in per_layer.items():
        expected = (3_059_712, 11_953_152) if layer in q6k else (2_654_208, 11_682_816)
        assert (experts // 128, dense) == expected, layer


def refused(tmp_path: Path, like: Path, *args: str, out: Path | None = None) -> str:
    target = out or tmp_path / "out" / "m.gguf"
    result = run_cli("model", "synth", "--like", str(like), str(target), *args)
    assert result.returncode in (1, 2), result.stdout
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert not target.exists()
    assert not target.parent.exists() or not list(target.parent.iterdir())
    return result.stderr


def test_refuses_a_file_that_is_not_a_skeleton_input(tmp_path: Path) -> None:
    text = tmp_path / "notes.json"
    text.write_text("hello\n")
    assert "not valid JSON" in refused(tmp_path, text) and "not a skeleton input" in refused(tmp_path, text)
    array = tmp_path / "array.json"
    array.write_text("[1, 2]\n")
    assert f"{array}: not a skeleton input (a JSON object with arch, config and types)" in refused(
        tmp_path, array
    )
    no_config = tmp_path / "no-config.json"
    no_config.write_text('{"arch": "qwen3moe"}\n')
    assert "not a skeleton input (no config object)" in refused(tmp_path, no_config)


def test_refuses_a_type_it_cannot_generate(tmp_path: Path) -> None:
    doc = json.loads(QWEN3.read_text())
    like = small_input(tmp_path, QWEN3, types={**doc["types"], "routed_down": "IQ2_XXS"})
    message = refused(tmp_path, like, "--layers", "2")  # layer 0's down is Q6_K (an override)
    assert "blk.1.ffn_down_exps.weight is IQ2_XXS, which `model synth` cannot generate" in message


def test_refuses_a_norm_of_a_quantized_type(tmp_path: Path) -> None:
    doc = json.loads(QWEN3.read_text())
    like = small_input(tmp_path, QWEN3, types={**doc["types"], "vectors": "Q8_0"})
    assert "output_norm.weight (ones) must be F32 or F16 to be generated, not Q8_0" in refused(tmp_path, like)


def test_refuses_a_directory_with_too_little_free_space_and_says_both_sizes(tmp_path: Path) -> None:
    doc = json.loads(QWEN3.read_text())
    like = small_input(tmp_path, QWEN3)
    doc = json.loads(like.read_text())
    doc["config"]["num_experts"] = 50_000_000  # about 4 PB of experts
    like.write_text(json.dumps(doc))
    message = refused(tmp_path, like)
    assert f"error: {tmp_path} has " in message
    assert " free; writing the 4-layer model takes " in message
    assert "free space or choose another directory" in message


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_refuses_a_target_on_tmpfs(tmp_path: Path) -> None:
    shm = Path("/dev/shm") / f"appliance-test-{tmp_path.name}"
    message = refused(tmp_path, small_input(tmp_path, QWEN3), out=shm / "m.gguf")
    assert message == (
        "error: /dev/shm is on tmpfs: its pages cannot be evicted, so no trial could start cold; "
        "write the 4-layer model to a disk-backed directory\n"
    )


@pytest.mark.parametrize(
    ("layers", "message"),
    [("5", "--layers 5 is outside 1..4, the layers of"), ("0", "0 is not in the range 1<=x")],
)
def test_refuses_layers_outside_the_model(tmp_path: Path, layers: str, message: str) -> None:
    assert message in refused(tmp_path, small_input(tmp_path, QWEN3), "--layers", layers)


def test_used_sets_the_experts_per_token_the_gguf_declares(tmp_path: Path) -> None:
    like = small_input(tmp_path, QWEN3)  # 8 experts, 2 per token
    record = synth(like, tmp_path / "k3.gguf", "--layers", "2", "--used", "3")
    assert record["used"] == 3
    assert int(GGUFReader(tmp_path / "k3.gguf").fields["qwen3moe.expert_used_count"].parts[-1][0]) == 3
    default = synth(like, tmp_path / "k2.gguf", "--layers", "2")
    assert default["used"] == 2 and default["sha256"] != record["sha256"]
    assert default["size_bytes"] == record["size_bytes"]  # the header's value, not the tensors


@pytest.mark.parametrize("used", ["9", "0"])
def test_refuses_used_outside_the_experts(tmp_path: Path, used: str) -> None:
    message = refused(tmp_path, small_input(tmp_path, QWEN3), "--used", used)
    expected = (
        "--used 9 is outside 1..8, the experts per layer of small-qwen3-30b-a3b-q4_k_m.input.json"
        if used == "9"
        else "Invalid value for '--used': 0 is not in the range 1<=x"
    )
    assert expected in message


def test_refuses_a_hybrid_slice_without_an_attention_layer(tmp_path: Path) -> None:
    like = small_input(tmp_path, QWEN35)  # one attention layer in 4: layer 4 the first
    message = refused(tmp_path, like, "--layers", "3")
    assert message.startswith(
        "error: --layers 3 of small-qwen35-35b-a3b-ud-iq4_nl.input.json holds no attention"
    )
    assert message.endswith("use --layers 4 or more\n")


def test_refuses_tiny_options_beside_like(tmp_path: Path) -> None:
    message = refused(tmp_path, small_input(tmp_path, QWEN3), "--arch", "qwen3moe", "--experts", "4")
    assert "--arch, --experts describe a tiny model; --like takes its shape from" in message


def test_refuses_an_input_without_the_runtime_values(tmp_path: Path) -> None:
    like = small_input(tmp_path, QWEN3)
    doc = json.loads(like.read_text())
    del doc["config"]["rope_theta"]
    like.write_text(json.dumps(doc))
    assert "config lacks rope_theta, which llama.cpp needs to run the model" in refused(tmp_path, like)


def test_an_interrupted_write_leaves_nothing(tmp_path: Path) -> None:
    calls = []

    def interrupt(progress: object) -> None:
        calls.append(progress)
        if len(calls) == 3:
            raise KeyboardInterrupt

    out = tmp_path / "m.gguf"
    with pytest.raises(KeyboardInterrupt):
        full_synth.synthesize_like(small_input(tmp_path, QWEN3), out, progress=interrupt)
    assert len(calls) == 3
    assert leftovers(tmp_path) == []


def test_a_type_override_naming_a_missing_tensor_is_refused(tmp_path: Path) -> None:
    like = small_input(
        tmp_path, QWEN3, type_overrides=[{"tensors": ["ssm_out"], "layers": [1], "type": "Q6_K"}]
    )
    with pytest.raises(
        ApplianceError, match="type_overrides names 'ssm_out' in layer 1, which has no such tensor"
    ):
        skeleton.tensor_specs(skeleton.load_input(like), str(like))
    like = small_input(
        tmp_path, QWEN3, type_overrides=[{"tensors": ["attn_v"], "layers": [4], "type": "Q6_K"}]
    )
    with pytest.raises(ApplianceError, match=r"type_overrides\[0\] names layer 4; the model has layers 0..3"):
        skeleton.tensor_specs(skeleton.load_input(like), str(like))


def test_digest_gives_the_size_and_sha256_synth_writes_and_writes_nothing(tmp_path: Path) -> None:
    like = small_input(tmp_path, QWEN3)
    args = ("--layers", "2", "--used", "3", "--seed", "4")
    written = synth(like, tmp_path / "m.gguf", *args)
    before = sorted(tmp_path.iterdir())
    result = run_cli("model", "digest", "--like", str(like), *args, "--json", check=True)
    assert json.loads(result.stdout) == {
        "like": like.name,
        "size_bytes": written["size_bytes"],
        "sha256": written["sha256"],
    }
    assert sorted(tmp_path.iterdir()) == before
    plain = run_cli("model", "digest", "--like", str(like), *args, check=True).stdout
    assert (
        plain == f"{like.name}: {written['size_bytes']} bytes, sha256 {written['sha256']} (nothing written)\n"
    )
    refused = run_cli("model", "digest", "--like", str(like), "--used", "9")
    assert refused.returncode == 2
    assert refused.stderr == f"error: --used 9 is outside 1..8, the experts per layer of {like.name}\n"
