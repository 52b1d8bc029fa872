"""The admin overview's "acceptable allocation now, and why not" rule (DESIGN.md)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.market.measured_allocation import LoadPoint, verdict


def test_everyone_below_threshold_is_acceptable() -> None:
    v = verdict([LoadPoint("A", 70, 80), LoadPoint("B", 10, 80)])
    assert v.acceptable and not v.overloaded_system and v.reasons == ()
    assert v.total_load == 80 and v.total_threshold == 160


def test_one_over_while_others_have_room_names_who_and_why() -> None:
    v = verdict([LoadPoint("A", 92, 80), LoadPoint("B", 30, 80), LoadPoint("C", 60, 80)])
    assert not v.acceptable
    assert v.reasons == ("A is over its threshold (92.0 > 80.0) while B, C have room",)


def test_overloaded_system_is_acceptable_only_when_everyone_is_at_threshold() -> None:
    saturated = verdict([LoadPoint("A", 120, 80), LoadPoint("B", 80, 80)])
    assert saturated.acceptable and saturated.overloaded_system
    idle = verdict([LoadPoint("A", 150, 80), LoadPoint("B", 40, 80)])
    assert not idle.acceptable and idle.overloaded_system
    assert idle.reasons == (
        "B has room (40.0 < threshold 80.0) while the system is overloaded (190.0 > 160.0)",
    )


def test_measurement_noise_within_tolerance_is_not_overload() -> None:
    assert verdict([LoadPoint("A", 80.5, 80), LoadPoint("B", 10, 80)]).acceptable


loads = st.lists(st.tuples(st.floats(0, 500), st.floats(1, 200)), min_size=1, max_size=8).map(
    lambda xs: [LoadPoint(f"P{i}", load, th) for i, (load, th) in enumerate(xs)]
)


@given(loads)
def test_a_verdict_explains_itself(points: list[LoadPoint]) -> None:
    v = verdict(points)
    # Unacceptable always says why; acceptable never lists a complaint.
    assert v.acceptable == (v.reasons == ())
    if v.acceptable and not v.overloaded_system:
        assert all(p.load <= p.threshold * 1.01 for p in points)
