"""MoE route traces: the binary format, synthetic traces, and expert-cache replay.

May import: core, engine, host, models.
"""
