"""GGUF headers as structures to mutate: seeds written by the project's own model writer
(`appliance.models.synth`), split into metadata entries and tensor infos, mutated where
readers go wrong (lengths, counts, types, dimensions, alignment, per-layer hyperparameters),
and encoded again."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

from fuzz.mutate import INTERESTING_INTS, mutate_bytes

SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9
U32, U64, F32, F64 = 4, 10, 6, 12
KEYS = (
    "block_count",
    "expert_count",
    "expert_used_count",
    "full_attention_interval",
    "nextn_predict_layers",
    "embedding_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "expert_feed_forward_length",
    "feed_forward_length",
    "ssm.conv_kernel",
    "ssm.inner_size",
    "ssm.state_size",
    "ssm.group_count",
    "context_length",
    "vocab_size",
)


@dataclass
class Entry:
    key: bytes
    vtype: int
    raw: bytes  # the encoded value, as in the file


@dataclass
class Tensor:
    name: bytes
    dims: list[int]
    type_id: int
    offset: int


@dataclass
class Header:
    version: int
    entries: list[Entry] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    n_tensors: int | None = None  # overrides len(tensors) when set
    n_kv: int | None = None

    def arch(self) -> bytes:
        for entry in self.entries:
            if entry.key == b"general.architecture":
                return entry.raw[8:]
        return b"qwen3moe"


def _value_end(data: bytes, pos: int, vtype: int) -> int:
    if vtype in SCALAR_SIZES:
        return pos + SCALAR_SIZES[vtype]
    if vtype == STRING:
        (n,) = struct.unpack_from("<Q", data, pos)
        return pos + 8 + n
    item, count = struct.unpack_from("<IQ", data, pos)
    pos += 12
    for _ in range(count):
        pos = _value_end(data, pos, item)
    return pos


def parse(data: bytes) -> Header:
    """The seed's structure (seeds are well formed: this is no validating reader)."""
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    header = Header(version)
    pos = 24
    for _ in range(n_kv):
        (n,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8 : pos + 8 + n]
        (vtype,) = struct.unpack_from("<I", data, pos + 8 + n)
        start = pos + 12 + n
        pos = _value_end(data, start, vtype)
        header.entries.append(Entry(key, vtype, data[start:pos]))
    for _ in range(n_tensors):
        (n,) = struct.unpack_from("<Q", data, pos)
        name = data[pos + 8 : pos + 8 + n]
        pos += 8 + n
        (n_dims,) = struct.unpack_from("<I", data, pos)
        dims = list(struct.unpack_from(f"<{n_dims}Q", data, pos + 4))
        pos += 4 + 8 * n_dims
        type_id, offset = struct.unpack_from("<IQ", data, pos)
        pos += 12
        header.tensors.append(Tensor(name, dims, type_id, offset))
    return header


def encode(header: Header) -> bytes:
    out = [
        b"GGUF",
        struct.pack(
            "<IQQ",
            header.version,
            len(header.tensors) if header.n_tensors is None else header.n_tensors,
            len(header.entries) if header.n_kv is None else header.n_kv,
        ),
    ]
    for e in header.entries:
        out += [struct.pack("<Q", len(e.key)), e.key, struct.pack("<I", e.vtype), e.raw]
    for t in header.tensors:
        out += [struct.pack("<Q", len(t.name)), t.name, struct.pack("<I", len(t.dims))]
        out += [struct.pack(f"<{len(t.dims)}Q", *t.dims), struct.pack("<IQ", t.type_id, t.offset)]
    return b"".join(out)


def _u64(value: int) -> int:
    return value % (1 << 64)


def _scalar(rng: random.Random) -> tuple[int, bytes]:
    roll = rng.random()
    value = rng.choice(INTERESTING_INTS)
    if roll < 0.4:
        return U32, struct.pack("<I", value % (1 << 32))
    if roll < 0.6:
        return U64, struct.pack("<Q", _u64(value))
    if roll < 0.75:
        return F32, struct.pack("<f", rng.choice((0.0, float("nan"), float("inf"), -1.0, 3.5)))
    if roll < 0.85:
        return F64, struct.pack("<d", rng.choice((0.0, float("nan"), float("inf"), 1e300, 4.0)))
    if roll < 0.92:
        return STRING, struct.pack("<Q", 3) + b"abc"
    count = rng.choice((0, 1, 3, 5000))
    return ARRAY, struct.pack("<IQ", U32, count) + struct.pack(
        f"<{count}I", *(rng.choice((0, 1, 2, 1 << 31)) for _ in range(count))
    )


