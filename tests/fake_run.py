"""A realistic run directory laid out as the runner writes it, for bundle and evidence tests.

Layout (the runner's contract): run.json, inputs/{profile.yaml,lock.json,schedule.json,
model.json}, trials/NNN-<variant>-r<repeat>/{trial.json,stdout.txt,stderr.txt,timing.json,
output.txt,trace.moetrace,cgroup.json}, results.json, plots/*.png.
"""

import json
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

from tests.conftest import REPO

MODEL = {"file": "tiny-moe.gguf", "bytes": 402653184,
         "sha256": "3b1d2e5c4a69a0f7a0a5d7c1a0e6e6f1c0f9b3d8e2a7c4b5d6e7f8091a2b3c4d"}
TEXT = "The quick brown fox jumps over the lazy dog. " * 3


def _png() -> bytes:
    """A valid 1x1 PNG: the plots are real image files, not placeholders."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b""))


def results(baseline: dict[str, float], demand: dict[str, float],
            identical: bool = True) -> dict[str, Any]:
    variants = {"baseline": baseline, "demand-mmap": demand}
    return {
        "variants": {name: {metric: {"median": value, "min": value, "max": value,
                                     "samples": [value] * 3}
                            for metric, value in metrics.items()}
                     for name, metrics in variants.items()},
        "ratios": {"demand-mmap/baseline": {m: demand[m] / baseline[m] for m in baseline}},
        "byte_identity": {"identical": identical, "matched_length": len(TEXT)},
    }


def make_run(root: Path, status: str = "complete", profile: str = "tiny-oversub",
             result: dict[str, Any] | None = None, model: dict[str, Any] | None = None,
             memory_limit: int = 268435456, n_predict: int = 32) -> Path:
    run = root / "run-20260101T000000Z"
    (run / "inputs").mkdir(parents=True)
    (run / "plots").mkdir()
    trials = 6 if status == "complete" else 3
    (run / "run.json").write_text(json.dumps({
        "status": status, "profile": profile, "started": "2026-01-01T00:00:00Z",
        "ended": "2026-01-01T00:05:00Z", "appliance_version": "0.1.0", "trial_count": trials,
        "source": {"kind": "stand-in", "name": "b10229"},
    }, indent=2))
    (run / "inputs" / "profile.yaml").write_text(
        f"name: {profile}\ntarget: cpu\nmemory_limit: {memory_limit}\n"
        f"schedule:\n  repeats: 3\n  n_predict: {n_predict}\n  seed: 42\n"
        f"evidence: [tiny-oversub-demand-mmap]\n")
    shutil.copy(REPO / "engine" / "llama.cpp.lock.json", run / "inputs" / "lock.json")
    (run / "inputs" / "schedule.json").write_text(json.dumps({
        "profile": profile, "order": "interleaved", "repeats": 3, "seed": 42,
        "n_predict": n_predict, "memory_limit_bytes": memory_limit,
        "variants": ["baseline", "demand-mmap"]}))
    (run / "inputs" / "model.json").write_text(json.dumps(model or MODEL))
    for index in range(trials):
        variant = ("baseline", "demand-mmap")[index % 2]
        trial = run / "trials" / f"{index:03d}-{variant}-r{index // 2}"
        trial.mkdir(parents=True)
        (trial / "trial.json").write_text(json.dumps({"variant": variant, "repeat": index // 2,
                                                      "exit_code": 0, "oom_killed": False}))
        (trial / "stdout.txt").write_text(TEXT)
        (trial / "stderr.txt").write_text("llama_model_load: loaded\n")
        (trial / "timing.json").write_text(json.dumps({"wall_s": 10.0 + index}))
        (trial / "output.txt").write_text(TEXT)
        (trial / "trace.moetrace").write_bytes(b"MOETRACE" + bytes(range(64)))
        (trial / "cgroup.json").write_text(json.dumps({"peak_bytes": 200000000}))
    if status == "complete":
        res = result or results({"wall_s": 40.0, "decode_tps": 2.0, "prefill_tps": 50.0},
                                {"wall_s": 10.0, "decode_tps": 8.0, "prefill_tps": 40.0})
        (run / "results.json").write_text(json.dumps(res, indent=2))
        (run / "plots" / "decode_tps.png").write_bytes(_png())
    return run
