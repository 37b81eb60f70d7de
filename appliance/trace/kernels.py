"""Compiled expert-cache replay: one pool, one policy, one capacity, exact MoE event semantics.

Semantics (the same for every policy, and the ones the Belady bound is optimal for):

- An event is one (step, MoE layer): the distinct experts its tokens were routed to, processed
  in ascending object id. The experts resident when the event starts are its hits; every
  other expert of the event is a miss and is loaded (demand paging: an expert must be resident
  to be computed, so a miss always moves one expert's bytes).
- While an event is processed its experts are pinned: a miss evicts the policy's choice among
  resident experts that are not part of the same event.
- An event larger than the capacity (a prefill micro-batch touching more experts than fit)
  cannot be resident at once: its experts stream through in ascending id and the cache ends
  the event holding exactly its `capacity` highest ids. Hits are still the experts resident
  at the event's start. This rule is the same for every policy.
- Each touch (hit or load) takes the next value of a counter `tick`, so recency is total:
  within an event, lower ids count as touched earlier. Every policy breaks ties by a unique
  secondary key stated below, so a replay is a pure function of its inputs.

Policies (victim = smallest key among unpinned residents):

- FIFO: insertion tick; hits do not refresh.
- LRU: tick of the last touch.
- LFU: (touches since this residency began, last tick): in-cache frequency, LRU among equals.
- LFRU: (decayed touch count, last tick). The count is a combined recency-frequency value
  (LRFU family): every touch adds 1 and the sum halves every `LFRU_HALF_LIFE_STEPS` trace
  steps; unlike LFU the count survives eviction, so history outlives a residency.
- Least-Stale (after SpecMD, arXiv 2602.03921): MoE layers are visited in a fixed cycle, one
  visit per step. An expert's staleness is the number of visits of its own layer that passed
  since it was last used (0 when it was used at its layer's latest visit, whether that was
  this step or the previous one). The victim is the most stale expert; among equally stale
  ones, the one whose layer is visited again furthest in the future (the layer just passed);
  then the earliest touch. Difference from LRU: LRU ranks by global time of last use, so in
  a shared (global) pool it evicts the previous token's experts of the layers still ahead --
  exactly the ones the next layer visits are likely to re-use (a "collision" miss) -- while
  keeping the current token's experts of layers already passed, which cannot be needed
  before the next step. Least-Stale treats both as fresh and evicts the already-passed ones.
  With one pool per layer (per-layer scope) staleness is steps since last use and the two
  policies coincide exactly.
- static-hot: (calibration count of the expert, last tick): the experts most often routed in a
  calibration trace stay, the rest come and go in LRU order. It is demand-paged like the
  others (no preloading), so Belady remains its bound.
- Belady (MIN): (-next event that requests the expert, object id): evict the expert needed
  furthest in the future; experts never needed again first, lowest id first.

Byte budgets (`simulate_bytes`): every object costs its own bytes (the expert size of its
layer) and the cache holds at most `budget` bytes. The policies and their keys are the ones
above, with two event models:

- `during-event` (the default, as above): a miss evicts victims in key order among unpinned
  residents until its bytes fit. An event whose bytes exceed the budget streams through: the
  cache ends it holding the longest run of its highest ids whose bytes fit (at one size for
  every object, exactly the count rule's `capacity` highest ids).
- `after-event` (the published replay of route_trace v1 files, docs/sweeps.md): every miss of
  an event is admitted at once, and only after the event are victims evicted, in key order
  among residents the event did not touch, until the cache fits the budget again (or nothing
  evictable is left: the cache may then end an event over budget).

A touch's tick is, for `during-event`, the request's position in the pool's requests plus
one (ascending id within an event, as above: no per-request array is passed); for
`after-event`, the caller's `touch` value of the request, the position of its last occurrence
in the event's rows (token-major, slot order), where a repeated expert is looked up once
and its later occurrences only refresh it. FIFO's key is the tick at admission; Belady's tie
among equally distant next uses is the earlier admission. With one size for every object and
`budget = capacity x size`, `during-event` gives exactly `simulate`'s hits (ties in Belady
are then between interchangeable objects). With mixed sizes furthest-next-use is a heuristic,
not the optimum (docs/sweeps.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from appliance.core.paths import cache_dir
from appliance.trace.names import POLICIES

# Work up to this many requests runs as plain Python: importing numba and loading even cached
# machine code costs more than a small trace's whole replay. Above it, every kernel is
# compiled once per process (loaded from the on-disk cache after the first time).
COMPILE_ABOVE_REQUESTS = 20_000
_KERNELS: list[tuple[Callable[..., Any], dict[str, Any]]] = []
_compiled = False


def kernel(**options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a function as a kernel, compiled by `compile_kernels` with these numba options."""

    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        _KERNELS.append((func, options))
        return func

    return mark


