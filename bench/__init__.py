"""Benchmarks: ``python bench/run.py`` compares oncelog with the peer broker Tansu."""
