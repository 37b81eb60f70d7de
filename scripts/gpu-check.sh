#!/bin/sh
# The engine on a real NVIDIA GPU, checked without Docker and without a network.
#
# Builds the patched llama.cpp tree natively for the GPU's own architecture (llama-moe-trace
# only), runs the tracer on a tiny MoE model with every layer offloaded (-ngl 99) and again on
# the CPU (-ngl 0), compares the two route traces and texts, and prints the engine's placement
# lines, the GPU memory the run used and a JSON summary (also OUT/summary.json).
#
# Everything it needs travels as files: the patched tree and the model, made on a machine with
# the appliance by `scripts/gpu-check.sh --prepare DIR`. It writes only under OUT (ccache too,
# unless CCACHE_DIR is set). Meant to take at most 8 minutes on 16 cores.
set -eu

usage() {
    cat <<'EOF'
usage: scripts/gpu-check.sh --tree DIR --model FILE --out DIR [--jobs N] [--arch ARCH] [--cpu-only]
       scripts/gpu-check.sh --prepare DIR

  --tree DIR     the patched llama.cpp tree (with tools/moe-trace)
  --model FILE   a tiny MoE GGUF (qwen3moe)
  --out DIR      where the build, the runs and summary.json go (nothing is written elsewhere)
  --jobs N       parallel compile jobs (default: all cores)
  --arch ARCH    CMAKE_CUDA_ARCHITECTURES (default: the first GPU's compute capability, e.g. 89-real)
  --cpu-only     no GPU: build without CUDA and compare two CPU runs (the half CI can run)
  --prepare DIR  on the appliance's machine: write DIR/llama.cpp (the b10229 stand-in, patched)
                 and DIR/model.gguf, then copy DIR and this script to the GPU machine

Needs: cmake, ninja, a C++ compiler; for the GPU half also nvcc (CUDA 13) and nvidia-smi.
Exit status 0 when both runs succeed (and, with a GPU, the model's layers were placed on CUDA0).
EOF
}

tree="" model="" out="" jobs="" arch="" cpu_only=0 prepare=""
while [ $# -gt 0 ]; do
    case "$1" in
        --tree) tree=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --arch) arch=$2; shift 2 ;;
        --cpu-only) cpu_only=1; shift ;;
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

[ -n "$tree" ] && [ -n "$model" ] && [ -n "$out" ] || { usage >&2; exit 2; }
[ -d "$tree/tools/moe-trace" ] || die "$tree is not a patched llama.cpp tree (no tools/moe-trace): use --prepare"
[ -f "$model" ] || die "model $model not found"
for tool in cmake ninja; do
    command -v "$tool" >/dev/null || die "$tool not found: install it"
done
jobs=${jobs:-$(nproc)}
if [ "$cpu_only" = 0 ]; then
    command -v nvcc >/dev/null || die "nvcc not found: put CUDA 13's bin on PATH, or pass --cpu-only"
    command -v nvidia-smi >/dev/null || die "nvidia-smi not found: no NVIDIA driver here? pass --cpu-only"
    if [ -z "$arch" ]; then
        cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
        [ -n "$cc" ] || die "nvidia-smi reports no GPU: pass --cpu-only"
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
if command -v ccache >/dev/null; then
    export CCACHE_DIR="${CCACHE_DIR:-$out/ccache}" CCACHE_BASEDIR="$tree"
    cmake_args="$cmake_args -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
fi
if [ "$cpu_only" = 0 ]; then
    cmake_args="$cmake_args -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$arch"
    if command -v ccache >/dev/null; then cmake_args="$cmake_args -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"; fi
else
    cmake_args="$cmake_args -DGGML_CUDA=OFF"
fi

started=$(date +%s)
echo "gpu-check: building llama-moe-trace ($([ "$cpu_only" = 1 ] && echo CPU only || echo "CUDA $arch"), -j$jobs) in $build"
# shellcheck disable=SC2086 # one word per CMake argument
cmake -S "$tree" -B "$build" -G Ninja $cmake_args > "$out/cmake.log" 2>&1 || { tail -20 "$out/cmake.log" >&2; die "cmake failed (log: $out/cmake.log)"; }
cmake --build "$build" -j "$jobs" --target llama-moe-trace > "$out/build.log" 2>&1 || { tail -20 "$out/build.log" >&2; die "build failed (log: $out/build.log)"; }
build_s=$(( $(date +%s) - started ))
tracer=$build/bin/llama-moe-trace
echo "gpu-check: built in ${build_s} s"

prompt="The cat sat on the mat. The dog sat on the log."
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

run() {
    # $1: run name, $2: -ngl value
    name=$1
    sampler=""
    if [ "$cpu_only" = 0 ]; then
        sample_gpu_memory "$runs/$name.gpu-mib" &
        sampler=$!
    fi
    status=0
    "$tracer" -m "$model" -p "$prompt" -n 32 --ignore-eos --weights -ngl "$2" -v \
        -o "$runs/$name.moetrace" --text "$runs/$name.txt" --timings "$runs/$name.json" \
        > "$runs/$name.out" 2> "$runs/$name.log" || status=$?
    if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; fi
    [ "$status" = 0 ] || { tail -20 "$runs/$name.log" >&2; die "the $name run failed (exit $status; log: $runs/$name.log)"; }
}

if [ "$cpu_only" = 0 ]; then
    first=gpu second=cpu
    run gpu 99
    run cpu 0
else
    first=cpu second=cpu-repeat
    run cpu 0
    run cpu-repeat 0
fi

same() { cmp -s "$1" "$2" && echo true || echo false; }
traces_identical=$(same "$runs/$first.moetrace" "$runs/$second.moetrace")
texts_identical=$(same "$runs/$first.txt" "$runs/$second.txt")
backend() { sed -n 's/.*"backend":"\([^"]*\)".*/\1/p' "$1"; }
first_backend=$(backend "$runs/$first.json")
second_backend=$(backend "$runs/$second.json")

echo "gpu-check: placement ($first run):"
grep -E "buffer size|offload" "$runs/$first.log" | sed 's/^/  /' || echo "  (no placement lines)"
gpu_mib=null
placed_on_gpu=null
ok=true
if [ "$cpu_only" = 0 ]; then
    gpu_mib=$(cat "$runs/gpu.gpu-mib" 2>/dev/null || echo 0)
    echo "gpu-check: GPU memory used by the gpu run: ${gpu_mib} MiB (largest sample)"
    if grep -q "CUDA0 model buffer size" "$runs/gpu.log" && [ "$first_backend" = CUDA ]; then
        placed_on_gpu=true
    else
        placed_on_gpu=false ok=false
    fi
fi
gpu_name=null driver=null
if [ "$cpu_only" = 0 ]; then
    gpu_name="\"$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)\""
    driver="\"$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)\""
fi
arch_json=null
[ -n "$arch" ] && arch_json="\"$arch\""
summary=$(printf '{"mode":"%s","arch":%s,"gpu":%s,"driver":%s,"build_s":%s,"runs":["%s","%s"],"backends":["%s","%s"],"traces_identical":%s,"texts_identical":%s,"placed_on_gpu":%s,"gpu_memory_mib":%s,"ok":%s}' \
    "$([ "$cpu_only" = 1 ] && echo cpu-only || echo gpu)" "$arch_json" "$gpu_name" "$driver" "$build_s" \
    "$first" "$second" "$first_backend" "$second_backend" "$traces_identical" "$texts_identical" \
    "$placed_on_gpu" "$gpu_mib" "$ok")
echo "$summary" > "$out/summary.json"
echo "$summary"
[ "$ok" = true ]
