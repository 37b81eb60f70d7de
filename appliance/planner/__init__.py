"""Startup plans from a GGUF header alone: header reader, remote range reads, byte accounting,
the plan and reference plans.

May import: core, engine, host, models.
"""
