"""Random quantized blocks with bounded values, for full-size synthetic models.

A ggml quantized block holds one or two fp16 scale fields (`d`, and `dmin` for the K-quants
with minimums) and codes: integer quants, 6-bit sub-scales, grid indices, sign bits. Any bit
pattern of the codes decodes to a finite value, and the largest magnitude a block can decode
to is `CODE_MAX[type] x d` (with dmin = d where a type has one). So random code bytes with the
scale fields overwritten by `d = amax / CODE_MAX` give weights in [-amax, amax], whatever the
random bytes are: every activation stays finite and bounded.

The layouts (byte offset of each fp16 scale field in the block) are those of ggml's block
structs (ggml-common.h); tests/unit/models/test_blocks.py checks each against the `gguf`
package's dequantizer, bound included.
"""

from __future__ import annotations

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from appliance.core.errors import ConfigError

T = GGMLQuantizationType

# type -> byte offsets of the fp16 scale fields in a block (d first, dmin second)
SCALE_OFFSETS: dict[GGMLQuantizationType, tuple[int, ...]] = {
    T.Q4_0: (0,),  # d, qs[16]: d x (q - 8)
    T.Q5_0: (0,),  # d, qh[4], qs[16]: d x (q - 16)
    T.Q8_0: (0,),  # d, qs[32] int8: d x q
    T.IQ4_NL: (0,),  # d, qs[16]: d x kvalues[q], |kvalues| <= 127
    T.IQ4_XS: (0,),  # d, scales_h, scales_l[4], qs[128]: d x (ls - 32) x kvalues[q]
    T.IQ3_S: (0,),  # d, qs[64], qh[8], signs[32], scales[4]: d x (1 + 2 s) x grid, grid <= 15
    T.Q2_K: (80, 82),  # scales[16], qs[64], d, dmin: d x sc x q - dmin x m
    T.Q3_K: (108,),  # hmask[32], qs[64], scales[12], d: d x (sc - 32) x (q - 4)
    T.Q4_K: (0, 2),  # d, dmin, scales[12], qs[128]: d x sc x q - dmin x m
    T.Q5_K: (0, 2),  # d, dmin, scales[12], qh[32], qs[128]
    T.Q6_K: (208,),  # ql[128], qh[64], scales[16] int8, d: d x sc x (q - 32)
}
# the largest magnitude a block decodes to, in units of d (with dmin = d)
CODE_MAX: dict[GGMLQuantizationType, int] = {
    T.Q4_0: 8,
    T.Q5_0: 16,
    T.Q8_0: 128,
    T.IQ4_NL: 127,
    T.IQ4_XS: 32 * 127,
    T.IQ3_S: 31 * 15,
    T.Q2_K: 15 * 3,  # the minimum side reaches only 15
    T.Q3_K: 32 * 4,
    T.Q4_K: 63 * 15,  # d x sc x q reaches 945 d, - dmin x m only 63
    T.Q5_K: 63 * 31,
    T.Q6_K: 128 * 32,
}
# K-quants whose random sub-scales and minimums give every value a positive mean (a Q4_K
# block's is about a fifth of its bound): centered, every sub-block's scale 2 and minimum the
# codes' midpoint, so d x (2 q - top) is symmetric about 0. type -> (scale bytes, their offset,
# the largest magnitude in units of d)
CENTERED: dict[GGMLQuantizationType, tuple[bytes, int, int]] = {
    T.Q2_K: (bytes([0x32] * 16), 0, 3),  # scales[16]: sc | m << 4 = 2 | 3 << 4: 2 q - 3
    T.Q4_K: (bytes([2] * 4 + [15] * 4 + [0xF2] * 4), 4, 15),  # get_scale_min_k4: 2 q - 15
    T.Q5_K: (bytes([2] * 4 + [0x5F] * 4 + [0xF2] * 4), 4, 31),  # m = 31 (high bits in 4..7): 2 q - 31
}
FLOAT_TYPES = (T.F32, T.F16)
GENERATED = tuple(SCALE_OFFSETS) + FLOAT_TYPES


def refuse_ungenerated(qtype: GGMLQuantizationType, tensor: str, where: str) -> None:
    if qtype not in GENERATED:
        names = ", ".join(sorted(t.name for t in GENERATED))
        raise ConfigError(
            f"{where}: {tensor} is {qtype.name}, which `model synth` cannot generate; "
            f"change the input's type to one of {names}"
        )


def scale_for(qtype: GGMLQuantizationType, amax: float, code_max: int | None = None) -> np.float16:
    """The largest fp16 d with code_max (default CODE_MAX) x d <= amax."""
    target = amax / (CODE_MAX[qtype] if code_max is None else code_max)
    d = np.float16(target)
    while float(d) > target:
        d = np.nextafter(d, np.float16(0))
    if not d > 0:
        raise ConfigError(f"{qtype.name}: a bound of {amax:g} is below fp16's smallest scale")
    return d


def random_blocks(
    bitgen: np.random.BitGenerator, qtype: GGMLQuantizationType, n_blocks: int, amax: float
) -> np.ndarray:
    """(n_blocks, block bytes) uint8: random codes, every scale field set so |value| <= amax.
    Draws ceil(bytes / 8) 64-bit words, so chunks of whole words continue one stream."""
    _, size = GGML_QUANT_SIZES[qtype]
    total = n_blocks * size
    words = bitgen.random_raw((total + 7) // 8)
    assert isinstance(words, np.ndarray)
    raw = words.view(np.uint8)[:total].reshape(n_blocks, size)
    d = np.frombuffer(scale_for(qtype, amax).astype("<f2").tobytes(), dtype=np.uint8)
    for offset in SCALE_OFFSETS[qtype]:
        raw[:, offset : offset + 2] = d
    return raw


def centered_blocks(
    bitgen: np.random.BitGenerator, qtype: GGMLQuantizationType, n_blocks: int, amax: float
) -> np.ndarray:
    """random_blocks whose values have mean 0: the CENTERED types' scale bytes set (and d = dmin
    = amax / their largest magnitude); other types as random_blocks. A matrix of biased blocks
    adds its mean x the sum of its input to every output, and through many layers that common
    direction swamps the hidden state (every token then routes alike)."""
    raw = random_blocks(bitgen, qtype, n_blocks, amax)
    if qtype in CENTERED:
        scales, offset, code_max = CENTERED[qtype]
        d = np.frombuffer(scale_for(qtype, amax, code_max).astype("<f2").tobytes(), dtype=np.uint8)
        for field in SCALE_OFFSETS[qtype]:
            raw[:, field : field + 2] = d
        raw[:, offset : offset + len(scales)] = np.frombuffer(scales, dtype=np.uint8)
    return raw
