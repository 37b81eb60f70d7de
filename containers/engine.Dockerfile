# Engine image: the pinned, patched llama.cpp for one target (cpu, sm89, sm120).
#
# The build context is the already patched llama.cpp tree, prepared and verified by
# `appliance image build`; this file never fetches source. Targets differ only by the
# build arguments below, all taken from engine/llama.cpp.lock.json. No `# syntax=` line:
# that would make BuildKit pull a frontend image from a registry.
#
# Compiled objects are reused across builds through ccache (when the build base has it) in a
# BuildKit cache mount: the cache lives beside the image, never in a layer, so a rebuild after
# a small patch change recompiles only what the change touches. The classic builder has no
# cache mounts; `appliance image build` gives it this file without the `--mount` flag.

ARG BUILD_BASE
ARG RUNTIME_BASE

FROM ${BUILD_BASE} AS build
ARG CMAKE_ARGS=""
ARG CUDA_ARCHITECTURES=""
ARG TOOLS="llama-moe-trace llama-completion llama-bench ggml-rpc-server"
ARG JOBS=2
ARG SOURCE_DATE_EPOCH
# Debian build bases made by `appliance image base` carry cmake and ninja already; the
# nvidia/cuda devel images do not, so only those install them here.
RUN if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends cmake ninja-build \
        && rm -rf /var/lib/apt/lists/*; \
    fi
COPY . /src
RUN --mount=type=cache,target=/ccache,id=moe-appliance-ccache \
    set -eu; \
    cuda_arch=""; \
    if [ -n "$CUDA_ARCHITECTURES" ]; then cuda_arch="-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES"; fi; \
    launcher="-DGGML_CCACHE=OFF"; \
    if command -v ccache >/dev/null && [ -d /ccache ]; then \
        export CCACHE_DIR=/ccache CCACHE_MAXSIZE=5G CCACHE_COMPILERCHECK=content; \
        launcher="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"; \
        if [ -n "$CUDA_ARCHITECTURES" ]; then launcher="$launcher -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"; fi; \
        ccache --zero-stats >/dev/null; \
    fi; \
    cmake -S /src -B /build -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DCMAKE_SKIP_BUILD_RPATH=ON -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_UI=OFF \
        $CMAKE_ARGS $cuda_arch $launcher; \
    cmake --build /build -j "$JOBS" --target $TOOLS; \
    if [ "$launcher" != "-DGGML_CCACHE=OFF" ]; then ccache --show-stats | sed -n '1,12s/^/ccache: /p'; fi; \
    mkdir -p /out/bin /out/lib; \
    for tool in $TOOLS; do install -m 0755 "/build/bin/$tool" /out/bin/; done; \
    cp -P /build/bin/*.so* /out/lib/; \
    strip --strip-unneeded /out/bin/* /out/lib/*.so*

FROM ${RUNTIME_BASE} AS runtime
ARG APP_UID=10001
# libgomp (OpenMP) is in the Debian runtime bases; the nvidia/cuda runtime images lack it. The
# slim runtime base has no grep (nor apt): the test is the shell's own.
RUN case "$(ldconfig -p)" in \
        *libgomp.so.1*) ;; \
        *) apt-get update && apt-get install -y --no-install-recommends libgomp1 \
           && rm -rf /var/lib/apt/lists/* ;; \
    esac; \
    echo "llama:x:${APP_UID}:${APP_UID}:llama:/var/lib/llama:/usr/sbin/nologin" >> /etc/passwd; \
    echo "llama:x:${APP_UID}:" >> /etc/group; \
    mkdir -p /var/lib/llama /models /results; \
    chown "${APP_UID}:${APP_UID}" /var/lib/llama /results
COPY --from=build /out/lib/ /usr/local/lib/
COPY --from=build /out/bin/ /usr/local/bin/
RUN ldconfig
USER ${APP_UID}:${APP_UID}
WORKDIR /var/lib/llama
ENTRYPOINT []
CMD ["llama-completion", "--help"]