def compile_kernels() -> None:
    """Replace every kernel of this module by its numba version, cached on disk under the
    appliance cache (so a read-only package works too); NUMBA_CACHE_DIR still wins."""
    global _compiled
    if _compiled:
        return
    from numba import njit
    from numba.core import config

    if not getattr(config, "CACHE_DIR", ""):
        config.CACHE_DIR = str(cache_dir() / "numba")  # type: ignore[attr-defined]
    namespace = globals()
    for func, options in _KERNELS:
        namespace[func.__name__] = njit(cache=True, **options)(func)
    _compiled = True


def cache_stats() -> dict[str, tuple[int, int]]:
    """(cache hits, cache misses) of every compiled kernel that ran in this process."""
    namespace = globals()
    stats = {}
    for func, _ in _KERNELS:
        compiled = namespace[func.__name__]
        if _compiled and compiled.stats.cache_path:
            hits = sum(compiled.stats.cache_hits.values())
            misses = sum(compiled.stats.cache_misses.values())
            if hits or misses:
                stats[func.__name__] = (hits, misses)
    return stats


def _prepare(n_requests: int) -> None:
    if n_requests > COMPILE_ABOVE_REQUESTS:
        compile_kernels()


CODES = {name: code for code, name in enumerate(POLICIES)}
FIFO, LRU, LFU, LFRU, LEAST_STALE, STATIC_HOT, BELADY = range(7)
LFRU_HALF_LIFE_STEPS = 8.0
NEVER = np.iinfo(np.int64).max // 4


NEVER32 = np.iinfo(np.int32).max


def next_use_type(ptr: np.ndarray) -> tuple[type[np.signedinteger[Any]], int]:
    """The next-use index type of the events that ptr delimits, and its past-every-event value:
    int32 and NEVER32 when every event index and NEVER32 itself fit 32 bits (4 bytes a
    request), else int64 and NEVER."""
    if ptr.shape[0] - 1 < NEVER32:
        return np.int32, NEVER32
    return np.int64, NEVER


def next_use_events(ptr: np.ndarray, items: np.ndarray, n_obj: int) -> np.ndarray:
    """For each request, the index of the next event requesting the same object, or past every
    event (next_use_type). Only the order of next uses matters to a policy, so both types
    replay alike."""
    _prepare(items.shape[0])
    index_type, never = next_use_type(ptr)
    return _next_use_events(ptr, items, n_obj, np.empty(items.shape[0], dtype=index_type), never)


@kernel()
def _next_use_events(
    ptr: np.ndarray, items: np.ndarray, n_obj: int, out: np.ndarray, never: int
) -> np.ndarray:
    n_events = ptr.shape[0] - 1
    upcoming = np.full(n_obj, never, dtype=np.int64)
    for e in range(n_events - 1, -1, -1):
        for i in range(ptr[e], ptr[e + 1]):
            x = items[i]
            out[i] = upcoming[x]
            upcoming[x] = e
    return out


# ---- list (recency/insertion order) helpers: sentinel s = n_obj; nxt[s] newest, prv[s] oldest


@kernel(inline="always")
def _unlink(prv: np.ndarray, nxt: np.ndarray, x: int) -> None:
    p = prv[x]
    n = nxt[x]
    nxt[p] = n
    prv[n] = p


@kernel(inline="always")
def _push_newest(prv: np.ndarray, nxt: np.ndarray, s: int, x: int) -> None:
    first = nxt[s]
    nxt[x] = first
    prv[x] = s
    prv[first] = x
    nxt[s] = x


# ---- indexed binary min-heap; entries keep their keys inline (hk1, hk2) for locality


