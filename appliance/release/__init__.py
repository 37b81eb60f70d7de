"""What may be published: the release check over what git tracks, third-party notices.

May import: core .. evidence.
"""
