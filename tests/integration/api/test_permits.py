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
from sqlalchemy import func, select

from app.auth.principal import ADMIN
from app.db.session import unit_of_work
from app.models import AuditEntry, Participant, ReconciliationPermit
from app.permits import service
from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY, Api
from tests.integration.api.test_replica_market import contract
from tests.support.live_server import serve


@pytest.fixture
def settings(db_url: str) -> Settings:
    """An hour's lease (not the 10 s default): these tests expect a holder to still hold the
    permit several requests later, which a loaded machine could stretch past 10 s."""
    return Settings(
        database_url=db_url, admin_key=ADMIN_KEY, environment="test", permit_lease_seconds=3600
    )


def seed_copies(api: Api) -> Api:
    """A owns and hosts tasks A.C and A.D, each with one replica on B; E holds no copy of either."""
    for name in ("A", "B", "E"):
        api.register(name)
    contract(api, "A", "B", hosting=True)
    for task in ("A.C", "A.D"):
        created = api.post("A", "/v1/tasks", {"name": task, "load": 10.0})
        assert created.status_code == 201, created.text
        placed = api.post("A", f"/v1/tasks/{task}/replicas", {"k": 1})
        assert [r["host"] for r in placed.json()] == ["B"], placed.text
    return api


@pytest.fixture
def ab(api: Api) -> Api:
    return seed_copies(api)


def snapshot(db_url: str) -> tuple[list[tuple[object, ...]], int]:
    """Every permit row and the number of audit entries: what a refusal must leave alone."""
    with unit_of_work(db_url) as session:
        rows: list[tuple[object, ...]] = [
            (p.fragment, p.holder, p.participant_id, p.expires_at, p.fence, p.updated_at)
            for p in session.scalars(select(ReconciliationPermit).order_by(ReconciliationPermit.id))
        ]
        audits = session.scalar(select(func.count()).select_from(AuditEntry))
    return rows, int(audits or 0)


def test_one_holder_renewal_release_and_fence(ab: Api) -> None:
    first = ab.post("A", "/v1/permits/A.C/request", {"replica": "C1"})
    assert first.status_code == 200, first.text
    body = first.json()
    assert (body["granted"], body["holder"], body["participant"], body["fence"], body["held"]) == (
        True,
        "C1",
        "A",
        1,
        True,
    )
    refused = ab.post("B", "/v1/permits/A.C/request", {"replica": "C2"}).json()
    # Refused, with who holds the permit until when.
    assert (refused["granted"], refused["replica"], refused["holder"]) == (False, "C2", "C1")
    assert refused["expires_at"] == body["expires_at"] and refused["fence"] == 1
    other = ab.post("B", "/v1/permits/A.D/request", {"replica": "D2"}).json()
    assert (other["granted"], other["fence"]) == (True, 1), "each fragment has its own permit"
    renewed = ab.post("A", "/v1/permits/A.C/request", {"replica": "C1"}).json()
    assert (renewed["granted"], renewed["fence"]) == (True, 1), "a renewal keeps the fence"
    assert renewed["expires_at"] >= body["expires_at"]

    stolen = ab.post("B", "/v1/permits/A.C/release", {"replica": "C2"})
    assert stolen.status_code == 409
    assert stolen.json() == {
        "detail": "permit of fragment 'A.C': C2 does not hold the permit; C1 does",
        "field": "replica",
    }
    # Naming the holder is not enough: the permit was granted to A's replica.
    impostor = ab.post("B", "/v1/permits/A.C/release", {"replica": "C1"})
    assert impostor.status_code == 403
    assert impostor.json() == {
        "detail": "replica 'C1' of fragment 'A.C' is not participant 'B''s copy: it names "
        "another participant or was granted to another participant's copy",
        "field": "replica",
    }

    released = ab.post("A", "/v1/permits/A.C/release", {"replica": "C1"})
    assert released.status_code == 200
    assert (released.json()["holder"], released.json()["held"]) == (None, False)
    again = ab.post("A", "/v1/permits/A.C/release", {"replica": "C1"})
    assert again.status_code == 409
    assert (
        again.json()["detail"]
        == "permit of fragment 'A.C': C1 does not hold the permit; nobody does"
    )
    second = ab.post("B", "/v1/permits/A.C/request", {"replica": "C2"}).json()
    assert (second["granted"], second["holder"], second["fence"]) == (True, "C2", 2)

    listed = ab.get("admin", "/v1/permits")
    assert listed.status_code == 200
    assert [
        (p["fragment"], p["holder"], p["participant"], p["fence"], p["held"]) for p in listed.json()
    ] == [
        ("A.C", "C2", "B", 2, True),
        ("A.D", "D2", "B", 1, True),
    ]


