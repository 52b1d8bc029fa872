"""BPM decisions: reservation prices, the negotiated price, partial acceptance, chains."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.market import bpm
from app.market.cost_models import MM1Cost, marginal_cost

M = MM1Cost(capacity=100)


def test_largest_tasks_are_offered_first_and_only_while_shedding_pays() -> None:
    ranked = bpm.rank_for_shedding([("s", 5.0), ("b", 20.0), ("m", 10.0), ("z", 0.0)])
    assert ranked == [("b", 20.0), ("m", 10.0), ("s", 5.0)]
    # At 95 the incremental costs per unit are 0.8 (95->75), 0.1 (75->65) ... floor 0.24.
    assert bpm.offer_set(M, 95.0, ranked, 0.24, 0.005) == [("b", 20.0)]


def test_price_is_the_midpoint_of_the_reservations_inside_the_range() -> None:
    giver_max = bpm.giver_reservation(M, 90.0, [("t", 5.0)], 0.26, 0.005)  # MC 0.667 -> capped
    taker_min = bpm.taker_reservation(M, 20.0, 0.24, 0.005)  # MC 0.016 -> floored
    assert (giver_max, taker_min) == (0.26, 0.24)
    assert bpm.split_price(giver_max, taker_min) == pytest.approx(0.25)
    assert bpm.split_price(0.24, 0.25) is None
    # A fixed-price contract clips both sides to its one price, and still trades.
    assert bpm.split_price(0.25, 0.25) == 0.25


def test_partial_acceptance_stops_where_the_takers_marginal_cost_reaches_the_price() -> None:
    offered = [(f"t{i}", 5.0) for i in range(10)]
    taken = bpm.accept_subset(
        M, 130.0, M, 60.0, offered, give_price=0.25, take_price=0.25, delta=0.005
    )
    # D'(75) = 0.16 < 0.245 <= D'(80) = 0.25: the taker stops at 75.
    assert len(taken) == 3


def test_move_back_needs_both_sides_to_gain() -> None:
    from app.market.protocol import Placement, Side, move_back

    placed = Placement("t", 5.0, "O", 0.25, moved_at=0.0, min_move_seconds=30.0)

    def back(host: float, origin: float) -> bool:
        return move_back(placed, Side(M, host), Side(M, origin), now=30.0, delta=0.005) is not None

    assert back(90.0, 40.0)
    assert not back(60.0, 40.0)  # the host gains little
    assert not back(90.0, 78.0)  # the origin is full


def test_chain_prices_never_rise_and_a_single_leg_is_the_midpoint() -> None:
    assert bpm.leg_prices(0.26, 0.24, [(0.24, 0.26)]) == [pytest.approx(0.25)]
    prices = bpm.leg_prices(0.3, 0.1, [(0.22, 0.28), (0.1, 0.2)])
    assert prices is not None
    assert prices[0] >= prices[1]
    assert 0.22 <= prices[0] <= 0.28 and 0.1 <= prices[1] <= 0.2
    # The later contract's floor is above what the first may pay: no chain.
    assert bpm.leg_prices(0.3, 0.1, [(0.1, 0.15), (0.2, 0.25)]) is None


def test_threshold_is_at_the_contracts_mean_midpoint() -> None:
    assert bpm.capacity_threshold(M, [(0.24, 0.26), (0.24, 0.26)]) == pytest.approx(80.0)
    assert bpm.capacity_threshold(M, []) == 100.0


ranges = st.tuples(
    st.floats(min_value=0.01, max_value=1.0), st.floats(min_value=0.0, max_value=0.5)
).map(lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=300, deadline=None)
@given(
    st.floats(min_value=0.0, max_value=2.0),
    st.floats(min_value=0.0, max_value=2.0),
    st.lists(ranges, min_size=1, max_size=5),
)
def test_chain_prices_respect_every_bound(giver_max, taker_min, legs) -> None:
    prices = bpm.leg_prices(giver_max, taker_min, legs)
    if prices is None:
        return
    assert prices[0] <= giver_max + 1e-12
    assert prices[-1] >= taker_min - 1e-12
    for p, (lo, hi) in zip(prices, legs, strict=True):
        assert lo - 1e-12 <= p <= hi + 1e-12
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(prices))


@settings(max_examples=200, deadline=None)
@given(
    giver_load=st.floats(min_value=0, max_value=150),
    taker_load=st.floats(min_value=0, max_value=99),
    sizes=st.lists(st.floats(min_value=0.1, max_value=30), min_size=1, max_size=8),
    price=st.floats(min_value=0.01, max_value=2.0),
    delta=st.floats(min_value=0.0, max_value=0.05),
)
def test_every_accepted_task_is_individually_rational_for_both(
    giver_load, taker_load, sizes, price, delta
) -> None:
    offered = bpm.rank_for_shedding((f"t{i}", s) for i, s in enumerate(sizes))
    taken = bpm.accept_subset(
        M, giver_load, M, taker_load, offered, give_price=price, take_price=price, delta=delta
    )
    removed = added = 0.0
    for _, size in taken:
        assert marginal_cost(M, giver_load - removed, -size) > price + delta
        assert marginal_cost(M, taker_load + added, size) < price - delta
        removed += size
        added += size
