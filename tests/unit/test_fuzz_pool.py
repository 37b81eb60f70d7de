"""The fuzz worker pool tells refusals from foreign exceptions, survives crashes and hangs by
replacing the worker, and holds each case to its memory limit."""

import os
import time

from appliance.core.errors import ApplianceError, ConfigError
from fuzz.pool import ACCEPTED, CRASH, FOREIGN, HANG, REFUSED, Pool


def run(case: bytes) -> None:
    if case == b"refuse":
        raise ConfigError("bad input: one line")
    if case == b"two lines":
        raise ApplianceError("first\nsecond")
    if case == b"raise":
        raise KeyError("x")
    if case == b"hang":
        time.sleep(30)
    if case == b"die":
        os._exit(3)
    if case == b"allocate 3 GiB":
        bytearray(3 << 30)


def test_outcomes_and_recovery() -> None:
    cases = [
        b"ok",
        b"refuse",
        b"two lines",
        b"raise",
        b"hang",
        b"ok",
        b"die",
        b"ok",
        b"allocate 3 GiB",
        b"ok",
    ]
    with Pool(run, size=2, deadline_s=1.0) as pool:
        outcomes = {o.index: o for o in pool.map(iter(enumerate(cases)))}
        pids = [w.pid for w in pool.workers]
    kinds = [outcomes[i].kind for i in range(len(cases))]
    assert kinds == [ACCEPTED, REFUSED, FOREIGN, FOREIGN, HANG, ACCEPTED, CRASH, ACCEPTED, FOREIGN, ACCEPTED]
    assert outcomes[1].detail == "ConfigError: bad input: one line"
    assert outcomes[2].detail.startswith("ApplianceError not one line")
    assert outcomes[3].detail.startswith("KeyError: 'x'")
    assert outcomes[6].detail == "worker died: exited with status 3"
    assert outcomes[8].detail.startswith("MemoryError")  # RLIMIT_AS, not the machine's memory
    assert all(0 < outcomes[i].peak_rss < 1 << 30 for i in (0, 5, 7, 9))
    for pid in pids:  # the workers are reaped when the pool closes
        assert not os.path.exists(f"/proc/{pid}")