@kernel()
def _sift_up(hk1: np.ndarray, hk2: np.ndarray, hobj: np.ndarray, where: np.ndarray, i: int) -> None:
    k1 = hk1[i]
    k2 = hk2[i]
    x = hobj[i]
    while i > 0:
        p = (i - 1) >> 1
        if k1 < hk1[p] or (k1 == hk1[p] and k2 < hk2[p]):
            hk1[i] = hk1[p]
            hk2[i] = hk2[p]
            hobj[i] = hobj[p]
            where[hobj[i]] = i
            i = p
        else:
            break
    hk1[i] = k1
    hk2[i] = k2
    hobj[i] = x
    where[x] = i


@kernel()
def _sift_down(
    hk1: np.ndarray, hk2: np.ndarray, hobj: np.ndarray, where: np.ndarray, i: int, size: int
) -> None:
    k1 = hk1[i]
    k2 = hk2[i]
    x = hobj[i]
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        d = c + 1
        if d < size and (hk1[d] < hk1[c] or (hk1[d] == hk1[c] and hk2[d] < hk2[c])):
            c = d
        if hk1[c] < k1 or (hk1[c] == k1 and hk2[c] < k2):
            hk1[i] = hk1[c]
            hk2[i] = hk2[c]
            hobj[i] = hobj[c]
            where[hobj[i]] = i
            i = c
        else:
            break
    hk1[i] = k1
    hk2[i] = k2
    hobj[i] = x
    where[x] = i


@kernel()
def _heap_remove(
    hk1: np.ndarray, hk2: np.ndarray, hobj: np.ndarray, where: np.ndarray, x: int, size: int
) -> int:
    """Remove x; return the new size."""
    i = where[x]
    where[x] = -1
    size -= 1
    if i != size:
        hk1[i] = hk1[size]
        hk2[i] = hk2[size]
        hobj[i] = hobj[size]
        where[hobj[i]] = i
        last = hobj[i]
        _sift_down(hk1, hk2, hobj, where, i, size)
        _sift_up(hk1, hk2, hobj, where, where[last])
    return size


@kernel()
def _heap_set(
    hk1: np.ndarray,
    hk2: np.ndarray,
    hobj: np.ndarray,
    where: np.ndarray,
    x: int,
    k1: float,
    k2: int,
    size: int,
) -> int:
    """Insert x or change its key; return the new size."""
    i = where[x]
    if i < 0:
        i = size
        size += 1
        hobj[i] = x
    hk1[i] = k1
    hk2[i] = k2
    _sift_down(hk1, hk2, hobj, where, i, size)
    _sift_up(hk1, hk2, hobj, where, where[x])
    return size


@kernel()
def _heap_state(
    n_obj: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An empty indexed heap for n_obj objects (objects, keys, tie keys, positions) and a stash
    of the same size (objects and both keys) for entries taken out and put back."""
    return (
        np.zeros(n_obj, dtype=np.int64),
        np.zeros(n_obj, dtype=np.float64),
        np.zeros(n_obj, dtype=np.int64),
        np.full(n_obj, -1, dtype=np.int64),
        np.zeros(n_obj, dtype=np.int64),
        np.zeros(n_obj, dtype=np.float64),
        np.zeros(n_obj, dtype=np.int64),
    )


class EventPool(Protocol):
    """One pool's events in CSR form (`appliance.trace.events.EventStream` is one): event i's
    requests are items[ptr[i]:ptr[i + 1]], object ids (layer index) * experts + expert; each
    event's step and layer (an index into the pool's n_layers)."""

    @property
    def ptr(self) -> np.ndarray: ...
    @property
    def items(self) -> np.ndarray: ...
    @property
    def step(self) -> np.ndarray: ...
    @property
    def layer_index(self) -> np.ndarray: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def n_objects(self) -> int: ...


def simulate(
    code: int, pool: EventPool, capacity: int, static_count: np.ndarray, next_use: np.ndarray
) -> np.ndarray:
    """Replay one pool; return 1 for every request that hit, 0 for a miss (see module doc)."""
    ptr, items, n_obj = pool.ptr, pool.items, pool.n_objects
    _prepare(items.shape[0])
    if code in (FIFO, LRU, LEAST_STALE):
        return _simulate_list(code, ptr, items, pool.step, pool.layer_index, pool.n_layers, n_obj, capacity)
    if code == BELADY:
        return _simulate_belady(ptr, items, n_obj, capacity, next_use)
    return _simulate_heap(code, ptr, items, pool.step, n_obj, capacity, static_count)


@kernel(inline="always")
def _mark_hits_and_pins(
    ptr: np.ndarray,
    items: np.ndarray,
    e: int,
    capacity: int,
    resident: np.ndarray,
    hits: np.ndarray,
    pin: np.ndarray,
) -> int:
    """Record the event's hits, pin what it keeps; return the first item it keeps."""
    a = ptr[e]
    b = ptr[e + 1]
    for i in range(a, b):
        hits[i] = resident[items[i]]
    first = b - capacity if b - a > capacity else a
    for i in range(first, b):
        pin[items[i]] = e
    return first


