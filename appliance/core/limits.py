"""Ranges shared by the command line and the file readers, so both refuse the same values."""

MAX_REPEATS = 1000  # trials per variant in one run
MAX_SEED = (1 << 32) - 1  # seeds are stored as u32 (GGUF metadata) and fed to numpy
MAX_N_PREDICT = 1 << 20  # tokens a trial generates
# llama.cpp refuses models beyond these (src/llama-hparams.h LLAMA_MAX_LAYERS, LLAMA_MAX_EXPERTS)
MAX_LAYERS = 512
MAX_EXPERTS = 512
