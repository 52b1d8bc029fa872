"""Fragments of the Borealis network-monitoring query.

(a) ``connection_counts``: connections per source IP per window, reported above a threshold.
(b) ``distinct_port_counts``: distinct destination ports per source IP per window, above a
    threshold (port scanners).
(c) ``prefix_scanner_counts``: per /24 prefix, how many of (b)'s scanners it holds per window.

They use only ordinary Structured Streaming operations, so they run the same on static
DataFrames (tests), on Spark's built-in sources (benchmark baseline) and on SUnion.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# A connection summary, as the generator emits it and SUnion delivers it.
CONNECTION_SCHEMA = StructType(
    [
        StructField("src_ip", StringType(), nullable=False),
        StructField("dst_ip", StringType(), nullable=False),
        StructField("dst_port", IntegerType(), nullable=False),
        StructField("stime", TimestampType(), nullable=False),
    ]
)


def _windowed(df: DataFrame, window_seconds: int, lateness_seconds: int) -> DataFrame:
    # The watermark lets append mode emit a window once it can no longer change and lets the
    # state store drop it. SUnion releases buckets in stime order, so no row is ever late and
    # lateness 0 is exact; a positive lateness only matters for unordered sources.
    return df.withWatermark("stime", f"{lateness_seconds} seconds").withColumn(
        "window", F.window("stime", f"{window_seconds} seconds")
    )


def _report(df: DataFrame, *columns: str) -> DataFrame:
    # stime = window end: every later output row of the fragment has a larger stime than the
    # watermark that released this one, which is what a downstream SUnion needs to bucket it.
    return df.select(
        F.col("window.end").alias("stime"),
        F.col("window.start").alias("window_start"),
        *columns,
    )


def connection_counts(
    connections: DataFrame,
    *,
    window_seconds: int = 60,
    threshold: int = 100,
    lateness_seconds: int = 0,
) -> DataFrame:
    """Source IPs that opened more than ``threshold`` connections in a window."""
    counted = (
        _windowed(connections, window_seconds, lateness_seconds)
        .groupBy("window", "src_ip")
        .agg(F.count(F.lit(1)).alias("connections"))
        .where(F.col("connections") > threshold)
    )
    return _report(counted, "src_ip", "connections")


def distinct_port_counts(
    connections: DataFrame,
    *,
    window_seconds: int = 60,
    threshold: int = 10,
    lateness_seconds: int = 0,
) -> DataFrame:
    """Source IPs that reached more than ``threshold`` distinct destination ports in a window.

    Streaming rejects ``count(DISTINCT ...)``; an exact set per (window, source) in the state
    store is the cheapest exact alternative (one stateful operator, and the set is bounded by
    the number of ports). approx_count_distinct would be cheaper but outputs are compared exactly.
    """
    counted = (
        _windowed(connections, window_seconds, lateness_seconds)
        .groupBy("window", "src_ip")
        .agg(F.size(F.collect_set("dst_port")).alias("ports"))
        .where(F.col("ports") > threshold)
    )
    return _report(counted, "src_ip", "ports")


def prefix_of(ip: str) -> str:
    """The /24 prefix of a dotted IPv4 address, as the fragment computes it (for tests)."""
    return ip.rsplit(".", 1)[0] + ".0/24"


def prefix_scanner_counts(
    scanners: DataFrame,
    *,
    window_seconds: int = 60,
    min_scanners: int = 1,
    lateness_seconds: int = 0,
) -> DataFrame:
    """Per /24 prefix and window, how many source IPs scanned many ports (input: fragment (b)).

    Each scanner appears once per window in (b)'s output, so a count of rows is the number of
    distinct IPs; ``ports`` sums what they probed, a measure of the prefix's total fan-out.
    """
    prefix = F.concat(F.substring_index("src_ip", ".", 3), F.lit(".0/24"))
    counted = (
        _windowed(scanners, window_seconds, lateness_seconds)
        .withColumn("prefix", prefix)
        .groupBy("window", "prefix")
        .agg(F.count(F.lit(1)).alias("scanners"), F.sum("ports").alias("ports"))
        .where(F.col("scanners") >= min_scanners)
    )
    return _report(counted, "prefix", "scanners", "ports")
