"""Room-making relays as the participant node plans them, over its ``ContractView``s (the
protocol's own properties are in tests/unit/market/test_protocol.py)."""

from __future__ import annotations

from app.market.protocol import plan_room
from app.participant.decisions import ContractView

CONTRACTS = [
    ContractView(1, "B", 0.24, 0.26, 30),
    ContractView(2, "A", 0.24, 0.26, 30),
    ContractView(3, "D", 0.20, 0.22, 30),
]


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
