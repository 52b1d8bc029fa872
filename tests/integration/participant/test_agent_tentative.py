"""A fragment none of whose stable copies the consumer can reach: every link into its primary's
agent is cut, its active replica on another agent loses one input, goes on tentatively within X,
and corrects after the heal (``spark_jobs.scenarios.tentative``, the scenario ``fedload demo
--scenario tentative --engine agents`` runs).

One federation of processes for every case (``fedload serve`` on SQLite, the agents of O, the
primary's host, and T and U, the two replica holders, each with its own Spark); the cases read
its report. The cut is real (O's agent advertises a TCP proxy that holds bytes while cut), each
replica is a running DPC copy in its holder's agent, and the consumer is the one consumer rule
over Flight (reading O and T). After the heal both copies ask the registry for the
reconciliation permit, which it grants to one at a time.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from spark_jobs.scenarios.tentative import (
    HOLDER,
    HOLDERS,
    OWNER,
    SECOND,
    TentativeOptions,
    run_tentative,
)

# Three agents with Spark, two reconciliations one after the other: about four minutes on a
# quiet machine, ten at load 10-15.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1500)]

# Timed bounds: figures of bench.ha.agents_failures ("Performance is measured by benchmarks").
LATENCY_CHECKS = {"added_latency_within_max_delay", "every_copy_within_max_delay"}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base: Path = tmp_path_factory.mktemp("tentative")
    # T reconciles "auto" (``fedload agent --reconcile auto``: it stands down for its redo
    # when the registry, granting the permit, names another copy serving, here O's primary),
    # U alongside (the default): both ways through agent processes in one federation.
    # After the heal the scenario already waits for what the cases read (both copies STABLE
    # again, their logs past their tentative buckets, the consumer's stable output past the
    # failure): a second of output after that is enough, not the demo's four.
    options = TentativeOptions(
        report_dir=base / "report",
        work=base / "work",
        reconcile_by_holder=((HOLDER, "auto"),),
        after_heal_s=1.0,
    )
    found = run_tentative(options, Console(stderr=True))
    print(json.dumps({k: v for k, v in found.items() if k != "proxy_stats"}, default=str))
    return found


def test_the_replica_goes_tentative_only_during_the_cut(report) -> None:
    # Tentative output reached the consumer while no stable copy was reachable.
    assert report["tentative_tuples"] > 0 and report["tentative_before_heal"] > 0, report
    assert report["consumer"]["tentative_received"] > 0, report["consumer"]
    history = report["history"][HOLDER]
    went_tentative = [at for state, at in history if state == "UP_FAILURE"]
    assert all(report["failure_at_ms"] <= at for at in went_tentative), history
    if not report["copies"][HOLDER]["up_failure_from_startup"]:
        assert went_tentative and went_tentative[0] < report["heal_at_ms"], history
    # The added latency is measured for every bucket (tentatively or stably processed) against
    # the median before the cut; whether it stays within X is a figure of the benchmark
    # (bench.ha.agents_failures), not an assertion here: on a 2-vCPU CI machine at load 20 the
    # copies' latency sat at 4.5-6.4 s before any cut (session 27, three runs of three).
    assert report["max_delay_ms"] == 5000  # the contract's, tentative-federation.yaml
    assert report["max_added_latency_ms"] is not None
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
    # Through the replica: stable rows, or (its stable log behind the consumer for the whole
    # cut, seen at load 18) a switch to it during the cut, whose tentative rows were resolved.
    assert report["rows_compared_via_replica"] > 0 or report["switched_to_replica_during_cut"]
    assert report["checks"]["output_matches_reference"]
    assert report["checks"]["consumer_loop_without_errors"], report["consumer_errors"]


def test_everything_ran_in_its_own_process(report) -> None:
    processes = report["processes"]
    assert {OWNER, HOLDER, SECOND, "service"} <= set(processes)
    assert len(set(processes.values())) == len(processes)
    for holder in HOLDERS:
        held = [r for r in report["registry_replicas"] if r["host"] == holder]
        assert held and held[0]["technique"] == "active_standby", report["registry_replicas"]
    # Every check but the two latency bounds (measured in the benchmark, see above).
    behaviour = {k: v for k, v in report["checks"].items() if k not in LATENCY_CHECKS}
    assert all(behaviour.values()), report["checks"]


def test_the_two_copies_reconcile_one_at_a_time_under_the_registrys_permit(report) -> None:
    # The registry's records (grants and releases in its audit log): after the heal it granted
    # the permit to each copy, each released it before the next grant.
    intervals = report["permit_intervals"]
    assert isinstance(intervals, list), intervals
    # (Granted after the heal, or before it to a copy still tentative from its start-up whose
    # redo went on through the cut: released after the heal either way.)
    after_heal = [
        i for i in intervals if i["released_ms"] is None or i["released_ms"] >= report["heal_at_ms"]
    ]
    assert {i["replica"] for i in after_heal} == {HOLDER, SECOND}, intervals
    for earlier, later in itertools.pairwise(intervals):
        assert earlier["released_ms"] is not None, intervals
        assert earlier["released_ms"] <= later["granted_ms"], intervals
    assert report["reconciliations_overlap"] is False
    # Each copy's own reconciliation (redo started to STABLE again) lies inside its permit, and
    # neither lost its permit mid-redo (renewed past the registry's 10 s lease).
    for holder in HOLDERS:
        copy = report["copies"][holder]
        done = [r for r in copy["reconciliations"] if r["stable"] is not None]
        assert done, copy
        mine = [i for i in intervals if i["replica"] == holder]
        for period in done:
            assert any(
                i["granted_ms"] <= period["began"] and period["stable"] <= i["released_ms"]
                for i in mine
            ), (holder, period, intervals)
        assert copy["permits_lost"] == 0, copy
    assert report["checks"]["reconciliations_one_at_a_time"], report["checks"]
    # So one copy was STABLE or UP_FAILURE (serving within X) at every moment from the cut on.
    assert report["checks"]["one_copy_serving_throughout"], report["copies"]


def test_each_copy_went_tentative_and_ends_stable_with_the_owners_output(report) -> None:
    for holder in HOLDERS:
        copy = report["copies"][holder]
        went_tentative = [at for state, at in copy["history"] if state == "UP_FAILURE"]
        # Tentative for the cut: it went so during the cut, or it was still so from its start-up
        # (a loaded machine) when the cut came; never in between.
        assert went_tentative or copy["up_failure_from_startup"], (holder, copy["history"])
        assert all(report["failure_at_ms"] <= at for at in went_tentative), copy
        if not copy["up_failure_from_startup"]:
            assert went_tentative[0] < report["heal_at_ms"], copy
        assert copy["tentative_rows"] > 0 and copy["tentative_buckets"] > 0, copy
        assert copy["undos"] >= 1 and copy["corrections"] > 0 and copy["rec_dones"] >= 1, copy
        assert copy["final_state"] == "STABLE", copy
        # Its corrected log equals O's over every window it computed, the cut included.
        assert copy["log_equals_owners"] and copy["log_rows_compared"] > 0, copy
        # Measured also while the other copy reconciled (each waits its turn tentatively);
        # within X or not is the benchmark's figure.
        assert copy["max_added_latency_ms"] is not None, copy
    assert report["checks"]["every_copy_corrected"], report["checks"]


def _entered_stabilization(copy: dict[str, Any], reconciliation: dict[str, Any]) -> int:
    """When (ms) the copy first advertised STABILIZATION in this reconciliation."""
    return min(
        at
        for state, at in copy["history"]
        if state == "STABILIZATION" and at >= reconciliation["began"]
    )


def test_the_copy_reconciling_auto_stands_down_for_its_redo_the_other_serves_beside_it(
    report,
) -> None:
    alone, alongside = report["copies"][HOLDER], report["copies"][SECOND]
    assert (alone["reconcile"], alongside["reconcile"]) == ("auto", "alongside")
    # By each copy's own record of its redos: the registry named another copy serving to T.
    assert (alone["stood_down"], alongside["stood_down"]) == (True, False)
    for copy, stands_down in ((alone, True), (alongside, False)):
        switched = [r for r in copy["reconciliations"] if r["switched"] is not None]
        assert switched, copy
        for reconciliation in switched:
            # Alone: STABILIZATION from the redo's start (consumers read another copy), so in
            # the first half of the reconciliation; alongside: only at the switch (the UNDO).
            began, at_switch = reconciliation["began"], reconciliation["switched"]
            entered = _entered_stabilization(copy, reconciliation)
            assert (entered < (began + at_switch) / 2) is stands_down, (copy, reconciliation)
