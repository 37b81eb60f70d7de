"""Engine images: registry-free bases, labels, build, inspect and self-test, registries, and
signed archives for machines without one.

May import: core, engine, host.
"""
