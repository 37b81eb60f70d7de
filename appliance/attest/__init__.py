"""Sealing a run directory into a signed bundle and verifying one: DSSE, in-toto, provenance.

May import: core, engine, host, images, runs.
"""
