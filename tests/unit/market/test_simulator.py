"""The simulator: the Borealis demo's story in real numbers, and BPM's invariants as properties."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from app.federation.document import (
    FederationFileError,
    TimelineEvent,
    load_federation,
    parse_federation,
)
from app.market.generate import generate_federation
from app.market.simulator import SimulationResult, simulate

DEMO = Path(__file__).resolve().parents[3] / "contracts" / "borealis-demo.yaml"


@pytest.fixture(scope="module")
def demo() -> SimulationResult:
    return simulate(load_federation(DEMO))


def _load_at(result: SimulationResult, t: float) -> dict[str, float]:
    return next(s for s in result.trace if s.t == t).loads


def test_demo_a_sheds_to_b_then_to_c_until_acceptable(demo: SimulationResult) -> None:
    first = [m for m in demo.move_log if m.at < 120]
    assert [(m.source, m.target) for m in first] == [("A", "B")] * 9 + [("A", "C")]
    assert first[0].at == 0 and first[-1].at == 7
    assert all(m.price == pytest.approx(0.25) for m in first)
    assert _load_at(demo, 0) == {"A": 85.0, "B": 75.0, "C": 20.0, "D": 0.0}
    after = next(s for s in demo.trace if s.t == 7)
    assert after.loads == {"A": 80.0, "B": 75.0, "C": 25.0, "D": 0.0}
    assert after.acceptable and not after.overloaded
    assert all(s.acceptable for s in demo.trace if 7 <= s.t < 120)


def test_demo_b_quadruples_and_the_federation_is_overloaded(demo: SimulationResult) -> None:
    at_120 = next(s for s in demo.trace if s.t == 120)
    assert at_120.loads["B"] == pytest.approx(45 + 4 * 30)  # A's 9 tasks + B's own x4
    assert at_120.overloaded and not at_120.acceptable
    shed = [m for m in demo.move_log if 120 <= m.at < 240]
    assert {(m.source, m.target) for m in shed} == {("B", "C")}
    settled = next(s for s in demo.trace if s.t == 126)
    assert settled.loads == {"A": 80.0, "B": 115.0, "C": 75.0, "D": 0.0}
    # Everyone at or above the threshold: acceptable for an overloaded federation.
    assert settled.overloaded and settled.acceptable
    assert math.isinf(settled.marginal_costs["B"])


def test_demo_d_joins_and_load_flows_c_to_d_and_b_to_c(demo: SimulationResult) -> None:
    late = [m for m in demo.move_log if m.at >= 240]
    assert {(m.source, m.target) for m in late} == {("B", "C"), ("C", "D")}
    assert all(m.reason == "relay" for m in late)
    assert demo.acceptable and not demo.overloaded
    assert demo.final_load == {"A": 80.0, "B": 75.0, "C": 75.0, "D": 40.0}
    assert demo.steps_to_acceptable == 245 and demo.seconds_to_acceptable == 245.0
    assert demo.thresholds["A"] == pytest.approx(80.0)


def test_demo_summary_and_payments(demo: SimulationResult) -> None:
    summary = demo.summary()
    for key in (
        "acceptable",
        "steps_to_acceptable",
        "moves",
        "payments_total",
        "cost",
        "cost_lower_bound",
        "final_load",
        "thresholds",
    ):
        assert key in summary
    assert summary["moves"] == 16  # relocations; a relay counts once
    assert sum(demo.net_payments.values()) == pytest.approx(0.0, abs=1e-6)
    assert demo.payments_total == pytest.approx(sum(demo.ledger.values()))
    # A pays B 0.25 per unit per second for its 45 units all run long, even for the two
    # tasks B passes on to C at t=126: B then pays C for them (a chain of contracts).
    assert demo.ledger["A->B"] == pytest.approx(0.25 * 45 * 420)
    # B pays C for 2 x 20 of its own and 2 x 5 of A's from 126, and for the 40 it relays
    # through C to D from 245.
    assert demo.ledger["B->C"] == pytest.approx(0.25 * 50 * (420 - 126) + 0.25 * 40 * (420 - 245))
    assert demo.ledger["C->D"] == pytest.approx(0.25 * 40 * (420 - 245))
    assert demo.cost == pytest.approx(4 + 3 + 3 + 40 / 60)
    assert demo.cost_lower_bound <= demo.cost
    assert demo.cost_lower_bound == pytest.approx(4 * (67.5 / 32.5))


def test_a_leaving_participant_hands_back_what_it_hosted() -> None:
    doc = load_federation(DEMO)
    doc = dataclasses.replace(doc, timeline=(TimelineEvent(at=60, event="leave", participant="B"),))
    result = simulate(doc, max_steps=100)
    back = [m for m in result.move_log if m.reason == "leave"]
    assert {(m.source, m.target) for m in back} == {("B", "A")} and len(back) == 9
    assert result.final_load["B"] == 0.0
    assert result.final_load["A"] + result.final_load["C"] == pytest.approx(130 + 20)


def test_move_back_after_min_move_seconds_when_cheaper_for_both() -> None:
    doc = parse_federation(
        """
