"""Benchmarks: each topic has a runnable module and a README with its figures."""
