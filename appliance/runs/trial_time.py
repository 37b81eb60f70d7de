"""How long a trial may take: the one home of the worst-case read bound behind a sweep's time
estimate and every trial's timeout (docs/sweeps.md, "Trial timeouts").

At worst a cold trial reads the whole file once (loading) and then, for every token it
processes (the prompt's and the generated ones), all the experts it routes to with no reuse:
k / n_experts of the file per token, a bound on the routed expert bytes since the experts are
part of the file. The sweep's estimate divides that by ASSUMED_READ_BPS. A trial's timeout
divides it by the disk probe's QD1 rate for expert-size reads when the run has a probe (else
ASSUMED_READ_BPS, conservative for any disk), adds CPU_S_PER_TOKEN per token for the compute
and the container's start, and multiplies by SAFETY_FACTOR: it stops an engine that hangs,
never one that is merely slow.
"""

from pathlib import Path

from appliance.core.errors import ConfigError
from appliance.runs.profile import Schedule
from appliance.trace.expert_bytes import gguf_expert_layout

ASSUMED_READ_BPS = 200 * (1 << 20)  # read rate assumed without a disk probe
TRIAL_OVERHEAD_S = 10.0  # container start-up, page-cache eviction, engine start
CPU_S_PER_TOKEN = 1.0  # compute per token at worst (2 cores, a 35B-A3B shape: 0.9 tok/s prompt)
SAFETY_FACTOR = 4.0  # a timeout is this many times the worst case


def trial_read_bytes(model_bytes: int, tokens: int, k: int, n_experts: int) -> float:
    """The bytes a cold trial reads at worst: the file once, then k / n_experts of it per token."""
    return model_bytes * (1 + tokens * k / n_experts)


def prompt_token_bound(prompt: str) -> int:
    """At most one token per byte of the prompt (byte-level tokenizers), plus BOS and EOS."""
    return len(prompt.encode()) + 2


def trial_timeout_s(
    model_bytes: int, tokens: int, k: int, n_experts: int, read_bps: float | None = None
) -> float:
    """A trial's timeout: SAFETY_FACTOR x (start-up + the worst-case reads at `read_bps`
    (ASSUMED_READ_BPS when None) + CPU_S_PER_TOKEN per token)."""
    rate = ASSUMED_READ_BPS if read_bps is None or read_bps <= 0 else read_bps
    reads_s = trial_read_bytes(model_bytes, tokens, k, n_experts) / rate
    return SAFETY_FACTOR * (TRIAL_OVERHEAD_S + reads_s + tokens * CPU_S_PER_TOKEN)


def model_trial_timeout_s(model_path: Path, schedule: Schedule, read_bps: float | None) -> float:
    """`trial_timeout_s` for a model file and a schedule: its size, its experts (a file
    without experts counts whole per token), the prompt's and the generated tokens."""
    try:
        n_experts, k, _ = gguf_expert_layout(model_path)
    except ConfigError:
        n_experts = k = 1
    tokens = prompt_token_bound(schedule.prompt) + schedule.n_predict
    return trial_timeout_s(model_path.stat().st_size, tokens, k, n_experts, read_bps)
