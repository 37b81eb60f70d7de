"""JSONL route records in (docs/trace-format.md, "Other formats"): one JSON object a line,
one (token, MoE layer) each, as routing loggers of several projects write them:

    {"layer": 3, "token": 17, "phase": "decode", "experts": [5, 9], "weights": [0.6, 0.4]}

Each field has the names those loggers use (`FIELDS`); a line may give a field under one of
them only. `layer`, `token` and `experts` are required, `phase` ("prompt", "prefill" or
"decode") and `weights` optional but then on every line; other keys are ignored. Records may
come in any order; a (token, layer) twice is refused. k is the length of `experts` (the same
on every line; a recording may route fewer experts than the model's default).

The prompt's tokens become one step and each decode token one step, `pos` = `token`. Without
`phase` every token is its own decode step and the header's `not_recorded` says so. The model
(`--model GGUF`) gives the layers and the expert count; its expert bytes come from the GGUF
when a replay needs them, as for the other imports.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from appliance.core.errors import ConfigError
from appliance.core.strict_load import decode_utf8, parse_json
from appliance.trace.format import KIND_DECODE, KIND_PROMPT, MAX_EXPERT_USED, VERSION, Trace, row_dtype

FORMAT = "jsonl"
FIELDS = {  # our name -> the names accepted for it, ours first
    "layer": ("layer", "layer_id", "layer_idx"),
    "token": ("token", "token_idx", "position", "pos"),
    "phase": ("phase", "stage"),
    "experts": ("experts", "expert_ids", "topk_ids", "selected_experts"),
    "weights": ("weights", "gate_weights", "topk_weights", "routing_weights"),
}
REQUIRED = ("layer", "token", "experts")
PHASES = {"prompt": KIND_PROMPT, "prefill": KIND_PROMPT, "decode": KIND_DECODE}


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field(record: dict[str, Any], name: str, at: str) -> Any:
    """The record's value for one of our fields (None when absent); a field twice is refused."""
    given = [key for key in FIELDS[name] if key in record]
    if len(given) > 1:
        raise ConfigError(f"{at}: field {name} is given twice ({' and '.join(given)}); keep one")
    if not given:
        if name in REQUIRED:
            raise ConfigError(f"{at}: field {name} is missing (as {' or '.join(FIELDS[name])})")
        return None
    return record[given[0]]


class _Records:
    """Columns gathered line by line, checked as they come."""

    def __init__(self, model: dict[str, Any], where: str) -> None:
        self.model = model
        self.where = where
        self.layers: list[int] = []
        self.tokens: list[int] = []
        self.phases: list[int] = []
        self.experts: list[list[int]] = []
        self.weights: list[list[float]] = []
        self.k: int | None = None
        self.has_phase: bool | None = None
        self.has_weights: bool | None = None
        self.lines: list[int] = []

    def add(self, record: Any, number: int) -> None:
        at = f"{self.where}: line {number}"
        if not isinstance(record, dict):
            raise ConfigError(f"{at}: a {type(record).__name__}, not a JSON object")
        layer = _field(record, "layer", at)
        token = _field(record, "token", at)
        experts = _field(record, "experts", at)
        phase = _field(record, "phase", at)
        weights = _field(record, "weights", at)
        moe_layers = self.model["moe_layers"]
        if not _whole(layer) or layer not in moe_layers:
            raise ConfigError(
                f"{at}: field layer: {layer!r} is not a MoE layer of {self.model['model_file']} "
                f"(its MoE layers are {moe_layers[0]}..{moe_layers[-1]})"
            )
        if not _whole(token) or not 0 <= token < 1 << 32:
            raise ConfigError(f"{at}: field token: {token!r} is not a token index (0..2**32-1)")
        n_experts = self.model["n_experts"]
        top = min(n_experts, MAX_EXPERT_USED)
        if not isinstance(experts, list) or not 1 <= len(experts) <= top:
            raise ConfigError(f"{at}: field experts: not a list of 1..{top} expert ids")
        if self.k is None:
            self.k = len(experts)
        if len(experts) != self.k:
            raise ConfigError(
                f"{at}: field experts: {len(experts)} ids, but the first line has {self.k}; "
                "every record routes the same number of experts"
            )
        bad = [e for e in experts if not _whole(e) or not 0 <= e < n_experts]
        if bad:
            raise ConfigError(
                f"{at}: field experts: {bad[0]!r} is outside 0..{n_experts - 1}, the experts of "
                f"{self.model['model_file']}"
            )
        for name, value, seen in (("phase", phase, self.has_phase), ("weights", weights, self.has_weights)):
            if seen is not None and seen != (value is not None):
                has = "has" if seen else "has no"
                raise ConfigError(
                    f"{at}: field {name}: the first line {has} {name}; give it on every line or none"
                )
        self.has_phase, self.has_weights = phase is not None, weights is not None
        if phase is not None and phase not in PHASES:
            raise ConfigError(f"{at}: field phase: {phase!r} is not one of {', '.join(PHASES)}")
        if weights is not None and (
            not isinstance(weights, list)
            or len(weights) != len(experts)
            or not all(
                isinstance(w, int | float) and not isinstance(w, bool) and math.isfinite(np.float32(w))
                for w in weights
            )
        ):
            raise ConfigError(f"{at}: field weights: not a list of {len(experts)} finite numbers")
        self.layers.append(layer)
        self.tokens.append(token)
        self.phases.append(KIND_DECODE if phase is None else PHASES[phase])
        self.experts.append(experts)
        self.weights.append(weights or [])
        self.lines.append(number)


