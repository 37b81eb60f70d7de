"""`route_trace v1` CSV in (docs/trace-format.md, "Other formats"): real routes with their
gate weights and the bytes of one expert per layer.

The file is `#` preamble lines, then `turn,phase,step,layer,slot,expert,weight,residency,
expert_bytes` rows, one per routed (token, layer, slot). Preamble:

    # route_trace v1
    # model=PATH arch=A n_layer=L n_expert=E n_expert_used=K
    # layer=I expert_bytes=B dense_bytes=D        (one per layer)

Rows come in evaluation order: the prompt as one batch (layer by layer, its tokens in order
within a layer), then one decode token at a time (its layers ascending); within a
(token, layer), slots 0..K-1. `phase` is 0 (prompt) or 1 (decode), `step` the token's index.
`residency` and the row's `expert_bytes` describe the recording project's own cache and are
not routing: they are checked for form and dropped.

One turn is imported (`turn`, 0 unless asked): its prompt becomes one step, each decode token
one step, ids in slot order, gate weights kept, `pos` = the row's `step`. The header keeps
the model's base name (the preamble holds a host path, never stored) and the per-layer
expert bytes (`expert_bytes`, the MoE layers' only).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from appliance.core.errors import ConfigError
from appliance.trace.format import (
    KIND_DECODE,
    KIND_PROMPT,
    MAX_EXPERT_USED,
    MAX_TRACE_EXPERTS,
    MAX_TRACE_LAYERS,
    VERSION,
    Trace,
    row_dtype,
)

FORMAT = "route-trace-csv"
MAGIC_LINE = "# route_trace v1"
MODEL_LINE = re.compile(
    r"# model=(?P<path>.*) arch=(?P<arch>\S+) n_layer=(?P<n_layer>[0-9]{1,9}) "
    r"n_expert=(?P<n_expert>[0-9]{1,9}) n_expert_used=(?P<k>[0-9]{1,9})"
)
LAYER_LINE = re.compile(
    r"# layer=(?P<layer>[0-9]{1,9}) expert_bytes=(?P<bytes>[0-9]{1,18}) dense_bytes=[0-9]{1,18}"
)
COLUMNS = ("turn", "phase", "step", "layer", "slot", "expert", "weight", "residency", "expert_bytes")
COLUMN_LINE = ",".join(COLUMNS)
_INT = r"-?[0-9]{1,9}"
_FLOAT = r"-?(?:[0-9]{1,40}(?:\.[0-9]{0,40})?|\.[0-9]{1,40})(?:[eE][-+]?[0-9]{1,3})?"
_BIG = r"[0-9]{1,18}"
_FIELD = {c: _INT for c in COLUMNS} | {"weight": _FLOAT, "expert_bytes": _BIG}
_ROW = ",".join(f"({_FIELD[c]})" for c in COLUMNS)
_BODY = re.compile(rf"(?:{_ROW}\n)*(?:{_ROW}\n?)?".encode())
_INT_COLUMNS = [c for c in COLUMNS if c != "weight"]


def _fail(where: str, line: int, what: str) -> ConfigError:
    return ConfigError(f"{where}: line {line}: {what}")


def parse_preamble(lines: list[str], where: str) -> tuple[dict[str, Any], dict[int, int], int]:
    """(model fields, expert bytes per layer, number of preamble lines) of the `#` lines."""
    if not lines or lines[0] != MAGIC_LINE:
        shown = lines[0][:40] if lines else ""
        raise _fail(where, 1, f"expected {MAGIC_LINE!r}, found {shown!r}; this is not a route_trace v1 CSV")
    model = MODEL_LINE.fullmatch(lines[1]) if len(lines) > 1 else None
    if model is None:
        raise _fail(
            where,
            2,
            "field model: expected '# model=PATH arch=A n_layer=L n_expert=E n_expert_used=K'; "
            "the preamble is incomplete",
        )
    n_layers, n_experts, k = (int(model[key]) for key in ("n_layer", "n_expert", "k"))
    bounds = (("n_layer", n_layers, MAX_TRACE_LAYERS), ("n_expert", n_experts, MAX_TRACE_EXPERTS))
    for key, value, top in bounds:
        if not 1 <= value <= top:
            raise _fail(where, 2, f"field {key}: {value} is outside 1..{top}")
    if not 1 <= k <= min(n_experts, MAX_EXPERT_USED):
        raise _fail(where, 2, f"field n_expert_used: {k} is outside 1..{min(n_experts, MAX_EXPERT_USED)}")
    expert_bytes: dict[int, int] = {}
    number = 2
    while number < len(lines) and lines[number].startswith("#"):
        match = LAYER_LINE.fullmatch(lines[number])
        if match is None:
            raise _fail(
                where,
                number + 1,
                f"{lines[number][:60]!r} is not '# layer=I expert_bytes=B dense_bytes=D'",
            )
        layer, size = int(match["layer"]), int(match["bytes"])
        if layer >= n_layers or layer in expert_bytes:
            again = "a second time" if layer in expert_bytes else f"outside 0..{n_layers - 1}"
            raise _fail(where, number + 1, f"field layer: layer {layer} is {again}")
        if size < 1:
            raise _fail(where, number + 1, f"field expert_bytes: {size} is not a positive number of bytes")
        expert_bytes[layer] = size
        number += 1
    path = model["path"]
    fields = {
        "arch": model["arch"],
        "model_file": re.split(r"[/\\]", path)[-1],  # the base name only: never a host path
        "n_layers": n_layers,
        "n_experts": n_experts,
        "n_expert_used": k,
    }
    return fields, expert_bytes, number


def _bad_row(body_lines: list[bytes], first_line: int, where: str) -> ConfigError:
    """The first row that is not nine fields of the right form, named by line and field."""
    for offset, raw in enumerate(body_lines):
        number = first_line + offset
        if raw == b"" and offset == len(body_lines) - 1:
            break
        text = raw.decode("utf-8", "replace")
        fields = text.split(",")
        if len(fields) != len(COLUMNS):
            return _fail(where, number, f"{len(fields)} columns, expected {len(COLUMNS)} ({COLUMN_LINE})")
        for name, value in zip(COLUMNS, fields, strict=True):
            if re.fullmatch(_FIELD[name], value) is None:
                return _fail(where, number, f"field {name}: {value[:40]!r} is not a number of that column")
    return _fail(where, first_line, "an empty line among the rows")


def parse_rows(data: bytes, start: int, first_line: int, where: str) -> dict[str, np.ndarray]:
    """The row columns (numpy arrays) of the bytes after the column line."""
    body = data[start:]
    if _BODY.fullmatch(body) is None:
        raise _bad_row(body.split(b"\n"), first_line, where)
    body = body.rstrip(b"\n")
    if not body:
        raise ConfigError(f"{where}: no routed row after the column line; nothing to import")
    cells = np.array(body.replace(b"\n", b",").split(b",")).reshape(-1, len(COLUMNS))
    columns = {name: cells[:, i].astype(np.int64) for i, name in enumerate(COLUMNS) if name in _INT_COLUMNS}
    columns["weight"] = cells[:, COLUMNS.index("weight")].astype(np.float64)
    return columns


def _check_range(col: dict[str, np.ndarray], name: str, top: int, where: str, first_line: int) -> None:
    bad = (col[name] < 0) | (col[name] > top)
    if bad.any():
        i = int(np.argmax(bad))
        raise _fail(where, first_line + i, f"field {name}: {int(col[name][i])} is outside 0..{top}")


def check_order(col: dict[str, np.ndarray], k: int, where: str, first_line: int) -> None:
    """Rows in evaluation order: phase, then the decode token, then layer, token and slot;
    every (token, layer) holds slots 0..k-1 in order."""
    phase, step, layer, slot = col["phase"], col["step"], col["layer"], col["slot"]
    key = [phase, np.where(phase == 1, step, 0), layer, step, slot]
    names = ["phase", "step", "layer", "step", "slot"]
    n = len(step)
    decided = np.zeros(n - 1, dtype=bool)
    backwards = np.zeros(n - 1, dtype=np.int64) - 1  # which key went backwards first
    for index, values in enumerate(key):
        d = np.diff(values)
        backwards[~decided & (d < 0)] = index
        decided |= d != 0
    wrong = (backwards >= 0) | ~decided
    if wrong.any():
        i = int(np.argmax(wrong)) + 1
        if backwards[i - 1] < 0:
            raise _fail(
                where,
                first_line + i,
                f"a second row for step {int(step[i])}, layer {int(layer[i])}, slot {int(slot[i])}",
            )
        name = names[int(backwards[i - 1])]
        raise _fail(
            where,
            first_line + i,
            f"field {name}: {int(col[name][i])} after {int(col[name][i - 1])}; rows must come in "
            "evaluation order (the prompt layer by layer, then each decode token's layers)",
        )
    group_start = np.ones(n, dtype=bool)
    group_start[1:] = (np.diff(step) != 0) | (np.diff(layer) != 0)
    starts = np.flatnonzero(group_start)
    expected = np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n)))
    missing = slot != expected
    if missing.any():
        i = int(np.argmax(missing))
        raise _fail(
            where,
            first_line + i,
            f"field slot: {int(slot[i])} where slot {int(expected[i])} "
            "comes next; a token's slots go 0, 1, ... in order",
        )
    short = np.flatnonzero(np.diff(np.append(starts, n)) != k)
    if len(short):
        i = int(starts[short[0]])
        raise _fail(
            where,
            first_line + i,
            f"field slot: step {int(step[i])}, layer {int(layer[i])} "
            f"has {int(np.diff(np.append(starts, n))[short[0]])} slots, not the {k} of "
            "n_expert_used",
        )


def route_csv_to_trace(data: bytes, source: dict[str, Any], where: str, turn: int | None) -> Trace:
    """A trace of one turn of a route_trace v1 CSV (turn 0 unless `turn` says)."""
    head_lines = data[: min(len(data), 1 << 20)].split(b"\n")
    preamble = []
    for raw in head_lines:
        if not raw.startswith(b"#"):
            break
        preamble.append(raw.decode("utf-8", "replace").rstrip("\r"))
    if len(preamble) == len(head_lines):
        raise _fail(where, len(preamble), "the preamble has no end (no column line follows it)")
    fields, preamble_bytes, n_pre = parse_preamble(preamble, where)
    column_line = head_lines[n_pre].decode("utf-8", "replace")
    if column_line != COLUMN_LINE:
        raise _fail(where, n_pre + 1, f"expected the column line {COLUMN_LINE!r}, found {column_line[:80]!r}")
    start = sum(len(line) + 1 for line in head_lines[: n_pre + 1])
    first_line = n_pre + 2
    col = parse_rows(data, start, first_line, where)
    k, n_layers, n_experts = fields["n_expert_used"], fields["n_layers"], fields["n_experts"]
    _check_range(col, "turn", (1 << 31) - 1, where, first_line)
    _check_range(col, "phase", 1, where, first_line)
    _check_range(col, "step", (1 << 32) - 1, where, first_line)
    _check_range(col, "layer", n_layers - 1, where, first_line)
    _check_range(col, "slot", k - 1, where, first_line)
    _check_range(col, "expert", n_experts - 1, where, first_line)
    _check_range(col, "residency", 1, where, first_line)
    with np.errstate(over="ignore"):
        finite = np.isfinite(col["weight"].astype(np.float32))
    if not finite.all():
        i = int(np.argmin(finite))
        raise _fail(where, first_line + i, "field weight: not a finite 32-bit number")
    turns = np.unique(col["turn"])
    wanted = int(turns[0]) if turn is None and len(turns) == 1 else (0 if turn is None else turn)
    if wanted not in turns:
        listed = ", ".join(str(t) for t in turns.tolist())
        raise ConfigError(f"{where}: no row of turn {wanted} (the file has turns {listed}); pass --turn N")
    keep = np.flatnonzero(col["turn"] == wanted)
    if not (np.diff(keep) == 1).all():
        raise ConfigError(f"{where}: the rows of turn {wanted} are not together; the file is out of order")
    first_line += int(keep[0])
    col = {name: values[keep] for name, values in col.items()}
    check_order(col, k, where, first_line)
    return _build(col, fields, preamble_bytes, source, where, wanted, len(turns) > 1)


def _build(
    col: dict[str, np.ndarray],
    fields: dict[str, Any],
    preamble_bytes: dict[int, int],
    source: dict[str, Any],
    where: str,
    turn: int,
    several_turns: bool,
) -> Trace:
    k = fields["n_expert_used"]
    tokens = slice(0, None, k)
    phase, step, layer = col["phase"][tokens], col["step"][tokens], col["layer"][tokens]
    moe_layers = np.unique(layer).tolist()
    unsized = [block for block in moe_layers if block not in preamble_bytes]
    if unsized:
        raise ConfigError(
            f"{where}: field expert_bytes: layer {unsized[0]} has rows but no '# layer={unsized[0]} "
            "expert_bytes=B dense_bytes=D' line in the preamble"
        )
    prompt_steps = np.unique(step[phase == 0])
    decode_steps = np.unique(step[phase == 1])
    if len(prompt_steps) and len(decode_steps) and decode_steps[0] <= prompt_steps[-1]:
        raise ConfigError(
            f"{where}: field step: decode token {int(decode_steps[0])} is not after the prompt's last "
            f"token {int(prompt_steps[-1])}"
        )
    base = 1 if len(prompt_steps) else 0
    ours = np.where(phase == 0, 0, base + np.searchsorted(decode_steps, step))
    rows = np.zeros(len(step), dtype=row_dtype(k, True))
    rows["step"] = ours
    rows["layer"] = layer
    rows["kind"] = np.where(phase == 0, KIND_PROMPT, KIND_DECODE)
    rows["pos"] = step
    rows["ids"] = col["expert"].reshape(-1, k)
    rows["weights"] = col["weight"].reshape(-1, k)
    header: dict[str, Any] = {
        "format": "moetrace",
        "version": VERSION,
        **fields,
        "moe_layers": moe_layers,
        "has_weights": True,
        "n_prompt_tokens": len(prompt_steps),
        "n_predict": len(decode_steps),
        "expert_bytes": {str(block): preamble_bytes[block] for block in moe_layers},
        "engine": {"tool": f"appliance trace import --from {FORMAT}", "llama_build": None, "backend": None},
        "source": source,
        "not_recorded": [],
    }
    if several_turns or turn:
        header["turn"] = turn
    return Trace(header=header, rows=rows)
