"""A fragment none of whose stable copies the consumer can reach: every link into its primary's
agent is cut, its active replica on another agent loses one input, goes on tentatively within X,
and corrects after the heal (``spark_jobs.scenarios.tentative``, the scenario ``fedload demo
--scenario tentative --engine agents`` runs).

One federation of processes for every case (``fedload serve`` on SQLite, the agents of O, the
primary's host, and T, the replica holder, each with its own Spark); the cases read its report.
The cut is real (O's agent advertises a TCP proxy that holds bytes while cut), the replica is a
running DPC copy in T's agent, and the consumer is the one consumer rule over Flight.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from spark_jobs.scenarios.tentative import (
    HOLDER,
    LATENCY_SLACK_S,
    OWNER,
    TentativeOptions,
    run_tentative,
)

# Two agents with Spark: about two minutes on a quiet machine.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base: Path = tmp_path_factory.mktemp("tentative")
    found = run_tentative(
        TentativeOptions(report_dir=base / "report", work=base / "work"), Console(stderr=True)
    )
    print(json.dumps({k: v for k, v in found.items() if k != "proxy_stats"}, default=str))
    return found


def test_the_replica_goes_tentative_only_during_the_cut_and_within_x(report) -> None:
    # Tentative output reached the consumer while no stable copy was reachable.
    assert report["tentative_tuples"] > 0 and report["tentative_before_heal"] > 0, report
    assert report["consumer"]["tentative_received"] > 0, report["consumer"]
    history = report["history"][HOLDER]
    went_tentative = [at for state, at in history if state == "UP_FAILURE"]
    assert went_tentative and report["failure_at_ms"] <= went_tentative[0], history
    assert went_tentative[0] < report["heal_at_ms"], history
    # Each input bucket was processed (tentatively or stably) within X of its end, above the
    # median before the cut; the slack is the copy's clock mapping (one bucket, see the module).
    x_ms = report["max_delay_ms"]
    assert x_ms == 5000  # the contract's, tentative-federation.yaml
    assert report["max_added_latency_ms"] is not None
    assert report["max_added_latency_ms"] <= x_ms + LATENCY_SLACK_S * 1000, report
    assert report["tentative_buckets"] > 0, report
    # The consumer left O for the copy during the cut.
    assert (OWNER, HOLDER) in [(s["from"], s["to"]) for s in report["switches"]], report


def test_the_replica_corrects_after_the_heal_under_the_permit(report) -> None:
    assert report["undos"] >= 1 and report["corrections"] > 0 and report["rec_dones"] >= 1
    assert report["final_state"] == "STABLE"
    reconciliations = report["reconciliations"]
    assert reconciliations, report
    assert all(r["began"] >= report["heal_at_ms"] for r in reconciliations), reconciliations
    # T's own log, corrected, equals O's over every window T computed (the cut included).
    assert report["checks"]["replica_log_corrected"], report
    assert report["replica_rows_compared"] > 0
    # Every tentative row the consumer held was undone or superseded by stable rows.
    assert report["consumer"]["held_at_end"] == 0, report["consumer"]


def test_the_consumers_stable_output_is_the_failure_free_one(report) -> None:
    assert report["input_duplicates"] == 0
    assert report["difference"] == {"missing": 0, "extra": 0}, report
    assert report["rows_compared_via_replica"] > 0
    assert report["checks"]["output_matches_reference"]
    assert report["checks"]["consumer_loop_without_errors"], report["consumer_errors"]


def test_everything_ran_in_its_own_process(report) -> None:
    processes = report["processes"]
    assert {OWNER, HOLDER, "service"} <= set(processes)
    assert len(set(processes.values())) == len(processes)
    held = [r for r in report["registry_replicas"] if r["host"] == HOLDER]
    assert held and held[0]["technique"] == "active_standby"
    assert report["ok"], report["checks"]