@kernel()
def _simulate_list(
    code: int,
    ptr: np.ndarray,
    items: np.ndarray,
    ev_step: np.ndarray,
    ev_layer: np.ndarray,
    n_layers: int,
    n_obj: int,
    capacity: int,
) -> np.ndarray:
    """FIFO, LRU and Least-Stale over one doubly linked list (oldest at prv[s])."""
    n_events = ptr.shape[0] - 1
    hits = np.zeros(items.shape[0], dtype=np.uint8)
    resident = np.zeros(n_obj, dtype=np.uint8)
    pin = np.full(n_obj, -1, dtype=np.int64)
    s = n_obj
    prv = np.full(n_obj + 1, s, dtype=np.int64)
    nxt = np.full(n_obj + 1, s, dtype=np.int64)
    touched = np.zeros(n_obj, dtype=np.int64)  # layer-time of the last touch
    refresh = code != FIFO
    stale = code == LEAST_STALE
    n_res = 0
    for e in range(n_events):
        t_layer = ev_step[e] * n_layers + ev_layer[e] if stale else 0
        if ptr[e + 1] - ptr[e] == 1:
            # Single-expert event (decode with k = 1, flattened streams): nothing to pin.
            i = ptr[e]
            x = items[i]
            if resident[x]:
                hits[i] = 1
                if refresh:
                    _unlink(prv, nxt, x)
                    _push_newest(prv, nxt, s, x)
                    touched[x] = t_layer
                continue
            if n_res == capacity and not stale:
                victim = prv[s]
                _unlink(prv, nxt, victim)
                resident[victim] = 0
                n_res -= 1
                resident[x] = 1
                n_res += 1
                _push_newest(prv, nxt, s, x)
                continue
        first = _mark_hits_and_pins(ptr, items, e, capacity, resident, hits, pin)
        if first != ptr[e]:
            # Oversized event: keep exactly its `capacity` highest ids, evict everything else.
            x = prv[s]
            while x != s:
                y = prv[x]
                if pin[x] != e:
                    _unlink(prv, nxt, x)
                    resident[x] = 0
                    n_res -= 1
                x = y
        for i in range(first, ptr[e + 1]):
            x = items[i]
            if resident[x]:
                if refresh:
                    _unlink(prv, nxt, x)
                    _push_newest(prv, nxt, s, x)
                    touched[x] = t_layer
                continue
            if n_res == capacity:
                victim = prv[s]
                while pin[victim] == e:
                    victim = prv[victim]
                if stale:
                    # most stale first, then the layer visited again last, then earliest touch
                    y = victim
                    bound = t_layer - n_layers * ((t_layer - touched[y]) // n_layers)
                    while y != s:
                        if pin[y] != e:
                            if touched[y] > bound:
                                break
                            if touched[y] > touched[victim]:
                                victim = y
                        y = prv[y]
                _unlink(prv, nxt, victim)
                resident[victim] = 0
                n_res -= 1
            resident[x] = 1
            n_res += 1
            _push_newest(prv, nxt, s, x)
            touched[x] = t_layer
    return hits


@kernel()
def _evict_unpinned(
    hk1: np.ndarray,
    hk2: np.ndarray,
    hobj: np.ndarray,
    where: np.ndarray,
    size: int,
    pin: np.ndarray,
    e: int,
    resident: np.ndarray,
    stash: np.ndarray,
) -> tuple[int, int]:
    """Evict every resident that event e does not pin; return (heap size, n): the victims are
    stash[:n]."""
    n_vict = 0
    for j in range(size):
        if pin[hobj[j]] != e:
            stash[n_vict] = hobj[j]
            n_vict += 1
    for j in range(n_vict):
        size = _heap_remove(hk1, hk2, hobj, where, stash[j], size)
        resident[stash[j]] = 0
    return size, n_vict


@kernel()
def _simulate_heap(
    code: int,
    ptr: np.ndarray,
    items: np.ndarray,
    ev_step: np.ndarray,
    n_obj: int,
    capacity: int,
    static_count: np.ndarray,
) -> np.ndarray:
    """LFU, LFRU and static-hot over an indexed min-heap of (key, tie) pairs."""
    n_events = ptr.shape[0] - 1
    hits = np.zeros(items.shape[0], dtype=np.uint8)
    resident = np.zeros(n_obj, dtype=np.uint8)
    pin = np.full(n_obj, -1, dtype=np.int64)
    hobj, hk1, hk2, where, stash, stash_k1, stash_k2 = _heap_state(n_obj)
    freq = np.zeros(n_obj, dtype=np.int64)
    decayed = np.full(n_obj, -np.inf, dtype=np.float64)  # log2 count + step / half-life
    size = 0
    tick = 0
    for e in range(n_events):
        first = ptr[e]
        if ptr[e + 1] - first == 1:
            # Single-expert event: no other expert of it to protect, so no pins are needed.
            hits[first] = resident[items[first]]
        else:
            first = _mark_hits_and_pins(ptr, items, e, capacity, resident, hits, pin)
        if first != ptr[e]:
            # Oversized event: keep exactly its `capacity` highest ids, evict everything else.
            size, _ = _evict_unpinned(hk1, hk2, hobj, where, size, pin, e, resident, stash)
        for i in range(first, ptr[e + 1]):
            x = items[i]
            tick += 1
            if not resident[x]:
                if size == capacity:
                    n_stash = 0
                    while True:
                        y = hobj[0]
                        stash_k1[n_stash] = hk1[0]
                        stash_k2[n_stash] = hk2[0]
                        size = _heap_remove(hk1, hk2, hobj, where, y, size)
                        if pin[y] != e:
                            resident[y] = 0
                            break
                        stash[n_stash] = y
                        n_stash += 1
                    for j in range(n_stash):
                        size = _heap_set(hk1, hk2, hobj, where, stash[j], stash_k1[j], stash_k2[j], size)
                resident[x] = 1
                freq[x] = 0
            if code == LFU:
                freq[x] += 1
                size = _heap_set(hk1, hk2, hobj, where, x, float(freq[x]), tick, size)
            elif code == LFRU:
                now = ev_step[e] / LFRU_HALF_LIFE_STEPS
                decayed[x] = np.log2(np.exp2(decayed[x] - now) + 1.0) + now
                size = _heap_set(hk1, hk2, hobj, where, x, decayed[x], tick, size)
            else:  # STATIC_HOT
                size = _heap_set(hk1, hk2, hobj, where, x, static_count[x], tick, size)
    return hits


# ---- Belady's heap: a 4-ary min-heap of one int64 key per entry, (furthest - next use) *
# n_obj + id, so the smallest key is the expert needed furthest in the future, lowest id
# first: the module doc's (-next event, object id) order, every next use past the trace (NEVER)
# counted as the same furthest one. A request's next use lies after its event, so a touch only
# lowers its key: it sifts up, never down.


@kernel(inline="always")
def _key_sift_up(hkey: np.ndarray, hobj: np.ndarray, where: np.ndarray, i: int) -> None:
    key = hkey[i]
    x = hobj[i]
    while i > 0:
        p = (i - 1) >> 2
        if key >= hkey[p]:
            break
        hkey[i] = hkey[p]
        hobj[i] = hobj[p]
        where[hobj[i]] = i
        i = p
    hkey[i] = key
    hobj[i] = x
    where[x] = i


@kernel(inline="always")
def _key_pop(hkey: np.ndarray, hobj: np.ndarray, where: np.ndarray, size: int) -> int:
    """Remove the root; return the new size."""
    where[hobj[0]] = -1
    size -= 1
    if size == 0:
        return 0
    key = hkey[size]
    x = hobj[size]
    i = 0
    while True:
        c = 4 * i + 1
        if c >= size:
            break
        for d in range(c + 1, min(c + 4, size)):
            if hkey[d] < hkey[c]:
                c = d
        if hkey[c] >= key:
            break
        hkey[i] = hkey[c]
        hobj[i] = hobj[c]
        where[hobj[i]] = i
        i = c
    hkey[i] = key
    hobj[i] = x
    where[x] = i
    return size


@kernel()
def _simulate_belady(
    ptr: np.ndarray, items: np.ndarray, n_obj: int, capacity: int, next_use: np.ndarray
) -> np.ndarray:
    """Belady with `_simulate_heap`'s events and pins (a victim is the smallest key among
    unpinned residents), on the single-key heap above."""
    n_events = ptr.shape[0] - 1
    hits = np.zeros(items.shape[0], dtype=np.uint8)
    resident = np.zeros(n_obj, dtype=np.uint8)
    pin = np.full(n_obj, -1, dtype=np.int64)
    hkey = np.zeros(n_obj, dtype=np.int64)
    hobj = np.zeros(n_obj, dtype=np.int64)
    where = np.full(n_obj, -1, dtype=np.int64)
    stash_key = np.zeros(n_obj, dtype=np.int64)
    stash_obj = np.zeros(n_obj, dtype=np.int64)
    size = 0
    for e in range(n_events):
        first = ptr[e]
        if ptr[e + 1] - first == 1:
            hits[first] = resident[items[first]]
        else:
            first = _mark_hits_and_pins(ptr, items, e, capacity, resident, hits, pin)
        if first != ptr[e]:
            # Oversized event: keep exactly its `capacity` highest ids, evict everything else.
            kept = 0
            for j in range(size):
                if pin[hobj[j]] == e:
                    stash_obj[kept] = hobj[j]
                    stash_key[kept] = hkey[j]
                    kept += 1
                else:
                    resident[hobj[j]] = 0
                    where[hobj[j]] = -1
            size = 0
            for j in range(kept):
                hkey[size] = stash_key[j]
                hobj[size] = stash_obj[j]
                where[stash_obj[j]] = size
                _key_sift_up(hkey, hobj, where, size)
                size += 1
        for i in range(first, ptr[e + 1]):
            x = items[i]
            if not resident[x]:
                if size == capacity:
                    n_stash = 0
                    while pin[hobj[0]] == e:
                        stash_key[n_stash] = hkey[0]
                        stash_obj[n_stash] = hobj[0]
                        n_stash += 1
                        size = _key_pop(hkey, hobj, where, size)
                    resident[hobj[0]] = 0
                    size = _key_pop(hkey, hobj, where, size)
                    for j in range(n_stash):
                        hkey[size] = stash_key[j]
                        hobj[size] = stash_obj[j]
                        _key_sift_up(hkey, hobj, where, size)
                        size += 1
                resident[x] = 1
                hobj[size] = x
                where[x] = size
                size += 1
            nu = next_use[i]
            if nu > n_events:
                nu = n_events
            hkey[where[x]] = (n_events - nu) * n_obj + x
            _key_sift_up(hkey, hobj, where, where[x])
    return hits


def layer_tally(ptr: np.ndarray, hits: np.ndarray, *rest: Any) -> np.ndarray:
    """Per layer index (columns): requests, hits, decode requests, decode hits (rows), from a
    pool's per-request hit flags. `rest` is what `_layer_tally` takes after `hits`: the events'
    layer indices and steps, each step's kind, the decode kind, the number of layers; a step
    is a decode step when its kind is the decode kind (none is when the kinds are empty)."""
    _prepare(hits.shape[0])
    return _layer_tally(ptr, hits, *rest)


@kernel()
def _layer_tally(
    ptr: np.ndarray,
    hits: np.ndarray,
    ev_layer: np.ndarray,
    ev_step: np.ndarray,
    step_kind: np.ndarray,
    decode_kind: int,
    n_layers: int,
) -> np.ndarray:
    out = np.zeros((4, n_layers), dtype=np.int64)
    known = step_kind.shape[0] > 0
    for e in range(ptr.shape[0] - 1):
        j = ev_layer[e]
        n = ptr[e + 1] - ptr[e]
        h = 0
        for i in range(ptr[e], ptr[e + 1]):
            h += hits[i]
        out[0, j] += n
        out[1, j] += h
        if known and step_kind[ev_step[e]] == decode_kind:
            out[2, j] += n
            out[3, j] += h
    return out


def lru_depths(ptr: np.ndarray, items: np.ndarray, n_obj: int) -> np.ndarray:
    """Mattson stack distance of every request under the event semantics (0 = first touch).

    Before an event, a request's depth is its object's position in the LRU stack (1 = most
    recent); then the event's objects move to the top in ascending id. A request hits at
    capacity C exactly when 1 <= depth <= C; this equals `simulate(LRU, ...)` at every C,
    oversized events included, so one pass gives the whole LRU curve.
    """
    _prepare(items.shape[0])
    return _lru_depths(ptr, items, n_obj)


@kernel()
def _lru_depths(ptr: np.ndarray, items: np.ndarray, n_obj: int) -> np.ndarray:
    n = items.shape[0]
    tree = np.zeros(n + 1, dtype=np.int64)  # Fenwick tree over ticks 1..n: 1 = some last touch
    last = np.zeros(n_obj, dtype=np.int64)  # tick of the last touch, 0 = never
    depths = np.zeros(n, dtype=np.int32)
    marked = 0
    n_events = ptr.shape[0] - 1
    for e in range(n_events):
        for i in range(ptr[e], ptr[e + 1]):
            t = last[items[i]]
            if t == 0:
                continue
            upto = 0  # last touches at or before t
            j = t
            while j > 0:
                upto += tree[j]
                j -= j & (-j)
            depths[i] = marked - upto + 1
        for i in range(ptr[e], ptr[e + 1]):
            x = items[i]
            t = last[x]
            if t != 0:
                j = t
                while j <= n:
                    tree[j] -= 1
                    j += j & (-j)
                marked -= 1
            t = i + 1
            last[x] = t
            j = t
            while j <= n:
                tree[j] += 1
                j += j & (-j)
            marked += 1
    return depths


def simulate_bytes(code: int, ptr: np.ndarray, items: np.ndarray, *rest: Any) -> np.ndarray:
    """Replay one pool under a byte budget; 1 for every request that hit (see module doc).
    `rest` is what `_simulate_bytes` takes after `items`: touch (after-event ticks, read only
    under after-event), event steps, event layers,
    number of layers, bytes per object, budget, after-event, static counts, next uses."""
    _prepare(items.shape[0])
    return _simulate_bytes(code, ptr, items, *rest)


@kernel()
def _stale_victim(
    prv: np.ndarray, s: int, pin: np.ndarray, e: int, used_at: np.ndarray, t_layer: int, n_layers: int
) -> int:
    """Least-Stale's victim among unpinned residents (-1 if none): most stale, then the layer
    visited again last, then the earliest touch. The list runs oldest touch first (prv[s]),
    and layer-times of last use never decrease along it, so the most stale experts are a run
    at its old end."""
    victim = prv[s]
    while victim != s and pin[victim] == e:
        victim = prv[victim]
    if victim == s:
        return -1
    bound = t_layer - n_layers * ((t_layer - used_at[victim]) // n_layers)
    y = prv[victim]
    while y != s:
        if pin[y] != e:
            if used_at[y] > bound:
                break
            if used_at[y] > used_at[victim]:
                victim = y
        y = prv[y]
    return victim


@kernel()
def _heap_victim(
    hk1: np.ndarray,
    hk2: np.ndarray,
    hobj: np.ndarray,
    where: np.ndarray,
    size: int,
    pin: np.ndarray,
    e: int,
    stash: np.ndarray,
    stash_k1: np.ndarray,
    stash_k2: np.ndarray,
) -> int:
    """The unpinned resident with the smallest key (-1 if none); the heap is left unchanged."""
    n_stash = 0
    victim = -1
    while size > 0:
        y = hobj[0]
        stash[n_stash] = y
        stash_k1[n_stash] = hk1[0]
        stash_k2[n_stash] = hk2[0]
        n_stash += 1
        size = _heap_remove(hk1, hk2, hobj, where, y, size)
        if pin[y] != e:
            victim = y
            break
    for j in range(n_stash):
        size = _heap_set(hk1, hk2, hobj, where, stash[j], stash_k1[j], stash_k2[j], size)
    return victim


@kernel()
def _simulate_bytes(
    code: int,
    ptr: np.ndarray,
    items: np.ndarray,
    touch: np.ndarray,
    ev_step: np.ndarray,
    ev_layer: np.ndarray,
    n_layers: int,
    obj_bytes: np.ndarray,
    budget: int,
    after_event: bool,
    static_count: np.ndarray,
    next_use: np.ndarray,
) -> np.ndarray:
    """Every policy under a byte budget: residents in an indexed min-heap of their keys
    (Least-Stale, whose key moves with time, picks from a list in touch order instead)."""
    n_obj = obj_bytes.shape[0]
    n_events = ptr.shape[0] - 1
    hits = np.zeros(items.shape[0], dtype=np.uint8)
    resident = np.zeros(n_obj, dtype=np.uint8)
    pin = np.full(n_obj, -1, dtype=np.int64)
    hobj, hk1, hk2, where, stash, stash_k1, stash_k2 = _heap_state(n_obj)
    freq = np.zeros(n_obj, dtype=np.int64)
    admitted = np.zeros(n_obj, dtype=np.int64)
    used_at = np.zeros(n_obj, dtype=np.int64)  # layer-time of the last touch (Least-Stale)
    decayed = np.full(n_obj, -np.inf, dtype=np.float64)  # log2 count + step / half-life
    stale = code == LEAST_STALE
    s = n_obj  # Least-Stale's list of residents in touch order (sentinel s, oldest at prv[s])
    prv = np.full(n_obj + 1, s, dtype=np.int64)
    nxt = np.full(n_obj + 1, s, dtype=np.int64)
    size = 0
    used = 0
    for e in range(n_events):
        a = ptr[e]
        b = ptr[e + 1]
        t_layer = ev_step[e] * n_layers + ev_layer[e]
        for i in range(a, b):
            hits[i] = resident[items[i]]
        first = a
        if not after_event:
            # the longest run of the highest ids whose bytes fit; the rest stream through
            kept = 0
            first = b
            while first > a and kept + obj_bytes[items[first - 1]] <= budget:
                first -= 1
                kept += obj_bytes[items[first]]
        for i in range(a if after_event else first, b):
            pin[items[i]] = e
        if first != a:
            size, n_vict = _evict_unpinned(hk1, hk2, hobj, where, size, pin, e, resident, stash)
            for j in range(n_vict):
                used -= obj_bytes[stash[j]]
                if stale:
                    _unlink(prv, nxt, stash[j])
        # touch order (after-event ticks need not follow the ids; no eviction happens inside)
        order = np.argsort(touch[first:b]) + first if after_event else np.arange(first, b)
        for i in order:
            x = items[i]
            tick = touch[i] if after_event else i + 1
            if not resident[x]:
                if not after_event:
                    while used + obj_bytes[x] > budget:
                        if stale:
                            y = _stale_victim(prv, s, pin, e, used_at, t_layer, n_layers)
                            _unlink(prv, nxt, y)
                        else:
                            y = _heap_victim(hk1, hk2, hobj, where, size, pin, e, stash, stash_k1, stash_k2)
                        size = _heap_remove(hk1, hk2, hobj, where, y, size)
                        resident[y] = 0
                        used -= obj_bytes[y]
                resident[x] = 1
                used += obj_bytes[x]
                admitted[x] = tick
                freq[x] = 0
            elif stale:
                _unlink(prv, nxt, x)
            if stale:
                _push_newest(prv, nxt, s, x)
            freq[x] += 1
            used_at[x] = t_layer
            if code == FIFO:
                k1 = float(admitted[x])
                k2 = x
            elif code in (LRU, LEAST_STALE):
                k1 = float(tick)
                k2 = x
            elif code == LFU:
                k1 = float(freq[x])
                k2 = tick
            elif code == LFRU:
                now = ev_step[e] / LFRU_HALF_LIFE_STEPS
                decayed[x] = np.log2(np.exp2(decayed[x] - now) + 1.0) + now
                k1 = decayed[x]
                k2 = tick
            elif code == STATIC_HOT:
                k1 = float(static_count[x])
                k2 = tick
            else:  # BELADY
                k1 = -float(next_use[i])
                k2 = admitted[x]
            size = _heap_set(hk1, hk2, hobj, where, x, k1, k2, size)
        if after_event:
            while used > budget:
                if stale:
                    y = _stale_victim(prv, s, pin, e, used_at, t_layer, n_layers)
                else:
                    y = _heap_victim(hk1, hk2, hobj, where, size, pin, e, stash, stash_k1, stash_k2)
                if y < 0:
                    break
                if stale:
                    _unlink(prv, nxt, y)
                size = _heap_remove(hk1, hk2, hobj, where, y, size)
                resident[y] = 0
                used -= obj_bytes[y]
    return hits
