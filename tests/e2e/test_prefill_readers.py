"""llama-moe-trace --prefill-readers (patch 0006): each prompt layer's chosen experts read whole by
reader threads, with the same texts and traces as demand paging, every chosen expert read once
while it is held, and bad input refused in one line."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import docker
import numpy as np
import pytest

from appliance.runs.profile import load_profile
from appliance.trace.expert_bytes import gguf_expert_layout
from appliance.trace.format import KIND_PROMPT, read_trace
from tests.e2e.conftest import run_tracer, tracer_command
from tests.e2e.test_demand_mmap import evict
from tests.models import tiny_model

PROMPT = "The cat sat on the mat. The dog sat on the log. A bird sang in the tree by the pond."
UBATCH = "16"  # several prompt steps: a later step finds experts an earlier one read
DEMAND = {"LLAMA_MMAP_DEMAND": "1"}
ARGS = ("-n", "8", "--ignore-eos", "--no-repack", "-ub", UBATCH, "--prefetch-experts")
READ_FAULT = "MOE_TRACE_READ_FAULT"

pytestmark = pytest.mark.engine


def expert_bytes_per_layer(model: Path) -> dict[int, int]:
    """Bytes of one expert's slices of each MoE layer's expert tensors, from the GGUF header."""
    return gguf_expert_layout(model)[2]


def prompt_union_bytes(trace_path: Path, model: Path) -> int:
    """Bytes of the distinct experts the prompt's tokens chose, layer by layer."""
    trace = read_trace(trace_path)
    rows = trace.rows[trace.rows["kind"] == KIND_PROMPT]
    per_expert = expert_bytes_per_layer(model)
    return sum(
        len(np.unique(rows[rows["layer"] == layer]["ids"])) * per_expert[layer] for layer in per_expert
    )


def last_token_bytes(trace_path: Path, model: Path) -> int:
    """Bytes of the experts the prompt's last token chose, layer by layer."""
    trace = read_trace(trace_path)
    rows = trace.rows[trace.rows["kind"] == KIND_PROMPT]
    last = rows[rows["pos"] == rows["pos"].max()]
    per_expert = expert_bytes_per_layer(model)
    return sum(len(np.unique(row["ids"])) * per_expert[int(row["layer"])] for row in last)


