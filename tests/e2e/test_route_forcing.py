"""llama-moe-trace --routes-from: a model driven by another model's routes computes exactly those
experts, its trace equals the routes, and routes that do not fit the model or run are refused."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from appliance.trace.expert_bytes import expert_bytes_from_gguf
from appliance.trace.format import read_trace
from appliance.trace.routes import ROUTES_MAGIC, routes_bytes
from appliance.trace.synth import TraceSynthSpec, synth_trace
from tests.e2e.conftest import TracerRun, run_tracer
from tests.models import tiny_model

PROMPT = "The cat sat on the mat. The dog sat on the log."
N_PREDICT = 12
UBATCH = 16
N_PROMPT = len(PROMPT.encode())  # byte-level vocabulary
ARGS = ("-n", str(N_PREDICT), "-ub", str(UBATCH), "--ignore-eos")

pytestmark = pytest.mark.engine


def routes_of(run: TracerRun, path: Path) -> Path:
    path.write_bytes(routes_bytes(read_trace(run.trace)))
    return path


def test_forced_run_computes_and_traces_exactly_the_given_routes(engine_bin: Path, tmp_path: Path) -> None:
    model_a, model_b = tiny_model("qwen3moe"), tiny_model("qwen3moe", seed=1)
    a = run_tracer(engine_bin, model_a, tmp_path / "a", *ARGS, prompt=PROMPT)
    b = run_tracer(engine_bin, model_b, tmp_path / "b", *ARGS, prompt=PROMPT)
    trace_a, trace_b = read_trace(a.trace), read_trace(b.trace)
    assert trace_a.rows.shape == trace_b.rows.shape
    assert (trace_a.ids != trace_b.ids).any(axis=1).mean() > 0.5  # the two routers disagree

    routes = routes_of(a, tmp_path / "a.routes")
    forced = [
        run_tracer(
            engine_bin, model_b, tmp_path / f"forced{i}", *ARGS, "--routes-from", str(routes), prompt=PROMPT
        )
        for i in (1, 2)
    ]
    assert forced[0].trace.read_bytes() == forced[1].trace.read_bytes()
    assert forced[0].text == forced[1].text and len(forced[0].text) > 0
    got = read_trace(forced[0].trace)
    assert got.header["model_file"] == model_b.name
    for field in ("step", "layer", "kind", "pos", "ids"):
        assert np.array_equal(got.rows[field], trace_a.rows[field]), field
    # (the text is no witness: the tiny models' experts are too small to change the argmax;
    # test_only_the_forced_experts_are_read shows which experts were computed)

    # ids are indexed by token position: another micro-batch split forces the same routes
    split = run_tracer(
        engine_bin, model_b, tmp_path / "split", "-n", str(N_PREDICT), "-ub", "5", "--ignore-eos",
        "--routes-from", str(routes), "--weights", prompt=PROMPT,
    )  # fmt: skip
    other = read_trace(split.trace)
    assert other.n_steps > trace_a.n_steps
    for layer in trace_a.moe_layers:
        mine, theirs = other.rows[other.rows["layer"] == layer], trace_a.rows[trace_a.rows["layer"] == layer]
        assert np.array_equal(mine["pos"], theirs["pos"]) and np.array_equal(mine["ids"], theirs["ids"])
    weights = other.rows["weights"]  # the model's own router probabilities at the forced experts
    assert np.isfinite(weights).all() and (weights > 0).all()
    # qwen3moe divides the k weights by their sum clamped below at 2^-14: where B finds A's
    # experts that unlikely, the forced weights sum to less than 1
    sums = weights.sum(axis=1)
    assert (sums <= 1 + 1e-4).all() and (np.abs(sums - 1) <= 1e-4).mean() > 0.5
    # the gate weights' get_rows read the forced ids: a router's own choice comes in descending
    # order of weight (argsort), B's weights at A's choice mostly do not
    own = read_trace(
        run_tracer(engine_bin, model_b, tmp_path / "own", *ARGS, "--weights", prompt=PROMPT).trace
    ).rows["weights"]
    assert (np.diff(own, axis=1) <= 0).all()
    assert (np.diff(weights, axis=1) > 0).any(axis=1).mean() > 0.5


def test_only_the_forced_experts_are_read(engine_bin: Path, tmp_path: Path) -> None:
    """Under demand paging, the model mapping's resident bytes after a run are the pages the
    process touched: forcing experts 0..7 everywhere leaves the other 56 experts unread."""
    model = tiny_model("qwen3moe", seed=1)
    args = (*ARGS, "--no-repack")  # weights stay in the mapping, read where MUL_MAT_ID reads them
    env = {"LLAMA_MMAP_DEMAND": "1"}
    natural = run_tracer(engine_bin, model, tmp_path / "natural", *args, prompt=PROMPT, env=env)
    n_tokens, k = N_PROMPT + N_PREDICT, 8
    ids = np.tile(np.arange(k, dtype="<i4"), (n_tokens, 4, 1))
    head = struct.pack("<8s7I", ROUTES_MAGIC, 1, 4, 64, k, 4, N_PROMPT, N_PREDICT)
    routes = tmp_path / "first8.routes"
    routes.write_bytes(head + np.arange(4, dtype="<u4").tobytes() + ids.tobytes())
    forced = run_tracer(
        engine_bin, model, tmp_path / "forced", *args, "--routes-from", str(routes), prompt=PROMPT, env=env
    )
    assert np.array_equal(read_trace(forced.trace).ids, np.tile(np.arange(k), (4 * n_tokens, 1)))

    trace = read_trace(natural.trace)
    per_expert = expert_bytes_from_gguf(model, trace.header)  # one expert of a layer, all its tensors
    assert len(set(per_expert.values())) == 1
    expert = per_expert[0]
    dense = model.stat().st_size - 4 * 64 * expert
    pairs = sum(len(np.unique(trace.ids[trace.layers == layer])) for layer in trace.moe_layers)
    assert pairs > 4 * 2 * k  # the natural router spreads over many more experts
    resident = {
        name: run.timings["residency_at_end"]["model_mapped_rss_bytes"]
        for name, run in (("natural", natural), ("forced", forced))
    }
    assert resident["natural"] >= pairs * expert  # every chosen expert read whole
    # the forced run read the 8 experts of each layer and nothing else (kernel fault-around maps
    # at most 64 KiB beyond a touched page, under one expert's 240 KiB)
    assert resident["forced"] <= dense + 4 * k * expert * 2
    assert resident["forced"] < resident["natural"] / 3


def test_forcing_a_models_own_routes_changes_nothing(engine_bin: Path, tmp_path: Path) -> None:
    model = tiny_model("qwen3moe", seed=1)
    natural = run_tracer(engine_bin, model, tmp_path / "natural", *ARGS, prompt=PROMPT)
    routes = routes_of(natural, tmp_path / "own.routes")
    forced = run_tracer(
        engine_bin, model, tmp_path / "forced", *ARGS, "--routes-from", str(routes), prompt=PROMPT
    )
    assert forced.trace.read_bytes() == natural.trace.read_bytes()
    assert forced.text == natural.text


def synth_routes(path: Path, **shape: int) -> Path:
    """A routes file of a synthetic trace; shape overrides the tiny model's and the run's."""
    spec = {"n_layers": 4, "n_experts": 64, "k": 8, "n_prompt": N_PROMPT, "n_decode": N_PREDICT}
    path.write_bytes(routes_bytes(synth_trace(TraceSynthSpec(**(spec | shape)))))
    return path


def fewer_moe_layers(path: Path) -> Path:
    """A routes file for the model's 4 layers that calls only layers 1..3 MoE."""
    n_tokens, k = N_PROMPT + N_PREDICT, 8
    ids = np.tile(np.arange(k, dtype="<i4"), (n_tokens, 3, 1))
    head = struct.pack("<8s7I", ROUTES_MAGIC, 1, 4, 64, k, 3, N_PROMPT, N_PREDICT)
    path.write_bytes(head + np.array([1, 2, 3], dtype="<u4").tobytes() + ids.tobytes())
    return path


