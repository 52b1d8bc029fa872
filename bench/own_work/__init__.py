"""Benchmarks of participants' own work: sources, SQL fragments and sinks of their own."""
