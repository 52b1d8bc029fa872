"""Replicas through the market API: offered, accepted, moved and paid like load; never two copies
of one task on one participant."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import select

from app.db.session import unit_of_work
from app.models import LedgerEntry, Replica
from tests.integration.api.conftest import Api
from tests.support.snapshot import registry_snapshot


def contract(api: Api, a: str, b: str, *, hosting: bool, low: float = 0.5) -> dict[str, Any]:
    proposed = api.propose(
        a, b, price_min=low, price_max=low + 0.1, availability={"replica_hosting": hosting}
    )
    accepted = api.post(b, f"/v1/contracts/{proposed['id']}/accept", {"version": 1})
    assert accepted.status_code == 200, accepted.text
    return accepted.json()


def setup(api: Api) -> dict[str, dict[str, Any]]:
    """A owns q1 (load 10); its replica is placed on B; B may shed it to C (replica hosting)
    but not to D; A hosts the primary."""
    for name in ("A", "B", "C", "D"):
        api.register(name)
    out = {
        "AB": contract(api, "A", "B", hosting=True),
        "BC": contract(api, "B", "C", hosting=True, low=0.3),
        "BD": contract(api, "B", "D", hosting=False, low=0.3),
        "BA": {},
    }
    assert api.post("A", "/v1/tasks", {"name": "A.q1", "load": 10.0}).status_code == 201
    placed = api.post("A", "/v1/tasks/A.q1/replicas", {"k": 1})
    assert [r["host"] for r in placed.json()] == ["B"], placed.text
    return out


def test_a_replica_is_offered_accepted_moved_and_paid_like_load(api: Api, db_url: str) -> None:
    c = setup(api)
    offer = api.post(
        "B",
        "/v1/offers",
        {"contract_id": c["BC"]["id"], "replicas": ["A.q1"], "price": 0.35, "loads": {"A.q1": 9.0}},
    )
    assert offer.status_code == 201, offer.text
    body = offer.json()
    assert (body["from"], body["to"], body["tasks"], body["replicas"]) == ("B", "C", [], ["A.q1"])
    assert body["loads"] == {"A.q1": 9.0}

    accepted = api.post("C", f"/v1/offers/{body['id']}/accept", {"version": 1})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["status"] == "accepted"
    assert accepted.json()["accepted_replicas"] == ["A.q1"]
    (mid,) = accepted.json()["movement_ids"]
    movement = next(m for m in api.get("C", "/v1/movements").json() if m["id"] == mid)
    assert (movement["task"], movement["from"], movement["to"], movement["replica"]) == (
        "A.q1",
        "B",
        "C",
        True,
    )
    # The primary is untouched by a replica's move: its host and lease stay.
    assert api.get("A", "/v1/tasks/A.q1/lease").json()["host"] == "A"

    time.sleep(0.05)  # a measurable interval at the placement's terms
    committed = api.post("C", f"/v1/movements/{mid}/commit", {"epoch": movement["epoch"]})
    assert committed.status_code == 200, committed.text
    assert committed.json()["status"] == "committed"

    seen = api.get("admin", "/v1/replicas").json()
    assert [(r["task"], r["host"], r["load"], r["price"], r["contract_id"]) for r in seen] == [
        ("A.q1", "C", 9.0, 0.35, c["BC"]["id"])
    ]
    lease = api.get("A", "/v1/tasks/A.q1/lease").json()
    assert (lease["host"], lease["epoch"]) == ("A", 0)

    time.sleep(0.05)
    # The host's state report charges the replica's hops: A still pays B, and B pays C.
    report = api.client.put(
        "/v1/replicas/A.q1/state", json={"state": "STABLE"}, headers=api.headers("C")
    )
    assert report.status_code == 200, report.text
    with unit_of_work(db_url) as session:
        entries = session.scalars(
            select(LedgerEntry).where(LedgerEntry.kind == "replica").order_by(LedgerEntry.id)
        ).all()
        people = {p["name"]: p["id"] for p in api.get("admin", "/v1/participants").json()}
        by_pair = {(e.payer_id, e.payee_id, e.price, e.load) for e in entries}
        assert (people["A"], people["B"], 0.5, 10.0) in by_pair  # before the move
        assert (people["A"], people["B"], 0.5, 9.0) in by_pair  # after: the load sold
        assert (people["B"], people["C"], 0.35, 9.0) in by_pair
        assert all(e.amount == e.load * e.price * e.seconds and e.amount > 0 for e in entries)
        replica = session.scalars(select(Replica)).one()
        assert replica.participant_id == people["C"]
    bc = api.get("B", f"/v1/contracts/{c['BC']['id']}/ledger").json()
    # The contract's ledger lists the replica's payments and counts them as paid load.
    assert {(e["kind"], e["payer"], e["payee"], e["price"]) for e in bc["entries"]} == {
        ("replica", "B", "C", 0.35)
    }
    assert bc["total_paid"] > 0 and abs(sum(bc["balances"].values())) < 1e-12
    assert bc["balances"]["C"] == pytest.approx(bc["total_paid"])
    terminated = api.post("B", f"/v1/contracts/{c['BC']['id']}/terminate", {"version": 2})
    assert terminated.status_code == 200, terminated.text
    assert terminated.json()["settled_amount"] >= bc["total_paid"]


def test_an_offer_that_would_put_two_copies_on_one_participant_is_refused(
    api: Api, db_url: str
) -> None:
    c = setup(api)
    ab = c["AB"]["id"]
    before = registry_snapshot(db_url)
    # A would hand the primary to B, which hosts its replica.
    primary = api.post("A", "/v1/offers", {"contract_id": ab, "tasks": ["A.q1"], "price": 0.55})
    assert primary.status_code == 409, primary.text
    assert primary.json()["field"] == "tasks[0]"
    assert "never two copies" in primary.json()["detail"]
    # B would hand the replica back to A, which hosts the primary.
    back = api.post("B", "/v1/offers", {"contract_id": ab, "replicas": ["A.q1"], "price": 0.55})
    assert back.status_code == 409, back.text
    assert back.json()["field"] == "replicas[0]"
    # A replica only travels over a contract that allows replica hosting.
    to_d = api.post(
        "B", "/v1/offers", {"contract_id": c["BD"]["id"], "replicas": ["A.q1"], "price": 0.35}
    )
    assert (to_d.status_code, to_d.json()["field"]) == (422, "replicas[0]")
    # Only the replica's host offers it.
    not_mine = api.post(
        "C", "/v1/offers", {"contract_id": c["BC"]["id"], "replicas": ["A.q1"], "price": 0.35}
    )
    assert (not_mine.status_code, not_mine.json()["field"]) == (422, "replicas[0]")
    assert registry_snapshot(db_url) == before


def test_a_copy_arriving_meanwhile_makes_the_acceptance_fail_and_changes_nothing(
    api: Api, db_url: str
) -> None:
    c = setup(api)
    contract(api, "A", "C", hosting=True)
    offer = api.post(
        "B", "/v1/offers", {"contract_id": c["BC"]["id"], "replicas": ["A.q1"], "price": 0.35}
    ).json()
    # Before C decides, A asks for a second replica, which lands on C.
    assert [r["host"] for r in api.post("A", "/v1/tasks/A.q1/replicas", {"k": 2}).json()] == ["C"]
    before = registry_snapshot(db_url)
    refused = api.post("C", f"/v1/offers/{offer['id']}/accept", {"version": 1})
    assert refused.status_code == 409, refused.text
    assert refused.json()["field"] == "replicas[0]"
    assert registry_snapshot(db_url) == before


def test_moving_a_replica_back_unwinds_its_paid_hops(api: Api, db_url: str) -> None:
    c = setup(api)

    def move(src: str, dst: str, contract: int, price: float) -> None:
        body = {"contract_id": contract, "replicas": ["A.q1"], "price": price}
        offer = api.post(src, "/v1/offers", body)
        assert offer.status_code == 201, offer.text
        accepted = api.post(dst, f"/v1/offers/{offer.json()['id']}/accept", {"version": 1})
        (mid,) = accepted.json()["movement_ids"]
        epoch = next(m["epoch"] for m in api.get(dst, "/v1/movements").json() if m["id"] == mid)
        done = api.post(dst, f"/v1/movements/{mid}/commit", {"epoch": epoch})
        assert done.status_code == 200, done.text

    move("B", "C", c["BC"]["id"], 0.35)
    move("C", "B", c["BC"]["id"], 0.35)
    (seen,) = api.get("admin", "/v1/replicas").json()
    # Back where it was placed, on the placement's terms: the B-C hop is gone.
    assert (seen["host"], seen["price"], seen["contract_id"]) == ("B", 0.5, c["AB"]["id"])
    people = {p["name"]: p["id"] for p in api.get("admin", "/v1/participants").json()}
    with unit_of_work(db_url) as session:
        replica = session.scalars(select(Replica)).one()
        assert replica.hops == [
            {
                "payer": people["A"],
                "payee": people["B"],
                "contract_id": c["AB"]["id"],
                "price": 0.5,
            }
        ]
