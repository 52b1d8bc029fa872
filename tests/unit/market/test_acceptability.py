"""The one acceptability rule (DESIGN.md "Acceptable allocation") and its explanations."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from app.market.acceptability import (
    MAX_EXPLAINED,
    MEASURED_TOLERANCE,
    Link,
    Position,
    acceptable_from_counts,
    judge_allocation,
)
from app.market.cost_models import MM1Cost

M = MM1Cost(capacity=100)


def measured(name: str, load: float, threshold: float) -> Position:
    return Position(name, load, threshold)


def mm1(name: str, load: float, threshold: float = 80.0, price: float | None = 0.25) -> Position:
    return Position(name, load, threshold, smallest_task=5.0, model=M, price=price)


# --- measured loads (the admin overview's case) ---------------------------------------------


def test_everyone_below_threshold_is_acceptable() -> None:
    v = judge_allocation([measured("A", 70, 80), measured("B", 10, 80)], tolerance=0.01)
    assert v.acceptable and not v.overloaded and v.reasons == ()
    assert v.total_load == 80 and v.total_threshold == 160
    assert v.summary == "acceptable: every participant is below its capacity threshold"


def test_one_over_while_others_have_room_names_who_and_why() -> None:
    v = judge_allocation(
        [measured("A", 92, 80), measured("B", 30, 80), measured("C", 60, 80)],
        tolerance=MEASURED_TOLERANCE,
    )
    assert not v.acceptable and v.offenders == ("A",)
    assert v.reasons == ("A is over its threshold (92.0 > 80.0) while B, C have room",)


def test_overloaded_federation_is_acceptable_only_when_everyone_is_at_threshold() -> None:
    saturated = judge_allocation([measured("A", 120, 80), measured("B", 80, 80)], tolerance=0.01)
    assert saturated.acceptable and saturated.overloaded
    idle = judge_allocation([measured("A", 150, 80), measured("B", 40, 80)], tolerance=0.01)
    assert not idle.acceptable and idle.overloaded
    assert idle.reasons == (
        "B has room (40.0 < threshold 80.0) while the federation is overloaded (190.0 > 160.0)",
    )


def test_measurement_noise_within_tolerance_is_not_overload() -> None:
    assert judge_allocation(
        [measured("A", 80.5, 80), measured("B", 10, 80)], tolerance=MEASURED_TOLERANCE
    ).acceptable
    assert not judge_allocation([measured("A", 80.5, 80), measured("B", 10, 80)]).acceptable


loads = st.lists(st.tuples(st.floats(0, 500), st.floats(1, 200)), min_size=1, max_size=8).map(
    lambda xs: [measured(f"P{i}", load, th) for i, (load, th) in enumerate(xs)]
)


@given(loads)
def test_a_verdict_explains_itself(points: list[Position]) -> None:
    v = judge_allocation(points, tolerance=MEASURED_TOLERANCE)
    # Unacceptable always says why; acceptable never lists a complaint.
    assert v.acceptable == (v.reasons == ())
    if v.acceptable and not v.overloaded:
        assert all(p.load <= p.threshold * 1.01 for p in points)
    # Explaining changes nothing about the verdict.
    quiet = judge_allocation(points, tolerance=MEASURED_TOLERANCE, explain=False)
    assert (quiet.acceptable, quiet.offenders) == (v.acceptable, v.offenders)


@given(st.lists(st.tuples(st.integers(0, 120), st.integers(0, 100)), min_size=1, max_size=10))
def test_unit_tasks_and_integer_loads_judge_as_the_rounds_do(rows) -> None:
    # The large-federation rounds: over is load > T and room is load < T, exactly.
    points = [
        Position(f"P{i}", float(n), float(t), smallest_task=1.0) for i, (n, t) in enumerate(rows)
    ]
    v = judge_allocation(points, explain=False)
    total, cap = sum(n for n, _ in rows), sum(t for _, t in rows)
    over = sum(n > t for n, t in rows)
    under = sum(n < t for n, t in rows)
    assert v.acceptable == acceptable_from_counts(
        overloaded=total > cap, over=over, with_room=under
    )


# --- task granularity with cost models (the simulator's case) ----------------------------------


def test_a_load_just_over_the_threshold_within_one_task_counts_as_at_it() -> None:
    # Removing the only 5-unit task from 82 saves 0.24 per unit: below price + band.
    assert judge_allocation([mm1("A", 82), mm1("B", 10)], delta=0.005).acceptable
    assert not judge_allocation([mm1("A", 85), mm1("B", 10)], delta=0.005).acceptable


def test_without_contracts_the_threshold_is_the_capacity_and_past_it_is_over() -> None:
    # No contract price: the threshold is the capacity, the price there infinite. A at 130% of it
    # is over whatever its tasks, and nothing could ever move: the contract graph is empty.
    a = Position("A", 130.0, 100.0, smallest_task=5.0, model=M, price=math.inf)
    b = Position("B", 30.0, 100.0, smallest_task=5.0, model=M, price=math.inf)
    c = Position("C", 20.0, 100.0, smallest_task=5.0, model=M)  # price from the model: inf
    v = judge_allocation([a, b, c], [], delta=0.005)
    assert not v.acceptable and not v.overloaded and v.offenders == ("A",)
    assert v.reasons == (
        "A is over its threshold (130.0 > 100.0) and no contract path leads from A to spare "
        "capacity (B, C)",
    )


# --- explanations over the contract graph ------------------------------------------------------


def test_prices_below_the_takers_marginal_cost_on_every_path() -> None:
    v = judge_allocation([mm1("A", 90), mm1("C", 70)], [Link("A", "C", 0.01, 0.02)], delta=0.005)
    assert v.offenders == ("A",)
    (reason,) = v.reasons
    assert reason.startswith("A is over its threshold (90.0 > 80.0); contract paths lead to spare")
    assert "prices on every path are below the marginal cost of taking load at C (0.16)" in reason


def test_prices_above_the_givers_marginal_cost_on_every_path() -> None:
    v = judge_allocation([mm1("A", 85), mm1("C", 20)], [Link("A", "C", 0.9, 1.0)], delta=0.005)
    (reason,) = v.reasons
    assert "prices on every path to C are above A's marginal cost of shedding (0.333)" in reason


def test_prices_that_would_rise_along_the_only_path() -> None:
    links = [Link("A", "B", 0.2, 0.3), Link("B", "C", 0.5, 0.6)]
    v = judge_allocation([mm1("A", 90), mm1("B", 80), mm1("C", 20)], links, delta=0.005)
    (reason,) = v.reasons
    assert "prices rise along every path to C" in reason


def test_a_workable_path_means_the_market_has_not_moved_the_load_yet() -> None:
    links = [("A", "B"), ("B", "C")]
    v = judge_allocation([mm1("A", 90), mm1("B", 80), mm1("C", 20)], links, delta=0.005)
    (reason,) = v.reasons
    assert reason == (
        "A is over its threshold (90.0 > 80.0) while C has room and a contract path at a price "
        "both sides accept: the market has not moved the load yet"
    )


def test_overloaded_federation_explains_the_idle_participant_by_the_graph() -> None:
    people = [mm1("A", 99), mm1("B", 99), mm1("C", 60)]
    v = judge_allocation(people, [Link("A", "B", 0.24, 0.26)], delta=0.005)
    assert v.overloaded and v.offenders == ("C",)
    assert v.reasons == (
        "C has room (60.0 < threshold 80.0) while the federation is overloaded (258.0 > 240.0) "
        "and no contract path leads to C from a participant over its threshold (A, B)",
    )


def test_many_offenders_are_counted_not_listed() -> None:
    people = [measured(f"P{i}", 100, 80) for i in range(MAX_EXPLAINED + 3)]
    people.append(measured("spare", 0, 10_000))
    v = judge_allocation(people, [])
    assert len(v.offenders) == MAX_EXPLAINED + 3
    assert len(v.reasons) == MAX_EXPLAINED + 1
    assert v.reasons[-1] == "3 more participants are over their thresholds"


def test_overloaded_federation_with_cost_models() -> None:
    # Everyone at or above the threshold: acceptable; C with room for a task: not.
    ok = judge_allocation([mm1("A", 80), mm1("B", 115), mm1("C", 75)], delta=0.005)
    assert ok.overloaded and ok.acceptable
    idle = judge_allocation([mm1("A", 80), mm1("B", 165), mm1("C", 25)], delta=0.005)
    assert idle.overloaded and not idle.acceptable and idle.offenders == ("C",)
    assert "while the federation is overloaded" in idle.reasons[0]
    # B at 75 cannot take a 5-unit task below the price less the band; C at 20 can.
    v = judge_allocation([mm1("A", 85), mm1("B", 75), mm1("C", 20)], delta=0.005)
    assert v.reasons == ("A is over its threshold (85.0 > 80.0) while C has room",)
