#!/bin/sh
# Prove that engine.Dockerfile's CUDA build stage compiles for a GPU target (sm89, sm120) on a
# machine with no registry and no GPU: make a local toolchain image (the Debian build base plus
# a CUDA toolkit), then build only the `build` stage on it with the target's CMake arguments
# from the lock. Nothing is kept but the log and the cached toolkit pieces. Long: about 30
# minutes of 2 cores per target.
#
# The toolkit should be the lock's CUDA version (12.8.1, the nvidia/cuda bases' version).
# PyPI's 12.8.1 wheels (nvidia-cuda-nvcc-cu12==12.8.93 and the matching runtime, CCCL and
# cuBLAS wheels) are assembled into one, but that nvcc wheel carries only ptxas, libnvvm and
# the headers, not the nvcc driver, cicc, cudafe++, fatbinary or nvlink: the check then stops
# and says so. CUDA_TOOLKIT=DIR uses a local toolkit instead (completed with cuBLAS from PyPI
# when it lacks it), and the output says which CUDA version compiled.
#
#   containers/check-cuda.sh sm89        (CUDA_TOOLKIT, SOURCE, JOBS, PYTHON may be set)
set -eu
target=${1:?usage: containers/check-cuda.sh sm89|sm120}
python=${PYTHON:-python3}
cache=${APPLIANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/appliance}/cuda-toolchain
WHEELS_12_8="nvidia-cuda-nvcc-cu12==12.8.93 nvidia-cuda-runtime-cu12==12.8.90
nvidia-cuda-cccl-cu12==12.8.90 nvidia-cublas-cu12==12.8.4.1"

wheels() {
    # $1: directory name under the cache, $2...: requirements; prints the install directory
    dir=$cache/$1
    shift
    if [ ! -d "$dir" ]; then
        rm -rf "$dir.part"
        $python -m pip install -q --no-deps --target "$dir.part" "$@" >&2
        mv "$dir.part" "$dir"
    fi
    echo "$dir"
}

merge_wheels() {
    # $1: wheels directory, $2: toolkit directory to copy their bin, include, lib, nvvm into
    for part in "$1"/nvidia/*/; do
        for sub in bin include lib nvvm; do
            if [ -d "$part$sub" ]; then
                mkdir -p "$2/$sub"
                cp -a "$part$sub/." "$2/$sub/"
            fi
        done
    done
    for lib in "$2"/lib/lib*.so.*; do
        [ -e "$lib" ] || continue
        link="${lib%%.so.*}.so"
        [ -e "$link" ] || ln -s "$(basename "$lib")" "$link"
    done
}

mkdir -p "$cache"
context=$cache/context
rm -rf "$context"
mkdir -p "$context"
if [ -n "${CUDA_TOOLKIT:-}" ]; then
    cp -a "$(readlink -f "$CUDA_TOOLKIT")" "$context/cuda"
else
    # shellcheck disable=SC2086 # one word per wheel
    merge_wheels "$(wheels wheels-12.8.93 $WHEELS_12_8)" "$context/cuda"
    if [ ! -x "$context/cuda/bin/nvcc" ]; then
        rm -rf "$context"
        echo "error: PyPI's nvidia-cuda-nvcc-cu12==12.8.93 has ptxas, libnvvm and headers but no" \
             "nvcc, cicc, cudafe++, fatbinary or nvlink, so CUDA 12.8 cannot be assembled from" \
             "wheels: set CUDA_TOOLKIT to a CUDA 12.8 toolkit directory (e.g. /usr/local/cuda of" \
             "nvidia/cuda:12.8.1-devel), or to the host's toolkit to compile with its version" >&2
        exit 1
    fi
fi
version=$("$context/cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
major=${version%%.*}
if [ ! -f "$context/cuda/include/cublas_v2.h" ]; then
    if [ "$major" = 12 ]; then
        cublas=$(wheels cublas-12.8.4.1 nvidia-cublas-cu12==12.8.4.1)
    else
        cublas=$(wheels "cublas-$major" "nvidia-cublas~=$major.0")
    fi
    merge_wheels "$cublas" "$context/cuda"
fi
[ -e "$context/cuda/lib64" ] || ln -s lib "$context/cuda/lib64"
ls "$context"/cuda/include/cublas_v2.h "$context"/cuda/include/cuda_runtime.h >/dev/null
lock_cuda=$($python -c "from appliance.engine.lock import load_lock; print(load_lock().target('$target').cuda.version)")
build_base=$($python -c 'from appliance.engine.lock import load_lock; print(load_lock().target("cpu").build_base)')
image=moe-appliance/cuda-toolchain:$version

# classic builder for this one COPY: every docker client has it (newer ones lack BuildKit
# without buildx)
DOCKER_BUILDKIT=0 docker build -q -t "$image" --build-arg "BUILD_BASE=$build_base" \
    -f containers/cuda-toolchain.Dockerfile "$context" >/dev/null
rm -rf "$context"
case "$lock_cuda" in
    "$version"*) echo "compiling the $target build stage with CUDA $version (the lock's $lock_cuda)" ;;
    *) echo "compiling the $target build stage with CUDA $version: NOT the lock's $lock_cuda" ;;
esac
# No driver library in the toolkit: GGML_CUDA_NO_VMM avoids it.
exec $python -m appliance image check-compile --target "$target" --build-base "$image" \
    --source "${SOURCE:-b10229}" --cmake-arg -DGGML_CUDA_NO_VMM=ON --jobs "${JOBS:-2}"
