"""The in-memory registry keeps the service's rules: one host per task at every instant, one
offer outstanding, the agreed price inside the range and between both reservations, payments
that balance, and each participant seeing only its own rows."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.market import protocol
from app.market.cost_models import build_cost_model
from app.participant.client import ApiError
from app.participant.memory_registry import MemoryRegistry
from app.participant.ports import Registry
from app.participant.simulation import SimClock


def federation(clock: SimClock | None = None) -> MemoryRegistry:
    """A, B, C; contracts A-B and B-C in [0.24, 0.26]; A holds four tasks, B one, C none."""
    registry = MemoryRegistry(clock or SimClock())
    for name in "ABC":
        registry.add_participant(name)
    registry.add_contract("A", "B", 0.24, 0.26, 30)
    registry.add_contract("B", "C", 0.24, 0.26, 30)
    for i in range(4):
        registry.add_task(f"A.q{i}", "A", 5.0)
    registry.add_task("B.q0", "B", 5.0)
    return registry


def contract_id(registry: MemoryRegistry, a: str, b: str) -> int:
    return next(c.id for c in registry.contracts.values() if {c.a, c.b} == {a, b})


def move(registry: MemoryRegistry, src: str, dst: str, tasks: list[str], price: float) -> dict:
    """Offer, accept and commit ``tasks`` from ``src`` to ``dst`` at ``price``."""
    giver, taker = registry.client_for(src), registry.client_for(dst)
    made = giver.offer(contract_id(registry, src, dst), tasks, price)
    accepted = taker.accept(made["id"], made["version"])
    for mid in accepted["movement_ids"]:
        taker.commit(mid, taker.movement(mid)["epoch"])
    return accepted


def test_a_view_fits_the_registry_port() -> None:
    view: Registry = federation().client_for("A")
    assert [t["name"] for t in view.tasks()] == ["A.q0", "A.q1", "A.q2", "A.q3"]


def test_a_participant_sees_only_its_own_contracts_offers_tasks_and_movements() -> None:
    registry = federation()
    made = registry.client_for("A").offer(contract_id(registry, "A", "B"), ["A.q0"], 0.25)
    c = registry.client_for("C")
    assert [(x["proposer"], x["partner"]) for x in c.contracts()] == [("B", "C")]
    assert c.offers() == [] and c.tasks() == []
    with pytest.raises(ApiError) as seen:
        c.task("A.q0")
    assert seen.value.status == 404
    # The addressee of an open offer may read the offered task (to see what it runs).
    assert registry.client_for("B").task("A.q0")["owner"] == "A"
    accepted = registry.client_for("B").accept(made["id"], made["version"])
    (mid,) = accepted["movement_ids"]
    with pytest.raises(ApiError) as seen:
        c.movement(mid)
    assert seen.value.status == 404
    with pytest.raises(ApiError) as seen:
        c.accept(made["id"], accepted["version"])
    assert seen.value.status == 404


def test_one_offer_outstanding_per_participant() -> None:
    registry = federation()
    a = registry.client_for("A")
    a.offer(contract_id(registry, "A", "B"), ["A.q0"], 0.25)
    with pytest.raises(ApiError) as seen:
        a.offer(contract_id(registry, "A", "B"), ["A.q1"], 0.25)
    assert (seen.value.status, seen.value.field) == (409, "contract_id")


def test_bad_offers_are_refused_and_change_nothing() -> None:
    registry = federation()
    a = registry.client_for("A")
    ab = contract_id(registry, "A", "B")
    cases = [
        (lambda: a.offer(ab, ["A.q0"], 0.3), 422, "price"),
        (lambda: a.offer(ab, ["B.q0"], 0.25), 422, "tasks[0]"),
        (lambda: a.offer(ab, [], 0.25), 422, "tasks"),
        (lambda: a.offer(ab, ["A.q0"], 0.25, reservation_price=0.245), 422, "reservation_price"),
        (lambda: a.offer(contract_id(registry, "B", "C"), ["A.q0"], 0.25), 404, "contract_id"),
    ]
    for call, status, field in cases:
        with pytest.raises(ApiError) as seen:
            call()
        assert (seen.value.status, seen.value.field) == (status, field)
    assert registry.offers == {} and registry.writes == 0


def test_partial_acceptance_moves_only_the_chosen_tasks_after_the_commit() -> None:
    registry = federation()
    a, b = registry.client_for("A"), registry.client_for("B")
    made = a.offer(contract_id(registry, "A", "B"), ["A.q0", "A.q1"], 0.25)
    accepted = b.accept(made["id"], made["version"], ["A.q1"])
    assert accepted["status"] == "partially_accepted" and accepted["accepted_tasks"] == ["A.q1"]
    (mid,) = accepted["movement_ids"]
    movement = b.movement(mid)
    # Prepared: the source is still the one host of record.
    assert registry.host_of("A.q1") == "A" and movement["status"] == "prepared"
    with pytest.raises(ApiError) as seen:
        a.commit(mid, movement["epoch"])  # only the target commits
    assert seen.value.status == 403
    with pytest.raises(ApiError) as seen:
        b.commit(mid, movement["epoch"] + 1)
    assert (seen.value.status, seen.value.field) == (409, "epoch")
    b.commit(mid, movement["epoch"])
    moved = b.task("A.q1")
    assert (moved["host"], moved["price"], moved["lease_epoch"]) == ("B", 0.25, movement["epoch"])
    assert registry.host_of("A.q0") == "A"


def test_a_stale_version_loses_the_race() -> None:
    registry = federation()
    made = registry.client_for("A").offer(contract_id(registry, "A", "B"), ["A.q0"], 0.25)
    b = registry.client_for("B")
    b.accept(made["id"], made["version"])
    with pytest.raises(ApiError) as seen:
        b.accept(made["id"], made["version"])
    assert (seen.value.status, seen.value.field) == (409, "version")


def test_no_price_for_both_sides_is_a_409_on_the_reservation() -> None:
    registry = federation()
    made = registry.client_for("A").offer(
        contract_id(registry, "A", "B"), ["A.q0"], 0.245, reservation_price=0.25
    )
    with pytest.raises(ApiError) as seen:
        registry.client_for("B").accept(made["id"], made["version"], reservation_price=0.255)
    assert (seen.value.status, seen.value.field) == (409, "reservation_price")
    assert registry.offers[made["id"]].status == "open"


def test_going_home_is_a_move_back_and_clears_contract_and_price() -> None:
    clock = SimClock()
    registry = federation(clock)
    move(registry, "A", "B", ["A.q0"], 0.25)
    clock.seconds = 40
    accepted = registry.client_for("B").offer(contract_id(registry, "A", "B"), ["A.q0"], 0.25)
    done = registry.client_for("A").accept(accepted["id"], accepted["version"])
    (mid,) = done["movement_ids"]
    a = registry.client_for("A")
    assert a.movement(mid)["reason"] == "move_back"
    a.commit(mid, a.movement(mid)["epoch"])
    home = a.task("A.q0")
    assert (home["host"], home["contract_id"], home["price"]) == ("A", None, None)
    assert home["host_since"] == clock().isoformat()
    # Paid 40 s at 5 units and 0.25, then nothing more.
    clock.seconds = 100
    registry.accrue_all()
    assert registry.balances()["B"] == pytest.approx(5 * 0.25 * 40)


def test_payments_follow_every_paid_hop_and_balance() -> None:
    clock = SimClock()
    registry = federation(clock)
    move(registry, "A", "B", ["A.q0"], 0.25)
    clock.seconds = 10
    move(registry, "B", "C", ["A.q0"], 0.24)  # A pays B, and B pays C, for the same task
    clock.seconds = 30
    registry.set_task_load("A.q0", 10.0)  # charged at the old load up to now
    clock.seconds = 40
    registry.accrue_all()
    assert registry.ledger_by_pair() == {
        "A->B": pytest.approx(5 * 0.25 * 30 + 10 * 0.25 * 10),
        "B->C": pytest.approx(5 * 0.24 * 20 + 10 * 0.24 * 10),
    }
    assert math.fsum(registry.balances().values()) == pytest.approx(0.0, abs=1e-9)


def test_a_leaver_hands_back_what_it_hosts_and_takes_its_own_tasks_home() -> None:
    clock = SimClock()
    registry = federation(clock)
    move(registry, "A", "B", ["A.q0"], 0.25)
    move(registry, "B", "C", ["B.q0"], 0.25)
    clock.seconds = 5
    moved = registry.leave("B")
    assert {(m.task, m.src, m.to) for m in moved} == {("A.q0", "B", "A"), ("B.q0", "C", "B")}
    assert registry.loads() == {"A": 20.0, "C": 0.0}
    assert registry.client_for("C").contracts(status="active") == []


@st.composite
def market_runs(draw: st.DrawFn) -> list[tuple[str, str, int, float, float, float]]:
    """Steps of (giver, taker, tasks to offer, seconds before, giver and taker load offsets)."""
    step = st.tuples(
        st.sampled_from("ABC"),
        st.sampled_from("ABC"),
        st.integers(1, 3),
        st.floats(0, 60),
        st.floats(0, 70),
        st.floats(0, 70),
    )
    return [s for s in draw(st.lists(step, min_size=1, max_size=12)) if s[0] != s[1]]


@settings(max_examples=60, deadline=None)
@given(market_runs())
def test_payments_balance_and_every_accepted_move_is_rational(
    runs: list[tuple[str, str, int, float, float, float]],
) -> None:
    """Random offers made and answered with both sides' reservation prices, as the nodes send
    them: every agreed price lies in the range and between the reservations (so each side
    gains at least the band per unit, DESIGN.md invariant 4), every task has one host, and the
    ledger balances."""
    clock = SimClock()
    registry = MemoryRegistry(clock)
    for name in "ABC":
        registry.add_participant(name)
    for a, b in (("A", "B"), ("B", "C"), ("A", "C")):
        registry.add_contract(a, b, 0.2, 0.3, 0)
    for name in "ABC":
        for i in range(4):
            registry.add_task(f"{name}.q{i}", name, 4.0 + i)
    model = build_cost_model({"kind": "mm1"}, 100.0)
    delta = 0.005
    for giver, taker, count, wait, base_g, base_t in runs:
        clock.seconds += wait
        hosted = sorted(registry.hosted(giver).items())[:count]
        if not hosted:
            continue
        shed = math.fsum(size for _, size in hosted)
        load_g = base_g + math.fsum(registry.hosted(giver).values())
        load_t = base_t + math.fsum(registry.hosted(taker).values())
        res_g = protocol.giver_reservation(model, load_g, shed, delta)
        res_t = protocol.taker_reservation(model, load_t, shed, delta)
        c = contract_id(registry, giver, taker)
        asking = protocol.asking_price(res_g, 0.2, 0.3)
        if asking is None:
            continue
        made = registry.client_for(giver).offer(
            c, [n for n, _ in hosted], asking, reservation_price=min(res_g, 0.3)
        )
        view = registry.client_for(taker)
        try:
            accepted = view.accept(
                made["id"],
                made["version"],
                reservation_price=res_t if math.isfinite(res_t) else 1e9,
            )
        except ApiError as exc:
            assert (exc.status, exc.field) == (409, "reservation_price")
            view.reject(made["id"], made["version"])
            continue
        price = accepted["agreed_price"]
        assert 0.2 <= price <= 0.3
        assert res_t <= price <= res_g  # individual rationality, both sides
        for mid in accepted["movement_ids"]:
            view.commit(mid, view.movement(mid)["epoch"])
        hosts = [t.host for t in registry.tasks.values()]
        assert len(hosts) == 12 and all(h in "ABC" for h in hosts)
    clock.seconds += 10
    registry.accrue_all()
    assert math.fsum(registry.balances().values()) == pytest.approx(0.0, abs=1e-6)
    assert registry.paid_total() >= 0


def test_the_clock_dates_what_the_registry_records() -> None:
    start = datetime(2030, 5, 1, tzinfo=UTC)
    clock = SimClock(start)
    registry = federation(clock)
    clock.seconds = 12
    move(registry, "A", "B", ["A.q0"], 0.25)
    assert registry.tasks["A.q0"].host_since == start + timedelta(seconds=12)
