"""Sealing a run directory into a signed bundle and verifying one: provenance (`provenance`),
the in-toto statement in a DSSE envelope (`dsse`), manifest.json as a typed record
(`manifest`), sealing (`bundle`), offline verification (`verify`) and the trust store (`trust`).

May import: core .. analysis.
"""
