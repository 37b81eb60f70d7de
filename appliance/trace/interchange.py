"""Route traces in and out of other tools' formats (docs/trace-format.md, "Other formats").

In: upstream llama.cpp's moe-trace CSV (PR 28544: one `layer,expert` row per routed
activation, no header, no step marker) becomes a `.moetrace` whose header lists in
`not_recorded` what the source could not say. Out: the same CSV, and libCacheSim's
oracleGeneral binary of the trace's request-level view (one request per distinct expert of
each (step, layer) event, in evaluation order), object ids per (layer, expert), sizes the
GGUF's expert bytes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from appliance.core.digests import sha256_bytes
from appliance.core.errors import ConfigError
from appliance.core.strict_load import parse_json_bytes, read_bytes
from appliance.trace import route_csv, route_jsonl
from appliance.trace.events import EventStream, single_item_stream, trace_events
from appliance.trace.format import KIND_DECODE, KIND_PROMPT, VERSION, Trace, row_dtype
from appliance.trace.names import EXPORT_FORMATS, IMPORT_FORMATS, MODEL_FREE_FORMATS

MAX_IMPORT_BYTES = 1 << 30  # a CSV row is at least 4 bytes: 268M activations
# What each source cannot record (the header's `not_recorded`, in the schema's enum).
NOT_RECORDED = {
    "llamacpp-csv": ["gate_weights", "step_boundaries", "prompt_decode_split", "positions"],
    "vllm": ["gate_weights", "step_boundaries"],
}
CSV_HEADER = b"layer,expert"
_CSV_BODY = re.compile(rb"(?:-?[0-9]{1,9},-?[0-9]{1,9}\n)*(?:-?[0-9]{1,9},-?[0-9]{1,9}\n?)?")
_CSV_LINE = re.compile(rb"-?[0-9]{1,9},-?[0-9]{1,9}")

# libCacheSim's oracleGeneral record (libCacheSim/traceReader/customizedReader/oracle/
# oracleGeneralBin.h): u32 time, u64 object id, u32 size, i64 vtime of the next request for
# the object (-1: none). A record of size 0 is skipped by its reader, so sizes are >= 1.
ORACLE_DTYPE = np.dtype([("time", "<u4"), ("obj", "<u8"), ("size", "<u4"), ("next", "<i8")])
MAX_ORACLE_SIZE = (1 << 32) - 1


def next_vtime(objs: np.ndarray) -> np.ndarray:
    """Index (vtime) of each request's next request for the same object, -1 when none."""
    n = len(objs)
    order = np.lexsort((np.arange(n), objs))
    nxt = np.full(n, -1, dtype=np.int64)
    same = objs[order[1:]] == objs[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def oracle_records(objs: np.ndarray, sizes: np.ndarray, times: np.ndarray) -> np.ndarray:
    """oracleGeneral records of a flat request stream (object ids >= 1, sizes 1..2**32-1)."""
    rec = np.zeros(len(objs), dtype=ORACLE_DTYPE)
    rec["time"] = times
    rec["obj"] = objs
    rec["size"] = sizes
    rec["next"] = next_vtime(objs)
    return rec


# --- llama.cpp moe-trace CSV -------------------------------------------------------------------


def parse_llamacpp_csv(data: bytes, where: str) -> np.ndarray:
    """(layer, expert) pairs of a moe-trace CSV, shape (n, 2); one line for a malformed row."""
    start = 0
    if data.startswith(CSV_HEADER) and data[len(CSV_HEADER) : len(CSV_HEADER) + 1] in (b"\n", b""):
        start = len(CSV_HEADER) + 1
    body = data[start:]
    if _CSV_BODY.fullmatch(body) is None:
        first = 1 if start else 0
        for number, line in enumerate(body.split(b"\n"), start=first + 1):
            if _CSV_LINE.fullmatch(line) is None and line:
                shown = line[:40].decode("utf-8", "replace")
                raise ConfigError(
                    f"{where}: line {number}: {shown!r} is not a 'layer,expert' row of "
                    "llama.cpp's moe-trace CSV"
                )
        raise ConfigError(f"{where}: an empty line inside llama.cpp's moe-trace CSV")
    body = body.rstrip(b"\n")
    if not body:
        return np.zeros((0, 2), dtype=np.int64)
    values = np.array(body.replace(b"\n", b",").split(b","), dtype=np.int64)
    return values.reshape(-1, 2)


def routes_to_trace(
    pairs: np.ndarray, model: dict[str, Any], source: dict[str, Any], where: str, first_line: int
) -> Trace:
    """A trace from (layer, expert) activations in evaluation order, for the model's layout.

    Runs of one layer hold k ids per token; a step starts where the layer does not ascend.
    Positions count the step's tokens from 0 at the first step; steps before the first
    one-token step are prompt, the rest decode (the CSV records neither)."""
    k = model["n_expert_used"]
    n_experts = model["n_experts"]
    moe_layers = model["moe_layers"]
    layers, experts = pairs[:, 0], pairs[:, 1]
    known = np.isin(layers, moe_layers)
    if not known.all():
        i = int(np.argmin(known))
        raise ConfigError(
            f"{where}: line {i + first_line}: layer {int(layers[i])} is not a MoE layer of "
            f"{model['model_file']} (its MoE layers are {_span(moe_layers)}); pass the model "
            "the trace was recorded with"
        )
    bad = (experts < 0) | (experts >= n_experts)
    if bad.any():
        i = int(np.argmax(bad))
        raise ConfigError(
            f"{where}: line {i + first_line}: expert {int(experts[i])} is outside "
            f"0..{n_experts - 1}, the experts of {model['model_file']}; pass the model the trace "
            "was recorded with"
        )
    if not len(pairs):
        raise ConfigError(f"{where}: no routed activation in the file; nothing to import")
    change = np.flatnonzero(np.diff(layers)) + 1
    run_start = np.concatenate(([0], change))
    run_len = np.diff(np.concatenate((run_start, [len(pairs)])))
    ragged = run_len % k != 0
    if ragged.any():
        j = int(np.argmax(ragged))
        raise ConfigError(
            f"{where}: line {int(run_start[j]) + first_line}: layer {int(layers[run_start[j]])} has "
            f"{int(run_len[j])} activations in a row, not a whole number of tokens of "
            f"{k} experts each ({model['model_file']}); the CSV is cut short or from another model"
        )
    run_layer = layers[run_start]
    run_tokens = run_len // k
    new_step = np.ones(len(run_start), dtype=bool)
    new_step[1:] = run_layer[1:] <= run_layer[:-1]
    run_step = np.cumsum(new_step) - 1
    n_steps = int(run_step[-1]) + 1
    step_tokens = np.zeros(n_steps, dtype=np.int64)
    np.maximum.at(step_tokens, run_step, run_tokens)
    step_pos = np.concatenate(([0], np.cumsum(step_tokens)[:-1]))
    single = np.flatnonzero(step_tokens == 1)
    first_decode = int(single[0]) if len(single) else n_steps
    n_rows = int(run_tokens.sum())
    row_run = np.repeat(np.arange(len(run_start)), run_tokens)
    row_in_run = np.arange(n_rows) - np.repeat(np.cumsum(run_tokens) - run_tokens, run_tokens)
    rows = np.zeros(n_rows, dtype=row_dtype(k, False))
    rows["step"] = run_step[row_run]
    rows["layer"] = run_layer[row_run]
    rows["kind"] = np.where(rows["step"] < first_decode, KIND_PROMPT, KIND_DECODE)
    rows["pos"] = step_pos[run_step[row_run]] + row_in_run
    rows["ids"] = experts.reshape(n_rows, k)
    header = {
        "format": "moetrace",
        "version": VERSION,
        **model,
        "has_weights": False,
        "engine": {
            "tool": f"appliance trace import --from {source['format']}",
            "llama_build": None,
            "backend": None,
        },
        "source": source,
        "not_recorded": list(NOT_RECORDED[source["format"]]),
    }
    return Trace(header=header, rows=rows)


def _span(layers: list[int]) -> str:
    if layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]}..{layers[-1]}"
    return ", ".join(str(x) for x in layers)