federation: back
participants:
  - {name: A, capacity: 100}
  - {name: B, capacity: 100}
contracts:
  - {between: [A, B], price_min: 0.24, price_max: 0.26, min_move_seconds: 30}
tasks:
  - {name: A.a1, owner: A, load: 80}
  - {name: A.a2, owner: A, load: 10}
  - {name: B.b1, owner: B, load: 40}
timeline:
  - {at: 10, event: task_load, task: A.a1, load: 40}
  - {at: 10, event: task_load, task: B.b1, load: 75}
simulation: {step_seconds: 1, offer_interval_seconds: 7, duration_seconds: 120, hysteresis: 0.005}
"""
    )
    result = simulate(doc)
    moves = [(m.at, m.task, m.source, m.target, m.reason) for m in result.move_log]
    # A at 90 sheds a2 to B at 0.25; then A's load falls and B's rises, so at the first round
    # after the 30 s minimum, B (saving (D(85) - D(75)) / 10 = 0.267 > 0.255) hands it back.
    assert moves == [(0, "A.a2", "A", "B", "offer"), (35, "A.a2", "B", "A", "move_back")]
    assert result.move_log[1].price == pytest.approx(0.25)
    assert result.final_load == {"A": 50.0, "B": 75.0}
    assert result.ledger == {"A->B": pytest.approx(0.25 * 10 * 35)}


LINE = """
federation: line
participants:
  - {{name: A, capacity: 100}}
  - {{name: B, capacity: 100}}
  - {{name: C, capacity: 100}}
  - {{name: D, capacity: 100}}
  - {{name: E, capacity: 100}}
contracts:
  - {{between: [A, B], price_min: 0.25, price_max: 0.25}}
  - {{between: [B, C], price_min: {bc_min}, price_max: {bc_max}}}
  - {{between: [C, D], price_min: 0.25, price_max: 0.25}}
  - {{between: [D, E], price_min: 0.25, price_max: 0.25}}
tasks:
  - {{name: A.a1, owner: A, load: 80}}
  - {{name: A.a2, owner: A, load: 10}}
  - {{name: B.b1, owner: B, load: 79}}
  - {{name: C.c1, owner: C, load: 79}}
  - {{name: D.d1, owner: D, load: 79}}
