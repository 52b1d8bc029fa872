"""Offers carrying both sides' reservation prices: the registry sets the agreed price with the
protocol's rule (app.market.protocol.negotiated_price), and that price is what the movements,
the task and its payments carry. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.api.conftest import Api
from tests.integration.api.test_market import active_contract, declare
from tests.support.snapshot import registry_snapshot


def numbers(document: Any) -> list[float]:
    """Every number in a JSON document, at any depth. A reservation must appear as none of them;
    looking for its digits in the text matched timestamps ('...10.244231Z')."""
    if isinstance(document, bool):
        return []
    if isinstance(document, int | float):
        return [float(document)]
    if isinstance(document, dict):
        return [n for value in document.values() for n in numbers(value)]
    if isinstance(document, list):
        return [n for value in document for n in numbers(value)]
    return []


def offer(api: Api, contract: dict[str, Any], **extra: Any) -> Any:
    body = {"contract_id": contract["id"], "tasks": ["A.q1"], "price": 0.22, **extra}
    return api.post("A", "/v1/offers", body)


def accept(api: Api, offer_id: int, **extra: Any) -> Any:
    return api.post("B", f"/v1/offers/{offer_id}/accept", {"version": 1, **extra})


def commit_all(api: Api, who: str, movement_ids: list[int]) -> list[dict[str, Any]]:
    moves = {m["id"]: m for m in api.get(who, "/v1/movements").json()}
    out = []
    for mid in movement_ids:
        r = api.post(who, f"/v1/movements/{mid}/commit", {"epoch": moves[mid]["epoch"]})
        assert r.status_code == 200, r.text
        out.append(moves[mid])
    return out


def test_both_reservations_set_the_agreed_price_of_movements_tasks_and_payments(abc: Api) -> None:
    ab = active_contract(abc, "A", "B")  # range [0.2, 0.3]
    declare(abc, "A", "A.q1", load=10)
    made = offer(abc, ab, reservation_price=0.28)
    assert made.status_code == 201, made.text
    assert made.json()["agreed_price"] is None and "reservation_price" not in made.json()
    # The taker does not see the giver's reservation anywhere.
    assert 0.28 not in numbers(abc.get("B", f"/v1/offers/{made.json()['id']}").json())

    taken = accept(abc, made.json()["id"], reservation_price=0.24)
    assert taken.status_code == 200, taken.text
    body = taken.json()
    # Midpoint of [max(0.24, 0.2), min(0.28, 0.3)]: 0.26, above the asking price 0.22.
    assert body["agreed_price"] == pytest.approx(0.26) and body["price"] == 0.22
    assert 0.24 not in numbers(abc.get("A", f"/v1/offers/{body['id']}").json())

    (move,) = commit_all(abc, "B", body["movement_ids"])
    assert move["price"] == pytest.approx(0.26)
    task = abc.get("A", "/v1/tasks/A.q1").json()
    assert (task["host"], task["price"]) == ("B", pytest.approx(0.26))
    assert abc.post("A", "/v1/participants/me/heartbeat", {"load": 0}).status_code == 200
    ledger = abc.get("A", f"/v1/contracts/{ab['id']}/ledger").json()
    assert ledger["entries"]
    assert all(e["price"] == pytest.approx(0.26) for e in ledger["entries"])
    assert abs(sum(ledger["balances"].values())) < 1e-12  # payments balance


def test_without_reservations_the_offered_price_stands(abc: Api) -> None:
    ab = active_contract(abc, "A", "B")
    declare(abc, "A", "A.q1")
    made = offer(abc, ab)
    taken = accept(abc, made.json()["id"])
    assert taken.json()["agreed_price"] == 0.22
    (move,) = commit_all(abc, "B", taken.json()["movement_ids"])
    assert move["price"] == 0.22
    # Only one side's reservation: the offered price, which the giver's covers ...
    declare(abc, "A", "A.q2")
    made = abc.post(
        "A",
        "/v1/offers",
        {"contract_id": ab["id"], "tasks": ["A.q2"], "price": 0.22, "reservation_price": 0.29},
    )
    assert accept(abc, made.json()["id"]).json()["agreed_price"] == 0.22


def test_a_taker_reservation_alone_must_be_met_by_the_offered_price(abc: Api, db_url: str) -> None:
    ab = active_contract(abc, "A", "B")
    declare(abc, "A", "A.q1")
    made = offer(abc, ab).json()
    before = registry_snapshot(db_url)
    refused = accept(abc, made["id"], reservation_price=0.23)
    assert refused.status_code == 409 and refused.json()["field"] == "reservation_price"
    assert registry_snapshot(db_url) == before
    ok = accept(abc, made["id"], reservation_price=0.21)
    assert ok.status_code == 200 and ok.json()["agreed_price"] == 0.22


@pytest.mark.parametrize(
    ("giver", "taker", "words"),
    [
        (0.25, 0.27, "above the most the giver will pay"),
        # The reservations overlap ([0.31, 0.35]) but not inside the range [0.2, 0.3].
        (0.35, 0.31, "no price both sides accept inside the contract's range [0.2, 0.3]"),
    ],
    ids=["taker-above-giver", "outside-range"],
)
def test_no_price_for_both_is_refused_naming_reservation_price_and_writes_nothing(
    abc: Api, db_url: str, giver: float, taker: float, words: str
) -> None:
    ab = active_contract(abc, "A", "B")
    declare(abc, "A", "A.q1")
    made = offer(abc, ab, reservation_price=giver).json()
    before = registry_snapshot(db_url)
    refused = accept(abc, made["id"], reservation_price=taker)
    assert refused.status_code == 409, refused.text
    assert refused.json()["field"] == "reservation_price"
    assert words in refused.json()["detail"]
    assert str(giver) not in refused.json()["detail"]  # the giver's reservation stays private
    assert registry_snapshot(db_url) == before
    still = abc.get("B", f"/v1/offers/{made['id']}").json()
    assert (still["status"], still["version"]) == ("open", 1)


def _raw(api: Api, who: str, path: str, text: str) -> Any:
    headers = {**api.headers(who), "content-type": "application/json"}
    return api.client.post(path, content=text, headers=headers)


def test_bad_reservations_are_422_naming_the_field_and_write_nothing(abc: Api, db_url: str) -> None:
    ab = active_contract(abc, "A", "B")
    declare(abc, "A", "A.q1")
    base = {"contract_id": ab["id"], "tasks": ["A.q1"], "price": 0.25}
    before = registry_snapshot(db_url)
    for value in (-0.1, "cheap"):
        r = abc.post("A", "/v1/offers", {**base, "reservation_price": value})
        assert (r.status_code, r.json()["field"]) == (422, "reservation_price"), r.text
    for literal in ("NaN", "Infinity", "-Infinity"):
        text = json.dumps(base)[:-1] + f', "reservation_price": {literal}}}'
        r = _raw(abc, "A", "/v1/offers", text)
        assert (r.status_code, r.json()["field"]) == (422, "reservation_price"), r.text
    # The price offered is above what the giver says it would pay.
    r = abc.post("A", "/v1/offers", {**base, "reservation_price": 0.24})
    assert (r.status_code, r.json()["field"]) == (422, "reservation_price"), r.text
    assert registry_snapshot(db_url) == before

    made = abc.post("A", "/v1/offers", base).json()
    before = registry_snapshot(db_url)
    r = accept(abc, made["id"], reservation_price=-1)
    assert (r.status_code, r.json()["field"]) == (422, "reservation_price"), r.text
    text = '{"version": 1, "reservation_price": NaN}'
    r = _raw(abc, "B", f"/v1/offers/{made['id']}/accept", text)
    assert (r.status_code, r.json()["field"]) == (422, "reservation_price"), r.text
    assert registry_snapshot(db_url) == before
