"""The full-size synth's token walk: its designed rows, routers and length, and the model
`model synth --like` writes with it (the walk router, the default)."""

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType

from appliance.models import full_synth, full_walk
from tests.conftest import run_cli
from tests.unit.models.test_full_synth import QWEN3, QWEN35, SMALL, dequantized, leftovers, small_input, synth

# `model synth --like small-qwen3 --layers 2 --router zipf` (seed 0) as written before the walk
# design existed (commit 28d869e): format 1's bytes stay what the pinned profiles were made with
ZIPF_SMALL_SHA256 = "b5aeb1822305a0b01fb1025c82d9009a9637955eb10cdd5f087ffa32ca94e781"


def test_the_walk_takes_its_tokens_from_the_filler_tokens() -> None:
    assert full_walk.walk_tokens(151936) == full_walk.WALK_TOKENS == 4096
    assert full_walk.walk_tokens(full_walk.FIRST_WALK_TOKEN + 10) == 10
    assert full_walk.FIRST_WALK_TOKEN == 260  # 256 bytes, one merge, three specials


def test_the_walk_is_the_same_for_a_seed_and_drifts() -> None:
    one, again, other = (full_walk.make_walk(s, 64, 800) for s in (1, 1, 2))
    assert np.array_equal(one.free, again.free) and not np.array_equal(one.free, other.free)
    assert one.free.shape == (800 - full_walk.FIRST_WALK_TOKEN, 63) and one.tokens == 540
    corr = np.corrcoef(one.free[:-1].reshape(-1), one.free[1:].reshape(-1))[0, 1]
    drift = full_walk.DRIFT_SHARE * full_walk.DRIFT_CORRELATION
    echo = (1 - full_walk.DRIFT_SHARE) * np.sqrt(full_walk.ECHO_SHARE * (1 - full_walk.ECHO_SHARE))
    assert corr == pytest.approx(drift + echo, abs=0.05)


def test_designed_rows_cover_only_the_walk_and_the_head_leads_each_token_to_the_next() -> None:
    walk = full_walk.make_walk(3, 8, full_walk.FIRST_WALK_TOKEN + 5)
    assert full_walk.designed_rows(walk, "token_embd", 0, full_walk.FIRST_WALK_TOKEN) is None
    found = full_walk.designed_rows(walk, "token_embd", full_walk.FIRST_WALK_TOKEN - 2, 4)
    assert found is not None
    rows, values = found
    assert rows == slice(2, 4) and values.shape == (2, 8)
    assert (values[:, 0] == full_walk.EMBED_SHARED).all() and np.array_equal(values[:, 1:], walk.free[:2])
    head = full_walk.designed_rows(walk, "output", full_walk.FIRST_WALK_TOKEN, 100)
    assert head is not None and head[0] == slice(0, 5)
    assert (head[1][:, 0] == 0).all()
    assert np.array_equal(head[1][:, 1:], np.roll(walk.free, 1, axis=0))  # row i + 1 = token i


def test_revisits_bring_an_earlier_tokens_noise_back_after_a_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(full_walk, "REVISIT_SHARE", 0.5)
    monkeypatch.setattr(full_walk, "REVISIT_MIN_GAP", 6.0)
    monkeypatch.setattr(full_walk, "REVISIT_TAIL", 1.0)
    fresh = np.random.default_rng(0).standard_normal((3000, 256), dtype=np.float32)
    recurred = full_walk.revisiting(np.random.default_rng(1), fresh)
    assert np.array_equal(recurred[:6], fresh[:6])  # no gap reaches back before the first token
    assert recurred.var() == pytest.approx(1.0, rel=0.03)  # unit variance, however deep the chain
    unit = recurred / np.linalg.norm(recurred, axis=1, keepdims=True)
    lag = [float(np.mean(np.sum(unit[g:] * unit[:-g], axis=1))) for g in (1, 5, 6, 12, 200)]
    # a Pareto(1) gap from 6 is 6 for a seventh of the tokens (each then sqrt(0.5) alike); shorter
    # lags only through two tokens revisiting one source, a hundredth of a gap each
    assert lag[2] > 0.1 and lag[2] > 3 * max(lag[:2])
    assert lag[2] > lag[3] > 0.03 > lag[4]  # the chance of a gap falls with its length


def test_revisits_are_off_without_a_share_and_the_walk_then_is_the_drift_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(full_walk, "REVISIT_SHARE", 0.0)
    monkeypatch.setattr(full_walk, "ECHO_SHARE", 0.0)
    plain = full_walk.make_walk(1, 64, 800).free
    rng = full_walk.rng_for(1, "walk")
    drift = full_walk.drifting_noise(rng, 540, 63, full_walk.DRIFT_SHARE, full_walk.DRIFT_CORRELATION)
    assert np.array_equal(plain, drift)
    monkeypatch.setattr(full_walk, "REVISIT_SHARE", 0.4)
    assert not np.array_equal(full_walk.make_walk(1, 64, 800).free, plain)


