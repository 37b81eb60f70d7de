"""Read a GGUF header (metadata and tensor infos) without touching the weights.

The header is read front to back from a byte source in fixed-size chunks, so a source is asked
for no more than the header plus one chunk: a whole file, a partial file that holds only the
header, or a URL read with HTTP range requests (`appliance.planner.remote`).

Every length the header declares (strings, arrays, counts of keys and tensors) is checked
against the source's size, when known, and against a byte budget before anything is allocated
or fetched, so a corrupt or hostile header costs at most the budget.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from appliance.core.errors import ApplianceError
from appliance.core.strict_load import open_regular

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
CHUNK = 1 << 20
HEADER_BUDGET = 64 << 20  # bytes of header a reader accepts (real ones: a few MiB, vocabulary included)
MAX_ALIGNMENT = 1 << 30
MAX_DIM = (1 << 63) - 1  # ggml keeps dimensions in int64
# smallest encodings: a metadata entry (empty key, type, one-byte value), a tensor info
# (empty name, n_dims 0, type, offset), a string (its length)
MIN_KV_BYTES, MIN_TENSOR_BYTES, MIN_STRING_BYTES = 8 + 4 + 1, 8 + 4 + 4 + 8, 8
KEEP_ARRAY_MAX = 4096  # numeric arrays up to this length are kept (per-layer values)

# value type ids of the GGUF format: (struct code, size)
SCALARS: dict[int, tuple[str, int]] = {
    0: ("B", 1),
    1: ("b", 1),
    2: ("H", 2),
    3: ("h", 2),
    4: ("I", 4),
    5: ("i", 4),
    6: ("f", 4),
    7: ("?", 1),
    10: ("Q", 8),
    11: ("q", 8),
    12: ("d", 8),
}
STRING, ARRAY = 8, 9


class ByteSource(Protocol):
    """Something that hands out bytes by offset: a file or a URL."""

    name: str

    def read(self, offset: int, size: int) -> bytes:
        """Up to `size` bytes at `offset`; fewer only at the end of the source."""
        ...

    def total_size(self) -> int | None:
        """Size of the whole GGUF if known (a partial local file does not know it)."""
        ...


class FileSource:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = str(path)
        self.bytes_read = 0
        fd = open_regular(path)  # never a FIFO or a device (`plan` would block or read forever)
        try:
            self._handle = os.fdopen(fd, "rb")  # closed by close()
            self._size = os.fstat(self._handle.fileno()).st_size
        except OSError as exc:
            raise ApplianceError(f"cannot open {path}: {exc.strerror}") from exc

    def read(self, offset: int, size: int) -> bytes:
        self._handle.seek(offset)
        data = self._handle.read(size)
        self.bytes_read += len(data)
        return data

    def total_size(self) -> int | None:
        return self._size

    def close(self) -> None:
        self._handle.close()


@dataclass(frozen=True)
class ArrayInfo:
    """A metadata array that was not kept (strings, or too long): its element type and length."""

    item_type: int
    count: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order: ne[0] first
    type_id: int
    offset: int  # relative to the start of the data section


@dataclass(frozen=True)
class GGUFHeader:
    source: str
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    alignment: int
    data_offset: int  # absolute file offset of the tensor data section
    file_size: int | None

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def arch(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))


class _Cursor:
    """Sequential reader over the growing prefix of a source."""

    def __init__(self, source: ByteSource, chunk: int, budget: int) -> None:
        self.source, self.chunk, self.budget = source, chunk, budget
        self.buf = bytearray()
        self.pos = 0
        self.what = "the file header"

    def limit(self) -> int:
        """The offset no header byte may reach: the end of the source or the budget."""
        total = self.source.total_size()
        return self.budget if total is None else min(total, self.budget)

    def check_fits(self, n: int, what: str) -> None:
        """Refuse `n` more bytes of header before asking the source for them."""
        end = self.pos + n
        total = self.source.total_size()
        if total is not None and end > total:
            raise ApplianceError(
                f"{self.source.name}: truncated GGUF header: it ends at byte {total} while "
                f"reading {self.what}, where {what} would end at byte {end}; the file is "
                "corrupt or incomplete: get the complete file (or at least its header)"
            )
        if end > self.budget:
            raise ApplianceError(
                f"{self.source.name}: GGUF header too large: {what} while reading {self.what} "
                f"would end at byte {end}, over the {self.budget}-byte header budget; "
                "the file is corrupt or not a model header"
            )

    def need(self, n: int) -> memoryview:
        self.check_fits(n, f"{n} bytes")
        while len(self.buf) < self.pos + n:
            want = max(self.chunk, self.pos + n - len(self.buf))
            want = max(min(want, self.limit() - len(self.buf)), self.pos + n - len(self.buf))
            more = self.source.read(len(self.buf), want)
            if not more:
                raise ApplianceError(
                    f"{self.source.name}: truncated GGUF header: it ends at byte {len(self.buf)} "
                    f"while reading {self.what}; get the complete file (or at least its header)"
                )
            self.buf += more[:want]
        view = memoryview(self.buf)[self.pos : self.pos + n]
        self.pos += n
        return view

    def scalar(self, code: str, size: int) -> Any:
        return struct.unpack("<" + code, self.need(size))[0]

    def u32(self) -> int:
        return int(self.scalar("I", 4))

    def u64(self) -> int:
        return int(self.scalar("Q", 8))

    def string(self) -> str:
        n = self.u64()
        self.check_fits(n, f"a string of {n} bytes")
        return bytes(self.need(n)).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        n = self.u64()
        self.check_fits(n, f"a string of {n} bytes")
        self.need(n)

    def value(self, vtype: int) -> Any:
        if vtype in SCALARS:
            return self.scalar(*SCALARS[vtype])
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            item_type, count = self.u32(), self.u64()
            item_bytes = (
                SCALARS[item_type][1]
                if item_type in SCALARS
                else MIN_STRING_BYTES
                if item_type == STRING
                else 0
            )
            self.check_fits(count * item_bytes, f"an array of {count} items")
            if item_type in SCALARS and count <= KEEP_ARRAY_MAX:
                code, size = SCALARS[item_type]
                return list(struct.unpack(f"<{count}{code}", self.need(size * count)))
            if item_type in SCALARS:
                self.need(SCALARS[item_type][1] * count)
            elif item_type == STRING:
                for _ in range(count):
                    self.skip_string()
            else:
                raise ApplianceError(
                    f"{self.source.name}: unsupported GGUF array of type "
                    f"{item_type} while reading {self.what}"
                )
            return ArrayInfo(item_type, count)
        raise ApplianceError(
            f"{self.source.name}: unknown GGUF value type {vtype} while "
            f"reading {self.what}: not a GGUF file this tool understands"
        )


def alignment_of(metadata: dict[str, Any], name: str) -> int:
    """`general.alignment`: a positive power of two (the data section starts at a multiple)."""
    value = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value <= 0
        or value & (value - 1)
        or value > MAX_ALIGNMENT
    ):
        raise ApplianceError(
            f"{name}: corrupt GGUF header: general.alignment is {value!r}, not a positive power of two"
        )
    return value


def read_header(source: ByteSource, chunk: int = CHUNK, budget: int = HEADER_BUDGET) -> GGUFHeader:
    """Parse magic, metadata and tensor infos; never reads tensor data, never more than
    `budget` bytes of header."""
    cur = _Cursor(source, chunk, budget)
    magic = bytes(cur.need(4))
    if magic != GGUF_MAGIC:
        raise ApplianceError(f"{source.name}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")
    version = cur.u32()
    if version not in (2, 3):
        raise ApplianceError(f"{source.name}: GGUF version {version} is not supported (2 or 3)")
    n_tensors, n_kv = cur.u64(), cur.u64()
    cur.what = "the counts of tensors and metadata keys"
    cur.check_fits(
        n_tensors * MIN_TENSOR_BYTES + n_kv * MIN_KV_BYTES,
        f"{n_tensors} tensor infos and {n_kv} metadata entries",
    )
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        cur.what = f"metadata entry {i + 1} of {n_kv}"
        key = cur.string()
        metadata[key] = cur.value(cur.u32())
    tensors = []
    for i in range(n_tensors):
        cur.what = f"tensor info {i + 1} of {n_tensors}"
        name = cur.string()
        n_dims = cur.u32()
        if n_dims > 4:
            raise ApplianceError(f"{source.name}: corrupt tensor info for {name!r} ({n_dims} dimensions)")
        shape = tuple(cur.u64() for _ in range(n_dims))
        elements = 1
        for dim in shape:
            elements *= dim
        if elements > MAX_DIM:
            raise ApplianceError(
                f"{source.name}: corrupt tensor info for {name!r}: shape "
                f"{list(shape)} holds more elements than ggml can address"
            )
        tensors.append(TensorInfo(name, shape, cur.u32(), cur.u64()))
    alignment = alignment_of(metadata, source.name)
    data_offset = (cur.pos + alignment - 1) // alignment * alignment
    return GGUFHeader(source.name, version, metadata, tensors, alignment, data_offset, source.total_size())


def read_header_file(path: Path) -> GGUFHeader:
    source = FileSource(path)
    try:
        return read_header(source)
    finally:
        source.close()


def tensor_nbytes(name: str, shape: tuple[int, ...], type_id: int, source: str) -> tuple[str, int]:
    """(ggml type name, bytes of the tensor's data) from its type and shape, as the header gives them."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType  # gguf loads only when sizing

    try:
        qtype = GGMLQuantizationType(type_id)
        block, type_size = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise ApplianceError(
            f"{source}: tensor {name!r} has ggml type id {type_id}, which this planner does not "
            "know; refusing to guess its size (update the gguf package or report the type)"
        ) from None
    elements = math.prod(shape)
    if shape and shape[0] % block:
        raise ApplianceError(
            f"{source}: tensor {name!r} ({qtype.name}) has a row of {shape[0]} "
            f"elements, not a multiple of the {block}-element block"
        )
    return qtype.name, elements // block * type_size
