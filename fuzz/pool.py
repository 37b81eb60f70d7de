"""A fork server: worker processes that run one case at a time under a memory limit and a
deadline, reused across cases and replaced after a crash or a hang.

The parent imports the reader (and warms it on its seeds) before forking, so a worker starts in
milliseconds with everything compiled. Each worker sets RLIMIT_AS for itself, reads a case
from its pipe, runs it, and answers with the outcome and its peak resident memory.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from socket import socketpair

from appliance.core.errors import ApplianceError

MEMORY_LIMIT = 2 << 30  # RLIMIT_AS of a worker
DEADLINE_S = 2.0  # per case

ACCEPTED, REFUSED, FOREIGN, HANG, CRASH = "accepted", "refused", "foreign", "hang", "crash"


@dataclass
class Outcome:
    index: int
    kind: str  # one of ACCEPTED .. CRASH
    detail: str = ""  # exception type and message, or how the worker died
    peak_rss: int = 0  # bytes, the worker's high-water mark so far


@dataclass
class Worker:
    pid: int
    conn: Connection
    index: int | None = None  # case in flight
    started: float = 0.0
    data: bytes = b""


def classify(run: Callable[[bytes], None], case: bytes) -> tuple[str, str]:
    """Run one case: accepted, a clean refusal (the project's own error, one line), or a
    foreign exception (anything else, or a refusal that spans lines)."""
    try:
        run(case)
    except ApplianceError as exc:
        message = str(exc)
        if "\n" in message or not message.strip():
            return FOREIGN, f"{type(exc).__name__} not one line: {message[:300]!r}"
        return REFUSED, f"{type(exc).__name__}: {message[:300]}"
    except BaseException as exc:  # noqa: BLE001 - the point is to catch everything else
        where = traceback.extract_tb(exc.__traceback__)[-1:]
        at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
        return FOREIGN, f"{type(exc).__name__}: {str(exc)[:300]}{at}"
    return ACCEPTED, ""


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _serve(conn: Connection, run: Callable[[bytes], None]) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the run
    while True:
        try:
            index_bytes = conn.recv_bytes()
        except EOFError:
            return
        case = conn.recv_bytes()
        kind, detail = classify(run, case)
        conn.send_bytes(f"{kind}\0{detail}\0{_peak_rss()}\0{index_bytes.decode()}".encode())


def _spawn(run: Callable[[bytes], None]) -> Worker:
    parent_sock, child_sock = socketpair()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        parent_sock.close()
        code = 0
        try:
            _serve(Connection(child_sock.detach()), run)
        except BaseException:  # noqa: BLE001 - a dying worker says nothing more
            code = 1
        os._exit(code)
    child_sock.close()
    return Worker(pid, Connection(parent_sock.detach()))


def _reap(worker: Worker, kill: bool) -> str:
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGKILL)
    worker.conn.close()
    _, status = os.waitpid(worker.pid, 0)
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exited with status {os.WEXITSTATUS(status)}"


@dataclass
class Pool:
    """`size` workers running `run`; `map` yields an Outcome per case, in completion order."""

    run: Callable[[bytes], None]
    size: int = 2
    deadline_s: float = DEADLINE_S
    workers: list[Worker] = field(default_factory=list)

    def __enter__(self) -> Pool:
        self.workers = [_spawn(self.run) for _ in range(self.size)]
        return self

    def __exit__(self, *exc: object) -> None:
        for worker in self.workers:
            _reap(worker, kill=True)
        self.workers = []

    def _replace(self, worker: Worker) -> None:
        self.workers[self.workers.index(worker)] = _spawn(self.run)

    def map(self, cases: Iterator[tuple[int, bytes]]) -> Iterator[Outcome]:
        pending = True
        while True:
            for worker in self.workers:
                if worker.index is None and pending:
                    try:
                        index, data = next(cases)
                    except StopIteration:
                        pending = False
                        break
                    worker.index, worker.data, worker.started = index, data, time.monotonic()
                    worker.conn.send_bytes(str(index).encode())
                    worker.conn.send_bytes(data)
            busy = [w for w in self.workers if w.index is not None]
            if not busy:
                return
            first_deadline = min(w.started for w in busy) + self.deadline_s
            ready = wait([w.conn for w in busy], timeout=max(first_deadline - time.monotonic(), 0))
            now = time.monotonic()
            for worker in list(busy):
                case = worker.index
                assert case is not None
                if worker.conn in ready:
                    try:
                        kind, detail, peak, _ = worker.conn.recv_bytes().decode().split("\0", 3)
                    except (EOFError, OSError):
                        how = _reap(worker, kill=False)
                        self._replace(worker)
                        yield Outcome(case, CRASH, f"worker died: {how}")
                        continue
                    worker.index = None
                    yield Outcome(case, kind, detail, int(peak))
                elif now - worker.started >= self.deadline_s:
                    _reap(worker, kill=True)
                    self._replace(worker)
                    yield Outcome(case, HANG, f"no answer within {self.deadline_s:g} s")
