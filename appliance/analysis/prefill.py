"""A trial's prompt (prefill) against its own bound.

The prompt has to read at least the distinct experts its tokens chose, layer by layer (from the
trial's trace), plus the model's non-expert tensors: its `bound_bytes`. Beside it stand the
device reads of the prompt phase (the tracer's `/proc/self/io` counters), their ratio, and the
read bandwidth while reading over the disk probe's at the depth the prompt read at
(appliance.runs.read_depth.prefill_read_depth). With prefill readers (patch 0006) the bandwidth
is the readers' bytes over the seconds they had a read in flight; without them reads happen in
page faults spread over the whole prompt, so it is the prompt's reads over its seconds. What the
model leaves out is in docs/sweeps.md ("The prompt").
"""

from typing import Any

import numpy as np

from appliance.analysis.capacity import ModelExperts
from appliance.analysis.stats import ratio_or_none as _ratio
from appliance.runs.read_depth import depth_probed, prefill_read_depth
from appliance.runs.timing import TimingRecord
from appliance.trace.format import KIND_PROMPT, Trace


def prompt_union_bytes(trace: Trace, experts: ModelExperts) -> int:
    """Bytes of the distinct experts the prompt's tokens chose, summed over the MoE layers."""
    rows = trace.rows[trace.rows["kind"] == KIND_PROMPT]
    return sum(
        int(np.unique(rows[rows["layer"] == layer]["ids"]).size) * size
        for layer, size in experts.expert_bytes.items()
    )


def prefill_row(
    timing: TimingRecord,
    prefill_read_bytes: int | None,
    trace: Trace,
    experts: ModelExperts,
    probe_bps: dict[int, float | None],
    engine_args: list[str],
) -> dict[str, Any]:
    """The prompt of one finished traced trial: speed, reads against the bound, bandwidth against
    the probe at its depth, and the prefill readers' own record when it had them."""
    union = prompt_union_bytes(trace, experts)
    bound = union + experts.non_expert_bytes
    readers = timing.prefill_readers
    busy = readers.get("read_busy_s") if readers else None
    if readers and busy:
        bandwidth: float | None = readers["read_bytes"] / busy
    else:
        bandwidth = _ratio(prefill_read_bytes, timing.prompt_s)
    depth = prefill_read_depth(engine_args)
    probed = depth_probed(depth)
    return {
        "tokens": timing.n_prompt_tokens,
        "seconds": timing.prompt_s,
        "tps": timing.prompt_tokens_per_s,
        "read_bytes": prefill_read_bytes,
        "union_bytes": union,
        "bound_bytes": bound,
        "read_over_bound": _ratio(prefill_read_bytes, bound),
        "read_bytes_per_s": bandwidth,
        "read_depth": depth,
        "disk_probe_depth": probed,
        "disk_fraction": _ratio(bandwidth, probe_bps.get(probed)),
        "readers": readers,
    }
