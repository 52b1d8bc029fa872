"""The registry's reconciliation arbiter (/v1/permits) on SQLite and PostgreSQL.

Two replicas of one fragment cut off from each other ask here before reconciling: one permit per
fragment, a lease the holder renews, a fence raised on each new holder, release by the holder
only. The race test runs the real server over TCP with concurrent clients.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from app.auth.principal import ADMIN
from app.db.session import unit_of_work
from app.permits import service
from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY, Api
from tests.support.live_server import serve


@pytest.fixture
def ab(api: Api) -> Api:
    for name in ("A", "B"):
        api.register(name)
    return api


def test_one_holder_renewal_release_and_fence(ab: Api) -> None:
    first = ab.post("A", "/v1/permits/C/request", {"replica": "C1"})
    assert first.status_code == 200, first.text
    body = first.json()
    assert (body["granted"], body["holder"], body["participant"], body["fence"], body["held"]) == (
        True,
        "C1",
        "A",
        1,
        True,
    )
    refused = ab.post("B", "/v1/permits/C/request", {"replica": "C2"}).json()
    # Refused, with who holds the permit until when.
    assert (refused["granted"], refused["replica"], refused["holder"]) == (False, "C2", "C1")
    assert refused["expires_at"] == body["expires_at"] and refused["fence"] == 1
    other = ab.post("B", "/v1/permits/D/request", {"replica": "D2"}).json()
    assert (other["granted"], other["fence"]) == (True, 1), "each fragment has its own permit"
    renewed = ab.post("A", "/v1/permits/C/request", {"replica": "C1"}).json()
    assert (renewed["granted"], renewed["fence"]) == (True, 1), "a renewal keeps the fence"
    assert renewed["expires_at"] >= body["expires_at"]

    stolen = ab.post("B", "/v1/permits/C/release", {"replica": "C2"})
    assert stolen.status_code == 409
    assert stolen.json() == {
        "detail": "permit of fragment 'C': C2 does not hold the permit; C1 does",
        "field": "replica",
    }
    # Naming the holder is not enough: the permit was granted to A's replica.
    impostor = ab.post("B", "/v1/permits/C/release", {"replica": "C1"})
    assert impostor.status_code == 403 and impostor.json()["field"] == "replica"

    released = ab.post("A", "/v1/permits/C/release", {"replica": "C1"})
    assert released.status_code == 200
    assert (released.json()["holder"], released.json()["held"]) == (None, False)
    again = ab.post("A", "/v1/permits/C/release", {"replica": "C1"})
    assert again.status_code == 409
    assert (
        again.json()["detail"] == "permit of fragment 'C': C1 does not hold the permit; nobody does"
    )
    second = ab.post("B", "/v1/permits/C/request", {"replica": "C2"}).json()
    assert (second["granted"], second["holder"], second["fence"]) == (True, "C2", 2)

    listed = ab.get("admin", "/v1/permits")
    assert listed.status_code == 200
    assert [
        (p["fragment"], p["holder"], p["participant"], p["fence"], p["held"]) for p in listed.json()
    ] == [
        ("C", "C2", "B", 2, True),
        ("D", "D2", "B", 1, True),
    ]


def test_only_an_admin_lists_permits(ab: Api) -> None:
    response = ab.get("A", "/v1/permits")
    assert response.status_code == 403
    assert response.json() == {"detail": "admin key required", "field": "Authorization"}
    assert ab.client.post("/v1/permits/C/request", json={"replica": "C1"}).status_code == 401


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/v1/permits/C/request", {"replica": ""}, 422, "replica"),
        ("/v1/permits/C/request", {}, 422, "replica"),
        ("/v1/permits/C/request", {"replica": "C1", "lease": 5}, 422, "lease"),
        ("/v1/permits/C/request", {"replica": "x" * 129}, 422, "replica"),
        ("/v1/permits/" + "f" * 129 + "/request", {"replica": "C1"}, 422, "path.fragment"),
        ("/v1/permits/%20/request", {"replica": "C1"}, 422, "fragment"),
        ("/v1/permits/C/release", {"replica": 3}, 422, "replica"),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    ab: Api, path: str, body: dict[str, object], status: int, field: str
) -> None:
    response = ab.post("A", path, body)
    assert response.status_code == status, response.text
    assert response.json()["field"] == field


def test_lease_expiry_frees_the_permit_for_the_next_asker(db_url: str) -> None:
    t0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    with unit_of_work(db_url) as session:
        held = service.request(session, ADMIN, "C", "C1", lease_seconds=10, now=t0)
    assert (held.granted, held.fence, held.expires_at) == (True, 1, t0 + timedelta(seconds=10))
    with unit_of_work(db_url) as session:
        late = service.request(
            session, ADMIN, "C", "C2", lease_seconds=10, now=t0 + timedelta(seconds=9.999)
        )
    assert (late.granted, late.holder, late.expires_at) == (
        False,
        "C1",
        t0 + timedelta(seconds=10),
    )
    # C1 died without releasing: at the end of its lease the permit goes to C2, fenced anew.
    with unit_of_work(db_url) as session:
        taken = service.request(
            session, ADMIN, "C", "C2", lease_seconds=10, now=t0 + timedelta(seconds=10)
        )
    assert (taken.granted, taken.holder, taken.fence) == (True, "C2", 2)
    with unit_of_work(db_url) as session:
        listed = service.listed(session)
    assert [(p.fragment, p.holder, p.fence) for p in listed] == [("C", "C2", 2)]


@pytest.fixture
def live(db_url: str) -> Iterator[str]:
    settings = Settings(database_url=db_url, admin_key=ADMIN_KEY, environment="test")
    with serve(settings) as url:
        yield url


def test_replicas_racing_for_one_permit_get_one_grant(live: str) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=live, timeout=60) as client:
        keys = {}
        for name in ("A", "B"):
            r = client.post("/v1/participants", json={"name": name, "capacity": 100}, headers=admin)
            keys[name] = {"Authorization": f"Bearer {r.json()['api_key']}"}
    racers = 8
    start = threading.Barrier(racers)

    def ask(i: int) -> dict[str, object]:
        # Two replicas' agents, several attempts each, all released at the same instant.
        who = "A" if i % 2 == 0 else "B"
        replica = f"C{i % 2 + 1}"
        with httpx.Client(base_url=live, timeout=60) as c:
            start.wait()
            r = c.post("/v1/permits/C/request", json={"replica": replica}, headers=keys[who])
            assert r.status_code == 200, r.text
            return dict(r.json())

    with ThreadPoolExecutor(racers) as pool:
        answers = list(pool.map(ask, range(racers)))
    holders = {a["holder"] for a in answers}
    assert len(holders) == 1, answers
    (winner,) = holders
    # Every attempt of the winner is granted (the later ones renew), none of the loser's.
    assert all(a["granted"] == (a["replica"] == winner) for a in answers), answers
    assert {a["fence"] for a in answers} == {1}
    with httpx.Client(base_url=live, timeout=60) as client:
        listed = client.get("/v1/permits", headers=admin).json()
    assert [(p["fragment"], p["holder"], p["fence"]) for p in listed] == [("C", winner, 1)]