def import_trace(path: Path, fmt: str, model: dict[str, Any] | None, turn: int | None = None) -> Trace:
    """Read `path` (strict bounded reader) in format `fmt` as a trace of `model`'s layout
    (None for a format that names its model: route-trace-csv; `turn` is that format's)."""
    if fmt not in IMPORT_FORMATS:
        raise ConfigError(f"unknown import format {fmt!r}; choose from {', '.join(IMPORT_FORMATS)}")
    if (model is None) != (fmt in MODEL_FREE_FORMATS):
        need = "does not take" if model is not None else "needs"
        raise ConfigError(
            f"--from {fmt} {need} --model GGUF"
            + (
                "; the file names its model and expert sizes"
                if model is not None
                else " (the layers, experts and k the routes were recorded with)"
            )
        )
    if turn is not None and fmt != route_csv.FORMAT:
        raise ConfigError(f"--turn is for --from {route_csv.FORMAT}; {fmt} files have no turns")
    data = read_bytes(path, MAX_IMPORT_BYTES)
    source = {"format": fmt, "file": path.name, "sha256": sha256_bytes(data)}
    if fmt == route_csv.FORMAT:
        return route_csv.route_csv_to_trace(data, source, str(path), turn)
    assert model is not None
    if fmt == route_jsonl.FORMAT:
        return route_jsonl.jsonl_to_trace(data, model, source, str(path))
    if fmt == "vllm":
        return vllm_to_trace(parse_json_bytes(data, str(path), MAX_IMPORT_BYTES), model, source, str(path))
    first_line = 2 if data.startswith(CSV_HEADER + b"\n") else 1
    pairs = parse_llamacpp_csv(data, str(path))
    return routes_to_trace(pairs, model, source, str(path), first_line)


