"""Startup plans from a GGUF header alone: remote range reads, byte and page accounting, the
plan, its rendering and reference plans. The header reader itself is
`appliance.models.gguf_header`.

May import: core .. images.
"""
