"""Facts every stage shares: errors, paths, atomic writes, digests, byte units, checks and verdicts,
the strict JSON/YAML reader and schema validation.

Imports nothing else from the appliance.
"""
