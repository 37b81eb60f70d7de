"""Run readers' harnesses through the worker pool and count what happened to each case."""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fuzz.pool import ACCEPTED, CRASH, FOREIGN, HANG, REFUSED, Outcome, Pool, classify
from fuzz.readers import READERS, Reader, workdir

# numpy's BLAS threads and glibc's per-thread arenas would take address space under RLIMIT_AS
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MALLOC_ARENA_MAX", "2")

MAX_SAVED = 20  # failing inputs kept per reader
PROGRESS_EVERY = 10_000


@dataclass
class Tally:
    reader: str
    cases: int = 0
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((REFUSED, ACCEPTED, FOREIGN, HANG, CRASH), 0)
    )
    peak_rss: int = 0
    seconds: float = 0.0
    failures: list[Outcome] = field(default_factory=list)

    @property
    def bad(self) -> int:
        return self.counts[FOREIGN] + self.counts[HANG] + self.counts[CRASH]


def case_stream(reader: Reader, seed: int, count: int) -> Iterator[tuple[int, bytes]]:
    """Case i depends only on (seed, i): a failure is reproduced from its index."""
    for index in range(count):
        rng = random.Random(f"{reader.name}:{seed}:{index}")
        yield index, reader.mutate(rng, rng.choice(reader.seeds))


def make_case(reader: Reader, seed: int, index: int) -> bytes:
    rng = random.Random(f"{reader.name}:{seed}:{index}")
    return reader.mutate(rng, rng.choice(reader.seeds))


def fuzz_reader(
    name: str,
    cases: int,
    seed: int = 0,
    workers: int | None = None,
    save_dir: Path | None = None,
    progress: Callable[[Tally], None] | None = None,
) -> Tally:
    reader = READERS[name]
    work = workdir()
    os.environ["APPLIANCE_FUZZ_WORKDIR"] = str(work)
    tally = Tally(name)
    start = time.monotonic()
    try:
        reader.seeds = reader.setup(work)
        for data in reader.seeds:  # the valid seeds are accepted (and warm every cache)
            kind, detail = classify(reader.run, data)
            if kind != ACCEPTED:
                raise AssertionError(f"{name}: a seed is not accepted: {kind} {detail}")
        cache: dict[int, bytes] = {}

        def stream() -> Iterator[tuple[int, bytes]]:
            for index, data in case_stream(reader, seed, cases):
                cache[index] = data
                yield index, data

        with Pool(reader.run, size=workers or reader.workers) as pool:
            for outcome in pool.map(stream()):
                data = cache.pop(outcome.index)
                tally.cases += 1
                tally.counts[outcome.kind] += 1
                tally.peak_rss = max(tally.peak_rss, outcome.peak_rss)
                if progress is not None and tally.cases % PROGRESS_EVERY == 0:
                    tally.seconds = time.monotonic() - start
                    progress(tally)
                if outcome.kind in (FOREIGN, HANG, CRASH):
                    tally.failures.append(outcome)
                    if save_dir is not None and len(tally.failures) <= MAX_SAVED:
                        save_dir.mkdir(parents=True, exist_ok=True)
                        stem = save_dir / f"{name}-{seed}-{outcome.index}"
                        stem.with_suffix(".bin").write_bytes(data)
                        stem.with_suffix(".txt").write_text(f"{outcome.kind}: {outcome.detail}\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tally.seconds = time.monotonic() - start
    return tally


def table(tallies: list[Tally]) -> str:
    head = (
        f"{'reader':<11} {'cases':>8} {'refused':>8} {'accepted':>8} {'foreign':>8} "
        f"{'hangs':>6} {'crashes':>7} {'peak MiB':>9} {'seconds':>8}"
    )
    lines = [head]
    for t in tallies:
        c = t.counts
        lines.append(
            f"{t.reader:<11} {t.cases:>8} {c[REFUSED]:>8} {c[ACCEPTED]:>8} "
            f"{c[FOREIGN]:>8} {c[HANG]:>6} {c[CRASH]:>7} {t.peak_rss / 2**20:>9.1f} "
            f"{t.seconds:>8.1f}"
        )
    return "\n".join(lines)
