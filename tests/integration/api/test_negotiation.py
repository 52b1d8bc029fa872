"""Negotiation flows over the REST API, on SQLite and PostgreSQL."""

from __future__ import annotations

from tests.integration.api.conftest import Api


def test_propose_counter_counter_accept(abc: Api) -> None:
    proposed = abc.propose("A", "B", min_move_seconds=30)
    assert (proposed["status"], proposed["version"]) == ("proposed", 1)
    assert (proposed["proposer"], proposed["partner"], proposed["terms_author"]) == ("A", "B", "A")

    cid = proposed["id"]
    countered = abc.post(
        "B", f"/v1/contracts/{cid}/counter", {"version": 1, "price_min": 0.9, "price_max": 1.2}
    )
    assert countered.status_code == 200, countered.text
    assert countered.json()["status"] == "countered"
    assert countered.json()["version"] == 2
    assert countered.json()["terms_author"] == "B"

    again = abc.post(
        "A", f"/v1/contracts/{cid}/counter", {"version": 2, "price_min": 0.85, "price_max": 1.1}
    )
    assert again.status_code == 200, again.text
    assert (again.json()["version"], again.json()["terms_author"]) == (3, "A")

    accepted = abc.post("B", f"/v1/contracts/{cid}/accept", {"version": 3})
    assert accepted.status_code == 200, accepted.text
    body = accepted.json()
    assert (body["status"], body["version"]) == ("active", 4)
    assert (body["price_min"], body["price_max"]) == (0.85, 1.1)

    history = abc.get("A", f"/v1/contracts/{cid}/history").json()
    assert [(h["action"], h["version"], h["author"]) for h in history] == [
        ("proposed", 1, "A"),
        ("countered", 2, "B"),
        ("countered", 3, "A"),
        ("accepted", 4, "B"),
    ]
    assert history[1]["terms"]["price_min"] == 0.9


def test_reject_ends_negotiation(abc: Api) -> None:
    cid = abc.propose("A", "B")["id"]
    rejected = abc.post("B", f"/v1/contracts/{cid}/reject", {"version": 1})
    assert rejected.status_code == 200
    assert rejected.json()["status"] == "rejected"
    late = abc.post("B", f"/v1/contracts/{cid}/accept", {"version": 2})
    assert late.status_code == 409
    assert "rejected" in late.json()["detail"]


def test_terminate_by_either_party_settles_ledger(abc: Api) -> None:
    cid = abc.propose("A", "B")["id"]
    abc.post("B", f"/v1/contracts/{cid}/accept", {"version": 1})
    terminated = abc.post("A", f"/v1/contracts/{cid}/terminate", {"version": 2})
    assert terminated.status_code == 200, terminated.text
    assert terminated.json()["status"] == "terminated"
    assert terminated.json()["settled_amount"] == 0.0
    assert terminated.json()["ended_at"] is not None
    again = abc.post("B", f"/v1/contracts/{cid}/terminate", {"version": 3})
    assert again.status_code == 409
    assert "terminated" in again.json()["detail"]


def test_stale_version_counter_is_409(abc: Api) -> None:
    cid = abc.propose("A", "B")["id"]
    abc.post(
        "B", f"/v1/contracts/{cid}/counter", {"version": 1, "price_min": 0.9, "price_max": 1.0}
    )
    stale = abc.post(
        "A", f"/v1/contracts/{cid}/counter", {"version": 1, "price_min": 0.7, "price_max": 1.0}
    )
    assert stale.status_code == 409
    assert stale.json()["field"] == "version"
    assert "version 2" in stale.json()["detail"]
    current = abc.get("A", f"/v1/contracts/{cid}").json()
    assert (current["version"], current["price_min"]) == (2, 0.9)


def test_author_cannot_accept_or_counter_own_terms(abc: Api) -> None:
    cid = abc.propose("A", "B")["id"]
    own_accept = abc.post("A", f"/v1/contracts/{cid}/accept", {"version": 1})
    assert own_accept.status_code == 403
    assert "other party" in own_accept.json()["detail"]
    own_counter = abc.post(
        "A", f"/v1/contracts/{cid}/counter", {"version": 1, "price_min": 0.5, "price_max": 1.0}
    )
    assert own_counter.status_code == 403
    assert abc.get("B", f"/v1/contracts/{cid}").json()["status"] == "proposed"


