"""Numba kernels (no Python objects inside), called through thin wrappers."""
