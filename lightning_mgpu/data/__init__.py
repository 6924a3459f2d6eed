"""Parallel dataset preprocessing into a memory-mapped cache."""
