"""bench.walk_proxy: the routes it predicts for a walk model are the file's own (without the
residual, the top k of each router times each walk token's embedding as written), and its
traces carry them for the locality statistics."""

from pathlib import Path

import numpy as np
from gguf import GGUFReader

from appliance.models import full_walk
from appliance.models.full_synth import synthesize_like
from appliance.trace.locality import locality
from bench import walk_proxy
from tests.unit.models.test_full_synth import QWEN3, SMALL, dequantized, small_input


def test_without_the_residual_the_predicted_routes_are_the_written_models_top_k(tmp_path: Path) -> None:
    like = small_input(tmp_path, QWEN3)
    synthesize_like(like, tmp_path / "m.gguf", seed=3, layers=2)
    tensors = {t.name: t for t in GGUFReader(tmp_path / "m.gguf").tensors}
    embd, vocab, used = SMALL["hidden_size"], SMALL["vocab_size"], SMALL["num_experts_per_tok"]
    emb = dequantized(tensors["token_embd.weight"]).reshape(vocab, embd)
    first, n = 5, 40
    walked = emb[full_walk.FIRST_WALK_TOKEN + first : full_walk.FIRST_WALK_TOKEN + first + n]
    predicted = walk_proxy.routes(like, 3, 1.0, 2, used, first, n, residual=0.0, static=0.0)
    assert predicted.shape == (2, n, used)
    for layer in range(2):
        router = dequantized(tensors[f"blk.{layer}.ffn_gate_inp.weight"]).reshape(-1, embd)
        logits = walked @ router.T
        chosen = np.take_along_axis(logits, predicted[layer], axis=1)
        # the predicted experts are the top k, best first (ties aside, to float rounding)
        assert np.all(np.diff(chosen, axis=1) <= 1e-6)
        assert np.allclose(chosen[:, -1], np.sort(logits, axis=1)[:, -used], rtol=1e-5)
    assert len({tuple(row) for row in predicted[0]}) > n // 8  # the walk moves the routes
    other = walk_proxy.routes(like, 3, 1.0, 2, used, first, n, residual=0.5)
    assert not np.array_equal(other, predicted)  # the residual moves some


def test_a_proxy_trace_holds_its_routes_token_by_token() -> None:
    ids = np.random.default_rng(0).permuted(np.tile(np.arange(8), (3, 5, 1)), axis=2)[:, :, :2]
    trace = walk_proxy.as_trace(ids, 8)
    assert trace.k == 2 and trace.moe_layers == [0, 1, 2] and trace.n_steps == 5
    for layer in range(3):
        assert np.array_equal(trace.ids[trace.layers == layer], ids[layer])
    loc = locality(trace)
    assert loc["decode_tokens"] == 5 and loc["activations"] == 3 * 5 * 2
    reused = np.mean([len(set(ids[0, t]) & set(ids[0, t - 1])) / 2 for t in range(1, 5)])
    assert abs(loc["next_token_reuse"]["per_layer"][0]["reuse"] - reused) < 1e-3