simulation: {{step_seconds: 1, offer_interval_seconds: 7, duration_seconds: 60, hysteresis: 0.005}}
"""


def test_load_travels_past_two_hops_when_the_near_participants_are_full() -> None:
    # Thresholds at 0.25 are 80 (M/M/1, capacity 100): A at 90 must shed a2, B, C and D have
    # no room for it, only E, four contracts away, has.
    doc = parse_federation(LINE.format(bc_min=0.25, bc_max=0.25))
    result = simulate(doc)
    legs = [(m.task, m.source, m.target, m.reason, m.price) for m in result.move_log]
    assert legs == [("A.a2", x, y, "relay", 0.25) for x, y in itertools.pairwise("ABCDE")]
    assert result.final_load == {"A": 80.0, "B": 79.0, "C": 79.0, "D": 79.0, "E": 10.0}
    assert result.acceptable
    # Relays are paid what they pay on: only A pays, only E is paid, net.
    assert result.net_payments["B"] == pytest.approx(0.0, abs=1e-9)
    assert result.net_payments["E"] == pytest.approx(-result.net_payments["A"])
    capped = simulate(doc, max_hops=2)
    assert capped.moves == 0 and not capped.acceptable


def test_no_chain_through_a_relay_that_would_pay_more_than_it_is_paid() -> None:
    # B would be paid 0.25 by A and pay at least 0.30 to C: no rational relay, nothing moves.
    rising = simulate(parse_federation(LINE.format(bc_min=0.30, bc_max=0.30)))
    assert rising.moves == 0 and not rising.acceptable
    # A range on B-C that reaches down to 0.25 opens the same route at non-rising prices.
    ranged = simulate(parse_federation(LINE.format(bc_min=0.20, bc_max=0.30)))
    legs = [(m.source, m.target, m.price) for m in ranged.move_log]
    assert legs == [(x, y, 0.25) for x, y in itertools.pairwise("ABCDE")]
    assert ranged.final_load["E"] == 10.0 and ranged.acceptable


def test_bad_scenarios_name_the_field() -> None:
    base = DEMO.read_text()
    with pytest.raises(FederationFileError) as err:
        parse_federation(base.replace("between: [C, D]", "between: [C, E]"))
    assert err.value.field == "contracts[3].between[1]"
    with pytest.raises(FederationFileError) as err:
        parse_federation(base.replace("{name: B, capacity: 100,", "{name: B, capacity: -1,"))
    assert "participants[1].capacity" in str(err.value)
    fitted = "cost_model: {kind: fitted, samples: [[0, 0], [20, 1], [40, 2], [60, 9], [80, 4]]}"
    with pytest.raises(FederationFileError) as err:
        parse_federation(
            base.replace(
                'cost_model: {kind: mm1}, profile: {site: "C"}', fitted + ', profile: {site: "C"}'
            )
        )
    assert err.value.field == "participants[2].cost_model.samples[3]"


def test_same_inputs_same_run() -> None:
    doc = generate_federation(
        participants=15,
        contracts_per_participant=2,
        price_range_width=0.1,
        load_skew=1.0,
        capacity_spread=0.5,
        seed=7,
    )
    a, b = simulate(doc), simulate(doc)
    assert a.summary() == b.summary()
    assert [m.as_dict() for m in a.move_log] == [m.as_dict() for m in b.move_log]


# --- properties over generated federations ----------------------------------------------

federations = st.builds(
    generate_federation,
    participants=st.integers(2, 12),
    contracts_per_participant=st.integers(1, 4),
    price_range_width=st.sampled_from([0.0, 0.02, 0.05, 0.1, 0.2]),
    load_skew=st.floats(0.0, 2.0),
    capacity_spread=st.floats(0.0, 0.8),
    seed=st.integers(0, 10_000),
    tasks_per_participant=st.integers(1, 12),
    overload=st.floats(0.3, 1.5),
    common_price=st.booleans(),
)
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(federations)
def test_every_move_is_individually_rational(doc) -> None:
    result = simulate(doc, record_trace=False)
    by_operation = defaultdict(list)
    for m in result.move_log:
        by_operation[m.operation].append(m)
    for legs in by_operation.values():
        for task in {m.task for m in legs}:
            chain = [m for m in legs if m.task == task]
            first, last = chain[0], chain[-1]
            assert first.giver_mc > first.price, first
            assert last.price > last.taker_mc, last
            assert all(a.price >= b.price for a, b in itertools.pairwise(chain))


@PROPS
@given(federations)
def test_payments_balance_and_cost_never_rises_with_a_move(doc) -> None:
    result = simulate(doc)
    total = sum(abs(v) for v in result.net_payments.values())
    assert sum(result.net_payments.values()) == pytest.approx(0.0, abs=1e-9 * max(1.0, total))
    assert all(m.cost_change <= 1e-12 for m in result.move_log)
    # No timeline: the federation's cost only changes through moves.
    costs = [s.cost for s in result.trace]
    assert all(b <= a or (math.isinf(a) and math.isinf(b)) for a, b in itertools.pairwise(costs))


@PROPS
@given(federations)
def test_a_static_federation_stops_moving(doc) -> None:
    limit = round(doc.simulation.duration_seconds / doc.simulation.step_seconds)
    result = simulate(doc, record_trace=False)
    # It went quiet before the duration ran out, so every task moved finitely often.
    assert result.steps < limit
    assert result.cost_lower_bound <= result.cost * (1 + 1e-9) + 1e-9


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    participants=st.integers(2, 15),
    k=st.integers(1, 4),
    width=st.sampled_from([0.0, 0.02, 0.05, 0.1, 0.2]),
    skew=st.floats(0.0, 1.0),
    spread=st.floats(0.0, 0.8),
    seed=st.integers(0, 10_000),
    fill=st.floats(0.2, 0.75),
)
def test_connected_underloaded_federation_priced_at_thresholds_ends_acceptable(
    participants, k, width, skew, spread, seed, fill
) -> None:
    doc = generate_federation(
        participants=participants,
        contracts_per_participant=k,
        price_range_width=width,
        load_skew=skew,
        capacity_spread=spread,
        seed=seed,
        tasks_per_participant=20,
        overload=fill,
        common_price=True,
    )
    # Tasks small next to every threshold: granularity alone cannot block the allocation.
    smallest_threshold = min(simulate(doc, max_steps=1).thresholds.values())
    assume(max(t.load for t in doc.tasks) <= 0.2 * smallest_threshold)
    result = simulate(doc, max_hops=None, record_trace=False)
    assert result.acceptable, result.reasons
    assert not result.overloaded


def test_without_contracts_the_demo_is_not_acceptable_and_says_why() -> None:
    # Nothing can move, but that does not make A at 130% of its threshold acceptable: the one
    # rule (app.market.acceptability) judges the loads and blames the missing contract paths.
    doc = dataclasses.replace(load_federation(DEMO), contracts=())
    result = simulate(doc)
    assert result.moves == 0 and not result.acceptable and not result.overloaded
    assert result.steps_to_acceptable is None
    assert not any(s.acceptable for s in result.trace)
    assert result.summary()["why_not_acceptable"] == [
        "A is over its threshold (130.0 > 100.0) and no contract path leads from A to spare "
        "capacity (C, D)",
        "B is over its threshold (120.0 > 100.0) and no contract path leads from B to spare "
        "capacity (C, D)",
    ]


def test_the_simulator_judges_with_the_one_rule_over_its_contract_graph() -> None:
    from app.market.acceptability import Link, judge_allocation
    from app.market.simulator import _Federation

    doc = load_federation(DEMO)
    fed = _Federation(doc, None)
    mine = fed.judge(explain=True)
    links = [Link(c.a, c.b, c.price_min, c.price_max) for c in doc.contracts]
    again = judge_allocation(fed.positions(), links, delta=doc.simulation.hysteresis)
    assert mine == again
    assert not mine.acceptable and mine.offenders == ("A",)  # A at 130 before any offer round
