"""Synthetic MoE GGUF models that llama.cpp loads and runs: tiny ones, and full-size ones with
the tensor plan of a published model.

`shapes` solves the layout for a target file size, `vocab` holds the byte-level tokenizer,
`weights` designs the values (routers with skew and locality, a token walk in the LM head),
`synth` streams the file to disk, `skeleton` writes header-only GGUFs of published shapes
(the tensor plan), `full_synth` fills that plan with random bounded weights (`blocks`: random
quantized blocks whose scales bound every value), `gguf_header` reads any GGUF's header (the
planner's input).

May import: core, engine, host.
"""