def test_an_echo_makes_consecutive_tokens_alike_and_tokens_two_apart_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh = np.random.default_rng(0).standard_normal((4000, 256), dtype=np.float32)
    monkeypatch.setattr(full_walk, "ECHO_SHARE", 0.0)
    assert full_walk.echoing(fresh) is fresh
    monkeypatch.setattr(full_walk, "ECHO_SHARE", 0.2)
    echoed = full_walk.echoing(fresh)
    assert echoed.dtype == np.float32 and echoed.var() == pytest.approx(1.0, rel=0.02)
    lag = [float(np.mean(echoed[g:] * echoed[:-g])) for g in (1, 2)]
    assert lag[0] == pytest.approx(np.sqrt(0.2 * 0.8), abs=0.01) and abs(lag[1]) < 0.01
    assert np.allclose(echoed[0], np.sqrt(0.8) * fresh[0] + np.sqrt(0.2) * fresh[-1])  # a cycle


def test_popularity_falls_from_1_to_0_and_its_shape_says_where(monkeypatch: pytest.MonkeyPatch) -> None:
    for shape in (-0.5, 0.0, 0.2025, 1.0, 2.0):
        monkeypatch.setattr(full_walk, "POPULARITY_SHAPE", shape)
        curve = full_walk.popularity(128)
        assert curve[0] == 1.0 and curve[-1] == pytest.approx(0.0, abs=1e-12) and (np.diff(curve) < 0).all()
        falls = -np.diff(curve)
        assert (np.diff(falls) < 0).all() if shape < 1 else True  # below 1: the fall is steepest at the head
        assert (np.diff(falls) > 0).all() if shape > 1 else True  # above 1: at the tail
    monkeypatch.setattr(full_walk, "POPULARITY_SHAPE", 1.0)
    assert np.allclose(full_walk.popularity(5), [1.0, 0.75, 0.5, 0.25, 0.0])  # even steps
    monkeypatch.setattr(full_walk, "POPULARITY_SHAPE", 0.0)
    assert np.allclose(full_walk.popularity(4), 1 - np.log([1, 2, 3, 4]) / np.log(4))
    assert full_walk.popularity(1).tolist() == [1.0]


def test_routers_read_popularity_on_dimension_0_times_skew_and_a_gain_of_their_layer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(full_walk, "LAYER_GAIN_SPREAD", 0.0)
    w = full_walk.router(np.random.default_rng(0), 1.0, 16, 32)
    ranked = np.sort(w[:, 0])[::-1]
    assert np.allclose(ranked, full_walk.POPULARITY_GAIN * full_walk.popularity(16), rtol=1e-6, atol=1e-7)
    assert (full_walk.router(np.random.default_rng(0), 0.0, 16, 32)[:, 0] == 0).all()
    assert w[:, 1:].std() == pytest.approx(1 / np.sqrt(31), rel=0.2)
    monkeypatch.setattr(full_walk, "LAYER_GAIN_SPREAD", 0.5)
    layer = [full_walk.router(np.random.default_rng(s), 1.0, 16, 32) for s in range(400)]
    gains = np.array([w[:, 0].max() for w in layer])
    assert np.array_equal(layer[0], full_walk.router(np.random.default_rng(0), 1.0, 16, 32))
    assert np.log(gains).mean() == pytest.approx(np.log(full_walk.POPULARITY_GAIN), abs=0.06)
    assert np.log(gains).std() == pytest.approx(0.5, rel=0.1)  # lognormal across layers
    spread = np.sort(full_walk.router(np.random.default_rng(3), 1.0, 16, 32)[:, 0])[::-1]
    # one curve, scaled by the layer's gain
    assert np.allclose(spread / spread[0], full_walk.popularity(16), rtol=1e-5, atol=1e-7)


