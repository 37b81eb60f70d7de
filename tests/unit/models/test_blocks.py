"""Random quantized blocks: every layout's scale fields, checked against gguf's dequantizer."""

import numpy as np
import pytest
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from appliance.core.errors import ConfigError
from appliance.models import blocks

T = GGMLQuantizationType
# the block sizes the layouts assume (ggml-common.h), beside gguf's table
EXPECTED_SIZES = {
    T.Q8_0: (32, 34),
    T.IQ4_NL: (32, 18),
    T.IQ3_S: (256, 110),
    T.Q4_K: (256, 144),
    T.Q6_K: (256, 210),
}


@pytest.mark.parametrize("qtype", sorted(EXPECTED_SIZES, key=lambda t: t.name), ids=lambda t: t.name)
def test_block_sizes_match_gguf(qtype: GGMLQuantizationType) -> None:
    assert GGML_QUANT_SIZES[qtype] == EXPECTED_SIZES[qtype]


@pytest.mark.parametrize("qtype", sorted(blocks.SCALE_OFFSETS, key=lambda t: t.name), ids=lambda t: t.name)
def test_random_blocks_decode_bounded_and_reach_the_bound(qtype: GGMLQuantizationType) -> None:
    amax = 0.05
    raw = blocks.random_blocks(np.random.SFC64(3), qtype, 4000, amax)
    assert raw.shape == (4000, GGML_QUANT_SIZES[qtype][1])
    values = quants.dequantize(raw.reshape(-1), qtype)
    assert np.isfinite(values).all()
    top = float(np.abs(values).max())
    assert top <= amax  # a wrong scale offset leaves random fp16 bits as d: huge, inf or nan
    assert top >= 0.9 * amax  # CODE_MAX is the real largest code, not a loose bound
    assert float(values.std()) > amax / 20


def test_same_generator_state_same_blocks_and_chunks_continue_one_stream() -> None:
    whole = blocks.random_blocks(np.random.SFC64(9), T.Q4_K, 64, 1.0)
    gen = np.random.SFC64(9)
    parts = [blocks.random_blocks(gen, T.Q4_K, 32, 1.0) for _ in range(2)]
    assert np.array_equal(whole, np.concatenate(parts))


def test_scale_is_the_largest_fp16_within_the_bound() -> None:
    d = blocks.scale_for(T.Q8_0, 1.0)
    assert float(d) * 128 <= 1.0 < float(np.nextafter(d, np.float16(1))) * 128


def test_a_type_without_a_generator_is_refused_in_one_line() -> None:
    with pytest.raises(
        ConfigError, match=r"^in.json: blk.0.x is IQ2_XXS, which `model synth` cannot generate; "
    ):
        blocks.refuse_ungenerated(T.IQ2_XXS, "blk.0.x", "in.json")
    blocks.refuse_ungenerated(T.F32, "blk.0.x", "in.json")


@pytest.mark.parametrize("qtype", sorted(blocks.CENTERED, key=lambda t: t.name), ids=lambda t: t.name)
def test_centered_blocks_have_mean_zero_where_random_ones_lean_positive(qtype: GGMLQuantizationType) -> None:
    amax = 0.05
    biased = quants.dequantize(blocks.random_blocks(np.random.SFC64(3), qtype, 4000, amax).reshape(-1), qtype)
    raw = blocks.centered_blocks(np.random.SFC64(3), qtype, 4000, amax)
    values = quants.dequantize(raw.reshape(-1), qtype)
    assert float(biased.mean()) > 0.08 * amax  # why centering exists: a rank-one push per matrix
    assert abs(float(values.mean())) < 0.005 * amax
    assert np.allclose(np.sort(np.unique(values)), -np.sort(np.unique(values))[::-1])  # symmetric codes
    assert float(np.abs(values).max()) <= amax
    assert float(np.abs(values).max()) >= 0.9 * amax


@pytest.mark.parametrize("qtype", [T.Q6_K, T.Q8_0, T.IQ3_S], ids=lambda t: t.name)
def test_centered_blocks_of_an_unbiased_type_are_its_random_blocks(qtype: GGMLQuantizationType) -> None:
    centered = blocks.centered_blocks(np.random.SFC64(5), qtype, 100, 1.0)
    assert np.array_equal(centered, blocks.random_blocks(np.random.SFC64(5), qtype, 100, 1.0))
