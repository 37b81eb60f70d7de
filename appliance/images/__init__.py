"""Engine images: registry-free bases, labels, build, inspect and self-test, registries.

May import: core, engine, host.
"""
