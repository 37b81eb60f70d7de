"""Tiny synthetic MoE models for tests, made once and cached.

`tiny_model("qwen3moe", size="400MiB", skew=1.0)` returns the path of a GGUF synthesized
with those parameters. Files live under APPLIANCE_CACHE (appliance.core.paths.cache_dir()) in
`models/`, keyed by the parameters and by a digest of the synthesizer's source, so a test
session makes each model once and a changed synthesizer never serves stale files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from appliance.core.paths import PACKAGE_DIR, cache_dir
from appliance.core.units import parse_size
from appliance.models.shapes import ModelSynthSpec
from appliance.models.synth import synthesize

SYNTH_SOURCES = sorted((PACKAGE_DIR / "models").glob("*.py"))


def synth_source_digest() -> str:
    digest = hashlib.sha256()
    for path in SYNTH_SOURCES:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def tiny_spec(
    arch: str, size: str = "64MiB", skew: float = 1.0, seed: int = 0, **kw: object
) -> ModelSynthSpec:
    """The ModelSynthSpec tiny_model() would build; kw: experts, used, layers, expert_type, embd."""
    return ModelSynthSpec(arch=arch, size_bytes=parse_size(size), skew=skew, seed=seed, **kw)  # type: ignore[arg-type]


def tiny_model(arch: str, size: str = "64MiB", skew: float = 1.0, seed: int = 0, **kw: object) -> Path:
    """Path of a cached tiny model with these parameters, synthesized on first use."""
    spec = tiny_spec(arch, size, skew, seed, **kw)
    key_doc = json.dumps({"spec": spec.__dict__, "source": synth_source_digest()}, sort_keys=True)
    key = hashlib.sha256(key_doc.encode()).hexdigest()[:20]
    path = cache_dir() / "models" / f"tiny-{arch}-{key}.gguf"
    if not path.exists():
        synthesize(spec, path)
    return path
