"""Reproducibility appliance for memory-constrained MoE inference experiments with llama.cpp."""

__version__ = "0.1.0"
