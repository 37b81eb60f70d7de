"""What may be published: the release check over what git tracks, third-party notices, and
published engine images with their signed records.

May import: core .. evidence.
"""
