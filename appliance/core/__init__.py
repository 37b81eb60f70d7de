"""Facts every stage shares: errors, paths, atomic writes, digests, byte units, checks and verdicts.

Imports nothing else from the appliance.
"""
