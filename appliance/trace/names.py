"""Policy and scope names, importable without numba (the CLI loads the engine lazily)."""

POLICIES = ("fifo", "lru", "lfu", "lfru", "least-stale", "static-hot", "belady")
SCOPES = ("per-layer", "global")
# `trace import --from` (appliance.trace.interchange; route_csv and route_jsonl)
IMPORT_FORMATS = ("llamacpp-csv", "vllm", "route-trace-csv", "jsonl")
MODEL_FREE_FORMATS = ("route-trace-csv",)  # the file names its model and expert sizes
EXPORT_FORMATS = ("llamacpp-csv", "libcachesim")  # `trace export --to`
