# A registry-free CUDA base (`appliance image base --cuda VERSION`, appliance/images/cuda_base.py):
# a Debian base made by mmdebstrap plus a CUDA toolkit assembled from PyPI wheels the lock pins
# by sha256. The context's `cuda/` is the whole toolkit for the build base and only the CUDA
# runtime and cuBLAS libraries for the runtime base. No driver library (libcuda.so.1): the
# NVIDIA container runtime mounts the host's.
ARG BASE
FROM ${BASE}
ARG PREFIX=/usr/local/cuda
COPY cuda ${PREFIX}
# as in the nvidia/cuda images: the toolkit's libraries are on the loader path, and the NVIDIA
# container runtime is asked for the compute and utility (nvidia-smi) driver parts
RUN echo "${PREFIX}/lib" > /etc/ld.so.conf.d/cuda.conf && ldconfig
ENV PATH=${PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CUDAToolkit_ROOT=${PREFIX} \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
