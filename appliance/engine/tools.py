"""The llama.cpp programs the engine is built for, and where an engine image installs them."""

# Built into every engine image (containers/engine.Dockerfile receives them as TOOLS) and
# hashed, with their libraries, into each run's provenance. ggml-rpc-server (every target builds
# with -DGGML_RPC=ON) serves a CPU backend as a device of type GPU: the stand-in device.
TRACER = "llama-moe-trace"  # the patched tool every trial runs; its timing.json names it in `tool`
IMAGE_TOOLS = (TRACER, "llama-completion", "llama-bench", "ggml-rpc-server")
# A local build adds llama-simple, the smallest program that loads a model and generates.
LOCAL_TOOLS = (*IMAGE_TOOLS, "llama-simple")
IMAGE_BIN_DIR = "/usr/local/bin"
# the engine's shared libraries and, in GPU images, its loadable backend modules (GGML_BACKEND_DIR)
IMAGE_LIB_DIR = "/usr/local/lib"
IMAGE_TOOL_PATHS = tuple(f"{IMAGE_BIN_DIR}/{tool}" for tool in IMAGE_TOOLS)
