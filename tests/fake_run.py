"""A realistic run directory laid out as the runner writes it (docs/run-directory.md).

run.json, inputs/{profile.yaml,lock.json,schedule.json,model.json},
trials/NNN-<variant>-r<repeat>/{trial.json,stdout.txt,stderr.txt,timing.json,output.txt,
trace.moetrace,cgroup.json}, results.json (appliance.analysis.stats's shape), plots/*.png.
"""

import json
import shutil
import struct
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.conftest import REPO

if TYPE_CHECKING:
    from appliance.attest.dsse import KeyPair
    from appliance.runs.model_files import CheckedModel
    from appliance.runs.plan import Trial

MODEL = {
    "file": "tiny-oversub-qwen3moe.gguf",
    "bytes": 419430400,
    "sha256": "3b1d2e5c4a69a0f7a0a5d7c1a0e6e6f1c0f9b3d8e2a7c4b5d6e7f8091a2b3c4d",
    "digest_status": "verified",
    "digest_from_cache": False,
    "pinned_bytes": None,
    "pinned_sha256": None,
    "source": "synthesized locally",
    "synth": {"seed": 1},
}
TEXT = "The quick brown fox jumps over the lazy dog. " * 3
VARIANTS = ("baseline", "demand-mmap")


def _png() -> bytes:
    """A valid 1x1 PNG: the plots are real image files, not placeholders."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def _describe(value: float) -> dict[str, Any]:
    return {
        "n": 3,
        "median": value,
        "min": value,
        "max": value,
        "spread": 0.0,
        "relative_spread": 0.0,
        "outliers": [],
        "samples": [value] * 3,
    }


def results(baseline: dict[str, float], demand: dict[str, float], identical: bool = True) -> dict[str, Any]:
    """results.json as appliance.analysis.stats.summarize writes it, with constant samples."""
    per_variant = {"baseline": baseline, "demand-mmap": demand}
    return {
        "schema_version": 1,
        "variants": {
            name: {"trials": [], "counts": {"ok": 3}, **{m: _describe(v) for m, v in metrics.items()}}
            for name, metrics in per_variant.items()
        },
        "ratios": [
            {
                "reference": "baseline",
                "other": "demand-mmap",
                "metrics": {m: _describe(demand[m] / baseline[m]) for m in baseline},
            }
        ],
        "byte_identity": {
            "reference": "000-baseline-r1",
            "comparisons": [],
            "all_identical": identical,
            "findings": [],
        },
    }


def make_run(
    root: Path,
    status: str = "complete",
    profile: str = "tiny-oversub",
    result: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    memory_limit: int = 209715200,
    n_predict: int = 32,
) -> Path:
    run = root / "tiny-oversub-20260101T000000Z"
    (run / "inputs").mkdir(parents=True)
    (run / "plots").mkdir()
    trials = 6 if status == "complete" else 3
    (run / "run.json").write_text(
        json.dumps(
            {
                "status": status,
                "profile": profile,
                "started_utc": "2026-01-01T00:00:00Z",
                "ended_utc": "2026-01-01T00:05:00Z",
                "appliance_version": "0.1.0",
                "trial_count": 6,
                "trials_recorded": trials,
                "run_id": run.name,
                "engine": {"kind": "image", "image": "moe-expert-cache:cpu-0123456789ab-standin-b10229"},
                "model_digest_status": "verified",
                "limits": {"memory_bytes": memory_limit, "memswap_bytes": memory_limit},
                "cgroup_version": 1,
                "trial_timeout_s": 600,
                "target": "cpu",
                "stand_in": "b10229",
                "image_id": "sha256:" + "5a" * 32,
            },
            indent=2,
        )
    )
    (run / "inputs" / "profile.yaml").write_text(
        f"schema_version: 1\nname: {profile}\ntarget: cpu\ngpu: none\n"
        f"limits:\n  memory: {memory_limit}\n  swap: 0\n"
        f"schedule:\n  repeats: 3\n  order: interleaved\n  n_predict: {n_predict}\n"
        f"  seed: 7\n  cold_cache: true\nevidence:\n  - tiny-oversub-demand-mmap\n"
    )
    shutil.copy(REPO / "engine" / "llama.cpp.lock.json", run / "inputs" / "lock.json")
    names = [f"{i:03d}-{VARIANTS[i % 2]}-r{i // 2 + 1}" for i in range(6)]
    (run / "inputs" / "schedule.json").write_text(
        json.dumps(
            {
                "profile": profile,
                "repeats": 3,
                "order": "interleaved",
                "n_predict": n_predict,
                "prompt": "The quick brown fox",
                "seed": 7,
                "cold_cache": True,
                "trace": True,
                "variants": [
                    {"name": "baseline", "env": {}, "args": []},
                    {"name": "demand-mmap", "env": {"LLAMA_MMAP_DEMAND": "1"}, "args": []},
                ],
                "trials": names,
            }
        )
    )
    (run / "inputs" / "model.json").write_text(json.dumps(model or MODEL))
    for index, name in enumerate(names[:trials]):
        trial = run / "trials" / name
        trial.mkdir(parents=True)
        (trial / "trial.json").write_text(
            json.dumps(
                {
                    "index": index,
                    "variant": VARIANTS[index % 2],
                    "repeat": index // 2 + 1,
                    "status": "ok",
                    "exit_code": 0,
                    "oom_killed": False,
                    "engine_wall_s": 10.0 + index,
                }
            )
        )
        (trial / "stdout.txt").write_text(TEXT)
        (trial / "stderr.txt").write_text("llama_model_load: loaded\n")
        (trial / "timing.json").write_text(json.dumps({"decode_tokens_per_s": 2.0 + index}))
        (trial / "output.txt").write_text(TEXT)
        (trial / "trace.moetrace").write_bytes(b"MOETRACE" + bytes(range(64)))
        (trial / "cgroup.json").write_text(json.dumps({"cgroup_version": 1, "peak_bytes": 200000000}))
    if status == "complete":
        res = result or results(
            {"wall_s": 40.0, "decode_tps": 2.0, "prefill_tps": 50.0},
            {"wall_s": 10.0, "decode_tps": 8.0, "prefill_tps": 40.0},
        )
        (run / "results.json").write_text(json.dumps(res, indent=2))
        (run / "plots" / "decode_tps.png").write_bytes(_png())
    return run


# an interrupted, sealed run to resume (tests/unit/workflows/test_resume_check.py, fuzz's
# resume reader)

RESUME_IMAGE_ID = "sha256:" + "ab" * 32
RESUME_MODEL = {"file": "tiny.gguf", "bytes": 4096, "sha256": "cd" * 32}


def resume_model(bytes_: int = RESUME_MODEL["bytes"]) -> "CheckedModel":  # type: ignore[assignment]
    from appliance.runs.model_files import UNPINNED, CheckedModel

    return CheckedModel(
        Path("/models") / str(RESUME_MODEL["file"]),
        str(RESUME_MODEL["file"]),
        int(bytes_),
        str(RESUME_MODEL["sha256"]),
        UNPINNED,
        False,
    )


def sealed_incomplete_run(root: Path, signer: "KeyPair | None") -> "tuple[Path, list[Trial]]":
    """An interrupted run of tiny-oversub in root/run (one ok trial, one interrupted, one never
    started), sealed as the runner seals it: signed by `signer` (unsigned when None)."""
    from appliance.attest.bundle import finalize_bundle
    from appliance.engine.lock import load_lock
    from appliance.runs.model_files import UNPINNED
    from appliance.runs.plan import trial_plan
    from appliance.runs.profile import load_profile
    from appliance.runs.record import schedule_record

    profile = load_profile("tiny-oversub")
    plan = trial_plan(profile, 1)
    run = root / "run"
    (run / "inputs").mkdir(parents=True)
    (run / "inputs" / "profile.yaml").write_text(profile.source_text)
    (run / "inputs" / "lock.json").write_text(json.dumps(load_lock().raw))
    (run / "inputs" / "schedule.json").write_text(json.dumps(schedule_record(profile, plan)))
    (run / "inputs" / "model.json").write_text(json.dumps({**RESUME_MODEL, "digest_status": UNPINNED}))
    record = {
        "status": "incomplete",
        "profile": profile.name,
        "run_id": "abc123",
        "started_utc": "2026-01-01T00:00:00.000Z",
        "ended_utc": "2026-01-01T00:01:00.000Z",
        "image_id": RESUME_IMAGE_ID,
    }
    (run / "run.json").write_text(json.dumps(record))
    for name, status in (("001-baseline-r1", "ok"), ("002-demand-mmap-r1", "interrupted")):
        trial = run / "trials" / name
        trial.mkdir(parents=True)
        (trial / "trial.json").write_text(json.dumps({"name": name, "status": status}))
        (trial / "timing.json").write_text(json.dumps({"decode_tokens_per_s": 2.11}))
        (trial / "stdout.txt").write_text("kept")
    finalize_bundle(run, signer.private if signer else None)
    return run, plan
