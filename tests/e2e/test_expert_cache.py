"""The expert cache in the engine (experimental patch 0004, `llama-moe-trace --expert-cache`).

Its decisions must be the replay's (appliance/trace/kernels.py) request by request; a run with
it must route and generate exactly as a run without it, and its own miss count for a trace
must be the replay's prediction for that trace and capacity; bad input gets one line.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from appliance.host.pagecache import evict
from appliance.trace import kernels
from appliance.trace.events import trace_events
from appliance.trace.format import Trace, read_trace, write_trace
from appliance.trace.replay import pool_hits
from appliance.trace.synth import TraceSynthSpec, synth_trace
from tests.e2e.conftest import TracerRun, run_tracer
from tests.models import tiny_model

POLICIES = ("lru", "fifo", "least-stale", "belady")
PROMPT = "The quick brown fox"
DEMAND = {"LLAMA_MMAP_DEMAND": "1"}


def replay_in_tool(
    bin_dir: Path, trace: Path, policy: str, capacity: int, out: Path
) -> subprocess.CompletedProcess[str]:
    future = ["--future", str(trace)] if policy == "belady" else []
    return subprocess.run(
        [
            str(bin_dir / "llama-moe-trace"),
            "--replay",
            str(trace),
            "--expert-cache",
            policy,
            "--expert-cache-capacity",
            str(capacity),
            *future,
            "--timings",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def python_hits(trace: Trace, policy: str, capacity: int) -> np.ndarray:
    """The replay's hit (1) or miss (0) of every request of the global pool, in event order."""
    return pool_hits(trace_events(trace).stream, kernels.CODES[policy], capacity, None, None)


def per_step(trace: Trace, hits: np.ndarray) -> dict[int, tuple[int, int]]:
    """step -> (hits, misses) of the global pool's requests."""
    stream = trace_events(trace).stream
    step_of_request = np.repeat(stream.step, np.diff(stream.ptr))
    out = {}
    for step in np.unique(step_of_request):
        sel = hits[step_of_request == step]
        out[int(step)] = (int(sel.sum()), int(len(sel) - sel.sum()))
    return out


SYNTH = [
    # decode-heavy, strong locality
    TraceSynthSpec(
        n_layers=4, n_experts=32, k=4, n_prompt=8, n_ubatch=8, n_decode=96, correlation=0.5, seed=1
    ),
    # a long prompt in micro-batches of 16 tokens: prefill events larger than small capacities
    TraceSynthSpec(n_layers=3, n_experts=64, k=8, n_prompt=64, n_ubatch=16, n_decode=40, skew=0.6, seed=2),
    # k = 1: single-expert events
    TraceSynthSpec(
        n_layers=5, n_experts=16, k=1, n_prompt=4, n_ubatch=2, n_decode=120, correlation=0.2, seed=3
    ),
]


