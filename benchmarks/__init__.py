"""Throughput benchmarks of fedjax_abc against independent baselines (see run.py)."""
