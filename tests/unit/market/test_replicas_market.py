"""Replicas as priced load in the pure market: placed, offered, moved and paid like any copy."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.federation.document import FederationDoc, parse_federation
from app.market import copies
from app.market.cost_models import MM1Cost
from app.market.generate import generate_federation
from app.market.simulator import SimulationResult, simulate

# B hosts only A's replica and is nearly full; C is its cheapest partner but may not host
# replicas, D may. A hosts the primary, so the replica can never go back to A either.
SHED = """
federation: replica-shed
participants:
  - {name: A, capacity: 100, cost_model: {kind: mm1}}
  - {name: B, capacity: 35, cost_model: {kind: mm1}}
  - {name: C, capacity: 100, cost_model: {kind: mm1}}
  - {name: D, capacity: 100, cost_model: {kind: mm1}}
contracts:
  - {between: [A, B], price_min: 0.10, price_max: 0.12, availability: {replica_hosting: true}}
  - {between: [B, C], price_min: 0.04, price_max: 0.06}
  - {between: [B, D], price_min: 0.08, price_max: 0.10, availability: {replica_hosting: true}}
tasks:
  - {name: A.q, owner: A, load: 30, replicas: 1}
simulation: {step_seconds: 1, offer_interval_seconds: 7, duration_seconds: 100, hysteresis: 0.01}
"""


def test_an_overloaded_replica_host_sheds_it_to_the_partner_whose_contract_allows_it() -> None:
    result = simulate(parse_federation(SHED))
    assert result.initial_hosts == {"A.q": "A", "A.q#r1": "B"}
    # The replica is B's whole load: MC_B(30) = 1 / (35 (1 - 30/35)^2) = 1.4 per unit, and
    # shedding all 30 saves D_B(30) / 30 = 6 / 30 = 0.2 per unit. C's contract is cheaper but
    # refuses replicas, so the offer goes to D, whose MC at 30 is 1 / (100 * 0.7^2) = 0.0204.
    # Price: midpoint of the giver's reservation min(0.10, 0.2 - 0.01) = 0.10 and the taker's
    # max(0.08, 0.0204 + 0.01) = 0.08, i.e. 0.09.
    assert [(m.task, m.source, m.target, m.reason, m.at) for m in result.move_log] == [
        ("A.q#r1", "B", "D", "offer", 0.0)
    ]
    move = result.move_log[0]
    assert move.price == pytest.approx(0.09)
    assert move.giver_mc == pytest.approx(0.2)
    assert move.taker_mc == pytest.approx(MM1Cost(100).cost(30) / 30)
    assert result.final_hosts == {"A.q": "A", "A.q#r1": "D"}
    assert result.final_load == {"A": 30.0, "B": 0.0, "C": 0.0, "D": 30.0}
    # Paid like any load, hop by hop, for the 100 s of the run: the owner keeps paying the
    # placement host at the A-B floor (0.10), which pays D the agreed 0.09.
    assert result.ledger == {
        "A->B": pytest.approx(0.10 * 30 * 100),
        "B->D": pytest.approx(0.09 * 30 * 100),
    }
    assert result.net_payments["B"] == pytest.approx((0.10 - 0.09) * 30 * 100)
    # Cost fell: B's 6.0 became D's 30/70.
    assert result.cost == pytest.approx(MM1Cost(100).cost(30) * 2)


def test_no_partner_that_may_host_it_keeps_the_replica_where_it_is() -> None:
    doc = parse_federation(
        SHED.replace(", availability: {replica_hosting: true}}\ntasks", "}\ntasks")
    )
    result = simulate(doc)
    assert result.move_log == []
    assert result.final_hosts == {"A.q": "A", "A.q#r1": "B"}


def test_a_partner_hosting_the_primary_is_never_offered_the_replica() -> None:
    # D hosts the primary now (it was placed there), so the replica-hosting contract to D is
    # closed to the replica and B keeps it: never two copies of q on D.
    doc = parse_federation(
        SHED.replace("{name: A.q, owner: A, load: 30", "{name: A.q, owner: A, host: D, load: 30")
    )
    result = simulate(doc)
    assert result.initial_hosts == {"A.q": "D", "A.q#r1": "B"}
    assert all(m.task != "A.q#r1" for m in result.move_log)
    assert result.final_hosts["A.q#r1"] == "B"


def test_a_replica_without_an_eligible_host_is_left_unplaced() -> None:
    doc = parse_federation(SHED.replace("replicas: 1", "replicas: 2"))
    result = simulate(doc)
    # A's only replica-hosting partner is B: the second replica has nowhere to go.
    assert result.unplaced_replicas == ("A.q#r2",)
    assert "A.q#r2" not in result.final_hosts


def test_the_receiver_refuses_a_second_copy_whatever_is_offered() -> None:
    offered = [("q#r1", 5.0), ("p", 4.0), ("p#r2", 3.0), ("s", 1.0)]
    task_of = {"q#r1": "q", "p": "p", "p#r2": "p", "s": "s"}.__getitem__
    assert copies.receivable(offered, task_of, {"q"}) == [("p", 4.0), ("s", 1.0)]
    assert copies.may_travel(False, [False]) and not copies.may_travel(True, [True, False])
    assert copies.Copy("q", 2).name == "q#r2" and copies.Copy("q").name == "q"


def test_without_replicas_a_generated_federation_is_unchanged() -> None:
    kwargs = {
        "participants": 8,
        "contracts_per_participant": 2,
        "price_range_width": 0.1,
        "load_skew": 1.0,
        "capacity_spread": 0.5,
        "seed": 3,
    }
    plain = generate_federation(**kwargs)  # type: ignore[arg-type]
    assert generate_federation(**kwargs, replica_share=0.0) == plain  # type: ignore[arg-type]
    assert all(t.replicas == 0 for t in plain.tasks)
    assert all(c.availability is None for c in plain.contracts)


# --- properties over generated federations with replicas ----------------------------------

with_replicas = st.builds(
    generate_federation,
    participants=st.integers(3, 10),
    contracts_per_participant=st.integers(1, 4),
    price_range_width=st.sampled_from([0.0, 0.05, 0.1, 0.2]),
    load_skew=st.floats(0.0, 2.0),
    capacity_spread=st.floats(0.0, 0.8),
    seed=st.integers(0, 10_000),
    tasks_per_participant=st.integers(1, 8),
    overload=st.floats(0.3, 1.2),
    common_price=st.booleans(),
    replica_share=st.floats(0.1, 1.0),
    replicas_per_task=st.integers(1, 3),
    replica_hosting_share=st.floats(0.2, 1.0),
)
PROPS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _hosting_pairs(doc: FederationDoc) -> set[frozenset[str]]:
    return {c.pair() for c in doc.contracts if c.availability and c.availability.replica_hosting}


def _placements(result: SimulationResult) -> list[dict[str, str]]:
    """Where every copy is after each operation, replayed from the move log."""
    hosts = dict(result.initial_hosts)
    states = [dict(hosts)]
    for _, legs in itertools.groupby(result.move_log, key=lambda m: m.operation):
        for m in legs:
            hosts[m.task] = m.target  # a relay's inner legs end at the last target
        states.append(dict(hosts))
    return states


def _doubles(hosts: dict[str, str], copy_of: dict[str, str]) -> dict[str, list[str]]:
    return copies.second_copies((who, copy_of[c]) for c, who in hosts.items())


@PROPS
@given(with_replicas)
def test_no_participant_ever_hosts_two_copies_of_one_task(doc: FederationDoc) -> None:
    result = simulate(doc, record_trace=False)
    states = _placements(result)
    assert states[-1] == result.final_hosts
    for hosts in states:
        assert _doubles(hosts, result.copy_of) == {}


@PROPS
@given(with_replicas)
def test_replicas_only_travel_over_replica_hosting_contracts(doc: FederationDoc) -> None:
    result = simulate(doc, record_trace=False)
    allowed = _hosting_pairs(doc)
    for m in result.move_log:
        if copies.REPLICA_MARK in m.task:
            assert frozenset((m.source, m.target)) in allowed, m
    # Placement too: on a partner of the owner over a replica-hosting contract.
    owners = {t.name: t.owner for t in doc.tasks}
    for name, host in result.initial_hosts.items():
        if copies.REPLICA_MARK in name:
            assert frozenset((owners[result.copy_of[name]], host)) in allowed


@PROPS
@given(with_replicas)
def test_with_replicas_moves_stay_rational_payments_balance_and_cost_never_rises(
    doc: FederationDoc,
) -> None:
    result = simulate(doc)
    by_operation = defaultdict(list)
    for m in result.move_log:
        by_operation[m.operation].append(m)
    for legs in by_operation.values():
        for task in {m.task for m in legs}:
            chain = [m for m in legs if m.task == task]
            assert chain[0].giver_mc > chain[0].price, chain[0]
            assert chain[-1].price > chain[-1].taker_mc, chain[-1]
            assert all(a.price >= b.price for a, b in itertools.pairwise(chain))
    total = sum(abs(v) for v in result.net_payments.values())
    assert sum(result.net_payments.values()) == pytest.approx(0.0, abs=1e-9 * max(1.0, total))
    assert all(m.cost_change <= 1e-12 for m in result.move_log)
    costs = [s.cost for s in result.trace]
    assert all(b <= a or (math.isinf(a) and math.isinf(b)) for a, b in itertools.pairwise(costs))
    # A replica's load counts: every placed copy is in its host's load.
    loads: dict[str, float] = defaultdict(float)
    size = {t.name: t.load for t in doc.tasks}
    for name, host in result.final_hosts.items():
        loads[host] += size[result.copy_of[name]]
    for who, load in result.final_load.items():
        assert load == pytest.approx(loads.get(who, 0.0), abs=1e-9)


def test_the_properties_are_not_vacuous_replicas_do_move() -> None:
    moved = 0
    for seed in range(6):
        doc = generate_federation(
            participants=8,
            contracts_per_participant=3,
            price_range_width=0.1,
            load_skew=1.5,
            capacity_spread=0.5,
            seed=seed,
            tasks_per_participant=6,
            overload=0.8,
            replica_share=0.6,
            replica_hosting_share=0.7,
        )
        result = simulate(doc, record_trace=False)
        moved += sum(copies.REPLICA_MARK in m.task for m in result.move_log)
        assert _doubles(result.final_hosts, result.copy_of) == {}
    assert moved > 0


def test_when_its_host_leaves_a_replica_returns_the_way_it_came() -> None:
    doc = parse_federation(SHED + "timeline:\n  - {at: 20, event: leave, participant: D}\n")
    result = simulate(doc)
    assert [(m.task, m.source, m.target, m.reason) for m in result.move_log] == [
        ("A.q#r1", "B", "D", "offer"),
        ("A.q#r1", "D", "B", "leave"),
    ]
    assert result.final_hosts == {"A.q": "A", "A.q#r1": "B"}


def test_when_its_placement_host_leaves_the_replica_is_placed_afresh() -> None:
    doc = parse_federation(
        SHED.replace(
            "  - {between: [B, C]",
            "  - {between: [A, C], price_min: 0.2, price_max: 0.3,"
            " availability: {replica_hosting: true}}\n  - {between: [B, C]",
        )
        + "timeline:\n  - {at: 20, event: leave, participant: B}\n"
    )
    result = simulate(doc)
    # Placed on B (cheapest replica-hosting partner of A), shed to D, then B leaves: the
    # replica cannot go "home" to the owner, so it is placed again, on C.
    assert result.initial_hosts["A.q#r1"] == "B"
    assert result.final_hosts == {"A.q": "A", "A.q#r1": "C"}
    assert result.unplaced_replicas == ()
