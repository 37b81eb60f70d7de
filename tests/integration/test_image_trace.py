"""llama-moe-trace inside the cpu image traces a tiny MoE model mounted read-only, no network."""

import json
import struct
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.engine, pytest.mark.slow]


def test_trace_a_tiny_moe_model_read_only_without_network(
    engine_image_cpu: str, tmp_path: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    from tests.models import tiny_model  # the synthesizer's cached tiny models

    model = tiny_model("qwen3moe", size="64MiB", skew=1.0)
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)  # the image runs as a non-root user
    n_predict = 8
    logs = docker_client.containers.run(
        engine_image_cpu,
        [
            "llama-moe-trace",
            "-m",
            f"/models/{model.name}",
            "-p",
            "the quick brown fox",
            "-n",
            str(n_predict),
            "-o",
            "/results/run.moetrace",
            "--no-repack",
        ],
        volumes={
            str(model): {"bind": f"/models/{model.name}", "mode": "ro"},
            str(results): {"bind": "/results", "mode": "rw"},
        },
        network_mode="none",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        mem_limit="1g",
        memswap_limit="1g",
        remove=True,
        stderr=True,
    )
    data = (results / "run.moetrace").read_bytes()
    assert data[:8] == b"MOETRACE", logs[-2000:]
    version, header_len = struct.unpack_from("<II", data, 8)
    header = json.loads(data[16 : 16 + header_len])
    assert version == 1 and header["arch"] == "qwen3moe"
    assert header["model_file"] == model.name
    assert data[-16:-8] == b"MOETEND\0"
    (rows,) = struct.unpack_from("<Q", data, len(data) - 8)
    k = header["n_expert_used"]
    row_size = 12 + (8 if header["has_weights"] else 4) * k
    assert len(data) == 16 + header_len + rows * row_size + 16
    body = data[16 + header_len : len(data) - 16]
    layers = {struct.unpack_from("<H", body, i * row_size + 4)[0] for i in range(rows)}
    assert layers == set(header["moe_layers"])
    decode_rows = sum(1 for i in range(rows) if body[i * row_size + 6] == 1)
    steps, remainder = divmod(decode_rows, len(header["moe_layers"]))
    assert remainder == 0 and steps in (n_predict - 1, n_predict)
