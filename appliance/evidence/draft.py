"""A reproduction finding drafted from a verified, complete bundle (`appliance evidence
draft`): the medians of every metric per variant, their ratios against the baseline, and the
scope the bundle records; what it does not record is null and listed under scope.unknown.
"""

import json
from pathlib import Path
from typing import Any

from appliance.core.errors import ConfigError
from appliance.evidence import sweep_claims
from appliance.evidence.bundle_facts import (
    UNTRUSTED_INPUT,
    BundleFacts,
    as_mapping,
    read_mapping,
    verified_input,
)
from appliance.evidence.finding import validate_finding
from appliance.runs.run_dir import RESULTS_FILE, RunDir

DRAFT_METRICS = ("wall_s", "decode_tps", "prefill_tps")
METRIC_UNITS = {"wall_s": "s", "decode_tps": "tokens/s", "prefill_tps": "tokens/s"}


def _source_text(source: Any) -> str | None:
    if source is None or isinstance(source, str):
        return source
    return json.dumps(source, sort_keys=True)


def _significant(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


def draft_finding(
    run_dir: Path,
    finding_id: str,
    title: str,
    summary: str,
    baseline: str = "baseline",
    tolerance: float = 0.25,
    pubkey: Any = None,
    allow_untrusted: bool = False,
) -> dict[str, Any]:
    """A reproduction finding drawn from a verified bundle: medians, ratios against baseline.

    Every scope field comes from the bundle (model manifest, schedule, provenance, results);
    what the bundle does not record is left null and listed under scope.unknown. The caller
    reviews the draft (controlled conditions, descriptions) before adding it to evidence/.
    With allow_untrusted, a bundle whose origin is not trusted is drafted with "untrusted
    input" in its title, summary and scope.not_controlled.
    """
    verification = verified_input(run_dir, pubkey, allow_untrusted)
    if not verification.accepted:
        raise ConfigError(
            f"{run_dir}: the bundle is {verification.verdict.label}: only a "
            "verified, complete run can become evidence (see `appliance bundle "
            "verify`)"
        )
    provenance = read_mapping(RunDir(run_dir).provenance_file)
    facts = BundleFacts.read(run_dir)
    names = sorted(as_mapping(facts.results.get("variants")).keys())
    if baseline not in names:
        raise ConfigError(
            f"{run_dir}: {RESULTS_FILE} has no variant {baseline!r} "
            f"(variants: {', '.join(names) or 'none'}); pass --baseline"
        )
    metrics, claims = [], []
    for metric in DRAFT_METRICS:
        values = {v: m for v in names if (m := facts.median(v, metric)) is not None}
        if not values:
            continue
        metrics.append({"name": metric, "unit": METRIC_UNITS[metric], "values": values})
        for variant in names:
            if variant == baseline or variant not in values or not values.get(baseline):
                continue
            ratio = values[variant] / values[baseline]
            if ratio != 1:
                claims.append(
                    {
                        "metric": metric,
                        "baseline": baseline,
                        "treatment": variant,
                        "direction": "lower" if ratio < 1 else "higher",
                        "ratio": _significant(ratio),
                        "tolerance": tolerance,
                    }
                )
    engine = provenance.get("engine") or {}
    upstream = engine.get("upstream") or {}
    host = provenance.get("host") or {}
    gpus = host.get("gpus") or []
    target = facts.profile.get("target")
    scope: dict[str, Any] = {
        "model": {
            "name": Path(str(facts.model.get("file", "model"))).stem,
            "quantization": None,
            "file": facts.model.get("file"),
            "bytes": facts.model.get("bytes"),
            "sha256": facts.model.get("sha256"),
        },
        "engine": {
            "name": "llama.cpp",
            "source": _source_text(engine.get("source")),
            "commit": upstream.get("commit"),
            "release": upstream.get("release"),
            "modification": None,
        },
        "target": target if target in ("cpu", "sm89", "sm120") else None,
        "hardware": {
            "gpu": gpus[0].get("name") if gpus else None,
            "gpu_memory_bytes": gpus[0].get("memory_bytes") if gpus else None,
            "ram_bytes": host.get("ram_bytes"),
        },
        "memory_limit_bytes": facts.memory_limit_bytes,
        "swap_bytes": facts.swap_bytes,
        "n_predict": facts.n_predict,
        "repeats": facts.repeats,
        "statistic": "median",
        "controlled": [],
        "not_controlled": [],
        "unknown": [],
    }
    if verification.untrusted_input:
        title, summary = f"[{UNTRUSTED_INPUT}] {title}", f"[{UNTRUSTED_INPUT}] {summary}"
        scope["not_controlled"].append(f"{UNTRUSTED_INPUT}: {verification.advice}")
    scope["unknown"] = [
        f"scope.{key}: not recorded in the bundle"
        for key in ("memory_limit_bytes", "swap_bytes", "n_predict", "repeats")
        if scope[key] is None
    ]
    sweep = facts.results.get("sweep")
    if isinstance(sweep, dict) and "error" not in sweep:
        # a sweep's overall medians mix its limits: its claims bound the per-limit figures
        metrics, claims = [], []
        scope["memory_limit_bytes"] = None
        scope["unknown"] = [u for u in scope["unknown"] if "memory_limit_bytes" not in u]
    identical = facts.byte_identical()
    raw = {
        "schema_version": 1,
        "id": finding_id,
        "title": title,
        "origin": "reproduction",
        "status": "measured",
        "summary": summary,
        "bundle_digest": verification.bundle_digest,
        "profile": facts.profile.get("name"),
        "scope": scope,
        "variants": {v: f"profile variant {v}" for v in names},
        "metrics": metrics,
        "claims": claims,
        "byte_identity": {
            "claimed": identical,
            "between": names,
            "scope": "generated text at matched length" if identical is not None else "not recorded",
        },
    }
    if isinstance(sweep, dict) and "error" not in sweep:
        raw["sweep"] = sweep_claims.draft_sweep(sweep, baseline, tolerance)
    errors = validate_finding(raw)
    if errors:
        raise ConfigError(f"{run_dir}: the drafted finding is not valid: {errors[0]}")
    return raw
