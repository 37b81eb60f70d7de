"""Tiny synthetic MoE GGUF models that llama.cpp loads and runs.

`shapes` solves the layout for a target file size, `vocab` holds the byte-level tokenizer,
`weights` designs the values (routers with skew and locality, a token walk in the LM head),
`synth` streams the file to disk, `skeleton` writes header-only GGUFs of published shapes,
`gguf_header` reads any GGUF's header (the planner's input).

May import: core, engine, host.
"""
