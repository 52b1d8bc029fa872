"""The tentative scenario's reading of the registry's permit records and the copies' states
(``spark_jobs.scenarios.tentative``): intervals, overlap, one copy serving throughout."""

from __future__ import annotations

from typing import Any

from spark_jobs.scenarios.tentative import (
    _reconciling,
    held_permit_after_heal,
    intervals_overlap,
    one_copy_serving,
    permit_intervals,
    since,
    startup_episodes,
    tentative_for_the_cut,
)


def record(action: str, replica: str, at: float, fence: int = 1) -> dict[str, Any]:
    return {"action": f"permit.{action}", "replica": replica, "at": at, "fence": fence}


def test_grants_released_before_the_next_one_do_not_overlap() -> None:
    records = [
        record("granted", "T", 10.0, 1),
        record("released", "T", 40.0, 1),
        record("granted", "U", 40.5, 2),
        record("released", "U", 70.0, 2),
    ]
    intervals = permit_intervals(records)
    assert [(i["replica"], i["granted"], i["released"]) for i in intervals] == [
        ("T", 10.0, 40.0),
        ("U", 40.5, 70.0),
    ]
    assert not intervals_overlap(intervals)


def test_a_grant_to_another_copy_before_the_release_is_an_overlap() -> None:
    # T's lease ran out mid-redo (never renewed), U got the permit, T released late (refused:
    # the registry records no release of T's).
    records = [record("granted", "T", 10.0, 1), record("granted", "U", 21.0, 2)]
    assert intervals_overlap(permit_intervals(records))
    released_late = [*records[:1], record("released", "T", 25.0), records[1]]
    released_late.sort(key=lambda r: r["at"])
    assert intervals_overlap(permit_intervals(released_late))


def test_a_regrant_to_the_same_copy_continues_its_interval() -> None:
    records = [
        record("granted", "T", 10.0, 1),
        record("granted", "T", 22.0, 2),
        record("released", "T", 30.0, 2),
        record("granted", "U", 31.0, 3),
    ]
    intervals = permit_intervals(records)
    assert [(i["replica"], i["granted"], i["released"]) for i in intervals] == [
        ("T", 10.0, 30.0),
        ("U", 31.0, None),
    ]
    assert not intervals_overlap(intervals)


def test_one_copy_serving_needs_one_stable_or_up_failure_at_every_change() -> None:
    t = [["STABLE", 0.0], ["UP_FAILURE", 10.0], ["STABILIZATION", 30.0], ["STABLE", 31.0]]
    u = [["STABLE", 0.0], ["UP_FAILURE", 10.5], ["STABILIZATION", 50.0], ["STABLE", 52.0]]
    assert one_copy_serving([t, u], 5.0, 60.0)
    both = [["STABLE", 0.0], ["UP_FAILURE", 10.5], ["STABILIZATION", 30.5], ["STABLE", 33.0]]
    assert not one_copy_serving([t, both], 5.0, 60.0)


def test_a_copy_stable_again_before_its_switch_was_timed_reconciled() -> None:
    # The history of U's copy in a CI run: STABLE 62 ms before the switch's own timestamp (the
    # UNDO and REC_DONE go out inside the switch).
    state = {
        "history": [
            ["STABLE", 1.0],
            ["UP_FAILURE", 10.0],
            ["STABILIZATION", 90.127],
            ["STABLE", 90.480],
        ],
        "reconciled": [
            {
                "began": 30.847,
                "switched": 90.542,
                "checkpoint_bytes": 31_744,
                "state_rows": 212,
            }
        ],
    }
    assert _reconciling(state) == [
        {
            "began": 30.847,
            "switched": 90.542,
            "stable": 90.480,
            "checkpoint_bytes": 31_744,
            "state_rows": 212,
        }
    ]


