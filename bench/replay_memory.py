"""Peak memory of one replay of a trace file, measured in a fresh process.

`python -m bench.replay_memory TRACE POLICY CAPACITY [SCOPE]` imports the replay, replays a
small synthetic trace with the same policy (loading the kernels' machine code) and records
its resident set (the interpreter, numpy, numba and the kernels: what any replay pays
whatever the trace), then reads and replays the trace as `appliance trace replay` does
and prints one JSON line: the file's bytes, that baseline, the peak resident set (VmHWM) and
the peak over the baseline, the memory the replay of this trace took.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def main() -> None:
    path, policy, capacity = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    scope = sys.argv[4] if len(sys.argv) > 4 else "global"
    from appliance.trace import kernels
    from appliance.trace.events import trace_events
    from appliance.trace.format import read_trace
    from appliance.trace.replay import ReplaySetup, replay_report
    from appliance.trace.synth import TraceSynthSpec, synth_trace

    kernels.compile_kernels()
    small = synth_trace(TraceSynthSpec(n_decode=8))  # loads the kernels' machine code
    replay_report(ReplaySetup(trace_events(small), small.k, None), small.header, [policy], [small.k], scope)
    baseline = _status_kib("VmRSS") * 1024
    trace = read_trace(path)
    setup = ReplaySetup(events=trace_events(trace), k=trace.k, expert_bytes=None)
    report = replay_report(setup, trace.header, [policy], [capacity], scope)
    peak = _status_kib("VmHWM") * 1024
    size = path.stat().st_size
    print(
        json.dumps(
            {
                "file_bytes": size,
                "baseline_bytes": baseline,
                "peak_bytes": peak,
                "replay_bytes": peak - baseline,
                "hits": report["results"][0]["total"]["hits"],
            }
        )
    )


if __name__ == "__main__":
    main()
