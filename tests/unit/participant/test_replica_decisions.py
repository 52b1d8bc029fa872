"""The live agent's decisions with replicas: the same rules as the simulator's."""

from __future__ import annotations

from app.market.cost_models import MM1Cost
from app.participant.bpm_decisions import BpmDecisions
from app.participant.decisions import ContractView

# B hosts only A's replica of q (30 of 35: MC 1.4 per unit); C is cheaper but refuses replicas.
B = BpmDecisions(MM1Cost(capacity=35.0), hysteresis=0.01)
TO_C = ContractView(1, "C", 0.04, 0.06, 0, replica_hosting=False)
TO_D = ContractView(2, "D", 0.08, 0.10, 0, replica_hosting=True)
ONLINE = {"C": True, "D": True}


def test_a_replica_is_offered_only_over_a_replica_hosting_contract() -> None:
    plan = B.plan_offer(
        load=30.0,
        movable={"q": 30.0},
        contracts=[TO_C, TO_D],
        partner_online=ONLINE,
        replicas={"q"},
    )
    assert plan is not None
    # Price: midpoint of min(0.10, 6/30 - 0.01) = 0.10 and the floor 0.08, as the simulator.
    assert (plan.partner, plan.tasks, plan.replicas) == ("D", ("q",), ("q",))
    assert abs(plan.price - 0.09) < 1e-12


def test_a_primary_still_goes_to_the_cheapest_partner() -> None:
    plan = B.plan_offer(
        load=30.0, movable={"q": 30.0}, contracts=[TO_C, TO_D], partner_online=ONLINE
    )
    assert plan is not None and (plan.partner, plan.replicas) == ("C", ())


def test_never_proposed_to_nor_taken_by_a_participant_holding_a_copy() -> None:
    plan = B.plan_offer(
        load=30.0,
        movable={"q": 30.0},
        contracts=[TO_C, TO_D],
        partner_online=ONLINE,
        replicas={"q"},
        held_by={"D": {"q"}},
    )
    assert plan is None
    taker = BpmDecisions(MM1Cost(capacity=100.0), hysteresis=0.01)
    offered = {"q": 5.0, "p": 4.0}
    assert taker.choose_accepted(load=10.0, offered=offered, price=0.09) == ["q", "p"]
    assert taker.choose_accepted(load=10.0, offered=offered, price=0.09, held={"q"}) == ["p"]
