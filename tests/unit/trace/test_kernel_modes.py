"""Plain Python (small traces) and compiled kernels give the same replay, bit for bit, counts
and byte budgets with mixed sizes in both event models (synth_trace itself uses numba; the
kernels stay plain until compile_kernels)."""

import json
import os
import subprocess
import sys

from tests.conftest import REPO

PROBE = """
import json
from appliance.trace import kernels
from appliance.trace.events import trace_events
from appliance.trace.replay import ReplaySetup, replay_report
from appliance.trace.synth import TraceSynthSpec, synth_trace

def reports():
    out = []
    for seed, (layers, experts, k, prompt, ubatch) in enumerate(
            [(3, 16, 2, 16, 8), (4, 32, 4, 48, 32), (2, 8, 3, 8, 8)]):
        trace = synth_trace(TraceSynthSpec(n_layers=layers, n_experts=experts, k=k, n_prompt=prompt,
                                      n_ubatch=ubatch, n_decode=40, skew=1.0,
                                      correlation=0.3, seed=seed))
        setup = ReplaySetup(events=trace_events(trace), k=trace.k, expert_bytes=None,
                            calibration=None)
        for scope in ("per-layer", "global"):
            out.append(replay_report(setup, trace.header, list(kernels.POLICIES),
                                     [k, k + 3, 2 * k + 1, experts * layers], scope))
        mixed = ReplaySetup(events=trace_events(trace, row_order=True), k=trace.k,
                            expert_bytes={layer: 1000 + 700 * layer for layer in trace.moe_layers})
        need = trace.k * (1000 + 700 * (layers - 1))
        for scope in ("per-layer", "global"):
            for admission in ("during-event", "after-event"):
                out.append(replay_report(mixed, trace.header, list(kernels.POLICIES), [k + 1], scope,
                                         [need * layers, 3 * need * layers], admission))
        ev = trace_events(trace).pools("global")[0]
        out.append(kernels.lru_depths(ev.ptr, ev.items, ev.n_objects).tolist())
        out.append(kernels.next_use_events(ev.ptr, ev.items, ev.n_objects).tolist())
    return out

plain = reports()  # every input is below COMPILE_ABOVE_REQUESTS
kernels.compile_kernels()
compiled = reports()
print(json.dumps({"same": plain == compiled, "n": len(plain)}))
"""


def test_plain_python_and_compiled_kernels_agree() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"same": True, "n": 24}
