"""Progress of long work, reported by library code through a callback; only cli/ draws it.

A long operation (an image build, a model synthesis, hashing a large file, a download) calls
its `progress` callback with a `Progress` record whenever it advances. The record says what
is being done, how far it is and, where there is one, the log that holds the full output.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

STEPS = "steps"
BYTES = "bytes"


@dataclass(frozen=True)
class Progress:
    task: str  # what is being done, e.g. "compiling cpu", "sha256 model.gguf"
    done: int
    total: int | None  # None while unknown
    unit: str = STEPS  # STEPS or BYTES
    log: Path | None = None  # the full output of the work, when it has one


ProgressFn = Callable[[Progress], None]


def byte_counter(
    task: str, total: int | None, progress: ProgressFn | None, log: Path | None = None
) -> Callable[[int], None]:
    """A callback for chunked byte work (hashing, writing) that reports a running total."""
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(Progress(task, done, total, BYTES, log))

    return advance
