"""The tentative scenario at the Borealis harness's settings: a third input stream, X from the
options, and the copy's latencies read in its own boundary interval (100 ms there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.federation.document import load_federation
from spark_jobs.scenarios.latency_plot import plot_latencies
from spark_jobs.scenarios.tentative import (
    FEDERATION,
    CopyLatency,
    TentativeOptions,
    copy_settled,
    first_version_latency,
    latency_limit_s,
    node_latencies,
    stood_down_for_a_redo,
    with_max_delay,
    with_third_stream,
)


def test_the_third_stream_runs_at_u_and_feeds_o_x() -> None:
    doc = with_third_stream(load_federation(FEDERATION))
    tasks = {t.name: t for t in doc.tasks}
    near = tasks["O.near"]
    assert (near.owner, near.host, near.fragment) == ("O", "U", "generator")
    # Its own seed: three distinct streams, each reproducible for the reference.
    assert near.params["seed"] == 23
    assert {tasks[n].params["seed"] for n in ("O.conns", "O.far", "O.near")} == {21, 22, 23}
    assert tasks["O.x"].inputs == ("O.conns", "O.far", "O.near")
    assert TentativeOptions(streams=3).sources() == {"O.conns": "O", "O.far": "T", "O.near": "U"}
    assert TentativeOptions().sources() == {"O.conns": "O", "O.far": "T"}


def test_x_is_set_on_every_contract_that_hosts_a_replica_and_only_there() -> None:
    doc = with_max_delay(load_federation(FEDERATION), 3.0)
    delays = {
        tuple(sorted((c.a, c.b))): None
        if c.availability is None
        else c.availability.max_delay_seconds
        for c in doc.contracts
    }
    assert delays == {("O", "T"): 3.0, ("O", "U"): 3.0, ("T", "U"): None}
    with pytest.raises(ValueError, match="max_delay_s must be a positive"):
        with_max_delay(doc, 0)


def _copy(batches: list[list[object]], bucket_ms: int | None) -> dict[str, object]:
    state: dict[str, object] = {"clock_offset_ms": 1_000_000, "batches": batches}
    if bucket_ms is not None:
        state["bucket_ms"] = bucket_ms
    return state


def test_latency_per_bucket_counts_in_the_copys_bucket() -> None:
    # 100 ms buckets: bucket 10 ends at 1.1 s on the copy's clock, 1001.1 s on the wall.
    holder = _copy([[11, False, 1001.3], [14, True, 1003.9]], 100)
    found = node_latencies(holder)
    assert found[10] == pytest.approx((0.2, False))
    # Buckets 11, 12, 13 end at 1001.2, 1001.3, 1001.4: first processed at 1003.9, tentative.
    assert found[11] == pytest.approx((2.7, True))
    assert found[13] == pytest.approx((2.5, True))
    # A state without the field (before it was reported) reads as one-second buckets.
    assert node_latencies(_copy([[11, False, 1011.5]], None))[10] == pytest.approx((0.5, False))


def test_baseline_and_added_latency_with_sub_second_buckets() -> None:
    started, failure_at = 1001.0, 1002.0
    batches = [[b + 1, False, 1000 + (b + 1) / 10 + 0.3] for b in range(10, 20)]
    batches.append([25, True, 1000 + 2.5 + 2.0])
    latency = CopyLatency.of(_copy(batches, 100), started, failure_at)
    assert latency.bucket_s == pytest.approx(0.1)
    assert latency.ends_at(19) == pytest.approx(1002.0)
    assert latency.baseline == pytest.approx(0.3)
    # Bucket 20 ended at 1002.1 and was first processed, tentatively, at 1004.5.
    assert latency.worst == pytest.approx(2.4)
    assert latency.added == pytest.approx(2.1)
    assert latency.tentative_buckets == [20, 21, 22, 23, 24]


def test_a_copy_settles_once_a_stable_batch_passes_the_heal_plus_x_in_its_buckets() -> None:
    heal_at = 1005.0
    state = _copy([[79, False, 1008.0]], 100) | {"state": "STABLE", "reconciliations": 0}
    state |= {"max_delay_seconds": 3.0, "history": []}
    # Batch end 79 x 0.1 s + 1000 = 1007.9 < heal + X = 1008: not yet.
    assert not copy_settled(state, 1003.0, heal_at, True)
    state["batches"] = [[80, False, 1008.1]]
    assert copy_settled(state, 1003.0, heal_at, True)


def test_the_latency_slack_is_one_bucket() -> None:
    assert latency_limit_s(3.0, 0.1) == pytest.approx(3.1)
    assert latency_limit_s(5.0) == pytest.approx(6.0)


def test_the_first_version_takes_each_bucket_from_the_copy_that_was_ahead() -> None:
    started, failure_at = 1001.0, 1002.0
    # Both copies 0.3 s behind before the cut; during it T falls 2.4 s behind (its bucket 20,
    # ended at 1002.1, first processed at 1004.5) while U sent bucket 20 at 1003.1 (1.0 s) and
    # its later buckets at 0.5-0.9 s.
    steady = [[b + 1, False, 1000 + (b + 1) / 10 + 0.3] for b in range(10, 20)]
    t = CopyLatency.of(_copy([*steady, [25, True, 1004.5]], 100), started, failure_at)
    u = CopyLatency.of(
        _copy([*steady, [21, True, 1003.1], [25, True, 1003.4]], 100), started, failure_at
    )
    found = first_version_latency([t, u], started, failure_at)
    assert found["baseline_latency_ms"] == pytest.approx(300.0)
    # Bucket 20: U's 1.0 s; buckets 21-24 (ended 1002.2-1002.5): U's 1.2 s at most.
    assert found["max_added_latency_ms"] == pytest.approx(900.0)
    assert found["worst_end_ms"] == 1200  # bucket 21, ended 1.2 s after the start
    # T alone is its own worst: 2.1 s added.
    alone = first_version_latency([t], started, failure_at)
    assert alone["max_added_latency_ms"] == pytest.approx(2100.0)


def test_no_first_version_without_a_baseline() -> None:
    late = CopyLatency.of(_copy([[25, True, 1004.5]], 100), 1001.0, 1002.0)
    assert first_version_latency([late], 1001.0, 1002.0)["max_added_latency_ms"] is None


def test_the_latency_plot_is_a_png_of_both_copies(tmp_path: Path) -> None:
    started, failure_at = 1001.0, 1002.0
    steady = [[b + 1, False, 1000 + (b + 1) / 10 + 0.3] for b in range(10, 20)]
    copies = {
        "T": CopyLatency.of(_copy([*steady, [25, True, 1004.5]], 100), started, failure_at),
        "U": CopyLatency.of(_copy([*steady, [25, True, 1003.4]], 100), started, failure_at),
    }
    path = plot_latencies(
        tmp_path / "latency.png",
        copies,
        started=started,
        failure_at=failure_at,
        heal_at=1003.0,
        max_delay_s=3.0,
        reconciliations={"T": [{"began": 2500, "stable": 3500}], "U": [{"began": 3600}]},
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000


def test_each_copy_reconciles_by_its_own_mode_or_the_scenarios() -> None:
    mixed = TentativeOptions(reconcile_by_holder=(("T", "alone"),))
    assert (mixed.reconcile_of("T"), mixed.reconcile_of("U")) == ("alone", "alongside")
    everywhere = TentativeOptions(reconcile="alone")
    assert (everywhere.reconcile_of("T"), everywhere.reconcile_of("U")) == ("alone", "alone")


@pytest.mark.parametrize("pair", [("O", "alone"), ("T", "sideways")])
def test_a_mode_for_no_copy_or_no_mode_is_refused_with_both_named(pair) -> None:
    with pytest.raises(ValueError) as refused:
        TentativeOptions(reconcile_by_holder=(pair,))
    assert repr(pair[0]) in str(refused.value) and repr(pair[1]) in str(refused.value)
    assert "T, U" in str(refused.value) and "alongside, alone, auto" in str(refused.value)


def test_a_copy_stood_down_when_one_of_its_redos_says_so() -> None:
    assert not stood_down_for_a_redo({})
    assert not stood_down_for_a_redo({"reconciled": [{"began": 1.0, "stood_down": 0.0}]})
    redone = [{"began": 1.0, "stood_down": 0.0}, {"began": 9.0, "stood_down": 1.0}]
    assert stood_down_for_a_redo({"reconciled": redone})
