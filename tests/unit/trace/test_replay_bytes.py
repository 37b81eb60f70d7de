"""Byte budgets: every expert costs its layer's bytes (appliance.trace.kernels, "Byte budgets").

A tiny two-size trace replayed by hand in both event models, budgets at the byte edges, the
refusals, the uniform-size case against the count replay, and the compiled kernel against a
plain-Python statement of the byte semantics written from the kernels' docstring.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from appliance.cli import trace as trace_cli
from appliance.core.errors import ConfigError
from appliance.trace import kernels
from appliance.trace.events import EventStream, trace_events
from appliance.trace.format import Trace, row_dtype, write_trace
from appliance.trace.replay import (
    ReplaySetup,
    pool_hits_bytes,
    replay_budget,
    replay_one,
    uniform_expert_bytes,
)
from appliance.trace.synth import TraceSynthSpec, synth_trace
from tests.conftest import run_cli
from tests.unit.trace.test_format import sample_header

# Two MoE layers of 4 experts, k = 2; an expert of layer 0 costs 3 bytes, of layer 1 5 bytes.
# Objects of the global pool: a0..a3 = 0..3 (layer 0), b0..b3 = 4..7 (layer 1).
SIZES = {0: 3, 1: 5}
# (step, layer, kind, pos, ids in slot order): a 2-token prompt as one step, then 3 decode steps
ROWS = [
    (0, 0, 0, 0, [1, 0]),
    (0, 0, 0, 1, [0, 2]),
    (0, 1, 0, 0, [3, 1]),
    (0, 1, 0, 1, [0, 2]),
    (1, 0, 1, 2, [0, 3]),
    (1, 1, 1, 2, [0, 2]),
    (2, 0, 1, 3, [1, 2]),
    (2, 1, 1, 3, [3, 0]),
    (3, 0, 1, 4, [0, 2]),
    (3, 1, 1, 4, [1, 3]),
]


def two_size_trace() -> Trace:
    rows = np.zeros(len(ROWS), dtype=row_dtype(2, False))
    for i, (step, layer, kind, pos, ids) in enumerate(ROWS):
        rows[i]["step"], rows[i]["layer"], rows[i]["kind"], rows[i]["pos"] = step, layer, kind, pos
        rows[i]["ids"] = ids
    header = sample_header(k=2) | {"n_layers": 2, "moe_layers": [0, 1], "n_experts": 4}
    return Trace(header=header, rows=rows)


def two_size_setup() -> ReplaySetup:
    return ReplaySetup(events=trace_events(two_size_trace(), row_order=True), k=2, expert_bytes=SIZES)


def per_event(admission: str, budget: int) -> list[tuple[int, int, int]]:
    """(hits, misses, bytes read) of every event, LRU, one global pool."""
    pool = two_size_setup().events.stream
    obj_bytes = np.array([3, 3, 3, 3, 5, 5, 5, 5], dtype=np.int64)
    flags = pool_hits_bytes(pool, kernels.LRU, obj_bytes, budget, admission, None)
    out = []
    for e in range(pool.n_events):
        a, b = pool.ptr[e], pool.ptr[e + 1]
        missed = pool.items[a:b][flags[a:b] == 0]
        out.append((int(flags[a:b].sum()), len(missed), int(obj_bytes[missed].sum())))
    return out


def test_lru_by_hand_during_event() -> None:
    # Budget 16 bytes. Ticks: ascending id within an event.
    assert per_event("during-event", 16) == [
        (0, 3, 9),  # step 0 layer 0: a0 a1 a2 load (9 B)
        # step 0 layer 1: b0..b3 are 20 B > 16: the highest ids that fit (b1 b2 b3, 15 B) stay,
        # everything else goes, b0 streams through (read, not kept)
        (0, 4, 20),
        (0, 2, 6),  # a0: 15+3 > 16, evict b1 (LRU); a3 fits (16)
        (1, 1, 5),  # b0: evict b3 (b2 is pinned); b2 hits
        (0, 2, 6),  # a1 evicts a0, a2 evicts a3
        (1, 1, 5),  # b0 hits; b3 evicts b2
        (1, 1, 3),  # a0 evicts a1; a2 hits
        (1, 1, 5),  # b1 evicts b0 (b3 pinned); b3 hits
    ]


def test_lru_by_hand_after_event() -> None:
    # Budget 16 bytes. Ticks: last occurrence in the rows (a1 before a0 before a2 at step 0).
    assert per_event("after-event", 16) == [
        (0, 3, 9),
        # all four b's are admitted (29 B), then a1, a0, a2 go; the event alone is 20 B, so the
        # cache ends it over budget, b0 included
        (0, 4, 20),
        (0, 2, 6),  # a0 a3 admitted (26 B), then b3 and b1 go (the two least recent)
        (2, 0, 0),  # b0 and b2 both still resident: where during-event missed b0
        (0, 2, 6),  # a1 a2 admitted, a0 a3 go
        (1, 1, 5),  # b0 hits, b3 admitted, b2 goes
        (1, 1, 3),  # a0 admitted, a2 hits, a1 goes
        (1, 1, 5),  # b1 admitted, b3 hits, b0 goes
    ]


def test_replay_budget_totals_decode_and_bytes() -> None:
    setup = two_size_setup()
    during = replay_budget(setup, "lru", 16, "global")
    assert during["budget_bytes"] == 16 and during["admission"] == "during-event"
    assert during["total"] == {
        "requests": 19,
        "hits": 4,
        "misses": 15,
        "hit_rate": 0.210526,
        "bytes_moved": 59,
    }
    assert during["decode"] == {
        "requests": 12,
        "hits": 4,
        "misses": 8,
        "hit_rate": 0.333333,
        "bytes_moved": 30,
    }
    assert [(r["layer"], r["misses"], r["bytes_moved"]) for r in during["layers"]] == [(0, 8, 24), (1, 7, 35)]
    after = replay_budget(setup, "lru", 16, "global", "after-event")
    assert after["total"]["hits"] == 5 and after["total"]["bytes_moved"] == 54
    assert after["decode"] == {
        "requests": 12,
        "hits": 5,
        "misses": 7,
        "hit_rate": 0.416667,
        "bytes_moved": 25,
    }


def _edge_stream() -> EventStream:
    # one event asking for b0..b3 (20 bytes), then one asking for b0 again
    return EventStream(
        ptr=np.array([0, 4, 5]),
        items=np.array([4, 5, 6, 7, 4]),
        step=np.array([0, 1]),
        layer_index=np.array([0, 0]),
        n_objects=8,
        n_layers=1,
        last_row_slot=np.arange(5),
    )


@pytest.mark.parametrize(("budget", "second"), [(19, 0), (20, 1)])
def test_an_event_streams_exactly_when_its_bytes_pass_the_budget(budget: int, second: int) -> None:
    obj_bytes = np.array([3, 3, 3, 3, 5, 5, 5, 5], dtype=np.int64)
    flags = pool_hits_bytes(_edge_stream(), kernels.LRU, obj_bytes, budget, "during-event", None)
    assert flags.tolist() == [0, 0, 0, 0, second]  # at 19 B b0 streamed through, at 20 B it stayed
    # after-event keeps the whole event, over budget, since nothing else can go
    after = pool_hits_bytes(_edge_stream(), kernels.LRU, obj_bytes, budget, "after-event", None)
    assert after.tolist() == [0, 0, 0, 0, 1]


def test_budget_edges_and_refusals() -> None:
    setup = two_size_setup()
    # global: the k = 2 experts of the largest size, 10 bytes, must fit; per-layer: an equal
    # share per MoE layer, so twice that
    assert replay_budget(setup, "lru", 10, "global")["total"]["requests"] == 19
    assert replay_budget(setup, "lru", 20, "per-layer")["total"]["requests"] == 19
    for budget, scope, share in ((9, "global", ""), (19, "per-layer", "(9 per MoE layer, split equally) ")):
        with pytest.raises(ConfigError, match=r"^budget \d+ bytes ") as err:
            replay_budget(setup, "lru", budget, scope)
        assert str(err.value) == (
            f"budget {budget} bytes {share}cannot hold the 2 experts of 5 bytes each token needs at a "
            f"layer; use a budget of at least {budget + 1} bytes"
        )
    # after-event lets an event overshoot, so any budget is defined: at 0 bytes the cache holds
    # only the last event's experts, always of the other layer here
    assert replay_budget(setup, "lru", 0, "global", "after-event")["total"]["misses"] == 19
    for sizes, what in ((None, "none are known"), ({0: 3}, "layer 1 has none")):
        bare = ReplaySetup(events=setup.events, k=2, expert_bytes=sizes)
        with pytest.raises(ConfigError, match=r"^a byte budget needs the bytes of one expert") as err:
            replay_budget(bare, "lru", 100, "global")
        assert str(err.value) == (
            f"a byte budget needs the bytes of one expert per MoE layer, and {what}: "
            "pass --expert-bytes N or --model GGUF (the trace's header records none)"
        )
    with pytest.raises(ConfigError, match=r"^admission must be one of during-event, after-event, got 'x'$"):
        replay_budget(setup, "lru", 100, "global", "x")


def test_cli_budget_parsing_at_its_limit_and_one_past() -> None:
    top = trace_cli.MAX_BUDGET_BYTES
    assert trace_cli._capacities_and_budgets(("8,1KiB", f"{top}B")) == ([8], [1024, top])
    with pytest.raises(ConfigError, match=r"^a byte budget must be at most ") as err:
        trace_cli._capacities_and_budgets((f"{top + 1}B",))
    assert str(err.value) == f"a byte budget must be at most {top} bytes, got {top + 1}B ({top + 1})"
    with pytest.raises(ConfigError, match=r"^capacity '4Gx' is neither") as err:
        trace_cli._capacities_and_budgets(("4Gx",))
    assert str(err.value).startswith("capacity '4Gx' is neither a whole number of experts nor a byte budget")


def test_cli_byte_budgets_text_json_and_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = two_size_trace()
    path = write_trace(tmp_path / "t.moetrace", trace.header, trace.rows)
    base = ("trace", "replay", str(path), "--policy", "lru,belady", "--scope", "global")
    text = run_cli(*base, "--capacity", "3,1KiB", "--expert-bytes", "100", check=True).stdout
    assert "scope global, admission during-event" in text
    assert [line.split()[:2] for line in text.splitlines()[2:]] == [
        ["lru", "3"],
        ["belady", "3"],
        ["lru", "1.00"],
        ["belady", "1.00"],  # one size everywhere: Belady is exact, no mark
    ]
    report = json.loads(
        run_cli(*base, "--capacity", "20B", "--expert-bytes", "5", "--json", check=True).stdout
    )
    assert [(r["policy"], r["budget_bytes"], r["admission"]) for r in report["results"]] == [
        ("lru", 20, "during-event"),
        ("belady", 20, "during-event"),
    ]
    # mixed sizes (the GGUF's or the trace header's): the row is marked and the bound printed
    trace_cli._table([replay_budget(two_size_setup(), p, 20, "global") for p in ("lru", "belady")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("belady*")
    bound = replay_budget(two_size_setup(), "belady", 20, "global")["belady"]["hit_bound"]
    assert lines[3] == (
        "* 20 B: furthest-next-use heuristic: expert sizes are mixed; no policy hits more than "
        f"{bound['hits']} (Belady at 6 experts of the smallest size)"
    )
    for args, message in (
        (("--capacity", "20B"), "error: a byte budget needs the bytes of one expert per MoE layer"),
        (("--capacity", "9B", "--expert-bytes", "5"), "error: budget 9 bytes cannot hold the 2 experts"),
        (
            ("--capacity", "1KiB", "--expert-bytes", "5", "--engine", "libcachesim"),
            "error: --engine libcachesim takes expert counts, not byte budgets",
        ),
    ):
        result = run_cli(*base, *args)
        assert result.returncode == 2
        assert result.stderr.startswith(message) and len(result.stderr.strip().splitlines()) == 1


SPEC = TraceSynthSpec(
    n_layers=3, n_experts=10, k=3, n_prompt=20, n_ubatch=8, n_decode=30, skew=0.8, correlation=0.4, seed=5
)


@pytest.mark.parametrize("admission", ["during-event", "after-event"])
@pytest.mark.parametrize("scope", ["per-layer", "global"])
@pytest.mark.parametrize("policy", kernels.POLICIES)
def test_one_size_everywhere_is_the_count_replay(policy: str, scope: str, admission: str) -> None:
    trace = synth_trace(SPEC)
    setup = ReplaySetup(
        events=trace_events(trace, row_order=True),
        k=3,
        expert_bytes=uniform_expert_bytes(trace.moe_layers, 7),
    )
    for capacity in (3, 4, 7, 10):
        budget = capacity * 7 * (3 if scope == "per-layer" else 1)
        counted = replay_one(setup, policy, capacity, scope, admission)
        budgeted = replay_budget(setup, policy, budget, scope, admission)
        assert budgeted["layers"] == counted["layers"], capacity
        assert budgeted["decode"] == counted["decode"], capacity


def test_furthest_next_use_is_not_optimal_with_mixed_sizes() -> None:
    # a (1 byte), then big X and Y (2 bytes each), budget 3 bytes: requests a a X Y X a.
    # At Y, Belady evicts a (next used last), which frees too little, then X as well; keeping
    # a and evicting only X would have hit a at the end. LFU does exactly that.
    items = np.array([0, 0, 1, 2, 1, 0])
    stream = EventStream(
        ptr=np.arange(7),
        items=items,
        step=np.arange(6),
        layer_index=np.zeros(6, dtype=np.int64),
        n_objects=3,
        n_layers=1,
    )
    sizes = np.array([1, 2, 2], dtype=np.int64)
    belady = pool_hits_bytes(stream, kernels.BELADY, sizes, 3, "during-event", None)
    lfu = pool_hits_bytes(stream, kernels.LFU, sizes, 3, "during-event", None)
    assert belady.tolist() == [0, 1, 0, 0, 0, 0]
    assert lfu.tolist() == [0, 1, 0, 0, 0, 1]


def test_mixed_sizes_label_belady_and_its_bound_holds() -> None:
    trace = synth_trace(SPEC)
    sizes = {0: 4, 1: 9, 2: 6}
    setup = ReplaySetup(events=trace_events(trace, row_order=True), k=3, expert_bytes=sizes)
    for budget in (27, 60, 100):
        belady = replay_budget(setup, "belady", budget, "global")
        note = belady["belady"]
        assert note["optimal"] is False and "heuristic" in note["meaning"]
        assert note["hit_bound"]["capacity"] == budget // 4
        for policy in kernels.POLICIES:
            assert (
                replay_budget(setup, policy, budget, "global")["total"]["hits"] <= note["hit_bound"]["hits"]
            )
    assert replay_budget(setup, "belady", 90, "per-layer")["belady"]["optimal"] is True
    assert replay_budget(setup, "belady", 90, "global", "after-event")["belady"]["hit_bound"] is None
    assert "belady" not in replay_budget(setup, "lru", 90, "global")


def reference_bytes(
    policy: str, stream: EventStream, sizes: list[int], budget: int, after: bool
) -> list[int]:
    """The byte semantics, stated plainly: O(residents) scans, no shared code with the kernel."""
    L = stream.n_layers
    events = [
        (int(stream.step[e]), int(stream.layer_index[e]), list(range(stream.ptr[e], stream.ptr[e + 1])))
        for e in range(stream.n_events)
    ]
    upcoming: dict[int, float] = {}
    next_event: dict[int, float] = {}
    for e in range(len(events) - 1, -1, -1):
        for i in events[e][2]:
            x = int(stream.items[i])
            next_event[i] = upcoming.get(x, float("inf"))
            upcoming[x] = e
    counts = np.bincount(stream.items, minlength=stream.n_objects)
    res: dict[int, dict] = {}
    decayed: dict[int, float] = {}

    def key(x: int, t: int) -> tuple:
        st = res[x]
        age = t - st["u"]
        return {
            "fifo": (st["ins"],),
            "lru": (st["last"],),
            "lfu": (st["freq"], st["last"]),
            "lfru": (decayed[x], st["last"]),
            "least-stale": (-(age // L), age % L, st["last"]),
            "static-hot": (counts[x], st["last"]),
            "belady": (-st["next"], st["ins"]),
        }[policy]

    def evict_until(room: int, pinned: set[int], t: int) -> None:
        while sum(sizes[y] for y in res) > room:
            free = [y for y in res if y not in pinned]
            if not free:
                return
            del res[min(free, key=lambda y: key(y, t))]

    out = [0] * stream.n_requests
    for step, lidx, idx in events:
        t = step * L + lidx
        for i in idx:
            out[i] = 1 if int(stream.items[i]) in res else 0
        keep = idx
        if not after:
            kept: list[int] = []
            for i in reversed(idx):
                if sum(sizes[int(stream.items[j])] for j in kept) + sizes[int(stream.items[i])] > budget:
                    break
                kept.append(i)
            keep = sorted(kept)
            if len(keep) < len(idx):
                mine = {int(stream.items[i]) for i in keep}
                for x in [x for x in res if x not in mine]:
                    del res[x]
        pinned = {int(stream.items[i]) for i in keep}
        for i in keep:
            x = int(stream.items[i])
            tick = int(stream.last_row_slot[i]) + 1 if after else i + 1
            if x not in res:
                if not after:
                    evict_until(budget - sizes[x], pinned, t)
                res[x] = {"ins": tick, "freq": 0}
            st = res[x]
            st["last"], st["u"], st["freq"], st["next"] = tick, t, st["freq"] + 1, next_event[i]
            now = step / kernels.LFRU_HALF_LIFE_STEPS
            decayed[x] = float(np.log2(np.exp2(decayed.get(x, -np.inf) - now) + 1.0) + now)
        if after:
            evict_until(budget, pinned, t)
    return out


@pytest.mark.parametrize("admission", ["during-event", "after-event"])
@pytest.mark.parametrize("policy", kernels.POLICIES)
def test_kernel_matches_the_plain_statement_with_mixed_sizes(policy: str, admission: str) -> None:
    events = trace_events(synth_trace(SPEC), row_order=True)
    stream = events.stream
    layer_sizes = [4, 9, 6]
    sizes = [layer_sizes[x // 10] for x in range(stream.n_objects)]
    obj_bytes = np.array(sizes, dtype=np.int64)
    counts = np.bincount(stream.items, minlength=stream.n_objects).astype(np.float64)
    code = kernels.CODES[policy]
    for budget in (27, 35, 52, 90, 300):
        ours = pool_hits_bytes(stream, code, obj_bytes, budget, admission, counts).tolist()
        assert ours == reference_bytes(policy, stream, sizes, budget, admission == "after-event"), budget
