"""A replica has a fencing token of its own: each committed move raises it, and a host holding
an older one is refused, as an old primary host is by the task's lease epoch."""

from __future__ import annotations

from typing import Any

from tests.integration.api.conftest import Api
from tests.integration.api.test_replica_market import setup


def _move(api: Api, src: str, dst: str, contract_id: int) -> dict[str, Any]:
    offer = api.post(
        src, "/v1/offers", {"contract_id": contract_id, "replicas": ["A.q1"], "price": 0.35}
    )
    assert offer.status_code == 201, offer.text
    accepted = api.post(dst, f"/v1/offers/{offer.json()['id']}/accept", {"version": 1})
    assert accepted.status_code == 200, accepted.text
    (mid,) = accepted.json()["movement_ids"]
    return dict(next(m for m in api.get(dst, "/v1/movements").json() if m["id"] == mid))


def _report(api: Api, who: str, epoch: int, state: str = "UP_FAILURE") -> Any:
    return api.client.put(
        "/v1/replicas/A.q1/state",
        json={"state": state, "epoch": epoch},
        headers=api.headers(who),
    )


def test_each_replica_move_raises_its_epoch_and_fences_the_old_host(api: Api) -> None:
    c = setup(api)
    (placed,) = api.get("admin", "/v1/replicas").json()
    assert (placed["host"], placed["epoch"]) == ("B", 0)
    assert _report(api, "B", 0, "STABILIZATION").status_code == 200

    there = _move(api, "B", "C", c["BC"]["id"])
    assert (there["replica"], there["epoch"]) == (True, 1), "the replica's next epoch"
    # The task's epoch (0) is the primary's token, not this copy's: refused.
    stale = api.post("C", f"/v1/movements/{there['id']}/commit", {"epoch": 0})
    assert stale.status_code == 409
    assert stale.json() == {
        "detail": "stale epoch 0: this movement holds epoch 1",
        "field": "epoch",
    }
    done = api.post("C", f"/v1/movements/{there['id']}/commit", {"epoch": 1})
    assert done.status_code == 200, done.text
    (moved,) = api.get("admin", "/v1/replicas").json()
    assert (moved["host"], moved["epoch"]) == ("C", 1)
    lease = api.get("A", "/v1/tasks/A.q1/lease").json()
    assert (lease["host"], lease["epoch"]) == ("A", 0), "the primary's epoch is untouched"

    back = _move(api, "C", "B", c["BC"]["id"])
    assert back["epoch"] == 2
    assert api.post("B", f"/v1/movements/{back['id']}/commit", {"epoch": 2}).status_code == 200
    (home,) = api.get("admin", "/v1/replicas").json()
    assert (home["host"], home["epoch"]) == ("B", 2)

    # B hosts the replica again, but its incarnation from before the moves holds epoch 0: its
    # late report is refused and leaves the replica's state alone.
    refused = _report(api, "B", 0)
    assert refused.status_code == 409
    assert refused.json() == {
        "detail": "stale replica epoch 0: the replica of 'A.q1' is at epoch 2",
        "field": "epoch",
    }
    ahead = _report(api, "B", 3)
    assert ahead.status_code == 409 and ahead.json()["detail"].startswith("unknown replica epoch 3")
    assert api.get("admin", "/v1/replicas").json()[0]["reported_state"] == "STABILIZATION"
    # C, which it left, no longer hosts it at all.
    assert _report(api, "C", 1).status_code == 404
    current = _report(api, "B", 2)
    assert current.status_code == 200, current.text
    assert (current.json()["reported_state"], current.json()["epoch"]) == ("UP_FAILURE", 2)


def test_replica_epoch_must_be_a_non_negative_integer(api: Api) -> None:
    setup(api)
    response = _report(api, "B", -1)
    assert response.status_code == 422 and response.json()["field"] == "epoch"
