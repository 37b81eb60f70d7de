"""The engine's inputs: the lock, verified llama.cpp sources (git pin or PyPI stand-in, through
the package index), the patch series and its editing tree (`patch_dev`), the bracket check,
local builds and the list of engine programs (`tools`).

May import: core.
"""
