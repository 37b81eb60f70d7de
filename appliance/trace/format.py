"""Route trace format v1 (`.moetrace`, docs/trace-format.md): zero-copy reads, atomic writes.

Layout: `MOETRACE`, u32 version, u32 H, H bytes of space-padded JSON header, N fixed rows,
`MOETEND\\0`, u64 N. Rows are exposed as a numpy structured array viewing a read-only
memory map of the file, so reading a large trace costs no copy.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from appliance.core import atomic
from appliance.core.errors import ConfigError
from appliance.core.nesting import max_nesting
from appliance.core.strict_load import MAX_DEPTH, open_regular, parse_json_bytes
from appliance.core.validation import schema_errors

MAGIC = b"MOETRACE"
TRAILER_MAGIC = b"MOETEND\0"
VERSION = 1
PREAMBLE = struct.Struct("<8sII")  # magic, version, header length
TRAILER = struct.Struct("<8sQ")  # trailer magic, row count
PREAMBLE_BYTES = PREAMBLE.size
TRAILER_BYTES = TRAILER.size
KIND_PROMPT = 0
KIND_DECODE = 1
# What a reader accepts, so that every trace it accepts can be replayed in bounded memory:
# replay keeps a few 8-byte words per (MoE layer, expert) object.
MAX_HEADER_BYTES = 1 << 20
# A trace header's n_layers and n_experts: bounds on what a replay holds, not the model limits
# llama.cpp enforces (appliance.core.limits.MAX_MODEL_LAYERS, MAX_MODEL_EXPERTS).
MAX_TRACE_LAYERS = 4096  # blocks; rows store the layer in 16 bits
MAX_TRACE_EXPERTS = 4096
MAX_EXPERT_USED = 256
MAX_OBJECTS = 1 << 20  # MoE layers x experts
HEADER_SCHEMA = "trace-header"  # appliance/schemas/trace-header.schema.json: the documented types
# Rows a pass over a trace (checking it, building its events) holds at a time.
ROW_CHUNK = 1 << 14


def row_dtype(k: int, has_weights: bool) -> np.dtype:
    """The numpy dtype of one row for k experts per token (12 + 4k bytes, 12 + 8k with weights)."""
    fields: list[Any] = [
        ("step", "<u4"),
        ("layer", "<u2"),
        ("kind", "u1"),
        ("reserved", "u1"),
        ("pos", "<u4"),
        ("ids", "<i4", (k,)),
    ]
    if has_weights:
        fields.append(("weights", "<f4", (k,)))
    return np.dtype(fields)


def chosen_experts(layers: np.ndarray, ids: np.ndarray) -> list[tuple[int, int]]:
    """The (layer, expert) pairs that rows of a trace chose, each once, in order."""
    if ids.size == 0:
        return []
    per_slot = np.broadcast_to(layers.astype(np.int64)[:, None], ids.shape)
    pairs = np.unique(np.stack([per_slot.ravel(), ids.astype(np.int64).ravel()], axis=1), axis=0)
    return [(int(layer), int(expert)) for layer, expert in pairs]


@dataclass(frozen=True)
class Trace:
    """A route trace: its JSON header and its rows (read-only, usually a view of the file)."""

    header: dict[str, Any]
    rows: np.ndarray
    path: Path | None = None

    @property
    def k(self) -> int:
        return int(self.header["n_expert_used"])

    @property
    def has_weights(self) -> bool:
        return bool(self.header["has_weights"])

    @property
    def n_experts(self) -> int:
        return int(self.header["n_experts"])

    @property
    def moe_layers(self) -> list[int]:
        return [int(layer) for layer in self.header["moe_layers"]]

    @property
    def n_steps(self) -> int:
        return int(self.rows["step"][-1]) + 1 if len(self.rows) else 0

    @property
    def steps(self) -> np.ndarray:
        return self.rows["step"]

    @property
    def layers(self) -> np.ndarray:
        return self.rows["layer"]

    @property
    def ids(self) -> np.ndarray:
        """Expert ids, shape (rows, k)."""
        return self.rows["ids"]

    def tokens_per_step(self) -> np.ndarray:
        """Number of tokens evaluated in each step (rows of the first MoE layer per step)."""
        if not len(self.rows):
            return np.zeros(0, dtype=np.int64)
        first = self.rows["layer"] == self.moe_layers[0]
        return np.bincount(self.rows["step"][first], minlength=self.n_steps)


def _check_header(header: Any, where: str) -> dict[str, Any]:
    if not isinstance(header, dict):
        raise ConfigError(f"{where}: trace header is not a JSON object; the file is corrupt")
    errors = schema_errors(header, HEADER_SCHEMA)
    if errors:
        raise ConfigError(f"{where}: trace header {errors[0]}; the file is corrupt")
    try:  # what a writer is handed: finite numbers, strings that encode (no lone surrogate)
        json.dumps(header, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        raise ConfigError(
            f"{where}: trace header holds a number that is not finite or a string that is not "
            "Unicode text; the file is corrupt"
        ) from None
    if header["format"] != "moetrace":
        raise ConfigError(f"{where}: header format is {header['format']!r}, expected 'moetrace'")
    if header["version"] != VERSION:
        raise ConfigError(
            f"{where}: header version {header['version']} but this reader understands version {VERSION}"
        )
    for key, top in (
        ("n_layers", MAX_TRACE_LAYERS),
        ("n_experts", MAX_TRACE_EXPERTS),
        ("n_expert_used", MAX_EXPERT_USED),
    ):
        if not 1 <= header[key] <= top:
            raise ConfigError(
                f"{where}: header {key}={header[key]} is outside 1..{top}; "
                "the file is corrupt or from a model this reader cannot replay"
            )
    if header["n_experts"] < header["n_expert_used"]:
        raise ConfigError(
            f"{where}: header has n_expert_used={header['n_expert_used']} with "
            f"n_experts={header['n_experts']}; the file is corrupt"
        )
    layers = header["moe_layers"]
    if (
        not layers
        or not all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x < header["n_layers"] for x in layers
        )
        or layers != sorted(set(layers))
    ):
        raise ConfigError(
            f"{where}: header moe_layers must be ascending block indices below n_layers={header['n_layers']}"
        )
    sizes = header.get("expert_bytes")
    if sizes is not None and sorted(int(key) for key in sizes) != layers:
        raise ConfigError(
            f"{where}: header expert_bytes must name exactly the moe_layers, "
            f"got {', '.join(sorted(sizes, key=int))}; the file is corrupt"
        )
    if len(layers) * header["n_experts"] > MAX_OBJECTS:
        raise ConfigError(
            f"{where}: {len(layers)} MoE layers x {header['n_experts']} experts "
            f"is over the {MAX_OBJECTS} experts a replay can track"
        )
    return header


def release_rows(rows: np.ndarray, start: int, stop: int) -> None:
    """Rows [start, stop) of a mapped trace will not be read again soon: their pages leave this
    process's resident set (a later read maps them again from the page cache), so a pass over
    a trace holds one chunk of it at a time. Rows that do not view a mapping are left alone."""
    base = rows.base.obj if isinstance(rows.base, memoryview) else rows.base
    if not isinstance(base, mmap.mmap) or stop <= start:
        return
    origin = np.frombuffer(base, dtype=np.uint8, count=1).ctypes.data
    first = rows[start:stop].ctypes.data - origin
    begin = first - first % mmap.PAGESIZE
    base.madvise(mmap.MADV_DONTNEED, begin, first + (stop - start) * rows.dtype.itemsize - begin)


def _check_rows(rows: np.ndarray, header: dict[str, Any], where: str) -> None:
    """Refuse rows that break the spec's invariants (ids in range, layers known, order), a
    chunk of rows at a time."""
    layer_set = np.asarray(header["moe_layers"], dtype=np.int64)
    before = -1  # the (step, layer) key of the previous chunk's last row
    for start in range(0, len(rows), ROW_CHUNK):
        chunk = rows[start : start + ROW_CHUNK]
        ids = chunk["ids"]
        if int(ids.min()) < 0 or int(ids.max()) >= header["n_experts"]:
            raise ConfigError(f"{where}: expert id outside 0..{header['n_experts'] - 1}; the file is corrupt")
        layers = chunk["layer"].astype(np.int64)
        if not np.isin(layers, layer_set).all():
            raise ConfigError(
                f"{where}: a row names a layer not in the header's moe_layers; the file is corrupt"
            )
        key = chunk["step"].astype(np.int64) * (1 << 16) + layers
        if key[0] < before or np.any(np.diff(key) < 0):
            raise ConfigError(
                f"{where}: rows are not in evaluation order (step, layer ascending); the file is corrupt"
            )
        before = int(key[-1])
        release_rows(rows, start, start + len(chunk))


def parse_trace(buffer: Any, where: str = "trace") -> tuple[dict[str, Any], np.ndarray]:
    """Parse a whole trace held in `buffer` (bytes, mmap); rows view the buffer without copying."""
    size = len(buffer)
    if size < PREAMBLE_BYTES + TRAILER_BYTES:
        raise ConfigError(
            f"{where}: {size} bytes is too short for a route trace (truncated or not a .moetrace file)"
        )
    magic, version, header_len = PREAMBLE.unpack_from(buffer, 0)
    if magic != MAGIC:
        raise ConfigError(f"{where}: not a route trace (magic {bytes(magic)!r}, expected {MAGIC!r})")
    if version != VERSION:
        raise ConfigError(
            f"{where}: trace format version {version}, but this reader "
            f"understands version {VERSION}; use a matching appliance"
        )
    if header_len > MAX_HEADER_BYTES:
        raise ConfigError(
            f"{where}: header length {header_len} is over the "
            f"{MAX_HEADER_BYTES}-byte limit; the trace is corrupt"
        )
    if (PREAMBLE_BYTES + header_len) % 8 or PREAMBLE_BYTES + header_len + TRAILER_BYTES > size:
        raise ConfigError(
            f"{where}: header length {header_len} does not fit the file "
            f"({size} bytes); the trace is truncated or corrupt"
        )
    trailer, n_rows = TRAILER.unpack_from(buffer, size - TRAILER_BYTES)
    if trailer != TRAILER_MAGIC:
        raise ConfigError(
            f"{where}: trailer missing; the trace is truncated or was not finished by its writer"
        )
    raw = bytes(buffer[PREAMBLE_BYTES : PREAMBLE_BYTES + header_len])
    if max_nesting(raw) > MAX_DEPTH:
        raise ConfigError(f"{where}: trace header nests deeper than {MAX_DEPTH} levels; the file is corrupt")
    try:
        header = parse_json_bytes(raw, "trace header", MAX_HEADER_BYTES)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}; the file is corrupt") from None
    header = _check_header(header, where)
    dtype = row_dtype(header["n_expert_used"], header["has_weights"])
    body = size - PREAMBLE_BYTES - header_len - TRAILER_BYTES
    if body != n_rows * dtype.itemsize:
        raise ConfigError(
            f"{where}: trailer says {n_rows} rows of {dtype.itemsize} bytes but "
            f"the file holds {body} bytes of rows; the trace is truncated or corrupt"
        )
    rows = np.frombuffer(buffer, dtype=dtype, count=n_rows, offset=PREAMBLE_BYTES + header_len)
    _check_rows(rows, header, where)
    return header, rows


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Map a `.moetrace` file read-only; refuse truncated or corrupt files with a ConfigError."""
    path = Path(path)
    fd = open_regular(path, "cannot read trace (no such file)")  # never a FIFO or a device
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise ConfigError(f"{path}: empty file, not a route trace")
        mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read trace ({exc.strerror})") from None
    finally:
        os.close(fd)
    header, rows = parse_trace(mapping, where=str(path))
    return Trace(header=header, rows=rows, path=path)


