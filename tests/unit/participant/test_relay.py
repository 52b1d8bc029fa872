"""Room-making relays: never raise the relay's load, never pay on more than it is paid."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.market.protocol import plan_room, take_after_room
from app.participant.decisions import ContractView

CONTRACTS = [
    ContractView(1, "B", 0.24, 0.26, 30),
    ContractView(2, "A", 0.24, 0.26, 30),
    ContractView(3, "D", 0.20, 0.22, 30),
]


def test_room_goes_to_the_cheapest_available_partner_other_than_the_giver() -> None:
    plan = plan_room(
        upstream="B",
        upstream_price=0.25,
        offered_load=12.0,
        movable={"c1": 5.0, "c2": 5.0, "c3": 5.0},
        contracts=CONTRACTS,
        partner_available={"A": True, "B": True, "D": True},
    )
    assert plan is not None
    assert (plan.partner, plan.contract_id) == ("D", 3)
    assert plan.tasks == ("c1", "c2")  # 10 of the 12 offered: never shed more than it takes
    assert plan.price == pytest.approx(0.21)  # midpoint of min(0.25, 0.22) and 0.20


def test_no_room_when_the_onward_floor_is_above_what_the_giver_pays() -> None:
    plan = plan_room(
        upstream="B",
        upstream_price=0.19,
        offered_load=10.0,
        movable={"c1": 5.0},
        contracts=[ContractView(3, "D", 0.20, 0.22, 30)],
        partner_available={"D": True},
    )
    assert plan is None


def test_unavailable_partners_are_skipped() -> None:
    plan = plan_room(
        upstream="B",
        upstream_price=0.25,
        offered_load=10.0,
        movable={"c1": 5.0},
        contracts=CONTRACTS,
        partner_available={"A": True, "D": False},
    )
    assert plan is not None and plan.partner == "A"


@given(
    load_before=st.floats(0, 100),
    shed=st.floats(0, 50),
    room=st.floats(0, 100),
    sizes=st.lists(st.floats(0.5, 20), min_size=1, max_size=8),
)
def test_taking_after_room_never_exceeds_the_earlier_load_or_the_price_room(
    load_before: float, shed: float, room: float, sizes: list[float]
) -> None:
    offered = {f"t{i}": s for i, s in enumerate(sizes)}
    load_now = max(0.0, load_before - shed)
    taken = take_after_room(
        load_now=load_now, load_before=load_before, offered=offered, room_below_price=room
    )
    after = load_now + sum(offered[t] for t in taken)
    assert after <= max(load_before, room) + 1e-6


def test_a_partner_that_refused_before_goes_after_one_that_never_did() -> None:
    plan = plan_room(
        upstream="B",
        upstream_price=0.25,
        offered_load=10.0,
        movable={"c1": 5.0},
        contracts=[ContractView(1, "A", 0.24, 0.26, 30), ContractView(2, "D", 0.24, 0.26, 30)],
        partner_available={"A": True, "D": True},
        last_refused={"A": 100.0},
    )
    assert plan is not None and plan.partner == "D"