def test_the_walk_design_writes_its_rows_centers_the_blocks_and_names_itself(tmp_path: Path) -> None:
    like = small_input(tmp_path, QWEN3)
    record = synth(like, tmp_path / "m.gguf", "--layers", "2")  # --router walk, the default
    assert record["router"] == "walk"
    reader = GGUFReader(tmp_path / "m.gguf")
    assert bytes(reader.fields["appliance.synth.router"].parts[-1]) == b"walk"
    tensors = {t.name: t for t in reader.tensors}
    embd, vocab = SMALL["hidden_size"], SMALL["vocab_size"]
    first, walk = full_walk.FIRST_WALK_TOKEN, full_walk.walk_tokens(vocab)
    assert walk == vocab - first  # a small vocabulary: every filler token is on the walk
    emb = dequantized(tensors["token_embd.weight"]).reshape(vocab, embd)
    head = dequantized(tensors["output.weight"]).reshape(vocab, embd)
    on = slice(first, first + walk)
    assert np.allclose(emb[:, 0], full_synth.EMBED_SHARED, rtol=1e-3)  # the routers' constant, everywhere
    assert np.abs(emb[:first, 1:]).max() <= full_synth.EMBED_AMAX  # off the walk: random, bounded
    assert emb[on, 1:].std() > 0.9  # on it: unit-variance free parts
    # token i + 1's head row is token i's free part (both rounded to their grids)
    follows = [np.corrcoef(head[first + (i + 1) % walk, 1:], emb[first + i, 1:])[0, 1] for i in range(walk)]
    assert min(follows) > 0.98
    assert (head[on, 0] == 0).all()
    # and no other walk token's: greedy decoding from token i picks i + 1
    logits = emb[on, 1:] @ head[on, 1:].T
    assert (np.argmax(logits, axis=1) == (np.arange(walk) + 1) % walk).all()
    consecutive = np.mean(
        [np.corrcoef(emb[first + i, 1:], emb[first + i + 1, 1:])[0, 1] for i in range(walk - 1)]
    )
    assert 0.2 < consecutive < 0.6  # drift and echo: about DRIFT_SHARE x DRIFT_CORRELATION + 0.17
    gains = []
    for layer in (0, 1):
        router = dequantized(tensors[f"blk.{layer}.ffn_gate_inp.weight"]).reshape(SMALL["num_experts"], embd)
        popularity = np.sort(router[:, 0])[::-1]
        assert np.allclose(popularity / popularity[0], full_walk.popularity(len(popularity)), atol=0.01)
        gains.append(float(popularity[0]))  # skew 1 x the layer's own gain
    spread = np.abs(np.log(np.array(gains) / full_walk.POPULARITY_GAIN)) / full_walk.LAYER_GAIN_SPREAD
    assert gains[0] != gains[1] and (spread < 4).all()  # each layer drew its own, a lognormal's
    for name, tensor in tensors.items():  # Q4_K matrices centered: no rank-one push through the layers
        if full_synth.role(name) == "dense" and GGMLQuantizationType(tensor.tensor_type).name == "Q4_K":
            values = dequantized(tensor)
            assert abs(float(values.mean())) < 0.02 * float(np.abs(values).max()), name
    zipf = synth(like, tmp_path / "z.gguf", "--layers", "2", "--router", "zipf")
    assert "appliance.synth.router" not in GGUFReader(tmp_path / "z.gguf").fields
    assert zipf["sha256"] == ZIPF_SMALL_SHA256  # the format-1 bytes, unchanged by the walk


def test_the_walk_refuses_a_vocabulary_too_small_and_a_head_it_cannot_write(tmp_path: Path) -> None:
    tiny_vocab = small_input(tmp_path, QWEN3)
    doc = json.loads(tiny_vocab.read_text())
    doc["config"]["vocab_size"] = full_walk.FIRST_WALK_TOKEN + 1
    tiny_vocab.write_text(json.dumps(doc))
    refused = run_cli("model", "synth", "--like", str(tiny_vocab), str(tmp_path / "m.gguf"), "--layers", "1")
    assert refused.returncode == 2
    assert refused.stderr == (
        f"error: {tiny_vocab}: the walk router needs at least {full_walk.FIRST_WALK_TOKEN + 2} tokens, "
        f"token_embd.weight has {full_walk.FIRST_WALK_TOKEN + 1}; use --router zipf\n"
    )
    iq_head = small_input(tmp_path, QWEN35)
    doc = json.loads(iq_head.read_text())
    doc["types"]["output"] = "IQ4_NL"
    iq_head.write_text(json.dumps(doc))
    refused = run_cli("model", "synth", "--like", str(iq_head), str(tmp_path / "m.gguf"), "--layers", "4")
    assert refused.returncode == 2
    assert refused.stderr == (
        f"error: {iq_head}: the walk router writes designed rows into output.weight, which is IQ4_NL; "
        "give it one of Q8_0, Q6_K, Q4_K, or use --router zipf\n"
    )
    assert leftovers(tmp_path) == []
    synth(iq_head, tmp_path / "z.gguf", "--layers", "4", "--router", "zipf")
    tiny = run_cli("model", "synth", str(tmp_path / "t.gguf"), "--arch", "qwen3moe", "--router", "zipf")
    assert tiny.returncode == 1
    assert tiny.stderr == "error: --router chooses the design of a --like model; a tiny model has its own\n"