def _pad_header(data: bytes) -> bytes:
    """Header bytes followed by the spaces that make rows start 8-byte aligned."""
    return data + b" " * ((-(PREAMBLE_BYTES + len(data))) % 8)


def encode_header(header: dict[str, Any]) -> bytes:
    """The header's JSON, space-padded so rows start 8-byte aligned."""
    return _pad_header(json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def encode_trace_bytes(
    header: dict[str, Any] | bytes,
    rows: np.ndarray | bytes = b"",
    *,
    magic: bytes = MAGIC,
    version: int = VERSION,
    header_len: int | None = None,
    pad: bool = True,
    trailer: bytes | None = TRAILER_MAGIC,
    row_count: int | None = None,
) -> bytes:
    """A whole trace as bytes, with no check: what write_trace writes for a valid header and
    rows under the defaults, and the deliberately broken layouts that fuzzing and tests feed
    the reader otherwise.

    `header` is a dict (encoded as write_trace encodes it) or raw header text; `pad=False`
    leaves raw text unaligned. `rows` is a row array or raw row bytes (cut them short for a
    truncated body). `header_len` and `row_count` override the lengths the preamble and the
    trailer state (by default the true ones: the header's length and the array's rows, 0 for
    raw bytes); `trailer=None` leaves the trailer out, as a writer that never finished would.
    """
    text = encode_header(header) if isinstance(header, dict) else _pad_header(header) if pad else header
    body = rows.tobytes() if isinstance(rows, np.ndarray) else rows
    if row_count is None:
        row_count = len(rows) if isinstance(rows, np.ndarray) else 0
    preamble = PREAMBLE.pack(magic, version, len(text) if header_len is None else header_len)
    end = b"" if trailer is None else TRAILER.pack(trailer, row_count)
    return preamble + text + body + end


def write_trace(path: str | os.PathLike[str], header: dict[str, Any], rows: np.ndarray) -> Path:
    """Write a trace under a temporary name, then rename it into place (never a partial file)."""
    path = Path(path)
    header = dict(header)
    header.setdefault("format", "moetrace")
    header.setdefault("version", VERSION)
    header = _check_header(header, str(path))
    dtype = row_dtype(header["n_expert_used"], header["has_weights"])
    if rows.dtype != dtype:
        raise ConfigError(
            f"{path}: rows have dtype {rows.dtype}, expected {dtype} for "
            f"k={header['n_expert_used']}, has_weights={header['has_weights']}"
        )
    rows = np.ascontiguousarray(rows)
    _check_rows(rows, header, str(path))
    encoded = encode_header(header)
    if len(encoded) > MAX_HEADER_BYTES or max_nesting(encoded) > MAX_DEPTH:
        raise ConfigError(
            f"{path}: the header is over {MAX_HEADER_BYTES} bytes or nests deeper "
            f"than {MAX_DEPTH} levels, which no reader accepts"
        )
    try:
        with atomic.replacing(path) as handle:
            handle.write(PREAMBLE.pack(MAGIC, VERSION, len(encoded)))
            handle.write(encoded)
            handle.write(rows.tobytes())  # streamed: rows are not joined into one more copy
            handle.write(TRAILER.pack(TRAILER_MAGIC, len(rows)))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write trace ({exc.strerror})") from None
    return path
