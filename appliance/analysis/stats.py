"""Statistics over a run's trials: the numbers `results.json` and the summary table show.

Per variant: median, min, max and spread of wall time, prefill and decode tokens/s, peak
memory, bytes read from the model's device and bytes read per generated token, with the raw
samples kept and outliers flagged by the modified z-score (median absolute deviation).
Ratios between variants (each later variant over each earlier one, so the first variant is
the denominator of its comparisons) are taken pair by pair within each round of the
interleaved order, then summarized. Generated texts are compared byte for byte at matched length.
"""

import statistics
from pathlib import Path
from typing import Any

from appliance.runs.run_dir import RunDir
from appliance.runs.status import TrialStatus
from appliance.runs.timing import timing_problem

SCHEMA_VERSION = 1
OUTLIER_Z = 3.5  # Iglewicz and Hoaglin's cut-off for the modified z-score
# Keys read from the engine's timing.json (llama-moe-trace). Names tried in order.
TIMING_KEYS = {
    "prefill_tps": ("prompt_tokens_per_s", "prefill_tokens_per_s"),
    "decode_tps": ("decode_tokens_per_s",),
    "generated_tokens": ("n_decode_tokens", "decode_tokens", "generated_tokens"),
}
METRICS = (
    "wall_s",
    "prefill_tps",
    "decode_tps",
    "peak_bytes",
    "block_read_bytes",
    "major_faults",
    "bytes_read_per_token",
)


def ratio_or_none(a: float | None, b: float | None) -> float | None:
    """a / b, or None when a is missing or b is missing or zero."""
    return a / b if a is not None and b else None


def mad_outliers(samples: list[float]) -> list[int]:
    """Indexes of samples whose modified z-score exceeds OUTLIER_Z (none when MAD is 0)."""
    if len(samples) < 3:
        return []
    median = statistics.median(samples)
    mad = statistics.median(abs(x - median) for x in samples)
    if mad == 0:
        return []
    return [i for i, x in enumerate(samples) if abs(0.6745 * (x - median) / mad) > OUTLIER_Z]


def describe(samples: list[float]) -> dict[str, Any]:
    """median, min, max, spread (max - min, and relative to the median), outliers, samples."""
    if not samples:
        return {"n": 0, "samples": []}
    median = statistics.median(samples)
    low, high = min(samples), max(samples)
    return {
        "n": len(samples),
        "median": median,
        "min": low,
        "max": high,
        "spread": high - low,
        "spread_rel": (high - low) / median if median else None,
        "outliers": mad_outliers(samples),
        "samples": samples,
    }


def _timing_value(timing: dict[str, Any], metric: str) -> float | None:
    for key in TIMING_KEYS[metric]:
        value = timing.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def model_read_bytes(trial: dict[str, Any]) -> int | None:
    """The block reads that count for a trial: those of the model's device (trial.json
    `model_device`) when the cgroup counted it, else the sum over every device; None when the
    cgroup counted no reads."""
    reads = (trial.get("cgroup") or {}).get("block_read_bytes") or {}
    device = trial.get("model_device")
    if device in reads:
        return int(reads[device])
    return sum(reads.values()) if reads else None


def trial_metrics(trial: dict[str, Any], n_predict: int) -> dict[str, float | None]:
    """The per-trial figures the statistics are taken over."""
    cgroup = trial.get("cgroup") or {}
    read = model_read_bytes(trial)
    tokens = _timing_value(trial["timing"], "generated_tokens") or float(n_predict)
    return {
        "wall_s": trial.get("engine_wall_s"),
        "prefill_tps": _timing_value(trial["timing"], "prefill_tps"),
        "decode_tps": _timing_value(trial["timing"], "decode_tps"),
        "peak_bytes": cgroup.get("peak_bytes"),
        "block_read_bytes": read,
        "major_faults": cgroup.get("major_faults"),
        "bytes_read_per_token": read / tokens if read is not None and tokens else None,
    }


