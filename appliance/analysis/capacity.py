"""The capacity model: how many bytes of routed experts a memory limit leaves in the page cache.

One formula for every prediction (the paging analysis of `appliance run`, the sweep's replay):
the budget = limit - anonymous memory - non-expert bytes of the model file, in bytes, and at
least k of the largest expert (a token's experts must all be resident at once). Each expert
then costs its own layer's bytes (a Q4_K_M file's layers differ), so the replay runs under that
byte budget (`appliance.trace.replay.pool_hits_bytes`), not at `budget // one expert`.

Anonymous memory has one source: the engine's own measurement (`anon_bytes` of its
timing.json `residency_after_load` and `residency_at_end`, the larger of the two). The cgroup's
`anon_bytes` in cgroup.json is read after the engine has exited, so it is not used here.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.runs.timing import timing_of
from appliance.trace.expert_bytes import expert_bytes_from_gguf
from appliance.trace.format import Trace


@dataclass(frozen=True)
class ModelExperts:
    """What of the model file is routed experts: bytes of one expert per MoE layer."""

    file_bytes: int
    expert_bytes: dict[int, int]
    n_experts: int
    k: int

    @property
    def one_expert(self) -> int:
        return max(self.expert_bytes.values())

    @property
    def smallest_expert(self) -> int:
        return min(self.expert_bytes.values())

    @property
    def non_expert_bytes(self) -> int:
        return self.file_bytes - sum(self.expert_bytes.values()) * self.n_experts

    def as_dict(self) -> dict[str, Any]:
        return {
            "file_bytes": self.file_bytes,
            "n_experts": self.n_experts,
            "k": self.k,
            "moe_layers": sorted(self.expert_bytes),
            "expert_bytes": self.one_expert,
            "expert_bytes_per_layer": {str(k): v for k, v in sorted(self.expert_bytes.items())},
            "non_expert_bytes": self.non_expert_bytes,
        }


def model_experts(model_path: Path, trace: Trace) -> ModelExperts:
    """Read once per sweep: checks that the GGUF is the traced model (sha256 included)."""
    return ModelExperts(
        file_bytes=model_path.stat().st_size,
        expert_bytes=expert_bytes_from_gguf(model_path, trace.header),
        n_experts=trace.n_experts,
        k=trace.k,
    )


def anon_bytes(trial: dict[str, Any]) -> int:
    """The engine's anonymous memory in a loaded trial (0 when its timing.json has none)."""
    timing = timing_of(trial)
    samples = (timing.residency_after_load, timing.residency_at_end)
    return max(int(sample.anon_bytes or 0) if sample is not None else 0 for sample in samples)


def budget_for(limit: int, anon_bytes: int, experts: ModelExperts) -> tuple[int, bool]:
    """Bytes of experts the limit leaves after anonymous memory and non-expert bytes; at least
    k of the largest expert (what one token may need at once), flagged when the limit left less."""
    room = limit - anon_bytes - experts.non_expert_bytes
    least = experts.k * experts.one_expert
    return max(int(room), least), room < least
