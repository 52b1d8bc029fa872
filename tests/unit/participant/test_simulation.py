"""The what-if simulation composed of participant nodes over the memory registry: the Borealis
demo reaches an acceptable allocation in each act, and its verdicts agree with the simulator's
at the end of each act."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from app.federation.document import FederationDoc, load_federation
from app.market.generate import generate_federation
from app.market.simulator import SimulationResult, simulate
from app.participant.simulation import acts, simulate_nodes

DEMO = Path(__file__).resolve().parents[3] / "contracts" / "borealis-demo.yaml"


@pytest.fixture(scope="module")
def demo() -> FederationDoc:
    return load_federation(DEMO)


@pytest.fixture(scope="module")
def nodes(demo: FederationDoc) -> SimulationResult:
    return simulate_nodes(demo)


def test_the_demo_reaches_an_acceptable_allocation_in_each_act(
    demo: FederationDoc, nodes: SimulationResult
) -> None:
    verdicts = acts(demo, nodes)
    assert [(a.start, a.end) for a in verdicts] == [(0, 120), (120, 240), (240, 420)]
    assert all(a.acceptable for a in verdicts), verdicts
    assert nodes.acceptable and nodes.final_load["D"] > 0  # D took load once it joined


def test_the_nodes_verdicts_agree_with_the_simulators_at_the_end_of_each_act(
    demo: FederationDoc, nodes: SimulationResult
) -> None:
    reference = simulate(demo)
    assert [a.acceptable for a in acts(demo, nodes)] == [
        a.acceptable for a in acts(demo, reference)
    ]
    assert nodes.acceptable == reference.acceptable
    assert nodes.overloaded == reference.overloaded


def test_the_nodes_pay_what_the_registry_charged_and_payments_balance(
    nodes: SimulationResult,
) -> None:
    assert nodes.payments_total > 0
    assert math.fsum(nodes.net_payments.values()) == pytest.approx(0.0, abs=1e-6)
    assert math.fsum(nodes.ledger.values()) == pytest.approx(nodes.payments_total)


def test_every_move_goes_between_contract_partners_at_a_price_in_range(
    demo: FederationDoc, nodes: SimulationResult
) -> None:
    ranges = {frozenset((c.a, c.b)): (c.price_min, c.price_max) for c in demo.contracts}
    for m in nodes.move_log:
        lo, hi = ranges[frozenset((m.source, m.target))]
        assert lo <= m.price <= hi, m
    # Nothing is lost or duplicated: the final loads are the demo's loads after B's scaling.
    expected = math.fsum(t.load * (4 if t.owner == "B" else 1) for t in demo.tasks)
    assert math.fsum(nodes.final_load.values()) == pytest.approx(expected)


def test_a_generated_federation_runs_on_nodes_as_on_the_simulator() -> None:
    doc = generate_federation(
        participants=6,
        contracts_per_participant=2,
        price_range_width=0.1,
        load_skew=1.0,
        capacity_spread=0.3,
        seed=3,
        tasks_per_participant=5,
        overload=0.6,
        duration_seconds=600,
    )
    nodes, reference = simulate_nodes(doc), simulate(doc)
    assert math.fsum(nodes.final_load.values()) == pytest.approx(
        math.fsum(reference.final_load.values())
    )
    assert math.fsum(nodes.net_payments.values()) == pytest.approx(0.0, abs=1e-6)
    assert nodes.acceptable == reference.acceptable