def mutate(rng: random.Random, seed: bytes) -> bytes:
    header = parse(seed)
    arch = header.arch()
    for _ in range(rng.choice((1, 1, 2, 3))):
        roll = rng.random()
        if roll < 0.3:  # a hyperparameter the planner reads gets a hostile value or type
            key = arch + b"." + rng.choice(KEYS).encode()
            vtype, raw = _scalar(rng)
            found = [e for e in header.entries if e.key == key]
            if found:
                found[0].vtype, found[0].raw = vtype, raw
            else:
                header.entries.append(Entry(key, vtype, raw))
        elif roll < 0.38:
            vtype, raw = _scalar(rng)
            if rng.random() < 0.5:
                vtype, raw = U32, struct.pack("<I", rng.choice((0, 1, 3, 6, 2**31, 2**32 - 1)))
            header.entries.append(Entry(b"general.alignment", vtype, raw))
        elif roll < 0.46 and header.entries:  # a declared length far past the data
            entry = rng.choice(header.entries)
            length = rng.choice((1 << 40, 1 << 63, (1 << 64) - 1, 1 << 30, 10**7))
            if entry.vtype == STRING:
                entry.raw = struct.pack("<Q", length) + entry.raw[8:]
            elif entry.vtype == ARRAY:
                entry.raw = entry.raw[:4] + struct.pack("<Q", length) + entry.raw[12:]
            else:
                header.entries.append(Entry(b"k", STRING, struct.pack("<Q", length) + b"abc"))
        elif roll < 0.52:
            if rng.random() < 0.5:
                header.n_tensors = rng.choice((0, 1 << 24, 1 << 40, (1 << 64) - 1, len(header.tensors) + 1))
            else:
                header.n_kv = rng.choice((0, 1 << 24, 1 << 40, (1 << 64) - 1, len(header.entries) + 1))
        elif roll < 0.68 and header.tensors:  # tensor shape, type, offset
            t = rng.choice(header.tensors)
            what = rng.random()
            if what < 0.5 and t.dims:
                t.dims[rng.randrange(len(t.dims))] = _u64(rng.choice(INTERESTING_INTS))
            elif what < 0.65:
                t.dims = t.dims + [rng.choice((0, 1, 2, 1 << 32))] * rng.choice((1, 2, 3))
            elif what < 0.8:
                t.type_id = rng.choice((0, 1, 2, 8, 15, 30, 39, 40, 1000, (1 << 32) - 1))
            else:
                t.offset = _u64(rng.choice(INTERESTING_INTS))
        elif roll < 0.74 and header.tensors:  # tensor names the classifier parses
            t = rng.choice(header.tensors)
            t.name = rng.choice(
                (
                    b"blk." + b"9" * rng.choice((3, 12, 5000)) + b".ffn_up_exps.weight",
                    b"blk.0.ffn_down_exps.weight",
                    b"",
                    b"blk..x",
                    b"\xff\xfe",
                    t.name * 2,
                )
            )
        elif roll < 0.8 and header.tensors:
            if rng.random() < 0.5:
                del header.tensors[rng.randrange(len(header.tensors))]
            else:
                header.tensors.append(rng.choice(header.tensors))
        elif roll < 0.85 and header.entries:
            del header.entries[rng.randrange(len(header.entries))]
        elif roll < 0.88:
            header.version = rng.choice((0, 1, 2, 4, (1 << 32) - 1))
        elif roll < 0.92:
            for entry in header.entries:
                if entry.key == b"general.architecture":
                    name = rng.choice((b"qwen35moe", b"qwen3moe", b"qwen3next", b"", b"llama"))
                    entry.raw = struct.pack("<Q", len(name)) + name
                    arch = name
        else:
            return mutate_bytes(rng, encode(header))
    data = encode(header)
    return mutate_bytes(rng, data) if rng.random() < 0.1 else data


def seed_headers(workdir: Path) -> list[bytes]:
    """Headers of tiny models made by `appliance.models.synth`, one per architecture."""
    from appliance.models.gguf_header import read_header_file
    from appliance.models.shapes import ModelSynthSpec
    from appliance.models.synth import synthesize

    seeds = []
    for arch, layers in (("qwen3moe", 2), ("qwen35moe", 4)):
        path = workdir / f"seed-{arch}.gguf"
        synthesize(ModelSynthSpec(arch=arch, size_bytes=8 << 20, experts=8, used=2, layers=layers), path)
        header = read_header_file(path)
        seeds.append(path.read_bytes()[: header.data_offset])
        path.unlink()
    return seeds