def test_a_dropped_redo_is_not_a_completed_reconciliation() -> None:
    state = {
        "history": [["UP_FAILURE", 10.0], ["STABILIZATION", 40.0], ["STABLE", 41.0]],
        "reconciled": [{"began": 20.0}, {"began": 39.0, "switched": 41.5}],
    }
    assert [r["stable"] for r in _reconciling(state)] == [None, 41.0]


def test_a_start_up_episode_is_counted_apart_and_left_out_of_the_measured_history() -> None:
    # T went tentative at 10 s while catching up, STABLE again at 40 s; the consumer started
    # at 100 s and the cut's episode began at 130 s.
    history = [
        ["STABLE", 1.0],
        ["UP_FAILURE", 10.0],
        ["STABILIZATION", 30.0],
        ["STABLE", 40.0],
        ["UP_FAILURE", 130.0],
        ["STABILIZATION", 170.0],
        ["STABLE", 175.0],
    ]
    assert since(history, 100.0) == history[4:]
    assert startup_episodes({"history": history}, 100.0) == 1
    assert startup_episodes({"history": history}, 5.0) == 0


# A copy's states as its agent records them: [state, wall time].
CUT, HEAL, STARTED = 100.0, 112.0, 60.0


def test_a_copy_tentative_during_the_cut_only_is_tentative_for_the_cut() -> None:
    history = [["STABLE", 10.0], ["UP_FAILURE", 101.5], ["STABILIZATION", 130.0], ["STABLE", 160.0]]
    assert tentative_for_the_cut(history, STARTED, CUT, HEAL)


def test_a_copy_still_tentative_from_its_start_up_at_the_cut_is_tentative_for_the_cut() -> None:
    # Went tentative while it caught up (before the consumer's start) and reconciled once, after
    # the heal, for both: one UNDO corrects the start-up's rows and the cut's.
    history = [["STABLE", 10.0], ["UP_FAILURE", 40.0], ["STABILIZATION", 130.0], ["STABLE", 160.0]]
    assert tentative_for_the_cut(history, STARTED, CUT, HEAL)


def test_a_copy_tentative_between_the_start_and_the_cut_is_not() -> None:
    history = [["STABLE", 10.0], ["UP_FAILURE", 80.0], ["STABILIZATION", 130.0], ["STABLE", 160.0]]
    assert not tentative_for_the_cut(history, STARTED, CUT, HEAL)


def test_a_copy_stable_through_the_cut_or_tentative_only_after_the_heal_is_not() -> None:
    assert not tentative_for_the_cut([["STABLE", 10.0]], STARTED, CUT, HEAL)
    late = [["STABLE", 10.0], ["UP_FAILURE", 115.0], ["STABILIZATION", 130.0], ["STABLE", 160.0]]
    assert not tentative_for_the_cut(late, STARTED, CUT, HEAL)
    # Tentative from its start-up but STABLE again before the cut, and stable through it.
    healed = [["UP_FAILURE", 40.0], ["STABILIZATION", 70.0], ["STABLE", 90.0]]
    assert not tentative_for_the_cut(healed, STARTED, CUT, HEAL)


def test_a_permit_granted_before_the_heal_and_released_after_it_was_held_after_the_heal() -> None:
    intervals = permit_intervals(
        [
            record("granted", "U", 95.0, 1),  # a start-up episode's redo, on through the cut
            record("released", "U", 140.0, 1),
            record("granted", "T", 140.5, 2),
            record("released", "T", 170.0, 2),
        ]
    )
    assert held_permit_after_heal(intervals, "U", HEAL)
    assert held_permit_after_heal(intervals, "T", HEAL)


def test_a_permit_released_before_the_heal_was_not_held_after_it() -> None:
    intervals = permit_intervals(
        [record("granted", "U", 70.0, 1), record("released", "U", 90.0, 1)]
    )
    assert not held_permit_after_heal(intervals, "U", HEAL)
    assert not held_permit_after_heal(intervals, "T", HEAL)
