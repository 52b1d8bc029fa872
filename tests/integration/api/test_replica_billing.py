"""Heartbeats bill replicas as they bill shed primaries: a hosted replica's load is paid like
any other load (issue 5, item 1), continuously, and its charges never hide a primary's."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from sqlalchemy import select

from app.db.session import unit_of_work
from app.models import LedgerEntry, Replica
from tests.integration.api.conftest import Api
from tests.integration.api.test_replica_market import contract


def _beat(api: Api, who: str) -> None:
    beat = api.post(who, "/v1/participants/me/heartbeat", {"load": 1.0})
    assert beat.status_code == 200, beat.text


def _entries(db_url: str, kind: str) -> list[LedgerEntry]:
    with unit_of_work(db_url) as session:
        return list(
            session.scalars(
                select(LedgerEntry).where(LedgerEntry.kind == kind).order_by(LedgerEntry.id)
            )
        )


def _accrued_at(db_url: str) -> datetime:
    with unit_of_work(db_url) as session:
        return session.scalars(select(Replica)).one().accrued_at


def test_owner_and_host_heartbeats_pay_the_replica_continuously(api: Api, db_url: str) -> None:
    for name in ("A", "B"):
        api.register(name)
    contract(api, "A", "B", hosting=True, low=0.5)
    assert api.post("A", "/v1/tasks", {"name": "A.q1", "load": 10.0}).status_code == 201
    assert [r["host"] for r in api.post("A", "/v1/tasks/A.q1/replicas", {"k": 1}).json()] == ["B"]
    placed_at = _accrued_at(db_url)
    # Before this change no heartbeat charged a replica: A hosts its own primary, so nothing
    # else of A's was billed.
    for who in ("A", "B", "A"):
        time.sleep(0.05)
        _beat(api, who)
    entries = _entries(db_url, "replica")
    people = {p["name"]: p["id"] for p in api.get("admin", "/v1/participants").json()}
    assert len(entries) == 3
    for entry in entries:
        assert (entry.payer_id, entry.payee_id, entry.load, entry.price) == (
            people["A"],
            people["B"],
            10.0,
            0.5,
        )
        assert entry.seconds > 0
        assert entry.amount == pytest.approx(10.0 * 0.5 * entry.seconds)
    # Back to back, no gap and no overlap: the seconds charged are the time since placement.
    charged = sum(e.seconds for e in entries)
    assert charged == pytest.approx((_accrued_at(db_url) - placed_at).total_seconds(), abs=1e-6)
    assert entries[-1].at == _accrued_at(db_url)
    assert _entries(db_url, "accrual") == [], "the primary is at home: nobody is paid for it"
    ledger = api.get("B", f"/v1/contracts/{entries[0].contract_id}/ledger").json()
    assert ledger["total_paid"] == pytest.approx(sum(e.amount for e in entries))
    assert ledger["balances"]["B"] == pytest.approx(ledger["total_paid"])


def test_replica_charges_do_not_hide_the_shed_primarys_interval(api: Api, db_url: str) -> None:
    for name in ("A", "B", "C"):
        api.register(name)
    ab = contract(api, "A", "B", hosting=False, low=0.25)
    contract(api, "A", "C", hosting=True, low=0.5)
    assert api.post("A", "/v1/tasks", {"name": "A.q1", "load": 4.0}).status_code == 201
    offer = api.post("A", "/v1/offers", {"contract_id": ab["id"], "tasks": ["A.q1"], "price": 0.3})
    assert offer.status_code == 201, offer.text
    accepted = api.post("B", f"/v1/offers/{offer.json()['id']}/accept", {"version": 1})
    (mid,) = accepted.json()["movement_ids"]
    assert api.post("B", f"/v1/movements/{mid}/commit", {"epoch": 1}).status_code == 200
    assert [r["host"] for r in api.post("A", "/v1/tasks/A.q1/replicas", {"k": 1}).json()] == ["C"]
    movements = api.get("admin", "/v1/movements").json()
    committed_at = datetime.fromisoformat(
        next(m for m in movements if m["id"] == mid)["finished_at"]
    )

    time.sleep(0.05)
    _beat(api, "C")  # the replica's host: charges the replica only
    time.sleep(0.05)
    _beat(api, "A")  # the owner: the primary since its move, and the replica again
    primary = _entries(db_url, "accrual")
    assert len(primary) == 1
    (charge,) = primary
    assert (charge.load, charge.price) == (4.0, 0.3)
    # Charged from the commit, not from the replica's later charge by C's heartbeat.
    assert charge.seconds == pytest.approx((charge.at - committed_at).total_seconds(), abs=1e-6)
    assert charge.amount == pytest.approx(4.0 * 0.3 * charge.seconds)
    replica = _entries(db_url, "replica")
    assert [(e.load, e.price) for e in replica] == [(4.0, 0.5), (4.0, 0.5)]
    assert replica[-1].at == charge.at, "one heartbeat, one instant paid up to"
