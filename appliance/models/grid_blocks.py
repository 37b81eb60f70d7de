"""Designed values in ggml quantized blocks, on a uniform grid.

Random blocks (models/blocks.py) bound a tensor's values but cannot say what they are. The
designed rows of a full-size synthetic model (the token walk's embeddings and output head,
models/full_walk.py) need values of our choosing, so each block here holds `step x code`:
one fp16 scale per block, every sub-scale 1 (and every minimum the code's midpoint), codes
rounded and clipped to the type's range. Q8_0 codes run -127..127, Q6_K -32..31, Q4_K -8..7:
the step is the caller's, chosen so the values that matter are on the grid.

The bit layouts are ggml's (ggml-common.h, dequantize_row_q4_K / q6_K);
tests/unit/models/test_grid_blocks.py checks each against the `gguf` package's dequantizer.
"""

from __future__ import annotations

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

T = GGMLQuantizationType

# type -> (lowest code, highest code) of step x code
CODE_RANGE: dict[GGMLQuantizationType, tuple[int, int]] = {
    T.Q8_0: (-127, 127),
    T.Q6_K: (-32, 31),
    T.Q4_K: (-8, 7),
}
GRID_TYPES = (*CODE_RANGE, T.F32, T.F16)
# Q4_K's 12 scale bytes with every sub-block's scale 1 and minimum 8 (get_scale_min_k4's packing)
Q4_K_UNIT_SCALES = np.array([1, 1, 1, 1, 8, 8, 8, 8, 0x81, 0x81, 0x81, 0x81], dtype=np.uint8)


def _f16_bytes(value: float) -> np.ndarray:
    return np.frombuffer(np.float16(value).astype("<f2").tobytes(), dtype=np.uint8)


def codes(values: np.ndarray, qtype: GGMLQuantizationType, step: float) -> np.ndarray:
    """values / step rounded and clipped to the type's codes (int16)."""
    lo, hi = CODE_RANGE[qtype]
    return np.clip(np.rint(values / float(np.float16(step))), lo, hi).astype(np.int16)


def grid_values(values: np.ndarray, qtype: GGMLQuantizationType, step: float) -> np.ndarray:
    """The float32 values that grid_blocks(values, qtype, step) decode to."""
    if qtype in (T.F32, T.F16):
        return values.astype("<f4" if qtype == T.F32 else "<f2").astype(np.float32)
    return codes(values, qtype, step).astype(np.float32) * np.float32(np.float16(step))


def grid_blocks(values: np.ndarray, qtype: GGMLQuantizationType, step: float) -> np.ndarray:
    """(n, bytes per row) uint8: rows of `values` (n, row length) as blocks of step x code
    (F32 and F16: the values themselves)."""
    n, width = values.shape
    if qtype in (T.F32, T.F16):
        dtype = "<f4" if qtype == T.F32 else "<f2"
        return np.ascontiguousarray(values.astype(dtype)).view(np.uint8).reshape(n, -1)
    if qtype not in CODE_RANGE:
        raise ValueError(f"no grid blocks for {qtype.name}")
    block, size = GGML_QUANT_SIZES[qtype]
    q = codes(values, qtype, step).reshape(n * (width // block), block)
    out = np.zeros((q.shape[0], size), dtype=np.uint8)
    if qtype == T.Q8_0:  # d, qs[32] int8
        out[:, 0:2] = _f16_bytes(step)
        out[:, 2:] = q.astype(np.int8).view(np.uint8)
    elif qtype == T.Q4_K:  # d, dmin, scales[12], qs[128]: d x 1 x u - dmin x 8, u = code + 8
        u = (q + 8).astype(np.uint8).reshape(-1, 4, 2, 32)  # 4 pairs of 32-value sub-blocks
        out[:, 0:2] = _f16_bytes(step)
        out[:, 2:4] = _f16_bytes(step)
        out[:, 4:16] = Q4_K_UNIT_SCALES
        out[:, 16:144] = (u[:, :, 0, :] | (u[:, :, 1, :] << 4)).reshape(-1, 128)
    else:  # Q6_K: ql[128], qh[64], scales[16] int8, d: d x 1 x (u - 32)
        u = (q + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # 2 halves of 4 x 32 values
        low, high = u & 0x0F, u >> 4
        ql = np.concatenate([low[:, :, 0] | (low[:, :, 2] << 4), low[:, :, 1] | (low[:, :, 3] << 4)], axis=2)
        qh = high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)
        out[:, 0:128] = ql.reshape(-1, 128)
        out[:, 128:192] = qh.reshape(-1, 64)
        out[:, 192:208] = 1
        out[:, 208:210] = _f16_bytes(step)
    return out.reshape(n, -1)
