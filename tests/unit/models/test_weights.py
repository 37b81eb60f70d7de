"""The synthesized weights (`appliance.models.weights`): the router's skew concentrates
routing, and the greedy walk visits every normal token, drifting without losing the next one."""

import numpy as np

from appliance.models import weights
from appliance.models.shapes import ModelSynthSpec, solve_layout
from appliance.models.vocab import byte_vocab


def routed_distinct(skew: float, arch: str = "qwen3moe", steps: int = 64) -> list[int]:
    """Distinct experts per layer along the greedy token walk, routing from the embeddings."""
    vocab = byte_vocab()
    layout = solve_layout(
        ModelSynthSpec(arch=arch, size_bytes=64 << 20, skew=skew, seed=5, experts=128, used=4),
        len(vocab.tokens),
    )
    design = weights.make_design(layout, vocab)
    token, walk = ord("a"), []
    for _ in range(steps):
        token = int(design.next_token[token])
        walk.append(token)
    x = design.embeddings[walk]
    x = x / np.sqrt((x**2).mean(axis=1, keepdims=True))
    distinct = []
    for t in layout.tensors:
        if t.role == "router":
            chosen = np.argsort(-(x @ weights.router(layout, design, t).T), axis=1)[:, : layout.spec.used]
            distinct.append(len(set(chosen.ravel().tolist())))
    return distinct


def test_router_skew_concentrates_routing() -> None:
    uniform, skewed = routed_distinct(0.0), routed_distinct(1.0)
    assert min(uniform) >= 70  # 64 tokens x 4 of 128 experts, drifting: most touched once
    assert max(skewed) <= 0.95 * min(uniform) and sum(skewed) <= 0.75 * sum(uniform)


def test_walk_visits_every_normal_token_and_drifts_without_losing_the_next_token() -> None:
    vocab = byte_vocab()
    layout = solve_layout(ModelSynthSpec(arch="qwen3moe", size_bytes=64 << 20), len(vocab.tokens))
    design = weights.make_design(layout, vocab)
    free = design.embeddings[:, design.free_dims]
    head = weights.output_head(design)
    token, seen, correlation = vocab.normal_ids[0], set(), []
    for _ in range(len(vocab.normal_ids)):
        nxt = int(design.next_token[token])
        correlation.append(float(free[nxt] @ free[token]) / free.shape[1])
        logits = head @ design.embeddings[token]
        best, second = np.sort(logits)[-2:][::-1]
        assert int(np.argmax(logits)) == nxt and best - second > 0.3 * best  # greedy follows the walk
        seen.add(nxt)
        token = nxt
    assert seen == set(vocab.normal_ids)
    drift = weights.DRIFT_SHARE * weights.DRIFT_CORRELATION
    assert abs(np.mean(correlation) - drift) < 0.1  # consecutive tokens share the drifting part
