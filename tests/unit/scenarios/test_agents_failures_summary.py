"""The failure-length benchmark's reading of a tentative report (``bench.ha.agents_failures``)
and the scenario's test of a copy done with the cut (``copy_settled``)."""

from __future__ import annotations

from typing import Any

from bench.ha.agents_failures import DEFAULT_RATE, _run_key, summarize, summarize_copy
from spark_jobs.scenarios.tentative import copy_settled


def copy(**overrides: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "history": [
            ["STABLE", 100],
            ["UP_FAILURE", 12_400],
            ["STABILIZATION", 21_000],
            ["STABLE", 70_000],
        ],
        "reconciliations": [{"began": 20_500, "switched": 69_800, "stable": 70_000}],
        "final_state": "STABLE",
        "tentative_rows": 420,
        "tentative_buckets": 9,
        "undos": 1,
        "corrections": 450,
        "rec_dones": 1,
        "baseline_latency_ms": 2500.0,
        "max_added_latency_ms": 3100.0,
        "log_equals_owners": True,
        "log_rows_compared": 1800,
        "permits_lost": 0,
        "redo_failures": 0,
    }
    return found | overrides


def report(copies: dict[str, dict[str, Any]], intervals: Any) -> dict[str, Any]:
    return {
        "failure_at_ms": 10_000,
        "heal_at_ms": 18_000,
        "max_delay_ms": 5000,
        "budget": {"last_ms": 3000, "min_ms": 2500},
        "copies": copies,
        "permit_intervals": intervals,
        "consumer": {"tentative_received": 40, "held_at_end": 0},
        "switches": [{"from": "O", "to": "T", "at_ms": 12_100}],
        "consumer_latency": {},
        "difference": {"missing": 0, "extra": 0},
        "rows_compared": 900,
        "reconciliations_overlap": False,
        "checks": {"no_losses": True},
        "ok": True,
    }


def test_a_copy_that_reconciled_reads_from_the_cut_and_from_the_heal() -> None:
    intervals = [
        # A grant before the cut (start-up) is not this failure's.
        {"replica": "T", "fence": 1, "granted_ms": 500, "released_ms": 900},
        {"replica": "T", "fence": 2, "granted_ms": 20_400, "released_ms": 70_100},
        {"replica": "U", "fence": 3, "granted_ms": 70_300, "released_ms": 120_000},
    ]
    found = summarize_copy(report({"T": copy(), "U": copy()}, intervals), "T")
    assert found["went_tentative"] is True
    assert found["cut_to_up_failure_ms"] == 2400
    assert found["permit_granted_after_heal_ms"] == 2400
    assert found["permit_released_after_heal_ms"] == 52_100
    assert found["redo_began_after_heal_ms"] == 2500
    assert found["redo_ms"] == 49_300
    assert found["reconciliation_ms"] == 49_500
    assert found["stable_after_heal_ms"] == 52_000
    # 3.1 s added against X = 5 s plus the 1 s slack.
    assert found["within_x"] is True
    assert (found["tentative_rows"], found["corrections"]) == (420, 450)


def test_a_copy_that_never_went_tentative_has_no_reconciliation() -> None:
    calm = copy(
        history=[["STABLE", 100]],
        reconciliations=[],
        tentative_rows=0,
        tentative_buckets=0,
        undos=0,
        corrections=0,
        rec_dones=0,
        max_added_latency_ms=6200.0,
    )
    run = summarize(report({"T": calm, "U": calm}, "HTTPError: 500"), 2.0)
    found = run["copies"]["U"]
    assert found["went_tentative"] is False
    assert found["cut_to_up_failure_ms"] is None
    assert found["permit_granted_after_heal_ms"] is None
    assert found["reconciliation_ms"] is None and found["redo_ms"] is None
    assert found["tentative_rows"] == 0
    # 6.2 s added is past X + 1 s.
    assert found["within_x"] is False
    assert run["fail_for_s"] == 2.0
    assert run["consumer"]["switches"] == [("O", "T", 12_100)]


