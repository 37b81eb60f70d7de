"""Where llama.cpp puts a model's tensors, given its offload choices (src/llama-model.cpp): of
n_layer + 1 offload slots, the output head the last, -ngl N offloads the last N, so the layers
from n_layer + 1 - N on and, for any N >= 1, the output head; --n-cpu-moe M keeps the routed
experts of layers below M on the host. Token embeddings stay on the host."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.planner.accounting import Accounting, TensorBytes


@dataclass(frozen=True)
class Offload:
    """One placement: the first layer on the device, the output head's side, and the layers
    whose routed experts stay on the host (all of them with --cpu-moe)."""

    first_device_layer: int
    output_on_device: bool
    host_expert_layers: int  # routed experts of layers below this stay on the host

    def on_device(self, layer: int, group: str) -> bool:
        """Whether a tensor of `layer` (-1 outside the layer stack) and accounting group
        (planner.accounting) is placed on the device."""
        if layer < 0:
            return self.output_on_device and group in ("output", "other")
        if group == "routed_experts" and layer < self.host_expert_layers:
            return False
        return layer >= self.first_device_layer

    def tensors(self, accounting: Accounting) -> Iterator[TensorBytes]:
        """The model's tensors placed on the device, in file order."""
        return (t for t in accounting.tensors if self.on_device(t.layer, t.group))

    def offloads(self, layers: int) -> bool:
        """Whether anything of a model of `layers` main layers goes to the device."""
        return self.output_on_device or self.first_device_layer < layers

    @classmethod
    def of_ngl(cls, layers: int, ngl: int, host_expert_layers: int) -> Offload:
        """The placement `-ngl ngl --n-cpu-moe host_expert_layers` gives a model of `layers`."""
        return cls(max(layers + 1 - ngl, 0), ngl >= 1, host_expert_layers)


def host_non_expert_bytes(accounting: Accounting, offload: Offload | None, model_bytes: int) -> int:
    """Model bytes outside the routed experts that stay on the host with this placement: all of
    them without one (None: no device, or a placement not modelled), the header and padding
    always. `model_bytes` is the model's size (a header-only skeleton's file is smaller)."""
    non_expert = max(0, model_bytes - accounting.groups["routed_experts"])
    if offload is None:
        return non_expert
    return non_expert - sum(t.nbytes for t in offload.tensors(accounting) if t.group != "routed_experts")
