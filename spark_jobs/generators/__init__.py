"""Deterministic generators of input streams for fragments, tests, benchmarks and the demo."""

from spark_jobs.generators.connections import (
    ConnectionGenerator,
    RateSchedule,
    bucket_of,
    split_buckets,
)

__all__ = ["ConnectionGenerator", "RateSchedule", "bucket_of", "split_buckets"]
