"""Policy and scope names, importable without numba (the CLI loads the engine lazily)."""

POLICIES = ("fifo", "lru", "lfu", "lfru", "least-stale", "static-hot", "belady")
SCOPES = ("per-layer", "global")
# when an event's misses evict (appliance.trace.kernels): during it (the default), or only after
# it, never the event's own experts (the published replay of route_trace v1 files)
ADMISSIONS = ("during-event", "after-event")
# `trace import --from` (appliance.trace.interchange; route_csv and route_jsonl)
IMPORT_FORMATS = ("llamacpp-csv", "vllm", "route-trace-csv", "jsonl")
MODEL_FREE_FORMATS = ("route-trace-csv",)  # the file names its model and expert sizes
EXPORT_FORMATS = ("llamacpp-csv", "libcachesim")  # `trace export --to`

# The routing knobs of appliance.trace.synth.TraceSynthSpec: what `trace synth --calibrated`
# takes from a shape's fit, and what a profile's routes.synth.knobs sets for a shape without one.
ROUTING_KNOBS = (
    "skew",
    "correlation",
    "recall",
    "recall_exponent",
    "recall_window",
    "recall_tail",
    "skew_spread",
)
