"""Tiny models load and generate in a real llama.cpp build, following the designed token walk."""

import subprocess
from pathlib import Path

import pytest

from appliance.models import weights
from appliance.models.shapes import solve_layout
from appliance.models.vocab import byte_vocab, token_bytes
from tests.models import tiny_model, tiny_spec

PROMPT = "Hello world"
N_PREDICT = 24


def expected_walk(arch: str, expert_type: str) -> list[int]:
    vocab = byte_vocab()
    layout = solve_layout(tiny_spec(arch, expert_type=expert_type), len(vocab.tokens))
    design = weights.make_design(layout, vocab)
    token, out = PROMPT.encode()[-1], []
    for _ in range(N_PREDICT):
        token = int(design.next_token[token])
        out.append(token)
    return out


@pytest.mark.engine
@pytest.mark.parametrize(
    ("arch", "expert_type"), [("qwen3moe", "f16"), ("qwen35moe", "f16"), ("qwen3moe", "q8_0")]
)
def test_llama_generates_the_designed_walk(engine_bin: Path, arch: str, expert_type: str) -> None:
    model = tiny_model(arch, expert_type=expert_type)
    result = subprocess.run(
        [str(engine_bin / "llama-simple"), "-m", str(model), "-n", str(N_PREDICT), PROMPT],
        capture_output=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    walk = expected_walk(arch, expert_type)
    vocab = byte_vocab()
    text = b"".join(token_bytes(vocab, t) for t in walk)
    assert result.stdout == PROMPT.encode() + text + b"\n"
