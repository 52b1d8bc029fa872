"""A partition between a consumer and the primary of a fragment whose active replica another
agent runs: the consumer switches to the STABLE replica, nothing tentative, and stays after the
heal (``spark_jobs.scenarios.partition``, the scenario ``fedload demo --scenario partition
--engine agents`` runs).

One federation of processes for every case (``fedload serve`` on SQLite, the agents of O, the
primary host, and T, the replica holder, each with its own Spark); the cases read its report.
The link is cut for real (a TCP proxy holding bytes), the replica is a running DPC copy in T's
agent (``spark_jobs.runtime.active``) writing its own log, and the consumer is the one consumer
rule (``app.availability.consumer``) over Flight with the operator's data-plane tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from spark_jobs.scenarios.partition import HOLDER, OWNER, PartitionOptions, run_partition

# Two agents with Spark: a minute and a half on a quiet machine, more under CI load.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base: Path = tmp_path_factory.mktemp("partition")
    found = run_partition(
        PartitionOptions(
            report_dir=base / "report",
            work=base / "work",
            fail_for_s=5.0,
            before_cut_s=3.0,
            after_heal_s=6.0,
        ),
        Console(stderr=True),
    )
    print(json.dumps({k: v for k, v in found.items() if k != "proxy_stats"}, default=str))
    return found


def test_the_consumer_switches_to_the_stable_replica_and_stays_after_the_heal(report) -> None:
    moves = [(s["from"], s["to"]) for s in report["switches"]]
    assert moves == [(OWNER, HOLDER)], report["switches"]
    switch = report["switches"][0]
    assert report["failure_at_ms"] < switch["at_ms"] < report["heal_at_ms"], report
    assert switch["version"] == 1
    assert report["checks"]["stays_after_heal"], report
    # Rows came through both copies, each under its own stream version.
    assert set(report["rows_by_version"]) == {f"{OWNER} v0", f"{HOLDER} v1"}, report
    assert report["false_suspicions"] == 0, report["replica_status_log"]


def test_nothing_tentative_lost_or_duplicated_and_the_output_is_the_failure_free_one(
    report,
) -> None:
    assert report["tentative_tuples"] == 0 and report["corrections"] == 0, report
    assert report["replica_state"]["state"] == "STABLE"
    assert report["input_duplicates"] == 0
    assert report["difference"] == {"missing": 0, "extra": 0}
    assert report["checks"]["output_matches_reference"]
    # The replica computed the same windows as the primary, in its own log on its own agent.
    assert report["checks"]["replicas_agree"]


def test_the_replica_is_real_in_its_agent_and_reported_to_the_registry(report) -> None:
    processes = report["processes"]
    assert {OWNER, HOLDER, "service"} <= set(processes)
    assert len(set(processes.values())) == len(processes)
    held = [r for r in report["registry_replicas"] if r["host"] == HOLDER]
    assert held and held[0]["technique"] == "active_standby"
    assert held[0]["state"] == "STABLE"
    assert report["ok"], report["checks"]
