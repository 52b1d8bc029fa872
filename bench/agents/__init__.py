"""Benchmarks of the participant as a process: ``fedload agent`` processes moving fragments."""