@pytest.mark.engine
@pytest.mark.parametrize("spec", SYNTH, ids=["decode-heavy", "oversized-prefill", "k1"])
def test_tool_decisions_equal_the_replay_request_by_request(
    cache_bin: Path, tmp_path: Path, spec: TraceSynthSpec
) -> None:
    synthetic = synth_trace(spec)
    path = write_trace(tmp_path / "synthetic.moetrace", synthetic.header, synthetic.rows)
    trace = read_trace(path)
    n_obj = spec.n_layers * spec.n_experts
    checked = 0
    for policy in POLICIES:
        for capacity in sorted({spec.k, spec.k + 1, 2 * spec.k + 3, n_obj // 5, n_obj // 2, n_obj}):
            if capacity < spec.k:
                continue
            out = tmp_path / f"{policy}-{capacity}.json"
            result = replay_in_tool(cache_bin, path, policy, capacity, out)
            assert result.returncode == 0, result.stderr
            record = json.loads(out.read_text())
            tool = np.frombuffer(record["hit_flags"].encode(), dtype=np.uint8) - ord("0")
            expected = python_hits(trace, policy, capacity)
            assert len(tool) == len(expected) == record["requests"]
            differ = np.flatnonzero(tool != expected)
            assert differ.size == 0, f"{policy} at {capacity}: first differing request {differ[:5]}"
            cache = record["expert_cache"]
            assert cache["prefill"]["misses"] + cache["decode"]["misses"] == int((expected == 0).sum())
            checked += 1
    assert checked >= 4 * 4


def cache_args(policy: str, capacity: int | str, future: Path | None = None) -> tuple[str, ...]:
    extra = ("--future", str(future)) if future is not None else ()
    return ("--expert-cache", policy, "--expert-cache-capacity", str(capacity), *extra)


MODEL_SHA = "0" * 64  # the tests name the model by this value (the cache only compares it)


def tracer_args(n: int) -> tuple[str, ...]:
    return ("-n", str(n), "--ignore-eos", "--no-repack", "--model-sha256", MODEL_SHA)


@pytest.mark.engine
def test_cache_keeps_routing_and_text_and_misses_what_the_replay_predicts(
    cache_bin: Path, tmp_path: Path
) -> None:
    model = tiny_model("qwen3moe")
    evict(model)
    plain = run_tracer(cache_bin, model, tmp_path / "plain", *tracer_args(24), prompt=PROMPT, env=DEMAND)
    assert plain.timings["expert_cache"] is None
    trace = read_trace(plain.trace)
    k = trace.k
    n_obj = len(trace.moe_layers) * trace.n_experts
    for policy, capacity in (
        ("lru", 3 * k),
        ("fifo", 3 * k),
        ("least-stale", 3 * k),
        ("belady", 3 * k),
        ("lru", n_obj),
    ):
        future = plain.trace if policy == "belady" else None
        evict(model)
        run = run_tracer(
            cache_bin,
            model,
            tmp_path / f"{policy}-{capacity}",
            *tracer_args(24),
            *cache_args(policy, capacity, future),
            prompt=PROMPT,
            env=DEMAND,
        )
        assert run.trace.read_bytes() == plain.trace.read_bytes(), f"{policy}: the trace changed"
        assert run.text == plain.text and run.text, f"{policy}: the text changed"
        cache = run.timings["expert_cache"]
        assert (cache["policy"], cache["capacity"], cache["capacity_source"]) == (policy, capacity, "given")
        expected = python_hits(trace, policy, capacity)
        want = per_step(trace, expected)
        got = steps_of(cache)
        assert got == want, f"{policy} at {capacity}: tool's per-step (hits, misses) differ from the replay"
        misses = cache["prefill"]["misses"] + cache["decode"]["misses"]
        assert misses == int((expected == 0).sum())
        evictions = cache["prefill"]["evictions"] + cache["decode"]["evictions"]
        if capacity < n_obj:
            assert evictions > 0 and cache["decode"]["bytes_dropped"] > 0, cache["decode"]
        else:
            assert evictions == 0 and cache["decode"]["bytes_dropped"] == 0, cache["decode"]
        assert (
            cache["prefill"]["bytes_read"] + cache["decode"]["bytes_read"] == misses * cache["expert_bytes"]
        )


def cold_plain_run(cache_bin: Path, tmp_path: Path) -> tuple[Path, TracerRun, Trace]:
    """The tiny model read cold by a run without the cache (24 tokens): the model, the run and
    its trace; the model is evicted again, for the cache run that follows."""
    model = tiny_model("qwen3moe")
    evict(model)
    plain = run_tracer(cache_bin, model, tmp_path / "plain", *tracer_args(24), prompt=PROMPT, env=DEMAND)
    evict(model)
    return model, plain, read_trace(plain.trace)


def steps_of(cache: dict) -> dict[int, tuple[int, int]]:  # type: ignore[type-arg]
    """step -> (hits, misses) as the tool counted them."""
    return {s["step"]: (s["hits"], s["misses"]) for s in cache["steps"]}


@pytest.mark.engine
def test_reading_ahead_changes_no_decision_and_reads_each_later_miss_once(
    cache_bin: Path, tmp_path: Path
) -> None:
    model, plain, trace = cold_plain_run(cache_bin, tmp_path)
    capacity = 3 * trace.k
    # no layer twice in a window: each expert read ahead is a miss to come
    lookahead = len(trace.moe_layers) - 2
    run = run_tracer(
        cache_bin,
        model,
        tmp_path / "ahead",
        *tracer_args(24),
        *cache_args("lru", capacity, plain.trace),
        "--expert-lookahead",
        str(lookahead),
        prompt=PROMPT,
        env=DEMAND,
    )
    assert run.trace.read_bytes() == plain.trace.read_bytes()
    assert run.text == plain.text and run.text
    cache = run.timings["expert_cache"]
    assert (cache["lookahead"], cache["future"]) == (lookahead, plain.trace.name)
    assert steps_of(cache) == per_step(trace, python_hits(trace, "lru", capacity)), (
        "reading ahead changed a decision"
    )
    # every decode miss was queued once, by an earlier event (the last prompt event or a decode one)
    ahead = cache["prefill"]["ahead_bytes"] + cache["decode"]["ahead_bytes"]
    assert cache["decode"]["misses"] > 0
    assert ahead == cache["decode"]["bytes_read"]


READ_CHUNK = 256 * 1024  # the tool reads an expert's three tensor slices in pieces of this size
FAULT = "MOE_TRACE_READ_FAULT"


@pytest.mark.engine
def test_short_reads_change_nothing_and_a_read_error_stops_the_run_in_one_line(
    cache_bin: Path, tmp_path: Path
) -> None:
    model, plain, trace = cold_plain_run(cache_bin, tmp_path)
    capacity = 3 * trace.k
    # every pread reports half of what it read: each read is finished by further calls
    short = run_tracer(
        cache_bin,
        model,
        tmp_path / "short",
        *tracer_args(24),
        *cache_args("lru", capacity),
        prompt=PROMPT,
        env={**DEMAND, FAULT: "short"},
    )
    assert short.trace.read_bytes() == plain.trace.read_bytes()
    assert short.text == plain.text and short.text
    cache = short.timings["expert_cache"]
    assert steps_of(cache) == per_step(trace, python_hits(trace, "lru", capacity))
    misses = cache["prefill"]["misses"] + cache["decode"]["misses"]
    assert cache["prefill"]["bytes_read"] + cache["decode"]["bytes_read"] == misses * cache["expert_bytes"]
    # a read error after the prompt's reads: one line with the error and the offset, exit 1,
    # no trace and no timing record presented as whole
    preads_per_expert = 3 * -(-cache["expert_bytes"] // 3 // READ_CHUNK)
    after_prompt = cache["prefill"]["misses"] * preads_per_expert + 1
    evict(model)
    line = bad(
        cache_bin,
        tmp_path,
        *tracer_args(24),
        *cache_args("lru", capacity),
        env={**DEMAND, FAULT: f"fail-after:{after_prompt}"},
    )
    assert re.search(
        r"expert cache: a read of the model failed \(Input/output error at byte \d+ of the model\); "
        r"the run stops here$",
        line,
    ), line
    assert not (tmp_path / "bad" / "timings.json").exists()
    assert "MOE_TRACE_READ_FAULT must be short, fail-after:N or stall-after:N, got sometimes" in bad(
        cache_bin, tmp_path, *tracer_args(4), *cache_args("lru", capacity), env={**DEMAND, FAULT: "sometimes"}
    )


def bad(
    cache_bin: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None, model: Path | None = None
) -> str:
    run = run_tracer(
        cache_bin,
        model or tiny_model("qwen3moe"),
        tmp_path / "bad",
        *args,
        prompt=PROMPT,
        env=DEMAND if env is None else env,
        check=False,
    )
    err = run.result.stderr.decode()
    lines = [line for line in err.splitlines() if line.strip()]
    assert run.result.returncode == 1, err
    assert len(lines) == 1, err
    assert not run.trace.exists()
    return lines[0]


@pytest.mark.engine
def test_bad_cache_input_is_refused_in_one_line(cache_bin: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model.gguf"  # checked before the model is even opened
    assert "unknown --expert-cache policy 'nope'; choose from lru, fifo, least-stale, belady" in bad(
        cache_bin, tmp_path, *cache_args("nope", 8), model=missing
    )
    assert "--expert-io-depth must be 1 to 64 (got 0)" in bad(
        cache_bin, tmp_path, *cache_args("lru", 8), "--expert-io-depth", "0", model=missing
    )
    assert "--expert-io-depth must be 1 to 64 (got 65)" in bad(
        cache_bin, tmp_path, *cache_args("lru", 8), "--expert-io-depth", "65", model=missing
    )
    assert "--expert-lookahead must be 0 to 8 MoE layers (got 9)" in bad(
        cache_bin, tmp_path, *cache_args("lru", 8), "--expert-lookahead", "9", model=missing
    )
    assert "--expert-lookahead reads ahead from --future TRACE" in bad(
        cache_bin, tmp_path, *cache_args("lru", 8), "--expert-lookahead", "1", model=missing
    )
    assert "--expert-lookahead needs --expert-cache POLICY" in bad(
        cache_bin, tmp_path, "--expert-lookahead", "1", model=missing
    )
    assert "--future is only used by --expert-cache belady and --expert-lookahead" in bad(
        cache_bin, tmp_path, *cache_args("lru", 8), "--future", str(missing), model=missing
    )
    assert "--expert-cache works only under demand mmap: set LLAMA_MMAP_DEMAND=1" in bad(
        cache_bin, tmp_path, *cache_args("lru", 8), env={"LLAMA_MMAP_DEMAND": ""}, model=missing
    )
    assert "--expert-cache belady needs --future TRACE" in bad(
        cache_bin, tmp_path, *cache_args("belady", 8), model=missing
    )
    assert "--expert-cache-capacity needs --expert-cache POLICY" in bad(
        cache_bin, tmp_path, "--expert-cache-capacity", "8", model=missing
    )
    assert (
        "--expert-cache-capacity 3 is below the 8 experts one token needs at a layer (k); use at least 8"
        in bad(cache_bin, tmp_path, *cache_args("lru", 3))
    )


@pytest.mark.engine
def test_a_future_from_another_run_is_refused(cache_bin: Path, tmp_path: Path) -> None:
    model = tiny_model("qwen3moe")
    first = run_tracer(cache_bin, model, tmp_path / "first", *tracer_args(8), prompt=PROMPT, env=DEMAND)
    belady = cache_args("belady", 16, first.trace)
    assert "was recorded with -n 8, this run has -n 12" in bad(cache_bin, tmp_path, *tracer_args(12), *belady)
    other_sha = ("-n", "8", "--ignore-eos", "--no-repack", "--model-sha256", "1" * 64)
    assert "traced another model" in bad(cache_bin, tmp_path, *other_sha, *belady)
    no_sha = ("-n", "8", "--ignore-eos", "--no-repack")
    assert "--future needs --model-sha256 HEX" in bad(cache_bin, tmp_path, *no_sha, *belady)
    longer = run_tracer(
        cache_bin,
        model,
        tmp_path / "longer",
        *tracer_args(8),
        *belady,
        prompt=PROMPT + " jumps over",
        env=DEMAND,
        check=False,
    )
    assert longer.result.returncode == 1
    assert "was recorded with another prompt" in longer.result.stderr.decode()
    # the same header with the last decode steps cut off: the run outlives its future
    trace = read_trace(first.trace)
    last = int(trace.rows["step"].max())
    short = write_trace(
        tmp_path / "short.moetrace", trace.header, np.array(trace.rows[trace.rows["step"] < last - 2])
    )
    assert "ends before this run does" in bad(
        cache_bin, tmp_path, *tracer_args(8), *cache_args("belady", 16, short)
    )
