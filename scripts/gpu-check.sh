#!/bin/sh
# The engine on a real NVIDIA GPU, checked without Docker and without a network: what the
# appliance's stand-in device (llama.cpp's RPC backend) cannot show.
#
# Builds the patched llama.cpp tree natively (llama-moe-trace; for the stand-in also
# ggml-rpc-server), then on a tiny MoE model:
#   placement  every layer offloaded (-ngl 99) against a CPU-only run: route rows and texts
#   tracing    the offloaded run traced and with --no-trace: texts and decode speed; on CUDA
#              also without kernel fusion (GGML_CUDA_DISABLE_FUSION=1: the router's fused
#              softmax/top-k kernel off, the path tracing forces) and without CUDA graphs
#              (GGML_CUDA_DISABLE_GRAPHS=1)
#   prefetch   a prompt of 40+ tokens with the first layers' experts on the host, demand mmap
#              and route-aware prefetch: prefetch bytes and calls (only host addresses count)
#   op-offload the same with and without --no-op-offload, each from a cold page cache: the
#              prompt's reads and speed
#   driver     nvidia-smi's readings (name, driver, CUDA, memory, clocks, power)
# and prints one JSON line of results (also OUT/summary.json).
#
# Everything it needs travels as files: the patched tree and the model, made on a machine with
# the appliance by `scripts/gpu-check.sh --prepare DIR`. It writes only under OUT (ccache too,
# unless CCACHE_DIR is set). Meant to take at most 8 minutes on 16 cores. Tried first where there
# is no GPU with --stand-in (the same checks on the RPC device on 127.0.0.1) or --cpu-only.
set -eu

usage() {
    cat <<'EOF'
usage: scripts/gpu-check.sh --tree DIR --model FILE --out DIR [--jobs N] [--arch ARCH]
                           [--cpu-only | --stand-in] [--n-cpu-moe K]
       scripts/gpu-check.sh --prepare DIR

  --tree DIR     the patched llama.cpp tree (with tools/moe-trace)
  --model FILE   a tiny MoE GGUF (qwen3moe)
  --out DIR      where the build, the runs and summary.json go (nothing is written elsewhere)
  --jobs N       parallel compile jobs (default: all cores)
  --arch ARCH    CMAKE_CUDA_ARCHITECTURES (default: the first GPU's compute capability, e.g. 89-real)
  --cpu-only     no GPU: build without CUDA and compare two CPU runs
  --stand-in     no GPU: every check on llama.cpp's RPC device, a ggml-rpc-server on 127.0.0.1
  --n-cpu-moe K  layers whose experts stay on the host in the prefetch and op-offload runs
                 (default 1)
  --prepare DIR  on the appliance's machine: write DIR/llama.cpp (the b10229 stand-in, patched)
                 and DIR/model.gguf, then copy DIR and this script to the GPU machine

Needs: cmake, ninja, a C++ compiler, python3; for the GPU also nvcc (CUDA 13) and nvidia-smi.
Exit status 0 when every run succeeds, the device run placed the model on the device (CUDA0 or
RPC0), its trace and text equal the CPU run's, and the op-offload runs recorded op_offload on
and off. What the prefetch bytes should be (the host experts' bytes the trace chose) is for the
appliance to compute from the trace: tests/e2e/test_gpu_check.py does on the stand-in.
EOF
}

tree="" model="" out="" jobs="" arch="" cpu_only=0 stand_in=0 prepare="" n_cpu_moe=1
while [ $# -gt 0 ]; do
    case "$1" in
        --tree) tree=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --arch) arch=$2; shift 2 ;;
        --cpu-only) cpu_only=1; shift ;;
        --stand-in) stand_in=1; shift ;;
        --n-cpu-moe) n_cpu_moe=$2; shift 2 ;;
        --prepare) prepare=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "gpu-check: $*" >&2; exit 1; }

if [ -n "$prepare" ]; then
    python=${PYTHON:-.venv/bin/python}
    [ -x "$python" ] || die "--prepare runs in the appliance checkout: make venv first (or set PYTHON)"
    mkdir -p "$prepare"
    PYTHONPATH=. "$python" - "$prepare" <<'EOF'
import shutil, sys
from pathlib import Path
from appliance.engine.lock import load_lock
from appliance.engine.patches import apply_series
from appliance.engine.source import fetch_source
from tests.models import tiny_model
out = Path(sys.argv[1])
lock = load_lock()
if (out / "llama.cpp").exists():
    shutil.rmtree(out / "llama.cpp")
