# Registry-free CUDA toolchain for compile checks only (`make check-cuda-sm89`, `check-cuda-sm120`):
# the Debian build base plus a CUDA toolkit assembled from PyPI wheels (nvcc, runtime, CCCL)
# completed with cuBLAS. No driver library: engine.Dockerfile compiles with GGML_CUDA_NO_VMM=ON.
# Real sm89/sm120 images use the nvidia/cuda 12.8 bases the lock names.
ARG BUILD_BASE
FROM ${BUILD_BASE}
COPY cuda /usr/local/cuda
# as in the nvidia/cuda images: the toolkit's libraries are on the loader path, so executables
# linking libggml-cuda find libcudart and libcublas behind it
RUN echo /usr/local/cuda/lib > /etc/ld.so.conf.d/cuda.conf && ldconfig
ENV PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CUDAToolkit_ROOT=/usr/local/cuda
