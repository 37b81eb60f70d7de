"""MoE route traces: the binary format, synthetic traces, other tools' formats in and out
(`interchange`, `route_csv`, `route_jsonl`, `routes`), summaries and locality, and expert-cache
replay (kernels, policies, libCacheSim, miss curves, lookahead), with the bytes of one routed
expert (`expert_bytes`) and the range of real routing (`calibration`).

May import: core .. models.
"""