def test_terminate_of_proposal_names_current_state(abc: Api) -> None:
    cid = abc.propose("A", "B")["id"]
    response = abc.post("A", f"/v1/contracts/{cid}/terminate", {"version": 1})
    assert response.status_code == 409
    assert "proposed" in response.json()["detail"]


def test_second_live_contract_for_a_pair_is_409(abc: Api) -> None:
    abc.propose("A", "B")
    response = abc.post("B", "/v1/contracts", {"partner": "A", "price_min": 1, "price_max": 2})
    assert response.status_code == 409
    assert response.json()["field"] == "partner"


def test_list_filters_by_status(abc: Api) -> None:
    ab = abc.propose("A", "B")["id"]
    abc.propose("A", "C")
    abc.post("B", f"/v1/contracts/{ab}/accept", {"version": 1})
    active = abc.get("A", "/v1/contracts", params={"status": "active"}).json()
    assert [c["id"] for c in active] == [ab]
    everything = abc.get("A", "/v1/contracts").json()
    assert sorted(c["partner"] for c in everything) == ["B", "C"]


def test_admin_sees_every_contract_and_may_terminate(abc: Api) -> None:
    cid = abc.propose("A", "B")["id"]
    abc.post("B", f"/v1/contracts/{cid}/accept", {"version": 1})
    assert [c["id"] for c in abc.get("admin", "/v1/contracts").json()] == [cid]
    response = abc.post("admin", f"/v1/contracts/{cid}/terminate", {"version": 2})
    assert response.status_code == 200
    audit_actor = abc.get("A", f"/v1/contracts/{cid}/history").json()[-1]["actor"]
    assert audit_actor == "admin"


def test_counter_changes_only_the_terms_it_names(abc: Api) -> None:
    proposed = abc.propose(
        "A",
        "B",
        min_move_seconds=30,
        starts_at="2030-01-01T00:00:00Z",
        ends_at="2031-01-01T00:00:00Z",
        availability={"recovery": "precise", "max_delay_seconds": 3, "replica_hosting": True},
    )
    countered = abc.post(
        "B",
        f"/v1/contracts/{proposed['id']}/counter",
        {"version": 1, "price_min": 0.9, "price_max": 1.1},
    ).json()
    assert (countered["price_min"], countered["price_max"]) == (0.9, 1.1)
    assert countered["availability"] == {
        "recovery": "precise",
        "max_delay_seconds": 3.0,
        "replica_hosting": True,
    }
    assert (countered["starts_at"], countered["ends_at"], countered["min_move_seconds"]) == (
        proposed["starts_at"],
        proposed["ends_at"],
        30.0,
    )
    only_max = abc.post(
        "A", f"/v1/contracts/{proposed['id']}/counter", {"version": 2, "price_max": 1.0}
    ).json()
    assert (only_max["price_min"], only_max["price_max"], only_max["version"]) == (0.9, 1.0, 3)


def test_counter_below_standing_minimum_is_refused(abc: Api) -> None:
    cid = abc.propose("A", "B")["id"]  # range [0.8, 1.0]
    r = abc.post("B", f"/v1/contracts/{cid}/counter", {"version": 1, "price_min": 1.5})
    assert r.status_code == 422
    assert r.json()["field"] == "price_min"
    assert "below price_min 1.5" in r.json()["detail"]
    assert abc.get("A", f"/v1/contracts/{cid}").json()["version"] == 1


def test_every_decision_raises_the_version_by_exactly_one(abc: Api) -> None:
    cid = abc.propose("A", "B")["id"]
    assert (
        abc.post("B", f"/v1/contracts/{cid}/counter", {"version": 1, "price_min": 0.9}).json()[
            "version"
        ]
        == 2
    )
    assert abc.post("A", f"/v1/contracts/{cid}/accept", {"version": 2}).json()["version"] == 3
    terminated = abc.post("B", f"/v1/contracts/{cid}/terminate", {"version": 3}).json()
    assert (terminated["status"], terminated["version"]) == ("terminated", 4)
    assert [h["version"] for h in abc.get("A", f"/v1/contracts/{cid}/history").json()] == [
        1,
        2,
        3,
        4,
    ]
