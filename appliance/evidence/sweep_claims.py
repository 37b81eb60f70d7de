"""Claims about a memory sweep: bounds on its predicted-against-measured figures.

A finding's `sweep` names the limits (bytes) and claims such as "demand mmap's decode reads
stay within [0.8, 1.5] of the LRU prediction at every limit". A claim bounds one quantity of
results.json `sweep.summary` (medians per limit and variant) at every limit, at the smallest or
at the largest; a missing bound (null) is not checked. A claim must be able to fail for a
reason of the run's own (`empty_claim`): never bounds that hold every value its quantity can take
(a Belady/LRU ceiling of 1), and never the fraction of the disk probe's bandwidth, whose
magnitude is the host's balance of disk against CPU (a faster disk lowers it, a probe at another
queue depth moves it), so a slow or a fast disk alone would turn it false. The expert cache's
quantities (measured reads over the same policy's replay, reads over demand mmap's, decode
tokens/s over demand prefetch's) are medians of `sweep.expert_cache.summary`; the decode-rate
ratio is drafted only from medians of RATE_CLAIM_REPEATS trials or more.
"""

from typing import Any

from appliance.runs.run_dir import RESULTS_FILE

QUANTITIES = (
    "measured_over_lru",
    "measured_over_belady",
    "belady_over_lru",
    "disk_fraction",
    "capacity_miss_share_lru",
)
# sweep.expert_cache.summary
CACHE_QUANTITIES = ("measured_over_replay", "reads_over_demand_mmap", "decode_over_demand_prefetch")
RATE_CLAIM_REPEATS = 3  # a decode-rate ratio is drafted only from medians of at least this many trials
PLACES = ("every", "smallest", "largest")
# the values each quantity can take at all (None: unbounded); bounds that hold all of them
# cannot fail. Belady never reads more than LRU at one expert size: its replay is optimal.
POSSIBLE = {q: (0.0, None) for q in QUANTITIES + CACHE_QUANTITIES} | {
    "belady_over_lru": (0.0, 1.0),
    "capacity_miss_share_lru": (0.0, 1.0),
}
# quantities whose magnitude is the host's disk against its CPU, not the run's: never claimed
HOST_BOUND = {
    "disk_fraction": "decode read bandwidth over the disk probe's, which a faster or slower disk "
    "moves by itself",
}


def empty_claim(claim: dict[str, Any]) -> str | None:
    """Why a sweep claim cannot fail for a reason of the run's own (its bounds hold every value
    its quantity can take, or its quantity is the host's), or None when it can."""
    quantity, low, high = claim["quantity"], claim["min"], claim["max"]
    if quantity in HOST_BOUND:
        return f"{quantity} measures the host, not the run ({HOST_BOUND[quantity]})"
    floor, ceiling = POSSIBLE.get(quantity, (None, None))
    below = low is None or (floor is not None and low <= floor)
    above = high is None or (ceiling is not None and high >= ceiling)
    if below and above:
        span = f"[{floor}, {'inf' if ceiling is None else ceiling}]"
        return f"bounds [{low}, {high}] hold every value {quantity} can take ({span}): it cannot fail"
    return None


def _rows(summary: list[dict[str, Any]], variant: str, at: str) -> list[dict[str, Any]]:
    mine = sorted((r for r in summary if r.get("variant") == variant), key=lambda r: r["memory_limit"])
    if not mine or at == "every":
        return mine
    return [mine[0]] if at == "smallest" else [mine[-1]]


def claim_label(claim: dict[str, Any]) -> str:
    low = "-inf" if claim["min"] is None else f"{claim['min']:.4g}"
    high = "inf" if claim["max"] is None else f"{claim['max']:.4g}"
    return f"sweep {claim['quantity']} of {claim['variant']} at {claim['at']} limit in [{low}, {high}]"


def check_claim(sweep: dict[str, Any], claim: dict[str, Any]) -> tuple[bool | None, str]:
    """(holds, reason); holds is None when results.json lacks the figures."""
    cache = claim["quantity"] in CACHE_QUANTITIES
    summary = ((sweep.get("expert_cache") or {}) if cache else sweep).get("summary") or []
    rows = _rows(summary, claim["variant"], claim["at"])
    values = [r.get(claim["quantity"]) for r in rows]
    if not rows or any(not isinstance(v, int | float) for v in values):
        return None, (
            f"{RESULTS_FILE} sweep{'.expert_cache' if cache else ''} has no {claim['quantity']} for "
            f"{claim['variant']!r} at the {claim['at']} limit"
        )
    outside = [
        (r["memory_limit"], v)
        for r, v in zip(rows, values, strict=True)
        if (claim["min"] is not None and v < claim["min"]) or (claim["max"] is not None and v > claim["max"])
    ]
    observed = ", ".join(f"{v:.4g}" for v in values)
    if outside:
        where = ", ".join(f"{v:.4g} at {limit} bytes" for limit, v in outside)
        return False, f"observed {where}: outside the claimed bounds"
    return True, f"observed {observed}: within the claimed bounds"


