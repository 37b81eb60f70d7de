"""`appliance model synth`: determinism, refusals, metadata, streaming memory, router design."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType

from appliance.models.shapes import ModelSynthSpec, solve_layout
from appliance.models.vocab import byte_vocab
from tests.conftest import REPO, run_cli


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def synth(out: Path, *args: str) -> dict[str, object]:
    result = run_cli("model", "synth", str(out), "--json", *args, check=True)
    record: dict[str, object] = json.loads(result.stdout)
    return record


@pytest.mark.parametrize("arch", ["qwen3moe", "qwen35moe"])
def test_same_seed_same_bytes(tmp_path: Path, arch: str) -> None:
    args = ("--arch", arch, "--size", "12MiB", "--experts", "16", "--used", "4", "--seed", "7")
    first = synth(tmp_path / "a.gguf", *args)
    second = synth(tmp_path / "b.gguf", *args)
    assert sha256(tmp_path / "a.gguf") == sha256(tmp_path / "b.gguf") == first["sha256"]
    assert first["sha256"] == second["sha256"]
    other = synth(tmp_path / "c.gguf", *args[:-1], "8")
    assert other["sha256"] != first["sha256"]
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--experts", "4", "--used", "8"), "--used 8 must be between 1 and --experts 4"),
        (("--size", "1MiB"), "is too small for 4 layers x 64 experts"),
        (("--size", "40MiB", "--layers", "64"), "is too small for 64 layers"),
        (("--experts", "600", "--size", "4GiB"), "exceeds llama.cpp's limit of 512"),
        (("--size", "lots"), "cannot read size 'lots'"),
    ],
)
def test_refuses_impossible_shapes(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    out = tmp_path / "m.gguf"
    result = run_cli("model", "synth", str(out), "--arch", "qwen3moe", *args)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--used", "0"), "Invalid value for '--used': 0 is not in the range 1<=x"),
        (("--skew", "-1"), "Invalid value for '--skew': -1.0 is not in the range x>=0"),
        (("--skew", "nan"), "Invalid value for '--skew': 'nan' is not a finite number"),
        (("--skew", "inf"), "Invalid value for '--skew': 'inf' is not a finite number"),
        (("--seed", "-1"), "Invalid value for '--seed': -1 is not in the range 0<=x<=4294967295"),
    ],
)
def test_refuses_out_of_range_options(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    out = tmp_path / "m.gguf"
    result = run_cli("model", "synth", str(out), "--arch", "qwen3moe", *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "(see `appliance model synth --help`)" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_qwen35moe_needs_two_layers(tmp_path: Path) -> None:
    result = run_cli("model", "synth", str(tmp_path / "m.gguf"), "--arch", "qwen35moe", "--layers", "1")
    assert result.returncode == 1
    assert "one linear-attention and one full-attention layer" in result.stderr


@pytest.mark.parametrize(("arch", "qtype"), [("qwen3moe", "f16"), ("qwen35moe", "q8_0")])
def test_metadata_round_trip(tmp_path: Path, arch: str, qtype: str) -> None:
    out = tmp_path / "m.gguf"
    record = synth(
        out,
        "--arch",
        arch,
        "--size",
        "40MiB",
        "--experts",
        "32",
        "--used",
        "4",
        "--layers",
        "4",
        "--skew",
        "0.5",
        "--seed",
        "3",
        "--type",
        qtype,
    )
    reader = GGUFReader(out)

    def field(key: str) -> object:
        f = reader.get_field(key)
        assert f is not None, key
        return f.contents()

    assert field("general.architecture") == arch
    assert field(f"{arch}.expert_count") == 32
    assert field(f"{arch}.expert_used_count") == 4
    assert field(f"{arch}.block_count") == 4
    assert field(f"{arch}.expert_feed_forward_length") == record["expert_ff"]
    assert field("appliance.synth.seed") == 3
    assert field("appliance.synth.skew") == pytest.approx(0.5)
    assert field("tokenizer.ggml.model") == "gpt2"
    assert len(field("tokenizer.ggml.tokens")) == len(byte_vocab().tokens)  # type: ignore[arg-type]

    tensors = {t.name: t for t in reader.tensors}
    layout = solve_layout(
        ModelSynthSpec(
            arch=arch, size_bytes=40 << 20, experts=32, used=4, skew=0.5, seed=3, expert_type=qtype
        ),
        len(byte_vocab().tokens),
    )
    assert sorted(tensors) == sorted(t.name for t in layout.tensors)
    down = tensors["blk.2.ffn_down_exps.weight"]
    assert [int(n) for n in down.shape] == [record["expert_ff"], 256, 32]
    assert down.tensor_type == GGMLQuantizationType[qtype.upper()]
    assert tensors["blk.0.ffn_gate_inp.weight"].tensor_type == GGMLQuantizationType.F32
    if arch == "qwen35moe":
        assert "blk.0.ssm_conv1d.weight" in tensors and "blk.3.attn_q.weight" in tensors
        assert "blk.3.ssm_conv1d.weight" not in tensors

    size = out.stat().st_size
    assert size == record["size_bytes"] <= 40 << 20
    data_start = min(t.data_offset for t in reader.tensors)
    last = max(reader.tensors, key=lambda t: t.data_offset)
    assert last.data_offset + int(last.n_bytes) == size
    expert_bytes = sum(int(t.n_bytes) for t in reader.tensors if "_exps" in t.name)
    assert expert_bytes == record["expert_bytes"]
    assert expert_bytes > 0.9 * (size - data_start)


def test_streaming_write_keeps_memory_well_under_file_size(tmp_path: Path) -> None:
    out = tmp_path / "big.gguf"
    # VmHWM is this process's own peak: ru_maxrss would carry over the forking parent's
    # (pytest's) resident size across exec.
    code = (
        "import sys;from appliance.cli import main;sys.argv=['appliance','model',"
        "'synth',sys.argv[1],'--arch','qwen3moe','--size','512MiB'];"
        "\ntry:\n main()\nexcept SystemExit:\n pass\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO)},
        check=True,
    )
    peak_bytes = int(result.stdout.strip().splitlines()[-1]) * 1024
    size = out.stat().st_size
    assert size > 500 << 20
    assert peak_bytes < 0.4 * size, (peak_bytes, size)
