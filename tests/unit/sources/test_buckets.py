"""The rule by which a source writes its log (``spark_jobs.sources.buckets``), pinned on any
order of rows and any split into batches: what the log gets is every row's bucket, each bucket
appended once and whole, in order, never below a boundary already sent; the late rows are
exactly those below the boundary their batch found, and are counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.sources.buckets import Clock, SourceLog, StateStore, step

BUCKET_US = 1_000_000
SCHEMA = pa.schema([("v", pa.int64()), ("stime", pa.timestamp("us", tz="UTC"))])


def table(rows: list[tuple[int, int]]) -> pa.Table:
    """(value, stime in microseconds) pairs."""
    return pa.table(
        {
            "v": pa.array([v for v, _ in rows], pa.int64()),
            "stime": pa.array([t for _, t in rows], pa.timestamp("us", tz="UTC")),
        }
    )


def pairs(t: pa.Table) -> list[tuple[int, int]]:
    stimes = t.column("stime").cast(pa.int64()).to_pylist()
    return list(zip(t.column("v").to_pylist(), stimes, strict=True))


class FakeLog:
    """A log as the source sees it: appends (deduplicated by batch id) and boundaries."""

    def __init__(self) -> None:
        self.buckets: dict[int, list[tuple[int, int]]] = {}
        self.boundary: int | None = None
        self.written: set[int] = set()
        self.violations: list[str] = []

    def append(
        self,
        stream: str,
        t: pa.Table,
        *,
        boundary: Any = None,
        batch_id: Any = None,
        epoch: Any = None,
    ) -> bool:
        if batch_id in self.written:
            return False
        self.written.add(batch_id)
        for value, stime in pairs(t):
            bucket = stime // BUCKET_US
            if self.boundary is not None and bucket < self.boundary:
                self.violations.append(f"row in closed bucket {bucket} < {self.boundary}")
            self.buckets.setdefault(bucket, []).append((value, stime))
        if boundary is not None:
            self.boundary = boundary if self.boundary is None else max(self.boundary, boundary)
        return True

    def advance(
        self, stream: str, boundary: int, epoch: Any = None, bucket_seconds: Any = None
    ) -> None:
        if self.boundary is not None and boundary < self.boundary:
            self.violations.append("boundary moved back")
        self.boundary = boundary if self.boundary is None else max(self.boundary, boundary)


# Event times within a few buckets of each other, so batches overlap, jump and arrive late.
stimes = st.integers(min_value=0, max_value=12 * BUCKET_US - 1)
batches = st.lists(st.lists(stimes, max_size=8), min_size=1, max_size=8)


def reference(split: list[list[int]], lateness_us: int) -> tuple[list[int], int]:
    """The rule written out row by row: (stimes kept, late count)."""
    boundary, latest, kept, late = None, None, [], 0
    for batch in split:
        on_time = [t for t in batch if boundary is None or t // BUCKET_US >= boundary]
        late += len(batch) - len(on_time)
        kept.extend(on_time)
        if on_time:
            latest = max([*([latest] if latest is not None else []), *on_time])
        if latest is not None:
            candidate = (latest - lateness_us) // BUCKET_US
            boundary = candidate if boundary is None else max(boundary, candidate)
    return kept, late


@settings(max_examples=150, deadline=None)
@given(batches, st.sampled_from([0, 1_500_000, 3 * BUCKET_US]))
def test_any_order_gives_each_row_its_bucket_minus_late_rows(
    split: list[list[int]], lateness_us: int
) -> None:
    fake = FakeLog()
    clock, kept = Clock(), SCHEMA.empty_table()
    counter = 0
    closed_order: list[int] = []
    for batch in split:
        rows = table([(counter + i, t) for i, t in enumerate(batch)])
        counter += len(batch)
        before = clock.boundary
        done = step(clock, kept, rows, bucket_seconds=1.0, lateness_s=lateness_us / 1e6)
        for bucket, part in done.closed:
            assert before is None or bucket >= before, "a closed bucket is appended once"
            assert done.clock.boundary is not None and bucket < done.clock.boundary
            fake.append("s", part, boundary=bucket + 1, batch_id=bucket)
            closed_order.append(bucket)
        if done.clock.boundary is not None:
            fake.advance("s", done.clock.boundary)
        clock, kept = done.clock, done.open
        # What stays open is exactly what the boundary has not closed.
        assert all(t // BUCKET_US >= (clock.boundary or -1) for _, t in pairs(kept))
    expected, late = reference(split, lateness_us)
    everything = sorted([*(r for rows in fake.buckets.values() for r in rows), *pairs(kept)])
    assert sorted(t for _, t in everything) == sorted(expected)
    assert len({v for v, _ in everything}) == len(everything), "no row twice"
    assert clock.late == late
    assert closed_order == sorted(set(closed_order)), "buckets close in order, once each"
    assert not fake.violations
    for bucket, rows in fake.buckets.items():
        assert all(t // BUCKET_US == bucket for _, t in rows)
        assert [t for _, t in rows] == sorted(t for _, t in rows), "a bucket in event-time order"


def test_lateness_zero_keeps_the_latest_bucket_open() -> None:
    done = step(
        Clock(), SCHEMA.empty_table(), table([(1, 500), (2, 2_100_000)]), bucket_seconds=1.0
    )
    assert [b for b, _ in done.closed] == [0]
    assert done.clock.boundary == 2
    assert pairs(done.open) == [(2, 2_100_000)]
    # A row of bucket 1 now is late (bucket 1 closed with the boundary at 2); one of 2 is not.
    after = step(done.clock, done.open, table([(3, 1_200_000), (4, 2_900_000)]), bucket_seconds=1.0)
    assert after.late == 1 and after.clock.late == 1
    assert sorted(pairs(after.open)) == [(2, 2_100_000), (4, 2_900_000)]


def test_idle_clock_closes_buckets_without_rows() -> None:
    done = step(Clock(), SCHEMA.empty_table(), table([(1, 500)]), bucket_seconds=1.0)
    assert done.closed == []
    idle = step(done.clock, done.open, SCHEMA.empty_table(), bucket_seconds=1.0, now_us=5_000_000)
    assert [b for b, _ in idle.closed] == [0] and idle.clock.boundary == 5


def test_a_restart_from_the_saved_state_appends_nothing_twice(tmp_path: Path) -> None:
    fake = FakeLog()
    first = SourceLog(fake, "s", SCHEMA, StateStore(tmp_path), bucket_seconds=1.0)
    assert first.resume() is None
    first.add(table([(1, 100), (2, 1_100_000)]), 2)
    first.add(table([(3, 1_200_000), (4, 3_000_000)]), 4)
    # A restart with the log still up: open rows come back from disk, the position with them.
    again = SourceLog(fake, "s", SCHEMA, StateStore(tmp_path), bucket_seconds=1.0)
    assert again.resume() == 4
    assert again.clock == first.clock
    again.add(table([(5, 3_500_000), (6, 4_200_000)]), 6)
    got = sorted(r for rows in fake.buckets.values() for r in rows)
    assert got == [(1, 100), (2, 1_100_000), (3, 1_200_000), (4, 3_000_000), (5, 3_500_000)]
    assert fake.boundary == 4 and not fake.violations
    # A fresh log (the owner restarted) is closed up to the saved boundary at once.
    fresh = FakeLog()
    SourceLog(fresh, "s", SCHEMA, StateStore(tmp_path), bucket_seconds=1.0).resume()
    assert fresh.boundary == 4