def not_routes(path: Path) -> Path:
    path.write_bytes(b"MOETRACE" + bytes(64))
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda p: synth_routes(p, k=4),
            "routes file bad.routes chooses k = 4 experts per token; model {model} uses 8",
        ),
        (
            lambda p: synth_routes(p, n_layers=5),
            "routes file bad.routes is for a model of 5 layers; model {model} has 4",
        ),
        (
            lambda p: synth_routes(p, n_experts=32),
            "routes file bad.routes is for 32 experts per layer; model {model} has 64",
        ),
        (
            lambda p: synth_routes(p, n_decode=N_PREDICT - 1),
            f"routes file bad.routes holds {N_PREDICT - 1} decode steps; this run asks for {N_PREDICT} (-n)",
        ),
        (
            lambda p: synth_routes(p, n_prompt=5),
            f"routes file bad.routes holds a 5-token prompt; this run's prompt has {N_PROMPT} tokens",
        ),
        (
            fewer_moe_layers,
            "tracing failed: the model routed layer 0 where routes file bad.routes has layer 1",
        ),
        (
            not_routes,
            "routes file bad.routes is not a routes file (no MOEROUTE header); make one with "
            "'appliance trace routes TRACE --out FILE'",
        ),
    ],
    ids=["k", "layers", "experts", "too-short", "prompt-length", "moe-layers", "not-routes"],
)
def test_routes_that_do_not_fit_are_refused_in_one_line(
    engine_bin: Path, tmp_path: Path, make: object, message: str
) -> None:
    model = tiny_model("qwen3moe")
    bad = make(tmp_path / "bad.routes")  # type: ignore[operator]
    run = run_tracer(
        engine_bin, model, tmp_path / "run", *ARGS, "--routes-from", str(bad), prompt=PROMPT, check=False
    )
    assert run.result.returncode == 1
    assert run.result.stderr.decode() == f"llama-moe-trace: error: {message.format(model=model.name)}\n"
    assert not run.trace.exists() and not run.text_path.exists()


def test_routes_need_tracing(engine_bin: Path, tmp_path: Path) -> None:
    routes = synth_routes(tmp_path / "ok.routes")
    model = tiny_model("qwen3moe")
    argv = (*ARGS, "--no-trace", "--routes-from", str(routes))
    run = run_tracer(engine_bin, model, tmp_path / "run", *argv, prompt=PROMPT, check=False)
    assert run.result.returncode == 1
    assert run.result.stderr.decode() == (
        "llama-moe-trace: error: --routes-from needs tracing: drop --no-trace "
        "(the trace shows the routes were forced)\n"
    )
