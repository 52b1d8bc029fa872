"""A participant about to run a task may read its record: it needs the fragment to run it."""

from __future__ import annotations

from tests.integration.api.conftest import Api


def test_the_recipient_of_an_open_offer_and_the_target_of_a_prepared_move_read_the_task(
    abc: Api,
) -> None:
    contract = abc.propose("A", "B", price_min=0.2, price_max=0.3)
    assert (
        abc.post("B", f"/v1/contracts/{contract['id']}/accept", {"version": 1}).status_code == 200
    )
    assert abc.post("A", "/v1/tasks", {"name": "A.q1", "load": 5.0}).status_code == 201
    # Before any offer, B (a partner, not the owner or host) cannot see A's task.
    assert abc.get("B", "/v1/tasks/A.q1").status_code == 404

    offer = abc.post(
        "A", "/v1/offers", {"contract_id": contract["id"], "tasks": ["A.q1"], "price": 0.25}
    ).json()
    seen = abc.get("B", "/v1/tasks/A.q1")
    assert seen.status_code == 200, seen.text
    assert (seen.json()["owner"], seen.json()["host"]) == ("A", "A")
    # C, a stranger to both, learns nothing: the same 404 as an unknown task.
    assert abc.get("C", "/v1/tasks/A.q1").status_code == 404

    accepted = abc.post("B", f"/v1/offers/{offer['id']}/accept", {"version": 1})
    assert accepted.status_code == 200, accepted.text
    assert abc.get("B", "/v1/tasks/A.q1").status_code == 200  # the prepared movement's target
    assert abc.get("C", "/v1/tasks/A.q1").status_code == 404

    # An aborted move ends it: B is neither host nor about to be.
    movement = accepted.json()["movement_ids"][0]
    assert abc.post("B", f"/v1/movements/{movement}/abort").status_code == 200
    assert abc.get("B", "/v1/tasks/A.q1").status_code == 404
    # And reading it gave B no right to change it.
    assert (
        abc.client.patch("/v1/tasks/A.q1", json={"load": 1.0}, headers=abc.headers("B")).status_code
        == 404
    )