def test_only_an_admin_lists_permits(ab: Api) -> None:
    response = ab.get("A", "/v1/permits")
    assert response.status_code == 403
    assert response.json() == {"detail": "admin key required", "field": "Authorization"}
    assert ab.client.post("/v1/permits/A.C/request", json={"replica": "C1"}).status_code == 401


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/v1/permits/A.C/request", {"replica": ""}, 422, "replica"),
        ("/v1/permits/A.C/request", {}, 422, "replica"),
        ("/v1/permits/A.C/request", {"replica": "C1", "lease": 5}, 422, "lease"),
        ("/v1/permits/A.C/request", {"replica": "x" * 129}, 422, "replica"),
        ("/v1/permits/" + "f" * 129 + "/request", {"replica": "C1"}, 422, "path.fragment"),
        ("/v1/permits/%20/request", {"replica": "C1"}, 422, "fragment"),
        ("/v1/permits/A.C/release", {"replica": 3}, 422, "replica"),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    ab: Api, path: str, body: dict[str, object], status: int, field: str
) -> None:
    response = ab.post("A", path, body)
    assert response.status_code == status, response.text
    assert response.json()["field"] == field


def test_lease_expiry_frees_the_permit_for_the_next_asker(ab: Api, db_url: str) -> None:
    t0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    with unit_of_work(db_url) as session:
        held = service.request(session, ADMIN, "A.C", "C1", lease_seconds=10, now=t0)
    assert (held.granted, held.fence, held.expires_at) == (True, 1, t0 + timedelta(seconds=10))
    with unit_of_work(db_url) as session:
        late = service.request(
            session, ADMIN, "A.C", "C2", lease_seconds=10, now=t0 + timedelta(seconds=9.999)
        )
    assert (late.granted, late.holder, late.expires_at) == (
        False,
        "C1",
        t0 + timedelta(seconds=10),
    )
    # C1 died without releasing: at the end of its lease the permit goes to C2, fenced anew.
    with unit_of_work(db_url) as session:
        taken = service.request(
            session, ADMIN, "A.C", "C2", lease_seconds=10, now=t0 + timedelta(seconds=10)
        )
    assert (taken.granted, taken.holder, taken.fence) == (True, "C2", 2)
    with unit_of_work(db_url) as session:
        listed = service.listed(session)
    assert [(p.fragment, p.holder, p.fence) for p in listed] == [("A.C", "C2", 2)]


@pytest.fixture
def live(settings: Settings) -> Iterator[str]:
    with serve(settings) as url:
        yield url


def test_replicas_racing_for_one_permit_get_one_grant(ab: Api, live: str) -> None:
    # Seeded through the in-process client on the same database the live server serves.
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    keys = {name: ab.headers(name) for name in ("A", "B")}
    racers = 8
    start = threading.Barrier(racers)

    def ask(i: int) -> dict[str, object]:
        # Two replicas' agents, several attempts each, all released at the same instant.
        who = "A" if i % 2 == 0 else "B"
        replica = f"C{i % 2 + 1}"
        with httpx.Client(base_url=live, timeout=60) as c:
            start.wait()
            r = c.post("/v1/permits/A.C/request", json={"replica": replica}, headers=keys[who])
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
    assert [(p["fragment"], p["holder"], p["fence"]) for p in listed] == [("A.C", winner, 1)]


