"""Callbacks that work under every strategy."""
