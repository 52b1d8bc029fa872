"""The partition scenario on Spark: A feeds B and its replica R, two Spark host processes; C
reads through one fault-injecting TCP proxy per replica; the B-C link is cut for real. C's
heartbeats declare B failed, C switches to R at its own next bucket and, after the heal, stays
there. Every check compares with a failure-free Spark run of the same input; timings are
reported, never asserted (shared machine).
"""

from __future__ import annotations

import os
import sys

import pytest

from spark_jobs.ha.scenarios import Timings
from spark_jobs.ha.spark_partition import SparkPartitionTimings, run, timings_like
from tests.support.components import require_java


def test_timings_refuse_a_heal_after_the_input_ends() -> None:
    with pytest.raises(ValueError, match="heal"):
        SparkPartitionTimings(seconds=8, fail_at_s=4.0, fail_for_s=5.0)
    with pytest.raises(ValueError, match="cut_mode"):
        SparkPartitionTimings(cut_mode="explode")


def test_timings_like_carries_heartbeats_cut_and_failure_length() -> None:
    python = Timings(heartbeat_ms=50, misses=4, cut_mode="refuse", fail_for_ms=9000)
    spark = timings_like(python)
    assert (spark.heartbeat_ms, spark.misses, spark.cut_mode) == (50, 4, "refuse")
    assert spark.fail_for_s == 9.0
    # The input outlasts the heal by 4 s at least, in whole windows.
    assert spark.seconds == 18 and spark.seconds % spark.window_s == 0
    assert timings_like(Timings.quick()) == SparkPartitionTimings.quick()


@pytest.mark.spark
@pytest.mark.slow
def test_partition_on_spark_switches_to_the_replica_and_stays(tmp_path) -> None:
    require_java()
    # The host processes inherit these: executors must run this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The designed detector: heartbeats every 100 ms, failed after 3 misses. They are answered
    # by each host's heartbeat responder process, which the host's Spark work does not starve
    # (answered by the host's own Python process, they once went unanswered for > 300 ms at
    # load 10 and B was declared failed before the cut).
    timings = SparkPartitionTimings.quick()
    assert (timings.heartbeat_ms, timings.misses) == (100, 3)

    report = run(tmp_path, timings)

    failed = [name for name, passed in report["checks"].items() if not passed]
    seen = {
        k: report[k]
        for k in (
            "failure_at_ms",
            "heal_at_ms",
            "rows_after_heal",
            "b_heard_again_after_heal_ms",
            "b_heartbeat_failures_after_heal",
            "b_direct_heartbeat",
            "heartbeat_proxy_stats",
        )
    }
    assert not failed, f"{failed}; {report['difference']}; {report['switches']}; {seen}"
    assert report["scenario"] == "partition" and report["engine"] == "spark"
    # One switch, B -> R, after the cut and before the heal, into stream version 1.
    [switch] = report["switches"]
    assert (switch["consumer"], switch["from"], switch["to"], switch["version"]) == (
        "C",
        "B",
        "R",
        1,
    )
    assert report["failure_at_ms"] <= switch["at_ms"] <= report["heal_at_ms"]
    # No replica was declared failed while its link was up (B before the cut, R ever).
    assert report["false_suspicions"] == 0
    # The detector counts silence from B's last answer, which came before the cut: C switched
    # after the cut, and B was not declared failed before it.
    assert report["detected_after_ms"] > 0
    # Rows came through both replicas, each key once, and together they are the reference.
    assert report["delivered_before_cut"] > 0
    assert report["rows_by_version"]["B v0"] > 0 and report["rows_by_version"]["R v1"] > 0
    assert sum(report["rows_by_version"].values()) == report["rows_out"]
    assert report["rows_out"] == report["reference_rows"] > 0
    assert report["input_duplicates"] == 0
    assert report["difference"] == {"missing": 0, "extra": 0}
    # The heartbeats went through their own proxy, cut with the data link: it held bytes.
    assert report["heartbeat_proxy_stats"]["B"]["accepted"] >= 1
    # A partition (not a crash): B answered C's heartbeats again after the heal.
    assert report["cut_mode"] == "drop"
    assert report["b_heard_again_after_heal_ms"] is not None
    statuses = [(e["replica"], e["status"]) for e in report["replica_status_log"]]
    assert ("B", "failed") in statuses
    [b_failed] = [e for e in report["replica_status_log"] if e["status"] == "failed"]
    assert b_failed["replica"] == "B" and b_failed["at_ms"] >= report["failure_at_ms"]
    assert ("B", "alive") in statuses[statuses.index(("B", "failed")) :]
    assert report["tentative_tuples"] == 0 and report["corrections"] == 0
    assert report["max_added_latency_ms"] is not None
