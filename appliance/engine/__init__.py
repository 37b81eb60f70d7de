"""The engine's inputs: the lock, verified llama.cpp sources (git pin or PyPI stand-in), the patch
series, the bracket check and local builds.

May import: core.
"""
