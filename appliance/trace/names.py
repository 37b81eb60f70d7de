"""Policy and scope names, importable without numba (the CLI loads the engine lazily)."""

POLICIES = ("fifo", "lru", "lfu", "lfru", "least-stale", "static-hot", "belady")
SCOPES = ("per-layer", "global")
IMPORT_FORMATS = ("llamacpp-csv", "vllm")  # `trace import --from` (appliance.trace.interchange)
EXPORT_FORMATS = ("llamacpp-csv", "libcachesim")  # `trace export --to`