apply_series(lock, fetch_source(lock, "b10229"), out / "llama.cpp")
shutil.copyfile(tiny_model("qwen3moe"), out / "model.gguf")
print(f"prepared {out}/llama.cpp and {out}/model.gguf")
EOF
    exit 0
fi

if [ -z "$tree" ] || [ -z "$model" ] || [ -z "$out" ]; then usage >&2; exit 2; fi
[ -d "$tree/tools/moe-trace" ] || die "$tree is not a patched llama.cpp tree (no tools/moe-trace): use --prepare"
[ -f "$model" ] || die "model $model not found"
[ "$cpu_only" = 1 ] && [ "$stand_in" = 1 ] && die "--cpu-only and --stand-in exclude each other: pass one"
case "$n_cpu_moe" in ''|*[!0-9]*) die "--n-cpu-moe takes a number of layers, not $n_cpu_moe" ;; esac
mode=gpu
[ "$cpu_only" = 1 ] && mode=cpu-only
[ "$stand_in" = 1 ] && mode=stand-in
for tool in cmake ninja python3; do
    command -v "$tool" >/dev/null || die "$tool not found: install it"
done
jobs=${jobs:-$(nproc)}
if [ "$mode" = gpu ]; then
    command -v nvcc >/dev/null || die "nvcc not found: put CUDA 13's bin on PATH, or pass --stand-in"
    command -v nvidia-smi >/dev/null || die "nvidia-smi not found: no NVIDIA driver here? pass --stand-in"
    if [ -z "$arch" ]; then
        cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
        [ -n "$cc" ] || die "nvidia-smi reports no GPU: pass --stand-in"
        arch="$cc-real"
        case "$cc" in 120|121) arch="${cc}a-real" ;; esac
    fi
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
tree=$(cd "$tree" && pwd)
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
build=$out/build
runs=$out/runs
rm -rf "$runs"
mkdir -p "$build" "$runs"

cmake_args="-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF \
-DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF"
targets=llama-moe-trace
if command -v ccache >/dev/null; then
    export CCACHE_DIR="${CCACHE_DIR:-$out/ccache}" CCACHE_BASEDIR="$tree"
    cmake_args="$cmake_args -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
fi
case "$mode" in
    gpu)
        cmake_args="$cmake_args -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$arch"
        if command -v ccache >/dev/null; then cmake_args="$cmake_args -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"; fi ;;
    stand-in)
        cmake_args="$cmake_args -DGGML_CUDA=OFF -DGGML_RPC=ON"
        targets="llama-moe-trace ggml-rpc-server" ;;
    cpu-only)
        cmake_args="$cmake_args -DGGML_CUDA=OFF" ;;
esac

started=$(date +%s)
echo "gpu-check: building $targets ($mode$([ "$mode" = gpu ] && echo ", CUDA $arch"), -j$jobs) in $build"
# shellcheck disable=SC2086 # one word per CMake argument and per target
cmake -S "$tree" -B "$build" -G Ninja $cmake_args > "$out/cmake.log" 2>&1 || { tail -20 "$out/cmake.log" >&2; die "cmake failed (log: $out/cmake.log)"; }
# shellcheck disable=SC2086
cmake --build "$build" -j "$jobs" --target $targets > "$out/build.log" 2>&1 || { tail -20 "$out/build.log" >&2; die "build failed (log: $out/build.log)"; }
build_s=$(( $(date +%s) - started ))
tracer=$build/bin/llama-moe-trace
echo "gpu-check: built in ${build_s} s"

device_args=""
server=""
stop_server() { if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi; }
trap stop_server EXIT
if [ "$mode" = stand-in ]; then
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$build/bin/ggml-rpc-server" -H 127.0.0.1 -p "$port" > "$runs/rpc-server.log" 2>&1 &
    server=$!
    python3 - "$port" "$server" <<'PY' || die "the stand-in device server did not listen on 127.0.0.1 (log: $runs/rpc-server.log)"
import os, socket, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
for _ in range(300):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        sys.exit(0)
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            sys.exit(1)
        time.sleep(0.1)
sys.exit(1)
PY
    device_args="--rpc 127.0.0.1:$port"
    echo "gpu-check: stand-in device ggml-rpc-server on 127.0.0.1:$port"
fi

prompt="The cat sat on the mat. The dog sat on the log."
# 40 tokens and more: a prompt batch that llama.cpp offloads to the device (op_offload, 32+)
long_prompt="In the quiet harbor town the fishermen mended their nets at dawn, while gulls circled the \
masts and the baker opened his shutters; children ran along the pier, counting boats, naming clouds, \
and arguing about which ship would come home first with the largest catch of the season."
sample_gpu_memory() {
    # $1: file; the largest GPU memory (MiB) any compute process used, sampled every 0.2 s
    max=0
    while :; do
        for used in $(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits 2>/dev/null); do
            [ "$used" -gt "$max" ] 2>/dev/null && max=$used
        done
        echo "$max" > "$1"
        sleep 0.2
    done
}

