"""The federation protocol's rules (app/market/protocol.py) and their invariants as properties."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from app.market import bpm, protocol
from app.market.cost_models import CostModel, MM1Cost, QuadraticCost
from app.market.protocol import (
    OfferGate,
    OfferTiming,
    Placement,
    Side,
    chain_prices,
    giver_reservation,
    may_offer,
    move_back,
    negotiated_price,
    taker_reservation,
)

prices = st.floats(0.0, 2.0, allow_nan=False)
reservations = st.floats(-1.0, 3.0, allow_nan=False) | st.sampled_from([math.inf, -math.inf])


@st.composite
def ranges(draw: st.DrawFn) -> tuple[float, float]:
    lo = draw(prices)
    return lo, lo + draw(st.floats(0.0, 0.5))


models: st.SearchStrategy[CostModel] = st.one_of(
    st.builds(MM1Cost, capacity=st.floats(20.0, 300.0), scale=st.floats(0.2, 5.0)),
    st.builds(
        QuadraticCost,
        capacity=st.floats(20.0, 300.0),
        a=st.floats(0.0, 5.0),
        b=st.floats(0.01, 5.0),
    ),
)
deltas = st.floats(0.0, 0.05)


# --- the negotiated price ------------------------------------------------------------------


def test_negotiated_price_is_the_midpoint_of_the_overlap() -> None:
    assert negotiated_price(0.40, 0.10, 0.24, 0.26) == pytest.approx(0.25)
    assert negotiated_price(0.25, 0.10, 0.24, 0.26) == pytest.approx(0.245)
    assert negotiated_price(0.40, 0.255, 0.24, 0.26) == pytest.approx(0.2575)
    assert negotiated_price(0.30, 0.20, 0.0, 10.0) == pytest.approx(0.25)


def test_no_price_when_the_taker_wants_more_than_the_giver_pays_or_outside_the_range() -> None:
    assert negotiated_price(0.20, 0.30, 0.0, 1.0) is None
    assert negotiated_price(0.23, 0.10, 0.24, 0.26) is None  # giver pays less than the floor
    assert negotiated_price(0.40, 0.27, 0.24, 0.26) is None  # taker wants more than the ceiling
    assert negotiated_price(math.nan, 0.1, 0.0, 1.0) is None
    assert negotiated_price(0.5, 0.1, 0.3, 0.2) is None  # an empty range


def test_the_giver_alone_over_capacity_still_pays_within_the_range() -> None:
    assert negotiated_price(math.inf, 0.1, 0.24, 0.26) == pytest.approx(0.25)
    assert negotiated_price(0.5, math.inf, 0.24, 0.26) is None


@given(g=reservations, t=reservations, r=ranges())
def test_negotiated_price_lies_in_the_range_and_between_both_reservations(g, t, r) -> None:
    lo, hi = r
    price = negotiated_price(g, t, lo, hi)
    overlap = max(t, lo) <= min(g, hi) and t <= g
    if price is None:
        assert not overlap or not math.isfinite(max(t, lo)) or not math.isfinite(min(g, hi))
        return
    assert lo <= price <= hi
    assert t <= price <= g


@given(g=reservations, t=reservations, r=ranges())
def test_the_asking_price_is_never_above_the_negotiated_one(g, t, r) -> None:
    lo, hi = r
    price = negotiated_price(g, t, lo, hi)
    asked = protocol.asking_price(g, lo, hi)
    if price is not None:
        assert asked is not None and asked <= price + 1e-15


@given(st.lists(st.tuples(reservations, reservations, ranges()), min_size=1, max_size=20))
def test_the_array_rule_is_the_scalar_rule(rows) -> None:
    g = np.array([r[0] for r in rows])
    t = np.array([r[1] for r in rows])
    lo = np.array([r[2][0] for r in rows])
    hi = np.array([r[2][1] for r in rows])
    got = protocol.negotiated_prices(g, t, lo, hi)
    for k, (gk, tk, (lok, hik)) in enumerate(rows):
        expected = negotiated_price(gk, tk, lok, hik)
        if expected is None:
            assert math.isnan(got[k])
        else:
            assert got[k] == expected  # identical doubles, not approximately


@given(g=reservations, t=reservations, r=ranges())
def test_a_one_leg_chain_is_the_negotiated_price(g, t, r) -> None:
    price = negotiated_price(g, t, *r)
    legs = chain_prices(g, t, [r])
    assert legs == (None if price is None else [price])


@given(
    g=reservations,
    t=reservations,
    legs=st.lists(ranges(), min_size=1, max_size=5),
)
def test_chain_prices_never_rise_and_stay_inside_each_range(g, t, legs) -> None:
    chain = chain_prices(g, t, legs)
    if chain is None:
        return
    assert chain[0] <= g and chain[-1] >= t
    for price, (lo, hi) in zip(chain, legs, strict=True):
        assert lo <= price <= hi
    assert all(a >= b for a, b in itertools.pairwise(chain))


# --- individual rationality and balanced payments ----------------------------------------------


@dataclass(frozen=True)
class Deal:
    giver: CostModel
    taker: CostModel
    g_load: float
    t_load: float
    size: float
    delta: float
    price_min: float
    price_max: float

    def reservations(self) -> tuple[float, float]:
        return (
            giver_reservation(self.giver, self.g_load, self.size, self.delta),
            taker_reservation(self.taker, self.t_load, self.size, self.delta),
        )

    def price(self) -> float | None:
        return negotiated_price(*self.reservations(), self.price_min, self.price_max)


@st.composite
def deals(draw: st.DrawFn, delta: st.SearchStrategy[float] = deltas) -> Deal:
    """A loaded giver, a lighter taker and a contract range placed around their reservations
    (sometimes off them), so that most draws trade and some do not."""
    giver, taker = draw(models), draw(models)
    g_load = draw(st.floats(0.4, 0.99)) * giver.capacity
    t_load = draw(st.floats(0.0, 0.7)) * taker.capacity
    size = draw(st.floats(0.01, 0.5)) * g_load
    band = draw(delta)
    g_res = giver_reservation(giver, g_load, size, band)
    t_res = taker_reservation(taker, t_load, size, band)
    anchor_lo, anchor_hi = sorted(x if math.isfinite(x) else 10.0 for x in (g_res, t_res))
    span = anchor_hi - anchor_lo + 0.01
    lo = max(0.0, anchor_lo + draw(st.floats(-0.3, 1.1)) * span)
    hi = lo + draw(st.floats(0.0, 1.0)) * span
    return Deal(giver, taker, g_load, t_load, size, band, lo, hi)


@given(deal=deals())
def test_a_deal_is_individually_rational_for_both_sides(deal: Deal) -> None:
    price = deal.price()
    assume(price is not None)
    assert price is not None
    d = deal
    saving = d.giver.cost(d.g_load) - d.giver.cost(d.g_load - d.size)
    added = d.taker.cost(d.t_load + d.size) - d.taker.cost(d.t_load)
    paid = price * d.size
    tol = 1e-9 * max(1.0, abs(saving), abs(added), paid)
    # The giver pays no more than it saves, the taker's cost rises by no more than it is paid,
    # each by the band's margin.
    assert paid + d.delta * d.size <= saving + tol
    assert added + d.delta * d.size <= paid + tol
    assert d.price_min <= price <= d.price_max


@given(
    g=st.floats(0.0, 3.0),
    t=st.floats(0.0, 3.0),
    legs=st.lists(ranges(), min_size=1, max_size=5),
    load=st.floats(0.1, 50.0),
    seconds=st.floats(0.0, 600.0),
)
def test_payments_along_a_chain_balance_and_no_relay_loses(g, t, legs, load, seconds) -> None:
    chain = chain_prices(g, t, legs)
    assume(chain is not None)
    assert chain is not None
    net = [0.0] * (len(chain) + 1)
    for leg, price in enumerate(chain):
        amount = bpm.payment(price, load, seconds)
        net[leg] -= amount
        net[leg + 1] += amount
    assert math.fsum(net) == pytest.approx(0.0, abs=1e-9 * max(1.0, *map(abs, net)))
    assert all(n >= -1e-12 for n in net[1:-1])  # a relay is paid at least what it pays on


# --- move-back --------------------------------------------------------------------------------

M = MM1Cost(capacity=100)


def _placed(size: float, price: float, at: float = 0.0, minimum: float = 30.0) -> Placement:
    return Placement("t", size, "A", price, moved_at=at, min_move_seconds=minimum)


def test_move_back_when_cheaper_for_both_after_the_minimum_duration() -> None:
    # The simulator's example: B at 85 saves (D(85) - D(75)) / 10 = 0.267 > 0.25 + 0.005 on
    # returning a 10-unit task; A at 40 pays D'(...) well below 0.245 to run it again.
    placed = _placed(10.0, 0.25)
    host, origin = Side(M, 85.0), Side(M, 40.0)
    assert move_back(placed, host, origin, now=29.9, delta=0.005) is None
    back = move_back(placed, host, origin, now=30.0, delta=0.005)
    assert back is not None and (back.task, back.to, back.price) == ("t", "A", 0.25)
    assert back.host_saving == pytest.approx((M.cost(85) - M.cost(75)) / 10)
    assert protocol.host_returns(placed, host, 30.0, 0.005)
    assert protocol.origin_takes_back(placed, origin, 0.005)


def test_no_move_back_when_the_origin_would_pay_more_than_it_saves() -> None:
    placed = _placed(10.0, 0.25)
    assert move_back(placed, Side(M, 85.0), Side(M, 78.0), now=60.0, delta=0.005) is None
    assert not protocol.origin_takes_back(placed, Side(M, 78.0), 0.005)


# A positive band: with none, a move priced exactly at both reservations is a tie that rounding
# in the loads could tip either way.
@given(deal=deals(st.floats(1e-6, 0.05)), later=st.floats(0.0, 1e6))
def test_a_task_that_just_moved_never_moves_back_under_the_same_loads(deal: Deal, later) -> None:
    price = deal.price()
    assume(price is not None)
    assert price is not None
    d = deal
    placed = Placement("t", d.size, "G", price, moved_at=0.0, min_move_seconds=0.0)
    # After the move the taker hosts it at t_load + size and the giver is at g_load - size.
    host, origin = Side(d.taker, d.t_load + d.size), Side(d.giver, d.g_load - d.size)
    assert move_back(placed, host, origin, now=later, delta=d.delta) is None


@given(
    host=models,
    origin=models,
    h_fill=st.floats(0.0, 1.2),
    o_fill=st.floats(0.0, 1.2),
    size=st.floats(0.1, 40.0),
    price=st.floats(0.0, 2.0),
    delta=deltas,
    moved_at=st.floats(0.0, 1000.0),
    minimum=st.floats(0.0, 120.0),
    now=st.floats(0.0, 1200.0),
)
def test_move_back_waits_the_minimum_and_never_makes_a_side_lose(
    host, origin, h_fill, o_fill, size, price, delta, moved_at, minimum, now
) -> None:
    h_load = h_fill * host.capacity + size
    o_load = o_fill * origin.capacity
    placed = Placement("t", size, "O", price, moved_at=moved_at, min_move_seconds=minimum)
    back = move_back(placed, Side(host, h_load), Side(origin, o_load), now=now, delta=delta)
    if back is None:
        return
    assert now - moved_at >= minimum
    added = origin.cost(o_load + size) - origin.cost(o_load)
    paid = price * size
    if math.isfinite(host.cost(h_load)):  # an infinite cost now: any shedding saves enough
        assert host.cost(h_load) - host.cost(h_load - size) > paid  # more than it gives up
    assert added < paid  # the origin's cost rises by less than the payment it stops


# --- offer discipline --------------------------------------------------------------------------


def test_one_offer_outstanding_and_none_while_a_move_is_in_flight() -> None:
    timing = OfferTiming(offer_interval=7.0, refusal_backoff_intervals=3)
    assert may_offer(OfferGate(now=7.0, last_offer_at=0.0), timing)
    assert not may_offer(OfferGate(now=6.9, last_offer_at=0.0), timing)
    assert not may_offer(OfferGate(now=70.0, open_offers=1), timing)
    assert not may_offer(OfferGate(now=70.0, moves_in_flight=1), timing)
    assert not may_offer(OfferGate(now=70.0, relays_pending=1), timing)


def test_a_partner_that_refused_sits_out_n_offer_intervals() -> None:
    timing = OfferTiming(offer_interval=7.0, refusal_backoff_intervals=3)
    gate = OfferGate(now=30.0, refused_at={"B": 10.0}, offered_at={"C": 25.0})
    assert not may_offer(gate, timing, partner="B")  # 20 s < 21 s
    assert not may_offer(gate, timing, partner="C")  # C itself just tried to shed to me
    assert may_offer(gate, timing, partner="D")
    later = OfferGate(now=31.0, refused_at={"B": 10.0})
    assert may_offer(later, timing, partner="B")
    assert protocol.available_partners(gate, {"B": True, "C": True, "D": False}, timing) == {
        "B": False,
        "C": False,
        "D": False,
    }
    assert protocol.counts_as_refusal("partially_accepted")
    assert not protocol.counts_as_refusal("accepted")


# --- room-making relays (the live agents' chain rule) ----------------------------------------


@dataclass(frozen=True)
class Terms:
    id: int
    partner: str
    price_min: float
    price_max: float


CONTRACTS = [Terms(1, "B", 0.24, 0.26), Terms(2, "A", 0.24, 0.26), Terms(3, "D", 0.20, 0.22)]


def test_room_goes_to_the_cheapest_available_partner_at_a_price_below_what_it_is_paid() -> None:
    plan = protocol.plan_room(
        upstream="B",
        upstream_price=0.25,
        offered_load=12.0,
        movable={"c1": 5.0, "c2": 5.0, "c3": 5.0},
        contracts=CONTRACTS,
        partner_available={"A": True, "B": True, "D": True},
    )
    assert plan is not None
    assert (plan.partner, plan.contract_id, plan.tasks) == ("D", 3, ("c1", "c2"))
    assert plan.price == pytest.approx(0.21)
    assert (
        protocol.plan_room(
            upstream="B",
            upstream_price=0.19,
            offered_load=10.0,
            movable={"c1": 5.0},
            contracts=[Terms(3, "D", 0.20, 0.22)],
            partner_available={"D": True},
        )
        is None
    )


def test_a_relay_skips_every_giver_upstream_in_its_chain() -> None:
    # D is the cheapest partner, but D gave load earlier in this chain: A is next.
    plan = protocol.plan_room(
        upstream="B",
        upstream_price=0.25,
        offered_load=5.0,
        movable={"c1": 5.0},
        contracts=CONTRACTS,
        partner_available={"A": True, "B": True, "D": True},
        chain=["D", "B"],
    )
    assert plan is not None and plan.partner == "A"
    assert protocol.relay_refusal(["D", "B"], "C", "D") is not None
    assert protocol.relay_refusal(["D", "B"], "C", "A") is None


def test_a_chain_holds_at_most_max_relay_depth_relays() -> None:
    chain = [f"P{i}" for i in range(protocol.MAX_RELAY_DEPTH)]  # origin + depth - 1 relays
    assert protocol.relay_refusal(chain, "X", "Y") is None  # the last relay allowed
    refusal = protocol.relay_refusal([*chain, "X"], "Y", "Z")
    assert refusal is not None and f"{protocol.MAX_RELAY_DEPTH} relays" in refusal


@given(
    load_before=st.floats(0, 100),
    shed=st.floats(0, 50),
    room=st.floats(0, 100),
    sizes=st.lists(st.floats(0.5, 20), min_size=1, max_size=8),
)
def test_taking_after_room_never_exceeds_the_earlier_load_or_the_price_room(
    load_before, shed, room, sizes
) -> None:
    offered = {f"t{i}": s for i, s in enumerate(sizes)}
    load_now = max(0.0, load_before - shed)
    taken = protocol.take_after_room(
        load_now=load_now, load_before=load_before, offered=offered, room_below_price=room
    )
    assert load_now + sum(offered[t] for t in taken) <= max(load_before, room) + 1e-6


@given(
    model=models,
    fill=st.floats(0.0, 0.99),
    sizes=st.lists(st.floats(0.5, 10.0), min_size=1, max_size=8),
    r=ranges(),
    delta=deltas,
)
def test_the_asking_price_is_the_live_agents_price(model, fill, sizes, r, delta) -> None:
    # app/participant/bpm_decisions.py names bpm.split_price(bpm.giver_reservation(...),
    # price_min); switching it to the protocol changes no price.
    load = fill * model.capacity
    items = [(f"t{i}", s) for i, s in enumerate(sizes)]
    lo, hi = r
    before = bpm.split_price(bpm.giver_reservation(model, load, items, hi, delta), lo)
    reservation = giver_reservation(model, load, bpm.set_load(items), delta)
    assert protocol.asking_price(reservation, lo, hi) == before
