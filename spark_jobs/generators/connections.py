"""Connection-summary records (src_ip, dst_ip, dst_port, stime) with realistic skew.

Sources are Zipf-distributed over a fixed pool (a few heavy hitters, a long tail), a handful of
port scanners probe many ports, and the rate follows a piecewise-constant schedule so the demo
and the benchmarks can raise load at chosen instants. Everything derives from one seed: the same
arguments give the same records, which is what lets a moved run be compared with a reference.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

# Arrow schema matching spark_jobs.fragments.CONNECTION_SCHEMA; Spark reads timestamps as
# microseconds in UTC, so the generator produces exactly that and SUnion never converts.
ARROW_SCHEMA = pa.schema(
    [
        pa.field("src_ip", pa.string(), nullable=False),
        pa.field("dst_ip", pa.string(), nullable=False),
        pa.field("dst_port", pa.int32(), nullable=False),
        pa.field("stime", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)

_COMMON_PORTS = np.array([80, 443, 22, 53, 25, 8080, 3306, 5432, 123, 993], dtype=np.int32)
DEFAULT_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RateSchedule:
    """Records per second, piecewise constant: ``steps`` are (from second, rate) pairs."""

    steps: tuple[tuple[float, float], ...] = ((0.0, 100.0),)

    def __post_init__(self) -> None:
        starts = [s for s, _ in self.steps]
        if not starts or starts[0] != 0.0 or starts != sorted(starts):
            raise ValueError("RateSchedule steps must start at 0 and be sorted by time")
        if any(rate < 0 for _, rate in self.steps):
            raise ValueError("RateSchedule rates must be >= 0")

    @classmethod
    def constant(cls, rate: float) -> RateSchedule:
        return cls(((0.0, rate),))

    def rate_at(self, second: float) -> float:
        index = bisect_right([s for s, _ in self.steps], second) - 1
        return self.steps[max(index, 0)][1]


def bucket_of(stime_us: int, bucket_seconds: float) -> int:
    """SUnion's bucket number of an event time given in microseconds since the Unix epoch."""
    return int(stime_us // int(bucket_seconds * 1_000_000))


@dataclass(frozen=True)
class ConnectionGenerator:
    seed: int = 0
    schedule: RateSchedule = field(default_factory=RateSchedule)
    sources: int = 500
    zipf_exponent: float = 1.3
    scanners: int = 3
    # Each scanner probes this many ports per second (rate-independent: scans are the signal).
    scan_rate: float = 20.0
    destinations: int = 200
    epoch: datetime = DEFAULT_EPOCH

    def _ip(self, block: int, index: np.ndarray) -> np.ndarray:
        # Sources spread over many /24 prefixes; scanners share two prefixes so (c) sees clusters.
        return np.array(
            [f"10.{block}.{(i // 250) % 250}.{i % 250 + 1}" for i in index.tolist()], dtype=object
        )

    def second_start_us(self, second: int) -> int:
        """Where second ``second`` begins, in microseconds since the Unix epoch (stime's unit)."""
        return int(self.epoch.timestamp() * 1_000_000) + second * 1_000_000

    def second(self, second: int) -> pa.Table:
        """The records whose stime falls in [epoch + second, epoch + second + 1), sorted."""
        rng = np.random.default_rng([self.seed, second])
        rate = self.schedule.rate_at(float(second))
        normal = int(rng.poisson(rate)) if rate > 0 else 0
        # Zipf ranks beyond the pool wrap around rather than pile up on the last address.
        ranks = (rng.zipf(self.zipf_exponent, size=normal) - 1) % self.sources
        src = self._ip(1, ranks)
        dst = self._ip(2, rng.integers(0, self.destinations, size=normal))
        port = _COMMON_PORTS[rng.integers(0, len(_COMMON_PORTS), size=normal)]

        scans = int(self.scan_rate) * self.scanners
        scan_src = self._ip(3, np.repeat(np.arange(self.scanners) * 120, int(self.scan_rate)))
        scan_dst = self._ip(2, rng.integers(0, self.destinations, size=scans))
        scan_port = rng.integers(1024, 65535, size=scans).astype(np.int32)

        base_us = self.second_start_us(second)
        offsets = np.sort(rng.integers(0, 1_000_000, size=normal + scans))
        order = rng.permutation(normal + scans)
        table = pa.table(
            {
                "src_ip": np.concatenate([src, scan_src])[order],
                "dst_ip": np.concatenate([dst, scan_dst])[order],
                "dst_port": np.concatenate([port, scan_port])[order],
                "stime": base_us + offsets,
            }
        )
        return table.cast(ARROW_SCHEMA)

    def seconds(self, start: int, stop: int) -> pa.Table:
        """All records of seconds [start, stop), sorted by stime."""
        tables = [self.second(s) for s in range(start, stop)]
        return pa.concat_tables(tables) if tables else ARROW_SCHEMA.empty_table()


def split_buckets(table: pa.Table, bucket_seconds: float) -> Iterator[tuple[int, pa.Table]]:
    """Group a table sorted by stime into (bucket number, rows) in bucket order."""
    if table.num_rows == 0:
        return
    micros = table.column("stime").cast(pa.int64()).to_numpy()
    buckets = micros // int(bucket_seconds * 1_000_000)
    edges = np.flatnonzero(np.diff(buckets)) + 1
    starts: Sequence[int] = [0, *edges.tolist()]
    ends: Sequence[int] = [*edges.tolist(), table.num_rows]
    for lo, hi in zip(starts, ends, strict=True):
        yield int(buckets[lo]), table.slice(lo, hi - lo)
