"""MoE route traces: the binary format, synthetic traces, other tools' formats in and out,
and expert-cache replay (kernels, policies, miss curves).

May import: core, engine, host, models.
"""