def limits_mismatch(sweep: dict[str, Any] | None, wanted: list[int]) -> str | None:
    """Why a run's sweep cannot be compared with the finding's, or None."""
    if not sweep or "error" in sweep:
        return f"the run is not a sweep ({RESULTS_FILE} has no sweep analysis)"
    if sorted(sweep.get("limits") or []) != sorted(wanted):
        return f"other sweep limits: the run used {sweep.get('limits')}, the evidence {wanted}"
    return None


def draft_sweep(sweep: dict[str, Any], baseline: str, tolerance: float) -> dict[str, Any]:
    """Claims drawn from a sweep's summary: every non-baseline variant's measured/LRU range
    widened by the tolerance, its Belady/LRU ceiling at the smallest limit (when the widening
    leaves it below 1, which Belady never exceeds), and the smallest limit's share of capacity
    misses; never the disk fraction, nor any claim `empty_claim` refuses."""
    summary = sweep.get("summary") or []
    variants = list(dict.fromkeys(r["variant"] for r in summary))
    claims: list[dict[str, Any]] = []

    def values(variant: str, quantity: str) -> list[float]:
        return [v for r in _rows(summary, variant, "every") if isinstance(v := r.get(quantity), int | float)]

    for variant in variants:
        ratios = values(variant, "measured_over_lru")
        if variant != baseline and ratios:
            claims.append(
                {
                    "quantity": "measured_over_lru",
                    "variant": variant,
                    "at": "every",
                    "min": _round(min(ratios) / (1 + tolerance)),
                    "max": _round(max(ratios) * (1 + tolerance)),
                }
            )
        headroom = values(variant, "belady_over_lru")
        if variant != baseline and headroom:
            claims.append(
                {
                    "quantity": "belady_over_lru",
                    "variant": variant,
                    "at": "smallest",
                    "min": None,
                    "max": _round(headroom[0] * (1 + tolerance)),
                }
            )
        share = values(variant, "capacity_miss_share_lru")
        if variant != baseline and share and share[0] >= 0.5:
            claims.append(
                {
                    "quantity": "capacity_miss_share_lru",
                    "variant": variant,
                    "at": "smallest",
                    "min": 0.5,
                    "max": None,
                }
            )
    claims += _draft_cache(sweep.get("expert_cache") or {}, tolerance)
    claims = [c for c in claims if empty_claim(c) is None]
    return {"limits_bytes": sorted(sweep.get("limits") or []), "claims": claims}


def _draft_cache(cache: dict[str, Any], tolerance: float) -> list[dict[str, Any]]:
    """Per expert-cache variant: measured reads within the replay's tolerance of its own replay
    at every limit (when they were), its reads over demand mmap's below the largest seen, widened
    by the tolerance, and, from medians of enough repeats, its decode rate over demand prefetch's
    above the smallest seen, narrowed by the tolerance."""
    from appliance.analysis.cache_analysis import REPLAY_TOLERANCE  # numpy and numba load only here

    summary = cache.get("summary") or []
    claims: list[dict[str, Any]] = []
    for variant in dict.fromkeys(r["variant"] for r in summary):
        rows = _rows(summary, variant, "every")
        replay = [v for r in rows if isinstance(v := r.get("measured_over_replay"), int | float)]
        if not replay:
            continue
        if all(abs(v - 1) <= REPLAY_TOLERANCE for v in replay):
            claims.append(
                {
                    "quantity": "measured_over_replay",
                    "variant": variant,
                    "at": "every",
                    "min": 1 - REPLAY_TOLERANCE,
                    "max": 1 + REPLAY_TOLERANCE,
                }
            )
        mmap = [v for r in rows if isinstance(v := r.get("reads_over_demand_mmap"), int | float)]
        if mmap:
            claims.append(
                {
                    "quantity": "reads_over_demand_mmap",
                    "variant": variant,
                    "at": "every",
                    "min": None,
                    "max": _round(max(mmap) * (1 + tolerance)),
                }
            )
        rates = [v for r in rows if isinstance(v := r.get("decode_over_demand_prefetch"), int | float)]
        if rates and len(rates) == len(rows) and all(r.get("n", 0) >= RATE_CLAIM_REPEATS for r in rows):
            claims.append(
                {
                    "quantity": "decode_over_demand_prefetch",
                    "variant": variant,
                    "at": "every",
                    "min": _round(min(rates) / (1 + tolerance)),
                    "max": None,
                }
            )
    return claims


def _round(value: float) -> float:
    return float(f"{value:.4g}")