@pytest.mark.parametrize(
    ("who", "path", "replica", "status", "body"),
    [
        (
            "A",
            "/v1/permits/nosuch/request",
            "A",
            404,
            {
                "detail": "no task named 'nosuch' that you hold a copy of: a reconciliation "
                "permit is for a registered task and asked for by a copy of it",
                "field": "fragment",
            },
        ),
        (
            "admin",
            "/v1/permits/nosuch/release",
            "A",
            404,
            {
                "detail": "no task named 'nosuch' that you hold a copy of: a reconciliation "
                "permit is for a registered task and asked for by a copy of it",
                "field": "fragment",
            },
        ),
        (
            "E",
            "/v1/permits/A.C/request",
            "E",
            404,
            {
                # As for an unknown name: E learns nothing about C (issue 15).
                "detail": "no task named 'A.C' that you hold a copy of: a reconciliation "
                "permit is for a registered task and asked for by a copy of it",
                "field": "fragment",
            },
        ),
        (
            "E",
            "/v1/permits/A.C/release",
            "C1",
            404,
            {
                # As for an unknown name: E learns nothing about C (issue 15).
                "detail": "no task named 'A.C' that you hold a copy of: a reconciliation "
                "permit is for a registered task and asked for by a copy of it",
                "field": "fragment",
            },
        ),
        # B hosts a replica of C, but A's copy is named after A: B cannot ask as it.
        (
            "B",
            "/v1/permits/A.C/request",
            "A",
            403,
            {
                "detail": "replica 'A' of fragment 'A.C' is not participant 'B''s copy: it names "
                "another participant or was granted to another participant's copy",
                "field": "replica",
            },
        ),
        # E holds no copy of C, but its name stands for E's copies: not a name B may use.
        (
            "B",
            "/v1/permits/A.C/release",
            "E",
            403,
            {
                "detail": "replica 'E' of fragment 'A.C' is not participant 'B''s copy: it names "
                "another participant or was granted to another participant's copy",
                "field": "replica",
            },
        ),
        # The permit is held by A's node C1: B asking as C1 would have "renewed" A's lease.
        (
            "B",
            "/v1/permits/A.C/request",
            "C1",
            403,
            {
                "detail": "replica 'C1' of fragment 'A.C' is not participant 'B''s copy: it names "
                "another participant or was granted to another participant's copy",
                "field": "replica",
            },
        ),
    ],
)
def test_refusals_name_fragment_and_participant_and_write_nothing(
    ab: Api, db_url: str, who: str, path: str, replica: str, status: int, body: dict[str, str]
) -> None:
    held = ab.post("A", "/v1/permits/A.C/request", {"replica": "C1"})
    assert held.status_code == 200 and held.json()["granted"] is True
    before = snapshot(db_url)
    assert [r[:3] for r in before[0]] == [("A.C", "C1", 1)]
    refused = ab.post(who, path, {"replica": replica})
    assert (refused.status_code, refused.json()) == (status, body)
    assert snapshot(db_url) == before


def test_each_copy_host_and_the_admin_may_ask(ab: Api, db_url: str) -> None:
    # The replica host B, under its participant name (how the registry names its copy).
    by_name = ab.post("B", "/v1/permits/A.D/request", {"replica": "B"}).json()
    assert (by_name["granted"], by_name["holder"], by_name["participant"]) == (True, "B", "B")
    # The primary host A, under a node name of its own, waits for B's lease.
    waits = ab.post("A", "/v1/permits/A.D/request", {"replica": "D1"}).json()
    assert (waits["granted"], waits["holder"]) == (False, "B")
    assert ab.post("B", "/v1/permits/A.D/release", {"replica": "B"}).status_code == 200
    # The operator may act for any copy, e.g. to free a permit a dead host holds.
    admin = ab.post("admin", "/v1/permits/A.D/request", {"replica": "D1"}).json()
    assert (admin["granted"], admin["holder"], admin["participant"], admin["fence"]) == (
        True,
        "D1",
        None,
        2,
    )
    released = ab.post("admin", "/v1/permits/A.D/release", {"replica": "D1"}).json()
    assert (released["holder"], released["held"]) == (None, False)
    rows, _ = snapshot(db_url)
    assert [(*r[:3], r[4]) for r in rows] == [("A.D", None, None, 2)]


def _serving(api: Api, who: str, replica: str) -> list[str]:
    decision = api.post(who, "/v1/permits/A.C/request", {"replica": replica})
    assert decision.status_code == 200, decision.text
    api.post(who, "/v1/permits/A.C/release", {"replica": replica})
    return list(decision.json()["serving"])


def test_a_decision_names_the_other_copies_that_serve_now(ab: Api, db_url: str) -> None:
    # A passive standby on E keeps a checkpoint: it serves no consumer.
    contract(ab, "A", "E", hosting=True)
    placed = ab.post("A", "/v1/tasks/A.C/replicas", {"k": 2, "technique": "passive_standby"})
    assert [(r["host"], r["technique"]) for r in placed.json()] == [("E", "passive_standby")]
    # B's replica asks: A, the primary host, serves (a plain query, STABLE to a consumer).
    assert _serving(ab, "B", "B") == ["A"]
    # A asks: B's active standby serves by its last report (a new replica reads STABLE)...
    assert _serving(ab, "A", "C1") == ["B"]
    # ...tentatively too, but not while it reconciles.
    for state, serves in (("UP_FAILURE", ["B"]), ("STABILIZATION", []), ("STABLE", ["B"])):
        reported = ab.client.put(
            "/v1/replicas/A.C/state", json={"state": state}, headers=ab.headers("B")
        )
        assert reported.status_code == 200, reported.text
        assert _serving(ab, "A", "C1") == serves, state
    # The operator asking for B's copy: the others than B.
    assert _serving(ab, "admin", "B") == ["A"]
    # A failed participant serves nobody.
    with unit_of_work(db_url) as session:
        primary = session.scalar(select(Participant).where(Participant.name == "A"))
        assert primary is not None
        primary.failed_at, primary.liveness = datetime.now(UTC), "failed"
    assert _serving(ab, "B", "B") == []
