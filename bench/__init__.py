"""Benchmarks: figures and ratios against a reference measured in the same run (see README.md)."""
