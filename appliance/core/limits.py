"""Ranges shared by the command line and the file readers, so both refuse the same values."""

MAX_REPEATS = 1000  # trials per variant in one run
MAX_SEED = (1 << 32) - 1  # seeds are stored as u32 (GGUF metadata) and fed to numpy
MAX_N_PREDICT = 1 << 20  # tokens a trial generates
# A model's blocks and its routed experts per layer, as the planner reads them from a GGUF header
# and the synthesizer makes them: llama.cpp refuses models beyond these (src/llama-hparams.h
# LLAMA_MAX_LAYERS, LLAMA_MAX_EXPERTS). A route trace has wider bounds of its own
# (appliance.trace.format.MAX_TRACE_LAYERS, MAX_TRACE_EXPERTS).
MAX_MODEL_LAYERS = 512
MAX_MODEL_EXPERTS = 512
