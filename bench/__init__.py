"""Throughput and store benchmarks (not part of the installed package)."""
