"""The three fragments on static DataFrames: the same code a streaming query runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pyspark.testing import assertDataFrameEqual

from spark_jobs.fragments import (
    CONNECTION_SCHEMA,
    connection_counts,
    distinct_port_counts,
    prefix_scanner_counts,
)

pytestmark = pytest.mark.spark

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def connections(spark, rows):
    return spark.createDataFrame(
        [(src, dst, port, at(s)) for src, dst, port, s in rows], CONNECTION_SCHEMA
    )


def test_connection_counts_reports_sources_above_threshold_per_window(spark):
    rows = (
        [("10.0.0.1", "10.9.0.1", 80, 0.1 * i) for i in range(5)]  # 5 in window [0, 10)
        + [("10.0.0.2", "10.9.0.1", 80, 1.0 + i) for i in range(3)]  # 3: at threshold, dropped
        + [("10.0.0.1", "10.9.0.1", 443, 10.0 + i) for i in range(4)]  # 4 in window [10, 20)
    )
    out = connection_counts(connections(spark, rows), window_seconds=10, threshold=3)
    expected = spark.createDataFrame(
        [(at(10), at(0), "10.0.0.1", 5), (at(20), at(10), "10.0.0.1", 4)],
        "stime timestamp, window_start timestamp, src_ip string, connections long",
    )
    assertDataFrameEqual(out, expected)


def test_distinct_port_counts_counts_each_port_once(spark):
    scan = [("10.0.0.9", "10.9.0.1", 1000 + i, 0.5 * i) for i in range(8)]  # 8 distinct ports
    repeat = [("10.0.0.3", "10.9.0.1", 80, 0.1 * i) for i in range(50)]  # many conns, 1 port
    window_edge = [("10.0.0.9", "10.9.0.1", 1000, 10.0)]  # next window: 1 port
    out = distinct_port_counts(
        connections(spark, scan + repeat + window_edge), window_seconds=10, threshold=5
    )
    expected = spark.createDataFrame(
        [(at(10), at(0), "10.0.0.9", 8)],
        "stime timestamp, window_start timestamp, src_ip string, ports int",
    )
    assertDataFrameEqual(out, expected)


def test_prefix_counts_sum_scanners_of_one_slash24_downstream_of_ports(spark):
    rows = []
    for host, ports in (("10.5.1.7", 6), ("10.5.1.8", 7), ("10.5.2.1", 9), ("10.5.1.9", 2)):
        rows += [(host, "10.9.0.1", 2000 + p, 1.0) for p in range(ports)]
    scanners = distinct_port_counts(connections(spark, rows), window_seconds=10, threshold=5)
    out = prefix_scanner_counts(scanners, window_seconds=10)
    # (b) emits stime = 10 (window end); (c) groups that into its window [10, 20).
    expected = spark.createDataFrame(
        [(at(20), at(10), "10.5.1.0/24", 2, 13), (at(20), at(10), "10.5.2.0/24", 1, 9)],
        "stime timestamp, window_start timestamp, prefix string, scanners long, ports long",
    )
    assertDataFrameEqual(out, expected)


def test_prefix_counts_threshold_drops_small_prefixes(spark):
    rows = [("10.5.1.7", "10.9.0.1", 3000 + p, 2.0) for p in range(12)]
    scanners = distinct_port_counts(connections(spark, rows), window_seconds=10, threshold=10)
    out = prefix_scanner_counts(scanners, window_seconds=10, min_scanners=2)
    assert out.count() == 0
