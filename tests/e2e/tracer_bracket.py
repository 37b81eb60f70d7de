"""Trace equality across the bracket: the patched b10068 and b10229 builds give the same traces.

Not collected by pytest (it builds llama.cpp twice, too long for CI on 2 cores); run it with
`make bracket-trace`. Exit status 0 when, on tiny qwen3moe and qwen35moe models, both builds
write the same rows, the same header apart from the `engine` identity, and the same text.
"""

import sys
import tempfile
from pathlib import Path

from appliance.engine.local_build import build_local
from appliance.engine.lock import load_lock
from appliance.trace.format import read_trace
from tests.e2e.conftest import run_tracer
from tests.models import tiny_model

PROMPT = "The cat sat on the mat. The dog sat on the log."


def main() -> int:
    lock = load_lock()
    builds = {name: build_local(lock, name, log=print) for name in ("b10068", "b10229")}
    failures = 0
    with tempfile.TemporaryDirectory(prefix="bracket-trace-") as tmp:
        for arch in ("qwen3moe", "qwen35moe"):
            model = tiny_model(arch)
            runs = {
                name: run_tracer(
                    bin_dir,
                    model,
                    Path(tmp) / f"{arch}-{name}",
                    "-n",
                    "32",
                    "-ub",
                    "16",
                    "--weights",
                    "--ignore-eos",
                    prompt=PROMPT,
                )
                for name, bin_dir in builds.items()
            }
            traces = {name: read_trace(run.trace) for name, run in runs.items()}
            a, b = traces["b10068"], traces["b10229"]
            headers_equal = {k: v for k, v in a.header.items() if k != "engine"} == {
                k: v for k, v in b.header.items() if k != "engine"
            }
            rows_equal = a.rows.tobytes() == b.rows.tobytes()
            texts_equal = runs["b10068"].text == runs["b10229"].text
            ok = headers_equal and rows_equal and texts_equal
            failures += not ok
            print(
                f"{arch}: {len(a.rows)} rows; rows {'equal' if rows_equal else 'DIFFER'}, header "
                f"{'equal' if headers_equal else 'DIFFERS'} (engine: {a.header['engine']['llama_build']}"
                f" vs {b.header['engine']['llama_build']}), text {'equal' if texts_equal else 'DIFFERS'}"
            )
    print("bracket trace check " + ("passed" if not failures else "FAILED"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
