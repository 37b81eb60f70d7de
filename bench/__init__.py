"""Benchmarks and the libCacheSim oracle used by the replay cross-checks."""