def _ratios(
    by_round: dict[int, dict[str, dict[str, float | None]]], reference: str, other: str
) -> dict[str, Any]:
    """other / reference for each metric, pair by pair in the same round."""
    out: dict[str, Any] = {"numerator": other, "denominator": reference, "metrics": {}}
    for metric in METRICS:
        pairs = []
        for repeat in sorted(by_round):
            a = by_round[repeat].get(reference, {}).get(metric)
            b = by_round[repeat].get(other, {}).get(metric)
            if a and b is not None:
                pairs.append({"repeat": repeat, "ratio": b / a})
        if pairs:
            ratios = [p["ratio"] for p in pairs]
            out["metrics"][metric] = {**describe(ratios), "pairs": pairs}
    return out


def byte_identity(trials: list[dict[str, Any]], reference_variant: str) -> dict[str, Any]:
    """Every finished trial's text against the reference variant's first text, at the
    shorter of the two lengths; any difference is a finding."""
    with_text = [t for t in trials if t["text"] is not None and t.get("status") == TrialStatus.OK]
    reference = next((t for t in with_text if t["variant"] == reference_variant), None)
    if reference is None:
        return {
            "reference": None,
            "comparisons": [],
            "all_identical": None,
            "findings": ["no finished reference trial with generated text"],
        }
    comparisons, findings = [], []
    for trial in with_text:
        if trial is reference:
            continue
        length = min(len(reference["text"]), len(trial["text"]))
        a, b = reference["text"][:length], trial["text"][:length]
        first_diff = next((i for i in range(length) if a[i] != b[i]), None)
        comparisons.append(
            {
                "trial": trial["dir"],
                "matched_length": length,
                "identical": first_diff is None,
                "first_difference": first_diff,
            }
        )
        if first_diff is not None:
            findings.append(
                f"{trial['dir']} differs from {reference['dir']} at byte {first_diff} of {length} compared"
            )
    return {
        "reference": reference["dir"],
        "comparisons": comparisons,
        "all_identical": not findings,
        "findings": findings,
    }


def per_variant_stats(
    trials: list[dict[str, Any]],
    variants: list[str],
    n_predict: int,
    by_round: dict[int, dict[str, dict[str, float | None]]] | None = None,
) -> dict[str, Any]:
    """Statistics of each variant over the given trials; fills by_round when given."""
    per_variant: dict[str, Any] = {}
    by_round = {} if by_round is None else by_round
    for name in variants:
        mine = [t for t in trials if t["variant"] == name]
        ok = [t for t in mine if t.get("status") == TrialStatus.OK]
        metrics = {t["dir"]: trial_metrics(t, n_predict) for t in ok}
        for t in ok:
            by_round.setdefault(t["repeat"], {})[name] = metrics[t["dir"]]
        counts = {status: sum(1 for t in mine if t.get("status") == status) for status in TrialStatus}
        per_variant[name] = {
            "trials": [t["dir"] for t in mine],
            "counts": counts,
            **{m: describe([v for v in (metrics[d][m] for d in metrics) if v is not None]) for m in METRICS},
        }
    return per_variant


def summarize(run_dir: Path, variants: list[str], n_predict: int) -> dict[str, Any]:
    """results.json: per-variant statistics, pairwise ratios and the byte-identity check; for
    a run over several memory limits also the per-variant statistics of each limit."""
    trials = RunDir(run_dir).load_trials()
    by_round: dict[int, dict[str, dict[str, float | None]]] = {}
    limits = sorted({t["memory_limit"] for t in trials if t.get("memory_limit") is not None})
    if len(limits) > 1:
        by_limit = {
            str(limit): per_variant_stats(
                [t for t in trials if t.get("memory_limit") == limit], variants, n_predict
            )
            for limit in limits
        }
        per_variant = per_variant_stats(trials, variants, n_predict)
    else:
        by_limit = None
        per_variant = per_variant_stats(trials, variants, n_predict, by_round)
    reference = variants[0]
    pairs = [(a, b) for i, a in enumerate(variants) for b in variants[i + 1 :]]
    return {
        "schema_version": SCHEMA_VERSION,
        "trial_order": [t["dir"] for t in trials],
        "statuses": {t["dir"]: t.get("status") for t in trials},
        "variants": per_variant,
        "ratios": [_ratios(by_round, a, b) for a, b in pairs],
        "byte_identity": byte_identity(trials, reference),
        # trials whose timing.json the analyses could not read, and why: their figures are absent
        "timing_unread": {t["dir"]: why for t in trials if (why := timing_problem(t)) is not None},
        **({"by_limit": by_limit} if by_limit is not None else {}),
    }
