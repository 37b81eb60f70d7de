"""The GPU engine images, checked without a GPU: `make check-gpu-images`.

Not collected by pytest (a cold sm89 plus sm120 build takes over an hour on 2 cores); run it by
hand when containers/engine.Dockerfile, the lock or the patches change. It builds (or reuses) the
cpu image and each GPU image from the same source, then asserts for each GPU image:

- every engine program starts (`--help`), `ldd` of every program and every library in the image
  resolves everything but the driver's `libcuda.so.1`, and the CUDA backend module is there
  (`appliance image selftest`);
- started without a GPU, `llama-moe-trace` says in one line that it fell back to the CPU backend
  and records `"backend": "CPU"` in its timing record;
- its route trace and generated text of a tiny synthesized MoE model are byte-identical to the
  cpu image's, and its placement record holds the same model buffers, no layer offloaded.

Exit status 0 when all hold; the last line is a JSON summary with build times and image sizes.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from appliance.engine.lock import load_lock
from appliance.host.docker import docker_client
from appliance.images import labels as L
from appliance.images.build import build_image
from appliance.images.selftest import selftest
from tests.models import tiny_model

FALLBACK_LINE = "fell back to the CPU backend"
PROMPT = "The cat sat on the mat. The dog sat on the log."
N_PREDICT = 24


def run_trace(client: Any, image: str, model: Path, out: Path) -> dict[str, Any]:
    """llama-moe-trace on the CPU in `image` (no GPU requested): trace, text, timing, stderr."""
    out.mkdir(parents=True)
    out.chmod(0o777)  # the image runs as a non-root user
    container = client.containers.run(
        image,
        [
            "llama-moe-trace",
            "-m",
            f"/models/{model.name}",
            "-p",
            PROMPT,
            "-n",
            str(N_PREDICT),
            "--ignore-eos",
            "--weights",
            "-o",
            "/results/run.moetrace",
            "--text",
            "/results/run.txt",
            "--timings",
            "/results/timing.json",
        ],
        volumes={
            str(model): {"bind": f"/models/{model.name}", "mode": "ro"},
            str(out): {"bind": "/results", "mode": "rw"},
        },
        network_mode="none",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        mem_limit="2g",
        memswap_limit="2g",
        detach=True,
    )
    try:
        status = container.wait(timeout=600)
        stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)
    assert status["StatusCode"] == 0, (
        f"{image}: llama-moe-trace exited {status['StatusCode']}: {stderr[-1500:]}"
    )
    return {
        "trace": (out / "run.moetrace").read_bytes(),
        "text": (out / "run.txt").read_bytes(),
        "timing": json.loads((out / "timing.json").read_text()),
        "stderr": stderr,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="b10229", help="source of every image (a stand-in or canonical)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--targets", nargs="+", default=["sm89", "sm120"])
    args = parser.parse_args(argv)
    lock = load_lock()
    client = docker_client()
    summary: dict[str, Any] = {"source": args.source, "images": {}}
    built = {}
    for target in ["cpu", *args.targets]:
        started = time.monotonic()
        print(f"building {target} from {args.source} (reused when unchanged)", flush=True)
        result = build_image(lock, target, args.source, jobs=args.jobs)
        image = client.images.get(result.tag)
        built[target] = result.tag
        summary["images"][target] = {
            "tag": result.tag,
            "reused": result.reused,
            "build_s": round(time.monotonic() - started, 1),
            "size_bytes": int(image.attrs.get("Size", 0)),
            "cuda_architectures": result.labels.get(L.CUDA_ARCHITECTURES, ""),
            "base_kind": result.labels.get(L.BASE_KIND, ""),
        }
        print(f"{target}: {result.tag} ({summary['images'][target]['size_bytes'] / 1e6:.0f} MB)", flush=True)

    for target in args.targets:
        checks = selftest(built[target], client)
        failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
        assert not failed, f"{target} selftest failed: {failed}"
        names = {c.name for c in checks}
        assert "CUDA backend module" in names, f"{target}: no CUDA backend module check (not a GPU image?)"
        summary["images"][target]["selftest_checks"] = len(checks)
        print(f"{target}: selftest passed ({len(checks)} checks)", flush=True)

    model = tiny_model("qwen3moe")
    with tempfile.TemporaryDirectory(prefix="gpu-images-") as tmp:
        runs = {target: run_trace(client, tag, model, Path(tmp) / target) for target, tag in built.items()}
    reference = runs["cpu"]
    assert reference["timing"]["backend"] == "CPU", reference["timing"]
    assert FALLBACK_LINE not in reference["stderr"], "the cpu image must not claim a fallback"
    for target in args.targets:
        run = runs[target]
        fallback = [line for line in run["stderr"].splitlines() if FALLBACK_LINE in line]
        assert len(fallback) == 1, f"{target}: expected one fallback line, got {fallback}"
        assert run["timing"]["backend"] == "CPU", f"{target}: timing backend {run['timing'].get('backend')}"
        assert run["trace"] == reference["trace"], f"{target}: trace differs from the cpu image's"
        assert run["text"] == reference["text"], f"{target}: text differs from the cpu image's"
        placement, expected = run["timing"].get("placement"), reference["timing"].get("placement")
        assert expected and placement, f"{target}: no placement record (cpu: {bool(expected)})"
        assert placement["model"] == expected["model"], f"{target}: model buffers {placement['model']}"
        assert placement["layers_offloaded"] == 0, (
            f"{target}: {placement['layers_offloaded']} layers offloaded"
        )
        summary["images"][target]["model_buffers"] = {k: v["bytes"] for k, v in placement["model"].items()}
        summary["images"][target]["fallback_line"] = fallback[0]
        print(f"{target}: trace ({len(run['trace'])} bytes) and text byte-identical to cpu's", flush=True)
    summary["trace_bytes"] = len(reference["trace"])
    print("GPU image check passed")
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
