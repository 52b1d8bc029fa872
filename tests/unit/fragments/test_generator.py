"""The connection generator: deterministic, skewed, scanners visible, rate follows the schedule."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from spark_jobs.generators import ConnectionGenerator, RateSchedule, split_buckets
from spark_jobs.generators.connections import ARROW_SCHEMA


def test_same_seed_same_records_other_seed_other_records():
    g = ConnectionGenerator(seed=7)
    assert g.seconds(0, 5).equals(ConnectionGenerator(seed=7).seconds(0, 5))
    assert not g.seconds(0, 5).equals(ConnectionGenerator(seed=8).seconds(0, 5))


def test_records_sorted_by_stime_with_the_fragment_schema():
    table = ConnectionGenerator(seed=1).seconds(0, 4)
    assert table.schema == ARROW_SCHEMA
    stimes = table.column("stime").cast("int64").to_pylist()
    assert stimes == sorted(stimes)


def test_rate_follows_the_piecewise_schedule():
    schedule = RateSchedule(((0.0, 50.0), (10.0, 500.0)))
    g = ConnectionGenerator(seed=2, schedule=schedule, scanners=0)
    low, high = g.seconds(0, 10).num_rows, g.seconds(10, 20).num_rows
    assert 400 < low < 600
    assert 4500 < high < 5500


def test_sources_are_skewed_and_scanners_probe_many_ports():
    g = ConnectionGenerator(seed=3, schedule=RateSchedule.constant(400), scanners=2, scan_rate=30)
    table = g.seconds(0, 10)
    counts = pc.value_counts(table.column("src_ip")).to_pylist()
    top = max(c["counts"] for c in counts)
    assert top > 10 * (table.num_rows / len(counts))  # a heavy hitter, Zipf-like
    scanners = table.filter(pc.starts_with(table.column("src_ip"), "10.3."))
    assert len(pc.unique(scanners.column("src_ip"))) == 2
    assert len(pc.unique(scanners.column("dst_port"))) > 200


def test_split_buckets_partitions_rows_in_bucket_order():
    table = ConnectionGenerator(seed=4).seconds(0, 6)
    parts = list(split_buckets(table, 2.0))
    assert [b for b, _ in parts] == sorted(b for b, _ in parts)
    assert len(parts) == 3
    assert sum(rows.num_rows for _, rows in parts) == table.num_rows


def test_schedule_must_start_at_zero():
    with pytest.raises(ValueError):
        RateSchedule(((1.0, 10.0),))