# --- vLLM routed experts ------------------------------------------------------------------------


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def vllm_to_trace(doc: Any, model: dict[str, Any], source: dict[str, Any], where: str) -> Trace:
    """Requests of vLLM's `--enable-return-routed-experts` output, one after another.

    A request is an object whose `routed_experts` is `[token][layer][k]` expert ids (vLLM's
    `CompletionOutput.routed_experts` as a list; the layer axis is every block, or only the
    MoE blocks), with `prompt_token_ids` (or `num_prompt_tokens`) telling how many of its
    tokens are prompt. Each prompt is one step and each generated token one step: vLLM does
    not say how its scheduler split the prompt."""
    records = doc if isinstance(doc, list) else [doc]
    if not records:
        raise ConfigError(f"{where}: no request in the file; nothing to import")
    k, n_experts = model["n_expert_used"], model["n_experts"]
    moe_layers = model["moe_layers"]
    steps: list[np.ndarray] = []
    step = 0
    for index, record in enumerate(records):
        at = f"{where}: request {index}"
        routed = record.get("routed_experts") if isinstance(record, dict) else None
        if not isinstance(routed, list) or not routed:
            raise ConfigError(
                f"{at} has no routed_experts; run vLLM with --enable-return-routed-experts "
                "and keep each output's routed_experts"
            )
        if (
            not all(
                isinstance(t, list) and all(isinstance(layer, list) and len(layer) == k for layer in t)
                for t in routed
            )
            or len({len(t) for t in routed}) != 1
        ):
            raise ConfigError(f"{at}: routed_experts is not a [token][layer][{k}] array of expert ids")
        ids = np.array(routed, dtype=object)
        if not all(_whole(x) for x in ids.ravel()):
            raise ConfigError(f"{at}: routed_experts holds a value that is not an expert id")
        if not all(0 <= x < n_experts for x in ids.ravel()):
            raise ConfigError(
                f"{at}: an expert id is outside 0..{n_experts - 1}, the experts of {model['model_file']}"
            )
        ids = ids.astype(np.int64)
        n_axis = ids.shape[1]
        if n_axis == model["n_layers"]:
            ids = ids[:, moe_layers, :]
        elif n_axis != len(moe_layers):
            raise ConfigError(
                f"{at}: routed_experts has {n_axis} layers; {model['model_file']} has "
                f"{model['n_layers']} blocks, {len(moe_layers)} of them MoE"
            )
        prompt = record.get("prompt_token_ids")
        n_prompt = len(prompt) if isinstance(prompt, list) else record.get("num_prompt_tokens")
        if not _whole(n_prompt) or not 0 <= n_prompt <= len(ids):
            raise ConfigError(
                f"{at}: needs prompt_token_ids or num_prompt_tokens (0..{len(ids)}) "
                "to split prompt and decode"
            )
        n_tokens = len(ids)
        token_step = np.where(np.arange(n_tokens) < n_prompt, 0, np.arange(n_tokens) - n_prompt + 1)
        token_step = step + token_step - (0 if n_prompt else 1)
        rows = np.zeros(n_tokens * len(moe_layers), dtype=row_dtype(k, False))
        # rows in evaluation order: step, then layer, then position
        order = np.lexsort(
            (
                np.arange(n_tokens)[:, None].repeat(len(moe_layers), 1).ravel(),
                np.tile(np.arange(len(moe_layers)), n_tokens),
                token_step.repeat(len(moe_layers)),
            )
        )
        tok = np.arange(n_tokens).repeat(len(moe_layers))[order]
        lay = np.tile(np.arange(len(moe_layers)), n_tokens)[order]
        rows["step"] = token_step[tok]
        rows["layer"] = np.asarray(moe_layers)[lay]
        rows["kind"] = np.where(tok < n_prompt, KIND_PROMPT, KIND_DECODE)
        rows["pos"] = tok
        rows["ids"] = ids[tok, lay]
        steps.append(rows)
        step = int(token_step[-1]) + 1
    header = {
        "format": "moetrace",
        "version": VERSION,
        **model,
        "has_weights": False,
        "engine": {"tool": "appliance trace import --from vllm", "llama_build": None, "backend": None},
        "source": source,
        "not_recorded": list(NOT_RECORDED["vllm"]),
    }
    return Trace(header=header, rows=np.concatenate(steps))


