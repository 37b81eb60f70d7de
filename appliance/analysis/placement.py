"""Where each trial's model lived, from the engine itself, beside what the planner predicted.

The engine's record is timing.json `placement` (patch 0001's `llama-moe-trace`): exact model
bytes per buffer and the device of each, the layers offloaded, and the KV cache and compute
buffers per buffer type. The planner's prediction is `appliance.planner.plan.make_plan` for the
trial's RAM limit and the profile's `limits.vram` (0 without one), and its predicted cgroup peak
(`predicted_peak_bytes`, for the context the trial used). A demand-mapped trial holds only the
pages of the experts its router chose, so its peak is predicted from its own route trace: the
routing is an input, the page and anonymous-memory model is what is checked; a trial of the
engine's expert cache holds at most its capacity's experts whole (`planner.cache_pages`, the
capacity, readers and lookahead from timing.json `expert_cache`). Each figure gets
its error in percent of the measured one; a prediction under the measured figure is flagged:
the planner's goal is within 5% and never under. A trial whose peak cannot be predicted (a
demand-mapped trial without a trace) leaves the goal undecided, which counts as not met.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.planner.accounting import Accounting
from appliance.planner.pages import is_demand_mapped
from appliance.planner.plan import CUDA, RPC, PlanLimits, make_plan, predicted_peak_bytes
from appliance.runs.records import Placement
from appliance.runs.run_dir import TIMING_FILE
from appliance.runs.timing import timing_of

if TYPE_CHECKING:
    from appliance.planner.cache_pages import CachePeak

GOAL_PCT = 5.0  # the planner's goal: within 5% of the measured figure, and never under it
HOST = "CPU"  # the device name llama.cpp gives host memory


def engine_bytes_by_device(placement: dict[str, Any]) -> dict[str, int]:
    """The model's bytes per device (CPU, CUDA0, ...), summed over the buffers on each."""
    out: dict[str, int] = {}
    for part in (placement.get("model") or {}).values():
        out[part["device"]] = out.get(part["device"], 0) + int(part["bytes"])
    return out


def _error_pct(predicted: int, measured: int | None) -> float | None:
    if not measured:
        return None
    return round((predicted - measured) / measured * 100, 3)


def _routing(
    trace: Path | None, accounting: Accounting, cache_record: dict[str, Any] | None
) -> tuple[list[tuple[int, int]] | None, CachePeak | None]:
    """The experts a demand-mapped trial's router chose, and with the engine's expert cache what
    the cache holds at most (None, None without a trace)."""
    if trace is None:
        return None, None
    from appliance.planner.cache_pages import cache_peak
    from appliance.trace.format import chosen_experts, read_trace

    loaded = read_trace(trace)
    chosen = chosen_experts(loaded.layers, loaded.ids)
    return chosen, None if cache_record is None else cache_peak(accounting, loaded, chosen, cache_record)


