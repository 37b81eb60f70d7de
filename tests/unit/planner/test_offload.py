"""Where llama.cpp places a model's tensors for -ngl and --n-cpu-moe: n_layer + 1 offload slots,
the output head the last, the token embeddings always on the host."""

from appliance.planner.accounting import account_file
from appliance.planner.offload import Offload, host_non_expert_bytes
from tests.models import tiny_model


def test_ngl_counts_the_output_head_as_the_last_slot() -> None:
    # 4 layers: -ngl 1 offloads the output head only, -ngl 5 every layer and the head
    head_only = Offload.of_ngl(4, 1, 4)
    assert (head_only.first_device_layer, head_only.output_on_device) == (4, True)
    assert not any(head_only.on_device(layer, "attention_ssm") for layer in range(4))
    assert head_only.on_device(-1, "output") and head_only.on_device(-1, "other")
    assert not head_only.on_device(-1, "embeddings")
    two = Offload.of_ngl(4, 3, 4)
    assert [two.on_device(layer, "attention_ssm") for layer in range(4)] == [False, False, True, True]
    assert not any(two.on_device(layer, "routed_experts") for layer in range(4))  # --n-cpu-moe 4
    nothing = Offload.of_ngl(4, 0, 4)
    assert not nothing.output_on_device and nothing.first_device_layer == 5
    assert Offload.of_ngl(4, 99, 0).first_device_layer == 0


def test_n_cpu_moe_keeps_the_experts_of_the_first_layers_on_the_host() -> None:
    placed = Offload.of_ngl(4, 5, 2)
    assert [placed.on_device(layer, "routed_experts") for layer in range(4)] == [False, False, True, True]
    assert all(placed.on_device(layer, "shared_experts") for layer in range(4))
    # experts of a layer left on the host by -ngl stay there whatever --n-cpu-moe says
    assert not Offload.of_ngl(4, 2, 0).on_device(2, "routed_experts")


def test_the_host_keeps_the_non_expert_bytes_the_device_does_not_take() -> None:
    model = tiny_model("qwen3moe")
    acc = account_file(model)
    size = model.stat().st_size
    routed = acc.groups["routed_experts"]
    assert host_non_expert_bytes(acc, None, size) == size - routed
    tensors = sum(t.nbytes for t in acc.tensors)
    embeddings = sum(t.nbytes for t in acc.tensors if t.group == "embeddings")
    everything = Offload.of_ngl(acc.facts.layers, acc.facts.layers + 1, 0)
    assert host_non_expert_bytes(acc, everything, size) == size - tensors + embeddings
    last_layer = sum(
        t.nbytes for t in acc.tensors if t.layer == acc.facts.layers - 1 and t.group != "routed_experts"
    )
    head = sum(t.nbytes for t in acc.tensors if t.group in ("output", "other"))
    one = Offload.of_ngl(acc.facts.layers, 2, acc.facts.layers)
    assert host_non_expert_bytes(acc, one, size) == size - routed - last_layer - head
