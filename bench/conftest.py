"""Benchmarks: run with ``python -m pytest bench --benchmark-only``."""
