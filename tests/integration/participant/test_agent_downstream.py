"""A Spark fragment downstream of a replicated one, with agents as processes: while the primary
of its input is cut off, it reads the input's active copy and its output stays the
failure-free one (``spark_jobs.scenarios.downstream``).

One federation of processes for every case (``fedload serve`` on SQLite; the agents of O, which
serves the source and keeps the logs, S, the upstream's primary host, T, its replica holder,
and P, the downstream's host, the last three each with its own Spark); the cases read its
report. S's link to O is cut for real (a TCP proxy on S's route to O, holding bytes), so O's log
of the upstream stands still while T's copy, a running DPC copy in T's agent, goes on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from rich.console import Console

from spark_jobs.scenarios.downstream import (
    CONSUMER,
    HOLDER,
    OWNER,
    PRIMARY,
    DownstreamOptions,
    run_downstream,
)

# Three agents with Spark and a reference run: two to four minutes under CI load.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> dict[str, Any]:
    base: Path = tmp_path_factory.mktemp("downstream")
    # Short: CI runs every test. The cut stays long beside O.s's trigger and batch times: T's
    # log gains a bucket a second, and O.s's output trails what it acknowledged by a few (an
    # 8 s cut left its output 2 buckets past O's standing log, a 10 s one 9). The heal is
    # followed by the wait for O's log of O.p to catch up, not by a fixed pause.
    found = run_downstream(
        DownstreamOptions(
            report_dir=base / "report",
            work=base / "work",
            fail_for_s=10.0,
            before_cut_s=1.0,
            after_heal_s=0.0,
        ),
        Console(stderr=True),
        # The test run's session: the scenario must not stop it (later tests share it).
        spark=spark,
    )
    print(json.dumps({k: v for k, v in found.items() if k != "samples"}, default=str))
    return found


def test_the_downstream_reads_the_active_copy_while_the_primary_log_stands_still(report) -> None:
    evidence = report["evidence"]
    checks = report["checks"]
    assert checks["primary_log_stood_still"] and checks["copy_went_on"], evidence
    # O.s acknowledged, as durably processed, input buckets O's log of O.p never closed
    # during the cut: it read them from T's log.
    assert evidence["buckets_read_from_copy"] > 0, report["samples"]
    # Its output went on past what O's standing log could have fed it.
    assert evidence["downstream_past_primary_log"] > 0, report["samples"]


def test_the_downstream_output_is_the_failure_free_one(report) -> None:
    output = report["output"]
    assert output["missing"] == 0 and output["unexpected"] == 0, output
    assert output["rows"] == output["expected_rows"] > 0, output
    assert report["checks"]["output_matches_reference"]


def test_the_copy_stayed_stable_and_the_primary_caught_up(report) -> None:
    assert report["replica_state"]["state"] == "STABLE", report["replica_state"]
    assert report["checks"]["primary_caught_up"], report["upstream_logs"]
    held = [r for r in report["registry_replicas"] if r["host"] == HOLDER]
    assert held and held[0]["technique"] == "active_standby"
    processes = report["processes"]
    assert {OWNER, PRIMARY, HOLDER, CONSUMER, "service"} <= set(processes)
    assert len(set(processes.values())) == len(processes)
    assert report["ok"], report["checks"]


def test_the_test_runs_spark_session_outlives_the_scenario(report, spark: SparkSession) -> None:
    """The scenario's reference ran on the shared session and left it running: every later
    test in this process uses it (stopped once, and each of them failed)."""
    assert report["checks"]["output_matches_reference"]
    assert spark.range(3).count() == 3
