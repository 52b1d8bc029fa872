"""Offers, partial acceptance, two-phase movements, fencing and payments through the API."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from app.db.session import unit_of_work
from app.models import LedgerEntry
from tests.integration.api.conftest import Api
from tests.support.snapshot import registry_snapshot


def active_contract(api: Api, a: str, b: str) -> dict[str, Any]:
    contract = api.propose(a, b, price_min=0.2, price_max=0.3)
    accepted = api.post(b, f"/v1/contracts/{contract['id']}/accept", {"version": 1})
    assert accepted.status_code == 200, accepted.text
    return accepted.json()


def declare(api: Api, who: str, *names: str, load: float = 5.0) -> None:
    for name in names:
        r = api.post(who, "/v1/tasks", {"name": name, "load": load})
        assert r.status_code == 201, r.text


def test_partial_acceptance_then_commit_moves_host_and_raises_epoch(abc: Api) -> None:
    ab = active_contract(abc, "A", "B")
    declare(abc, "A", "A.q1", "A.q2", "A.q3")
    offer = abc.post(
        "A",
        "/v1/offers",
        {
            "contract_id": ab["id"],
            "tasks": ["A.q1", "A.q2", "A.q3"],
            "price": 0.25,
            "loads": {"A.q1": 7.5},
        },
    )
    assert offer.status_code == 201, offer.text
    assert (offer.json()["from"], offer.json()["to"], offer.json()["status"]) == ("A", "B", "open")
    assert offer.json()["loads"] == {"A.q1": 7.5, "A.q2": 5.0, "A.q3": 5.0}

    accepted = abc.post(
        "B", f"/v1/offers/{offer.json()['id']}/accept", {"version": 1, "tasks": ["A.q2", "A.q1"]}
    )
    assert accepted.status_code == 200, accepted.text
    body = accepted.json()
    assert body["status"] == "partially_accepted"
    assert body["accepted_tasks"] == ["A.q1", "A.q2"]
    assert len(body["movement_ids"]) == 2

    # Prepared is not moved: A still hosts q1 until B commits.
    lease = abc.get("A", "/v1/tasks/A.q1/lease").json()
    assert lease == {"task": "A.q1", "host": "A", "epoch": 0, "moving": True}

    first = body["movement_ids"][0]
    stale = abc.post("B", f"/v1/movements/{first}/commit", {"epoch": 0})
    assert stale.status_code == 409 and stale.json()["field"] == "epoch"
    by_sender = abc.post("A", f"/v1/movements/{first}/commit", {"epoch": 1})
    assert by_sender.status_code == 403
    committed = abc.post("B", f"/v1/movements/{first}/commit", {"epoch": 1})
    assert committed.status_code == 200, committed.text
    assert committed.json()["status"] == "committed"

    q1 = abc.get("B", "/v1/tasks/A.q1").json()
    assert (q1["host"], q1["owner"], q1["lease_epoch"], q1["price"], q1["contract_id"]) == (
        "B",
        "A",
        1,
        0.25,
        ab["id"],
    )
    assert q1["load"] == 7.5  # payments charge the load that was sold
    assert abc.get("A", "/v1/tasks/A.q3").json()["host"] == "A"


def test_one_outstanding_offer_per_participant(abc: Api) -> None:
    ab = active_contract(abc, "A", "B")
    ac = active_contract(abc, "A", "C")
    declare(abc, "A", "A.q1", "A.q2")
    assert (
        abc.post(
            "A", "/v1/offers", {"contract_id": ab["id"], "tasks": ["A.q1"], "price": 0.25}
        ).status_code
        == 201
    )
    second = abc.post(
        "A", "/v1/offers", {"contract_id": ac["id"], "tasks": ["A.q2"], "price": 0.25}
    )
    assert second.status_code == 409
    assert "one at a time" in second.json()["detail"]


def test_only_the_addressee_accepts(abc: Api) -> None:
    ab = active_contract(abc, "A", "B")
    declare(abc, "A", "A.q1")
    oid = abc.post(
        "A", "/v1/offers", {"contract_id": ab["id"], "tasks": ["A.q1"], "price": 0.25}
    ).json()["id"]
    assert abc.post("C", f"/v1/offers/{oid}/accept", {"version": 1}).status_code == 404
    assert abc.get("C", f"/v1/offers/{oid}").status_code == 404
    assert abc.post("A", f"/v1/offers/{oid}/accept", {"version": 1}).status_code == 403
    assert abc.get("C", "/v1/offers").json() == []
    assert abc.get("A", f"/v1/offers/{oid}").json()["status"] == "open"


def test_bad_offers_write_nothing(abc: Api, db_url: str) -> None:
    ab = active_contract(abc, "A", "B")
    declare(abc, "A", "A.q1")
    declare(abc, "B", "B.b1")
    before = registry_snapshot(db_url)
    cases = [
        ({"contract_id": ab["id"], "tasks": ["A.q1"], "price": 0.9}, 422, "price"),
        ({"contract_id": ab["id"], "tasks": ["B.b1"], "price": 0.25}, 422, "tasks[0]"),
        ({"contract_id": ab["id"], "tasks": ["nope"], "price": 0.25}, 422, "tasks[0]"),
        ({"contract_id": ab["id"], "tasks": [], "price": 0.25}, 422, "tasks"),
        ({"contract_id": 999, "tasks": ["A.q1"], "price": 0.25}, 404, "id"),
        (
            {"contract_id": ab["id"], "tasks": ["A.q1"], "price": 0.25, "loads": {"B.b1": 3}},
            422,
            "loads.B.b1",
        ),
        (
            {"contract_id": ab["id"], "tasks": ["A.q1"], "price": 0.25, "loads": {"A.q1": -3}},
            422,
            "loads.A.q1",
        ),
    ]
    for body, status, field in cases:
        r = abc.post("A", "/v1/offers", body)
        assert (r.status_code, r.json()["field"]) == (status, field), (body, r.text)
    assert registry_snapshot(db_url) == before


def test_chained_moves_pay_each_hop_and_payments_balance(abc: Api, db_url: str) -> None:
    ab = active_contract(abc, "A", "B")
    bc = active_contract(abc, "B", "C")
    declare(abc, "A", "A.q1", load=10)

    def move(src: str, dst: str, contract: int, price: float) -> None:
        oid = abc.post(
            src, "/v1/offers", {"contract_id": contract, "tasks": ["A.q1"], "price": price}
        ).json()["id"]
        mid = abc.post(dst, f"/v1/offers/{oid}/accept", {"version": 1}).json()["movement_ids"][0]
        epoch = next(m["epoch"] for m in abc.get(dst, "/v1/movements").json() if m["id"] == mid)
        assert abc.post(dst, f"/v1/movements/{mid}/commit", {"epoch": epoch}).status_code == 200

    move("A", "B", ab["id"], 0.25)
    move("B", "C", bc["id"], 0.22)
    assert abc.get("A", "/v1/tasks/A.q1").json()["host"] == "C"
    # A's heartbeat charges its shed task's hops: A pays B, and B pays C.
    assert abc.post("A", "/v1/participants/me/heartbeat", {"load": 0}).status_code == 200
    ab_ledger = abc.get("A", f"/v1/contracts/{ab['id']}/ledger").json()
    bc_ledger = abc.get("B", f"/v1/contracts/{bc['id']}/ledger").json()
    assert ab_ledger["total_paid"] > 0 and bc_ledger["total_paid"] > 0
    assert {(e["payer"], e["payee"], e["price"]) for e in ab_ledger["entries"]} == {
        ("A", "B", 0.25)
    }
    assert {(e["payer"], e["payee"], e["price"]) for e in bc_ledger["entries"]} == {
        ("B", "C", 0.22)
    }
    for ledger in (ab_ledger, bc_ledger):
        assert abs(sum(ledger["balances"].values())) < 1e-12
        for e in ledger["entries"]:
            assert abs(e["amount"] - e["load"] * e["price"] * e["seconds"]) < 1e-12
    with unit_of_work(db_url) as session:
        paid = session.scalar(select(func.sum(LedgerEntry.amount)))
    assert abs(paid - ab_ledger["total_paid"] - bc_ledger["total_paid"]) < 1e-12

    terminated = abc.post("B", f"/v1/contracts/{bc['id']}/terminate", {"version": 2})
    assert terminated.status_code == 200
    assert terminated.json()["settled_amount"] >= bc_ledger["total_paid"]


def test_pinned_task_cannot_be_offered(abc: Api) -> None:
    ab = active_contract(abc, "A", "B")
    declare(abc, "A", "A.q1")
    assert (
        abc.client.patch(
            "/v1/tasks/A.q1", json={"pinned": True}, headers=abc.headers("admin")
        ).status_code
        == 200
    )
    r = abc.post("A", "/v1/offers", {"contract_id": ab["id"], "tasks": ["A.q1"], "price": 0.25})
    assert r.status_code == 409 and "pinned" in r.json()["detail"]


def test_abort_leaves_the_old_host(abc: Api) -> None:
    ab = active_contract(abc, "A", "B")
    declare(abc, "A", "A.q1")
    oid = abc.post(
        "A", "/v1/offers", {"contract_id": ab["id"], "tasks": ["A.q1"], "price": 0.25}
    ).json()["id"]
    mid = abc.post("B", f"/v1/offers/{oid}/accept", {"version": 1}).json()["movement_ids"][0]
    assert abc.post("A", f"/v1/movements/{mid}/abort").json()["status"] == "aborted"
    assert abc.post("B", f"/v1/movements/{mid}/commit", {"epoch": 1}).status_code == 409
    assert abc.get("A", "/v1/tasks/A.q1/lease").json() == {
        "task": "A.q1",
        "host": "A",
        "epoch": 0,
        "moving": False,
    }


def test_relay_offers_chain_onward_but_never_back_to_a_giver_of_the_chain(abc: Api) -> None:
    ab = active_contract(abc, "A", "B")
    bc = active_contract(abc, "B", "C")
    ac = active_contract(abc, "A", "C")
    assert ac["status"] == "active"
    declare(abc, "A", "A.a1")
    declare(abc, "B", "B.b1")
    declare(abc, "C", "C.c1")
    upstream = abc.post(
        "A", "/v1/offers", {"contract_id": ab["id"], "tasks": ["A.a1"], "price": 0.25}
    )
    assert upstream.status_code == 201, upstream.text
    up_id = upstream.json()["id"]
    assert upstream.json()["relay_chain"] == []

    # B sheds its own b1 to C to make room for A's a1: the offer names what it relays for.
    relay = abc.post(
        "B",
        "/v1/offers",
        {"contract_id": bc["id"], "tasks": ["B.b1"], "price": 0.24, "relay_for": up_id},
    )
    assert relay.status_code == 201, relay.text
    assert relay.json()["relay_for"] == up_id
    seen_by_c = abc.get("C", "/v1/offers").json()[0]
    assert seen_by_c["relay_for"] == up_id and seen_by_c["relay_chain"] == ["A"]

    # C may relay onward, but not to A, who already gives load in this chain: the load would
    # travel in a circle. 422 naming the field, and nothing written.
    back = abc.post(
        "C",
        "/v1/offers",
        {
            "contract_id": ac["id"],
            "tasks": ["C.c1"],
            "price": 0.24,
            "relay_for": relay.json()["id"],
        },
    )
    assert back.status_code == 422, back.text
    assert back.json()["field"] == "relay_for"
    assert "A is a giver in this chain" in back.json()["detail"]
    assert [o["id"] for o in abc.get("C", "/v1/offers").json() if o["from"] == "C"] == []

    # Onward to D, a participant new to the chain, it goes: a relay of a relay.
    abc.register("D")
    cd = active_contract(abc, "C", "D")
    onward = abc.post(
        "C",
        "/v1/offers",
        {
            "contract_id": cd["id"],
            "tasks": ["C.c1"],
            "price": 0.24,
            "relay_for": relay.json()["id"],
        },
    )
    assert onward.status_code == 201, onward.text
    assert abc.get("D", "/v1/offers").json()[0]["relay_chain"] == ["A", "B"]


def test_relay_for_must_name_an_open_offer_addressed_to_me(abc: Api, db_url: str) -> None:
    ab = active_contract(abc, "A", "B")
    bc = active_contract(abc, "B", "C")
    declare(abc, "A", "A.a1")
    declare(abc, "B", "B.b1")
    up = abc.post("A", "/v1/offers", {"contract_id": ab["id"], "tasks": ["A.a1"], "price": 0.25})
    before = registry_snapshot(db_url)

    def relay(who: str, contract: int, upstream: int) -> Any:
        body = {"contract_id": contract, "tasks": ["B.b1"], "price": 0.24, "relay_for": upstream}
        return abc.post(who, "/v1/offers", body)

    unknown = relay("B", bc["id"], 999)
    assert unknown.status_code == 422 and unknown.json()["field"] == "relay_for"
    back_to_giver = relay("B", ab["id"], up.json()["id"])
    assert back_to_giver.status_code == 422 and "giver" in back_to_giver.json()["detail"]
    assert registry_snapshot(db_url) == before

    abc.post("B", f"/v1/offers/{up.json()['id']}/reject", {"version": 1})
    closed = relay("B", bc["id"], up.json()["id"])
    assert closed.status_code == 409 and "rejected" in closed.json()["detail"]


def test_only_the_sender_withdraws_an_open_offer_and_then_it_cannot_be_accepted(abc: Api) -> None:
    ab = active_contract(abc, "A", "B")
    declare(abc, "A", "A.q1")
    offer = abc.post("A", "/v1/offers", {"contract_id": ab["id"], "tasks": ["A.q1"], "price": 0.25})
    offer_id = offer.json()["id"]
    by_addressee = abc.post("B", f"/v1/offers/{offer_id}/withdraw", {"version": 1})
    assert by_addressee.status_code == 403
    withdrawn = abc.post("A", f"/v1/offers/{offer_id}/withdraw", {"version": 1})
    assert withdrawn.status_code == 200, withdrawn.text
    assert withdrawn.json()["status"] == "withdrawn"
    late = abc.post("B", f"/v1/offers/{offer_id}/accept", {"version": withdrawn.json()["version"]})
    assert late.status_code == 409
    assert abc.get("A", "/v1/tasks/A.q1").json()["host"] == "A"