evict_model() {
    # drop the model's clean pages from the page cache (no root needed), so a run reads it cold
    python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$model"
}

run() {
    # $1: run name; then VAR=value words for its environment; then the tracer's own arguments
    name=$1
    shift
    envs=""
    while [ $# -gt 0 ]; do
        case "$1" in *=*) envs="$envs $1"; shift ;; *) break ;; esac
    done
    sampler=""
    if [ "$mode" = gpu ]; then
        sample_gpu_memory "$runs/$name.gpu-mib" &
        sampler=$!
    fi
    status=0
    # shellcheck disable=SC2086 # one word per VAR=value
    env $envs "$tracer" -m "$model" -n 32 --ignore-eos --weights -v \
        -o "$runs/$name.moetrace" --text "$runs/$name.txt" --timings "$runs/$name.json" "$@" \
        > "$runs/$name.out" 2> "$runs/$name.log" || status=$?
    if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; fi
    [ "$status" = 0 ] || { tail -20 "$runs/$name.log" >&2; die "the $name run failed (exit $status; log: $runs/$name.log)"; }
}

if [ "$mode" = cpu-only ]; then
    first=cpu second=cpu-repeat
    run cpu -p "$prompt" -ngl 0
    run cpu-repeat -p "$prompt" -ngl 0
else
    first=device second=cpu
    # shellcheck disable=SC2086 # device_args: empty or two words
    run device -p "$prompt" -ngl 99 $device_args
    run cpu -p "$prompt" -ngl 0
    # shellcheck disable=SC2086
    run device-no-trace -p "$prompt" -ngl 99 --no-trace $device_args
    if [ "$mode" = gpu ]; then
        run device-unfused-no-trace GGML_CUDA_DISABLE_FUSION=1 -p "$prompt" -ngl 99 --no-trace
        run device-unfused GGML_CUDA_DISABLE_FUSION=1 -p "$prompt" -ngl 99
        run device-no-graphs-no-trace GGML_CUDA_DISABLE_GRAPHS=1 -p "$prompt" -ngl 99 --no-trace
    fi
    evict_model
    # shellcheck disable=SC2086
    run partial-prefetch LLAMA_MMAP_DEMAND=1 -p "$long_prompt" -ngl 99 --n-cpu-moe "$n_cpu_moe" \
        --no-repack --prefetch-experts $device_args
    evict_model
    # shellcheck disable=SC2086
    run partial-prefetch-no-op-offload LLAMA_MMAP_DEMAND=1 -p "$long_prompt" -ngl 99 \
        --n-cpu-moe "$n_cpu_moe" --no-repack --prefetch-experts --no-op-offload $device_args
fi
stop_server

echo "gpu-check: placement ($first run):"
grep -E "buffer size|offload" "$runs/$first.log" | sed 's/^/  /' || echo "  (no placement lines)"
if [ "$mode" = gpu ]; then
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,memory.used,clocks.sm,clocks.max.sm,power.draw,pstate \
        --format=csv,noheader,nounits > "$runs/nvidia-smi.csv" 2>&1 || true
    nvidia-smi > "$runs/nvidia-smi.txt" 2>&1 || true
fi