def test_an_up_failure_before_the_cut_does_not_count_as_this_failures() -> None:
    found = summarize_copy(
        report({"T": copy(history=[["UP_FAILURE", 4000], ["STABLE", 6000]])}, []), "T"
    )
    assert found["went_tentative"] is False


def state(**overrides: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "state": "STABLE",
        "reconciliations": 0,
        "history": [["STABLE", 1000.0]],
        "clock_offset_ms": 500,
        "max_delay_seconds": 5.0,
        # [end bucket (one past its last input bucket), tentative, sent at]
        "batches": [[1020, False, 1021.0], [1022, False, 1023.0]],
    }
    return found | overrides


def test_a_copy_that_reconciled_is_settled_either_way() -> None:
    reconciled = state(reconciliations=1, history=[["UP_FAILURE", 1010.0], ["STABLE", 1060.0]])
    assert copy_settled(reconciled, 1008.0, 1016.0, without_tentative=False)
    assert copy_settled(reconciled, 1008.0, 1016.0, without_tentative=True)
    assert not copy_settled(
        reconciled | {"state": "UP_FAILURE"}, 1008.0, 1016.0, without_tentative=True
    )


def test_a_copy_never_tentative_is_settled_once_stably_past_the_heal_plus_x() -> None:
    # Heal at 1016, X = 5 s: buckets up to 1021 (wall) must be processed stably; the batch
    # ending at bucket 1022 covers up to 1022 + 0.5 s on the wall clock.
    assert copy_settled(state(), 1008.0, 1016.0, without_tentative=True)
    # Off: the integration test's behaviour, a reconciliation is required.
    assert not copy_settled(state(), 1008.0, 1016.0, without_tentative=False)
    # Not yet past the heal plus X: a bucket of the cut may still go tentative.
    assert not copy_settled(state(), 1008.0, 1018.0, without_tentative=True)
    # Past it only through a tentative batch: not settled.
    tentative_last = state(batches=[[1020, False, 1021.0], [1022, True, 1023.0]])
    assert not copy_settled(tentative_last, 1008.0, 1016.0, without_tentative=True)


def test_a_copy_that_went_tentative_during_the_cut_must_reconcile() -> None:
    went = state(history=[["STABLE", 1000.0], ["UP_FAILURE", 1011.0], ["STABLE", 1012.0]])
    assert not copy_settled(went, 1008.0, 1016.0, without_tentative=True)
    # UP_FAILURE before the cut (start-up) is not this cut's.
    before = state(history=[["UP_FAILURE", 1001.0], ["STABLE", 1002.0]])
    assert copy_settled(before, 1008.0, 1016.0, without_tentative=True)


def test_runs_are_keyed_by_settings_rate_repeat_and_failure_and_older_runs_ran_at_the_files() -> (
    None
):
    # Before the knobs: two streams, one-second buckets, X = 5 s, reconciling alongside, the
    # file's rate, one run.
    assert _run_key({"fail_for_s": 8}) == (2, 1.0, 5.0, "alongside", DEFAULT_RATE, 0, 8.0)
    assert _run_key({"fail_for_s": 8, "rows_per_second_per_source": 1000}) == (
        2,
        1.0,
        5.0,
        "alongside",
        1000,
        0,
        8.0,
    )
    paper = {"streams": 3, "bucket_seconds": 0.1, "max_delay_s": 3.0}
    run = {"fail_for_s": 4, "rows_per_second_per_source": 1000, "settings": paper, "repeat": 1}
    assert _run_key(run) == (3, 0.1, 3.0, "alongside", 1000, 1, 4.0)
    alone = run | {"settings": paper | {"reconcile": "alone"}}
    assert _run_key(alone) == (3, 0.1, 3.0, "alone", 1000, 1, 4.0)