def trial_placement(
    trial: dict[str, Any],
    accounting: Accounting | None,
    ram_bytes: int,
    vram_bytes: int | None,
    trace: Path | None = None,
) -> dict[str, Any] | None:
    """One trial's engine placement beside the planner's; None when the engine recorded none.
    `trace` is the trial's route trace, which a demand-mapped trial's peak is predicted from."""
    timing = timing_of(trial)
    engine = timing.placement
    if engine is None:
        return None
    devices = engine_bytes_by_device(engine)
    row: dict[str, Any] = {
        "trial": trial["dir"],
        "variant": trial.get("variant"),
        "layers_offloaded": engine.get("layers_offloaded"),
        "overrides": engine.get("overrides", []),
        "engine_model_bytes": devices,
        "engine_buffers": {name: part["bytes"] for name, part in (engine.get("model") or {}).items()},
        "kv_cache_bytes": {name: part["bytes"] for name, part in (engine.get("kv_cache") or {}).items()},
        "compute_bytes": {name: part["bytes"] for name, part in (engine.get("compute") or {}).items()},
        "router_fusion": timing.kernel_path.router_fusion if timing.kernel_path else None,
    }
    if accounting is None:
        return row
    prompt = timing.n_prompt_tokens or 1
    ctx = prompt + (timing.n_decode_tokens or 0) + 1
    device = trial.get("device_server")  # the stand-in GPU's record (runs.device_server)
    limits = PlanLimits(
        ram_bytes=ram_bytes, vram_bytes=vram_bytes or 0, ctx=ctx, device=RPC if device else CUDA
    )
    plan = make_plan(accounting, limits)
    gpu_weights = sum(
        line.bytes for line in plan.budget if line.tier == "vram" and line.item.startswith("weights")
    )
    predicted = {HOST: accounting.tensor_data_bytes - gpu_weights}
    if gpu_weights:
        predicted["GPU"] = gpu_weights
    measured_gpu = sum(b for device, b in devices.items() if device != HOST)
    measured = {HOST: devices.get(HOST, 0), **({"GPU": measured_gpu} if measured_gpu or gpu_weights else {})}
    peak = (trial.get("cgroup") or {}).get("peak_bytes")
    demand = is_demand_mapped((trial.get("container") or {}).get("environment"))
    experts, cache = _routing(trace, accounting, timing.expert_cache) if demand else (None, None)
    predicted_peak = (
        None
        if demand and experts is None
        else predicted_peak_bytes(
            accounting,
            ram_bytes,
            ctx=ctx,
            prompt_tokens=prompt,
            experts=experts,
            cache=cache,
            vram_bytes=limits.vram_bytes,
            device=limits.device,
        )
    )
    errors = {
        f"model_{device.lower()}": _error_pct(predicted[device], measured.get(device)) for device in predicted
    }
    errors["peak"] = None if predicted_peak is None else _error_pct(predicted_peak, peak)
    device_peak = (device or {}).get("peak_bytes")
    if device:
        errors["device_peak"] = _error_pct(plan.vram_total, device_peak)
    row.update(
        {
            "planner_model_bytes": predicted,
            "measured_model_bytes": measured,
            "planner_peak_bytes": predicted_peak,
            "planner_peak_pages": (
                "no route trace: a demand-mapped peak needs the router's choices"
                if predicted_peak is None
                else "the chosen experts' pages (route trace), those the expert cache holds at most whole"
                if cache is not None
                else "the chosen experts' pages (route trace)"
                + (", or the device's tensors' while they load" if device else "")
                if demand
                else "every page of the model file"
            ),
            "measured_peak_bytes": peak,
            **(
                {"planner_device_bytes": plan.vram_total, "measured_device_peak_bytes": device_peak}
                if device
                else {}
            ),
            "error_pct": errors,
            "under": sorted(name for name, pct in errors.items() if pct is not None and pct < 0),
        }
    )
    return row


def placement_summary(
    trials: list[dict[str, Any]],
    accounting: Accounting | None,
    ram_of: Any,
    vram_bytes: int | None,
    traces: dict[str, Path] | None = None,
) -> dict[str, Any]:
    """results.json `placement`: every trial's row and the worst planner error (the largest in
    magnitude, an under-prediction first); `ram_of(trial)` is the trial's RAM limit and
    `traces` maps a trial directory to its route trace."""
    rows = [
        row
        for trial in trials
        if (
            row := trial_placement(
                trial, accounting, ram_of(trial), vram_bytes, (traces or {}).get(trial["dir"])
            )
        )
        is not None
    ]
    undecided = sorted(
        row["trial"]
        for row in rows
        if "error_pct" in row and row["measured_peak_bytes"] and row["error_pct"]["peak"] is None
    )
    worst = None
    for row in rows:
        for name, pct in (row.get("error_pct") or {}).items():
            if pct is None:
                continue
            key = (pct < 0, abs(pct))
            if worst is None or key > (worst["pct"] < 0, abs(worst["pct"])):
                worst = {"trial": row["trial"], "figure": name, "pct": pct}
    return {
        "source": f"{TIMING_FILE} placement (the engine) beside appliance.planner.plan",
        "goal_pct": GOAL_PCT,
        "vram_budget_bytes": vram_bytes,
        "trials": rows,
        "worst": worst,
        "undecided": undecided,
        "within_goal": (
            None if worst is None else (not undecided and worst["pct"] >= 0 and worst["pct"] <= GOAL_PCT)
        ),
    }


def placement_digest(results: dict[str, Any] | None, planned: Placement | None) -> dict[str, Any] | None:
    """What `appliance bundle show` says about placement: the profile's mode and budget and any
    warning (run.json), each variant's model bytes per buffer and the planner's worst error
    (results.json); None for a bundle that records none of it."""
    placement = (results or {}).get("placement") or {}
    if not placement and not planned:
        return None
    per_variant: dict[str, Any] = {}
    for row in placement.get("trials") or []:
        per_variant.setdefault(row["variant"], row["engine_buffers"])
    return {
        "profile": planned.to_json() if planned is not None else None,
        "model_bytes_per_buffer": per_variant,
        "planner_worst": placement.get("worst"),
        "within_goal": placement.get("within_goal"),
    }
