"""Mutations shared by the readers' harnesses: bytes, and JSON-like trees (dicts, lists,
scalars) where a value is replaced by one a careless or hostile writer would produce."""

from __future__ import annotations

import copy
import random
from typing import Any

INTERESTING_INTS = (
    0,
    1,
    -1,
    2,
    3,
    7,
    255,
    256,
    4095,
    4096,
    65535,
    65536,
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    1 << 40,
    10**20,
    (1 << 62),
    (1 << 63) - 1,
    1 << 63,
    (1 << 64) - 1,
    -(1 << 63),
)
INTERESTING_FLOATS = (0.0, -0.0, 0.5, -1.0, 1e-300, 1e300, float("nan"), float("inf"), float("-inf"))
INTERESTING_STRINGS = (
    "",
    "a",
    "..",
    "/",
    "../../etc/passwd",
    "\u00ff",
    "\ud7ff" * 3,
    "x" * 5000,
    "sha256:",
    "0" * 64,
    "{}",
    "null",
    "\n",
    "auto",
    "cpu",
)


def interesting(rng: random.Random) -> Any:
    """A scalar or small container that readers often mishandle."""
    roll = rng.random()
    if roll < 0.35:
        return rng.choice(INTERESTING_INTS)
    if roll < 0.5:
        return rng.choice(INTERESTING_FLOATS)
    if roll < 0.7:
        return rng.choice(INTERESTING_STRINGS)
    if roll < 0.78:
        return rng.choice((True, False, None))
    if roll < 0.86:
        return [rng.choice(INTERESTING_INTS) for _ in range(rng.randint(0, 4))]
    if roll < 0.92:
        return {rng.choice(("a", "name", "sha256", "0")): rng.choice(INTERESTING_INTS)}
    return nested(rng.choice((3, 50, 150)))


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(tree, dict):
        for key, value in tree.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(tree, list):
        for index, value in enumerate(tree[:64]):
            out += _paths(value, prefix + (index,))
    return out


def _get(tree: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        tree = tree[part]
    return tree


def mutate_tree(rng: random.Random, tree: Any, rounds: int | None = None) -> Any:
    """A copy of `tree` with 1-3 structural mutations at random places."""
    tree = copy.deepcopy(tree)
    for _ in range(rounds or rng.choice((1, 1, 1, 2, 3))):
        paths = _paths(tree)
        path = rng.choice(paths)
        if not path:
            if rng.random() < 0.1:
                tree = interesting(rng)
            continue
        parent = _get(tree, path[:-1])
        key = path[-1]
        current = parent[key]
        roll = rng.random()
        if roll < 0.45:
            parent[key] = interesting(rng)
        elif roll < 0.55:
            del parent[key]
        elif roll < 0.62 and isinstance(parent, dict):
            parent[rng.choice(("unknown", "extra", str(key) + "_", "x" * 300))] = interesting(rng)
        elif roll < 0.7 and isinstance(current, (int, float)) and not isinstance(current, bool):
            parent[key] = rng.choice(
                (current + 1, current - 1, -current, current * 1000, float(current), str(current))
            )
        elif roll < 0.76 and isinstance(current, str):
            parent[key] = current[: rng.randint(0, len(current))] if current else "x"
        elif roll < 0.82 and isinstance(current, list) and current:
            parent[key] = current * rng.choice((2, 50))
        elif roll < 0.88:
            other = _get(tree, rng.choice(paths))
            parent[key] = copy.deepcopy(other) if other is not tree else 0
        else:
            parent[key] = [current] if rng.random() < 0.5 else {"value": current}
    return tree


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """Byte-level damage: flips, overwrites with boundary values, cuts, splices, repeats."""
    buf = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4))):
        if not buf:
            buf += bytes([rng.randrange(256)])
            continue
        roll = rng.random()
        at = rng.randrange(len(buf))
        if roll < 0.3:
            buf[at] ^= 1 << rng.randrange(8)
        elif roll < 0.5:
            width = rng.choice((1, 2, 4, 8))
            value = (
                rng.choice((0, 0xFF, 0x7F, 0x80))
                if width == 1
                else rng.choice(((1 << (8 * width)) - 1, 1 << (8 * width - 1), 0, 1))
            )
            buf[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
        elif roll < 0.65:
            del buf[rng.randrange(len(buf)) :]
        elif roll < 0.75:
            end = min(len(buf), at + rng.randint(1, 64))
            buf[at:at] = buf[at:end] * rng.choice((1, 2, 16))
        elif roll < 0.85:
            del buf[at : at + rng.randint(1, 32)]
        elif roll < 0.92:
            buf[at:at] = bytes([rng.choice((0x80, 0xC3, 0xFF, 0x00, 0x22, 0x5B, 0x7B))])
        else:
            buf[at] = rng.randrange(256)
    return bytes(buf)