def llamacpp_csv(trace: Trace) -> bytes:
    """The trace as llama.cpp's moe-trace CSV: `layer,expert` per routed activation, in order."""
    if not len(trace.rows):
        return b""
    layers = np.repeat(trace.layers.astype(np.int64), trace.k)
    ids = trace.ids.astype(np.int64).ravel()
    pairs = np.stack((layers, ids), axis=1)
    return ("\n".join(f"{a},{b}" for a, b in pairs.tolist()) + "\n").encode()


# --- libCacheSim oracleGeneral ------------------------------------------------------------------


def request_stream(trace: Trace) -> EventStream:
    """The request-level view: each (step, layer) event's distinct experts, one request each."""
    return single_item_stream(trace_events(trace).stream)


def oracle_object_ids(trace: Trace, stream: EventStream) -> tuple[np.ndarray, np.ndarray]:
    """(MoE block, expert) of each request of the global request stream."""
    blocks = np.asarray(trace.moe_layers, dtype=np.int64)[stream.item_layer_index()]
    return blocks, stream.items - stream.item_layer_index() * trace.n_experts


def libcachesim_oracle(trace: Trace, expert_bytes: dict[int, int]) -> np.ndarray:
    """oracleGeneral records: time = step, id = layer * n_experts + expert + 1, size = the
    layer's expert bytes, next = vtime of the object's next request (-1: none)."""
    for block, size in expert_bytes.items():
        if not 1 <= size <= MAX_ORACLE_SIZE:
            raise ConfigError(
                f"layer {block}: one expert is {size} bytes, which libCacheSim's oracleGeneral "
                f"size field (u32, at least 1) cannot hold"
            )
    stream = request_stream(trace)
    blocks, experts = oracle_object_ids(trace, stream)
    sizes = np.zeros(int(blocks.max()) + 1 if len(blocks) else 1, dtype=np.int64)
    for block, size in expert_bytes.items():
        if block < len(sizes):
            sizes[block] = size
    objs = (blocks * trace.n_experts + experts + 1).astype(np.uint64)
    return oracle_records(objs, sizes[blocks], stream.step)


def export_trace(trace: Trace, fmt: str, expert_bytes: dict[int, int] | None) -> bytes:
    """The bytes of `trace` in format `fmt` (libcachesim needs expert bytes per MoE layer)."""
    if fmt == "llamacpp-csv":
        return llamacpp_csv(trace)
    if fmt == "libcachesim":
        if expert_bytes is None:
            raise ConfigError(
                "--to libcachesim needs --model GGUF: object sizes are the model's expert bytes"
            )
        return libcachesim_oracle(trace, expert_bytes).tobytes()
    raise ConfigError(f"unknown export format {fmt!r}; choose from {', '.join(EXPORT_FORMATS)}")
