"""Runtime benchmark: move latency and SUnion/SOutput overhead (see README.md)."""
