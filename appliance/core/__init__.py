"""Facts every stage shares: errors, paths, atomic writes, digests, byte units, shared ranges
(`limits`), typed JSON records (`records`), checks and verdicts, progress callbacks, the strict
JSON/YAML reader (with `nesting`, its depth check) and schema validation, and the list of
vendored third-party files (`vendored`).

Imports nothing else from the appliance.
"""
