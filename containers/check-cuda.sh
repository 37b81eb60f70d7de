#!/bin/sh
# Prove that engine.Dockerfile's CUDA build stage compiles for a GPU target (sm89, sm120) on a
# machine with no registry and no GPU: make a local CUDA toolchain image (the Debian build base,
# the host's CUDA toolkit, cuBLAS from PyPI), then build only the `build` stage on it with the
# target's CMake arguments from the lock. Nothing is kept but the log. Long: about a hundred
# CUDA objects (15+ minutes on 2 cores).
#
#   containers/check-cuda.sh sm120        (CUDA_TOOLKIT, SOURCE, JOBS, PYTHON may be set)
set -eu
target=${1:?usage: containers/check-cuda.sh sm89|sm120}
python=${PYTHON:-python3}
toolkit=$(readlink -f "${CUDA_TOOLKIT:-/usr/local/cuda}")
cache=${APPLIANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/appliance}/cuda-toolchain
image=moe-appliance/cuda-toolchain:local

if [ ! -x "$toolkit/bin/nvcc" ]; then
    echo "error: no nvcc under $toolkit: install a CUDA toolkit or set CUDA_TOOLKIT" >&2
    exit 1
fi
major=$("$toolkit/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
build_base=$($python -c 'from appliance.engine.lock import load_lock; print(load_lock().target("cpu").build_base)')

mkdir -p "$cache"
if [ ! -d "$cache/cublas-$major" ]; then
    rm -rf "$cache/cublas.part"
    $python -m pip install -q --no-deps --target "$cache/cublas.part" "nvidia-cublas~=$major.0"
    mv "$cache/cublas.part" "$cache/cublas-$major"
fi
context=$cache/context
rm -rf "$context"
mkdir -p "$context"
cp -a "$toolkit" "$context/cuda"
for part in "$cache/cublas-$major"/nvidia/*/; do
    for sub in include lib; do
        if [ -d "$part$sub" ]; then cp -a "$part$sub/." "$context/cuda/$sub/"; fi
    done
done
for lib in "$context"/cuda/lib/libcublas*.so.*; do
    ln -sf "$(basename "$lib")" "${lib%%.so.*}.so"
done
ls "$context"/cuda/include/cublas_v2.h >/dev/null

# classic builder for this one COPY: every docker client has it (newer ones lack BuildKit
# without buildx)
DOCKER_BUILDKIT=0 docker build -q -t "$image" --build-arg "BUILD_BASE=$build_base" \
    -f containers/cuda-toolchain.Dockerfile "$context"
rm -rf "$context"
exec $python -m appliance image check-compile --target "$target" --build-base "$image" \
    --source "${SOURCE:-b10229}" --cmake-arg -DGGML_CUDA_NO_VMM=ON --jobs "${JOBS:-2}"