summary=$(python3 - "$runs" "$mode" "$arch" "$build_s" "$first" "$second" <<'PY'
import json, os, re, sys
runs, mode, arch, build_s, first, second = sys.argv[1:]

def path(name, ext):
    return os.path.join(runs, f"{name}.{ext}")

def have(name):
    return os.path.exists(path(name, "json"))

def timing(name):
    with open(path(name, "json")) as handle:
        return json.load(handle)

def same(a, b, ext):
    """Texts byte for byte; traces by their rows (the header names the backend, which differs)."""
    with open(path(a, ext), "rb") as x, open(path(b, ext), "rb") as y:
        left, right = x.read(), y.read()
    if ext == "moetrace":
        left, right = left[16 + int.from_bytes(left[12:16], "little"):], right[16 + int.from_bytes(right[12:16], "little"):]
    return left == right

def read(name, phase):
    io = timing(name).get("io") or {}
    end, start = io.get(f"{phase}_end") or {}, io.get("load_end" if phase == "prefill" else "prefill_end") or {}
    if "read_bytes" not in end or "read_bytes" not in start or min(end["read_bytes"], start["read_bytes"]) < 0:
        return None
    return end["read_bytes"] - start["read_bytes"]

def log(name):
    with open(path(name, "log"), errors="replace") as handle:
        return handle.read()

device = "CUDA0" if mode == "gpu" else "RPC0"
summary = {
    "mode": mode, "arch": arch or None, "gpu": None, "driver": None, "build_s": int(build_s),
    "runs": [first, second], "backends": [timing(first).get("backend"), timing(second).get("backend")],
    "traces_identical": same(first, second, "moetrace"), "texts_identical": same(first, second, "txt"),
    "placed_on_gpu": None, "gpu_memory_mib": None,
}
checks = {}
ok = summary["traces_identical"] and summary["texts_identical"]
if mode != "cpu-only":
    placed = re.search(rf"{device}(\[[^\]]*\])? model buffer size", log("device")) is not None
    summary["placed_on_gpu"] = placed
    ok = ok and placed
    checks["placement"] = {"device": device, "placement": timing("device").get("placement")}
    tracing = {
        "texts_traced_vs_no_trace": same("device", "device-no-trace", "txt"),
        "decode_tokens_per_s_traced": timing("device").get("decode_tokens_per_s"),
        "decode_tokens_per_s_no_trace": timing("device-no-trace").get("decode_tokens_per_s"),
        "router_fusion_traced": (timing("device").get("kernel_path") or {}).get("router_fusion"),
        "router_fusion_no_trace": (timing("device-no-trace").get("kernel_path") or {}).get("router_fusion"),
    }
    if have("device-unfused-no-trace"):
        tracing |= {
            "texts_fused_vs_unfused_no_trace": same("device-no-trace", "device-unfused-no-trace", "txt"),
            "texts_traced_vs_unfused_no_trace": same("device", "device-unfused-no-trace", "txt"),
            "traces_traced_vs_traced_unfused": same("device", "device-unfused", "moetrace"),
            "decode_tokens_per_s_unfused_no_trace": timing("device-unfused-no-trace").get("decode_tokens_per_s"),
            "texts_graphs_vs_no_graphs": same("device-no-trace", "device-no-graphs-no-trace", "txt"),
            "decode_tokens_per_s_no_graphs": timing("device-no-graphs-no-trace").get("decode_tokens_per_s"),
        }
    checks["tracing"] = tracing
    on, off = timing("partial-prefetch"), timing("partial-prefetch-no-op-offload")
    checks["prefetch"] = {
        "n_prompt_tokens": on.get("n_prompt_tokens"), "prefetch_bytes": on.get("prefetch_bytes"),
        "prefetch_calls": on.get("prefetch_calls"),
        "prefetch_bytes_without_op_offload": off.get("prefetch_bytes"),
    }
    checks["op_offload"] = {
        "op_offload": [on.get("op_offload"), off.get("op_offload")],
        "prompt_read_bytes": [read("partial-prefetch", "prefill"), read("partial-prefetch-no-op-offload", "prefill")],
        "prompt_tokens_per_s": [on.get("prompt_tokens_per_s"), off.get("prompt_tokens_per_s")],
        "texts_identical": same("partial-prefetch", "partial-prefetch-no-op-offload", "txt"),
    }
    ok = ok and on.get("op_offload") is True and off.get("op_offload") is False
if mode == "gpu":
    try:
        with open(os.path.join(runs, "nvidia-smi.csv")) as handle:
            fields = [f.strip() for f in handle.readline().split(",")]
        keys = ["name", "driver", "compute_cap", "memory_total_mib", "memory_used_mib", "clock_sm_mhz",
                "clock_max_sm_mhz", "power_draw_w", "pstate"]
        checks["driver"] = dict(zip(keys, fields))
        summary["gpu"], summary["driver"] = fields[0], fields[1]
        with open(os.path.join(runs, "nvidia-smi.txt")) as handle:
            cuda = re.search(r"CUDA Version:\s*([0-9.]+)", handle.read())
        checks["driver"]["cuda"] = cuda.group(1) if cuda else None
    except (OSError, IndexError):
        checks["driver"] = None
    try:
        with open(path("device", "gpu-mib")) as handle:
            summary["gpu_memory_mib"] = int(handle.read().strip() or 0)
    except (OSError, ValueError):
        pass
if checks:
    summary["checks"] = checks
summary["ok"] = bool(ok)
print(json.dumps(summary, separators=(",", ":")))
PY
)
echo "$summary" > "$out/summary.json"
echo "$summary"
case "$summary" in *'"ok":true'*) exit 0 ;; *) exit 1 ;; esac