def test_readers_change_no_result_and_read_each_chosen_expert_once(engine_bin: Path, tmp_path: Path) -> None:
    model = tiny_model("qwen3moe")
    evict(model)
    demand = run_tracer(engine_bin, model, tmp_path / "demand", *ARGS, prompt=PROMPT, env=DEMAND)
    evict(model)
    readers = run_tracer(
        engine_bin, model, tmp_path / "readers", *ARGS, "--prefill-readers", "4", prompt=PROMPT, env=DEMAND
    )
    assert readers.trace.read_bytes() == demand.trace.read_bytes()
    assert readers.text == demand.text and readers.text
    assert demand.timings["prefill_readers"] is None
    record = readers.timings["prefill_readers"]
    assert record["readers"] == 4 and record["layers_mapped"] == 4
    n_prompt_steps = -(-readers.timings["n_prompt_tokens"] // int(UBATCH))
    assert n_prompt_steps >= 3 and record["layers_read"] == 4 * n_prompt_steps
    # the non-expert tensors (all but the token embeddings) are read whole once, never cancelled
    n_experts, _, per_expert = gguf_expert_layout(model)
    non_expert = model.stat().st_size - sum(n_experts * b for b in per_expert.values())
    assert 0 < record["non_expert_queued_bytes"] <= non_expert
    # an expert read queued is read or cancelled (a layer's kernels outran its readers), never both
    assert (
        record["read_bytes"] + record["cancelled_bytes"]
        == record["queued_bytes"] + record["non_expert_queued_bytes"]
    )
    assert record["preads"] >= record["read_bytes"] // (256 << 10)
    union = prompt_union_bytes(readers.trace, model)
    if record["budget_source"] == "none":  # no memory limit here: nothing is dropped, nothing read twice
        assert record["budget_bytes"] == -1 and record["dropped_bytes"] == record["released_bytes"] == 0
        assert record["queued_bytes"] == union, (record, union)
    # short reads are finished by further calls: the same routes and text
    evict(model)
    short = run_tracer(
        engine_bin,
        model,
        tmp_path / "short",
        *ARGS,
        "--prefill-readers",
        "4",
        prompt=PROMPT,
        env={**DEMAND, READ_FAULT: "short"},
    )
    assert short.trace.read_bytes() == demand.trace.read_bytes() and short.text == demand.text


def test_a_layer_that_chose_nearly_every_expert_has_the_next_read_ahead(
    engine_bin: Path, tmp_path: Path
) -> None:
    """One micro-batch of a 534-token prompt on 16 experts: its tokens choose nearly every expert of
    each layer, so the next layer's experts are queued whole while the routed layer computes."""
    model = tiny_model("qwen3moe", experts=16)
    args = (*ARGS, "-ub", "512")  # the later -ub wins: one prompt step
    prompt = load_profile("qwen35-shape-8g-prefill").schedule.prompt  # 534 bytes, 534 tokens
    demand = run_tracer(engine_bin, model, tmp_path / "demand", *args, prompt=prompt, env=DEMAND)
    evict(model)
    ahead = run_tracer(
        engine_bin, model, tmp_path / "ahead", *args, "--prefill-readers", "4", prompt=prompt, env=DEMAND
    )
    assert ahead.trace.read_bytes() == demand.trace.read_bytes() and ahead.text == demand.text
    trace = read_trace(ahead.trace)
    prompt_rows = trace.rows[trace.rows["kind"] == KIND_PROMPT]
    chosen = [len(np.unique(prompt_rows[prompt_rows["layer"] == layer]["ids"])) for layer in range(4)]
    assert all(10 * n >= 9 * 16 for n in chosen[:3]), chosen  # what the read-ahead rule needs
    record = ahead.timings["prefill_readers"]
    per_expert = expert_bytes_per_layer(model)
    union = prompt_union_bytes(ahead.trace, model)
    assert record["ahead_bytes"] > 0 and record["dropped_bytes"] == 0
    # layer 0 is read as routed; each later layer whole ahead, the experts it then chose and
    # that were not read yet queued again: never less than the union, never more than the union
    # and every expert of layers 1 to 3 once more
    assert union <= record["queued_bytes"] <= union + sum(16 * per_expert[layer] for layer in (1, 2, 3))
    assert record["ahead_bytes"] <= sum(16 * per_expert[layer] for layer in (1, 2, 3))
    assert (
        record["read_bytes"] + record["cancelled_bytes"]
        == record["queued_bytes"] + record["non_expert_queued_bytes"]
    )


def test_a_tight_budget_drops_experts_and_changes_no_result(engine_bin: Path, tmp_path: Path) -> None:
    model = tiny_model("qwen3moe")
    per_expert = max(expert_bytes_per_layer(model).values())
    demand = run_tracer(engine_bin, model, tmp_path / "demand", *ARGS, prompt=PROMPT, env=DEMAND)
    tight = run_tracer(
        engine_bin,
        model,
        tmp_path / "tight",
        *ARGS,
        "--prefill-readers",
        "2",
        "--prefill-budget",
        str(4 * per_expert),
        prompt=PROMPT,
        env=DEMAND,
    )
    assert tight.trace.read_bytes() == demand.trace.read_bytes() and tight.text == demand.text
    record = tight.timings["prefill_readers"]
    assert record["budget_source"] == "given" and record["budget_bytes"] == 4 * per_expert
    assert record["dropped_bytes"] > 0
    # dropped experts a later step chose again were queued again
    assert record["queued_bytes"] > prompt_union_bytes(tight.trace, model)


@pytest.mark.parametrize("n_predict", [1, 64])
def test_when_the_prompt_ends_the_readers_release_what_decode_needs_room_for(
    engine_bin: Path, tmp_path: Path, n_predict: int
) -> None:
    """A budget that holds the whole prompt: when it ends, held experts are released (the fewest
    tokens' first, never the last token's) until the budget leaves room for what n_predict
    decode tokens can read (k experts of every layer each, at most the experts not held), and
    not one expert more."""
    model = tiny_model("qwen3moe")
    n_experts, k, per_expert = gguf_expert_layout(model)
    probe = run_tracer(
        engine_bin, model, tmp_path / "probe", *ARGS, "--prefill-readers", "2", prompt=PROMPT, env=DEMAND
    )
    union = prompt_union_bytes(probe.trace, model)
    run = run_tracer(
        engine_bin,
        model,
        tmp_path / "run",
        *ARGS,
        "-n",
        str(n_predict),
        "--prefill-readers",
        "2",
        "--prefill-budget",
        str(union),
        prompt=PROMPT,
        env=DEMAND,
    )
    assert run.text.startswith(probe.text[: len(run.text)]) and run.text
    record = run.timings["prefill_readers"]
    assert record["budget_source"] == "given" and record["dropped_bytes"] == record["released_bytes"]
    held_at_end = record["queued_bytes"] - record["cancelled_bytes"]  # the prompt's reads, none dropped
    assert record["held_bytes"] == held_at_end - record["released_bytes"]
    one_token = k * sum(per_expert.values())
    need = min(n_predict * one_token, n_experts * sum(per_expert.values()) - held_at_end)
    room = union - record["held_bytes"]
    if record["released_bytes"] == 0:
        assert union - held_at_end >= need
    elif room < need:  # released all it may: only the last token's experts are left
        assert record["held_bytes"] <= last_token_bytes(run.trace, model)
    else:  # released just enough: one expert fewer would not have made the room
        assert room - max(per_expert.values()) < need
    if n_predict == 64:
        assert record["released_bytes"] > 0


def refused(engine_bin: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    run = run_tracer(
        engine_bin,
        tiny_model("qwen3moe"),
        tmp_path / "bad",
        *args,
        prompt=PROMPT,
        env={**DEMAND, **(env or {})},
        check=False,
    )
    lines = run.result.stderr.decode().strip().splitlines()
    assert run.result.returncode == 1 and lines, run.result.stderr
    assert not (tmp_path / "bad" / "timings.json").exists()
    assert not (tmp_path / "bad" / "trace.moetrace").exists()
    return lines[-1]


def test_bad_prefill_input_is_refused_in_one_line(engine_bin: Path, tmp_path: Path) -> None:
    assert refused(engine_bin, tmp_path, "--prefill-readers", "65").endswith(
        "--prefill-readers must be 1..64 (got 65)"
    )
    assert refused(engine_bin, tmp_path, "--prefill-budget", "1GiB").endswith(
        "--prefill-budget needs --prefill-readers N: it bounds what the readers hold"
    )
    assert refused(engine_bin, tmp_path, "--prefill-readers", "2", "--prefill-budget", "lots").endswith(
        "option --prefill-budget expects a size in bytes (e.g. 4GiB), got 'lots'"
    )
    # a read that fails stops the run at once: one line with the error and the offset, no record
    line = refused(engine_bin, tmp_path, *ARGS, "--prefill-readers", "2", env={READ_FAULT: "fail-after:3"})
    assert re.search(
        r"a prefill read of the model failed \(Input/output error at byte \d+ of the model\); "
        r"the run stops here$",
        line,
    ), line


def test_an_interrupt_in_the_middle_of_prefill_leaves_nothing_half_written(
    engine_bin: Path, tmp_path: Path
) -> None:
    """Reads a step waits for that stall after the first three (MOE_TRACE_READ_FAULT=
    stall-after:3) hold the prompt open until Ctrl-C: the tool ends on the signal,
    and neither the trace, the timing record nor the text exists, whole or in part (each is
    written to a temporary name and renamed when whole, only at the end)."""
    model = tiny_model("qwen3moe")
    out = tmp_path / "interrupted"
    out.mkdir()
    tracer = subprocess.Popen(
        tracer_command(engine_bin, model, out, *ARGS, "--prefill-readers", "2", prompt=PROMPT),
        env={**os.environ, **DEMAND, READ_FAULT: "stall-after:3"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(2)  # a stalled read a step waits for never finishes: the prompt cannot end
        assert tracer.poll() is None, tracer.stderr.read() if tracer.stderr else ""
        assert list(out.iterdir()) == []  # held in the prompt, not finished and stuck at exit
        tracer.send_signal(signal.SIGINT)
        assert tracer.wait(timeout=30) == -signal.SIGINT
    finally:
        if tracer.poll() is None:
            tracer.kill()
            tracer.wait(timeout=30)
    assert list(out.iterdir()) == []


@pytest.mark.docker
def test_a_budget_above_what_the_memory_limit_allows_is_refused(
    engine_image_cpu: str, docker_client: docker.DockerClient
) -> None:
    model = tiny_model("qwen3moe")
    container = docker_client.containers.run(
        engine_image_cpu,
        [
            "llama-moe-trace",
            "-m",
            f"/models/{model.name}",
            "-p",
            PROMPT,
            "--no-trace",
            "-n",
            "2",
            "--no-repack",
            "--prefill-readers",
            "2",
            "--prefill-budget",
            "1GiB",
        ],
        volumes={str(model): {"bind": f"/models/{model.name}", "mode": "ro"}},
        environment=DEMAND,
        network_mode="none",
        mem_limit="256m",
        memswap_limit="256m",
        detach=True,
    )
    try:
        status = container.wait(timeout=300)
        lines = container.logs(stdout=False, stderr=True).decode().strip().splitlines()
    finally:
        container.remove(force=True)
    assert status["StatusCode"] == 1, lines
    assert re.fullmatch(
        r"llama-moe-trace: error: --prefill-budget 1073741824 is more than the memory limit allows: "
        r"\d+ bytes \(limit 268435456 - resident anonymous \d+ - non-expert tensors \d+ "
        r"- a tenth of the limit\); "
        r"give at most that, or leave it out",
        lines[-1],
    ), lines
