"""Designed values on a uniform grid in quantized blocks, checked against gguf's dequantizer."""

import numpy as np
import pytest
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from appliance.models import grid_blocks

T = GGMLQuantizationType


@pytest.mark.parametrize("qtype", sorted(grid_blocks.CODE_RANGE, key=lambda t: t.name), ids=lambda t: t.name)
def test_values_decode_to_the_nearest_grid_point_within_the_codes(qtype: GGMLQuantizationType) -> None:
    low, high = grid_blocks.CODE_RANGE[qtype]
    step = 0.25
    rng = np.random.default_rng(2)
    values = rng.uniform((low - 3) * step, (high + 3) * step, size=(5, 512)).astype(np.float32)
    values[0, :4] = [low * step, high * step, 0.0, (low - 10) * step]
    raw = grid_blocks.grid_blocks(values, qtype, step)
    block, size = GGML_QUANT_SIZES[qtype]
    assert raw.shape == (5, 512 // block * size) and raw.dtype == np.uint8
    decoded = quants.dequantize(raw.reshape(-1), qtype).reshape(5, 512)
    expected = np.clip(np.rint(values / step), low, high) * step
    assert np.array_equal(decoded, expected.astype(np.float32))
    assert np.array_equal(grid_blocks.grid_values(values, qtype, step), decoded)
    assert decoded[0, :4].tolist() == [low * step, high * step, 0.0, low * step]
    inside = (values >= low * step) & (values <= high * step)
    assert np.abs(decoded - values)[inside].max() <= step / 2


@pytest.mark.parametrize("qtype", [T.F32, T.F16], ids=lambda t: t.name)
def test_float_types_hold_the_values_themselves(qtype: GGMLQuantizationType) -> None:
    values = np.array([[0.1, -2.5, 3.0, 7.25]], dtype=np.float32)
    raw = grid_blocks.grid_blocks(values, qtype, 1.0)
    dtype = "<f4" if qtype == T.F32 else "<f2"
    assert np.array_equal(raw.view(dtype).astype(np.float32), values.astype(dtype).astype(np.float32))
    assert np.array_equal(grid_blocks.grid_values(values, qtype, 1.0), raw.view(dtype).astype(np.float32))


def test_a_type_without_a_grid_is_refused() -> None:
    with pytest.raises(ValueError, match="no grid blocks for IQ4_NL"):
        grid_blocks.grid_blocks(np.zeros((1, 32), dtype=np.float32), T.IQ4_NL, 1.0)