def parse_jsonl(data: bytes, model: dict[str, Any], where: str) -> _Records:
    text = decode_utf8(data, where)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ConfigError(f"{where}: no record in the file; nothing to import")
    records = _Records(model, where)
    for number, line in enumerate(lines, start=1):
        at = f"{where}: line {number}"
        if not line.strip():
            raise ConfigError(f"{at}: an empty line, not a JSON object")
        records.add(parse_json(line, at), number)
    return records


def jsonl_to_trace(data: bytes, model: dict[str, Any], source: dict[str, Any], where: str) -> Trace:
    """A trace of JSONL route records for the model's layout (see the module's docstring)."""
    rec = parse_jsonl(data, model, where)
    assert rec.k is not None
    layer = np.array(rec.layers, dtype=np.int64)
    token = np.array(rec.tokens, dtype=np.int64)
    kind = np.array(rec.phases, dtype=np.int64)
    line = np.array(rec.lines, dtype=np.int64)
    by_token = np.lexsort((layer, token))
    twice = (np.diff(token[by_token]) == 0) & (np.diff(layer[by_token]) == 0)
    if twice.any():
        i = by_token[int(np.argmax(twice)) + 1]
        raise ConfigError(
            f"{where}: line {int(line[i])}: a second record for token {int(token[i])} at layer "
            f"{int(layer[i])}"
        )
    mixed = (np.diff(token[by_token]) == 0) & (np.diff(kind[by_token]) != 0)
    if mixed.any():
        i = by_token[int(np.argmax(mixed)) + 1]
        raise ConfigError(
            f"{where}: line {int(line[i])}: field phase: token {int(token[i])} is prompt at one "
            "layer and decode at another"
        )
    prompt_tokens = np.unique(token[kind == KIND_PROMPT])
    decode_tokens = np.unique(token[kind == KIND_DECODE])
    if len(prompt_tokens) and len(decode_tokens) and decode_tokens[0] <= prompt_tokens[-1]:
        i = int(np.flatnonzero((kind == KIND_DECODE) & (token == decode_tokens[0]))[0])
        raise ConfigError(
            f"{where}: line {int(line[i])}: field token: decode token {int(decode_tokens[0])} is not "
            f"after the prompt's last token {int(prompt_tokens[-1])}"
        )
    base = 1 if len(prompt_tokens) else 0
    step = np.where(kind == KIND_PROMPT, 0, base + np.searchsorted(decode_tokens, token))
    order = np.lexsort((token, layer, step))  # evaluation order: step, layer, token
    k = rec.k
    rows = np.zeros(len(order), dtype=row_dtype(k, bool(rec.has_weights)))
    rows["step"] = step[order]
    rows["layer"] = layer[order]
    rows["kind"] = kind[order]
    rows["pos"] = token[order]
    rows["ids"] = np.array(rec.experts, dtype=np.int64)[order]
    if rec.has_weights:
        rows["weights"] = np.array(rec.weights, dtype=np.float64)[order]
    not_recorded = [] if rec.has_weights else ["gate_weights"]
    if not rec.has_phase:
        not_recorded += ["step_boundaries", "prompt_decode_split"]
    header: dict[str, Any] = {
        "format": "moetrace",
        "version": VERSION,
        **model,
        "n_expert_used": k,
        "has_weights": bool(rec.has_weights),
        "engine": {"tool": f"appliance trace import --from {FORMAT}", "llama_build": None, "backend": None},
        "source": source,
        "not_recorded": not_recorded,
    }
    if rec.has_phase:
        header["n_prompt_tokens"] = len(prompt_tokens)
        header["n_predict"] = len(decode_tokens)
    return Trace(header=header, rows=rows)
