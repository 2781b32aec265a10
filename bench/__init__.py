"""Benchmarks: run as scripts (``python bench/projections.py``), not imported by the product."""
