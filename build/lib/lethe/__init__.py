"""Lethe: a contract-grade correctness verifier for GPU kernels."""

__version__ = "0.1.0"
