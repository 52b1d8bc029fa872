"""GET /v1/participants/{name}/endpoint: only those who work with a participant find its agent."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from app.db.base import utcnow
from app.db.session import unit_of_work
from app.models import Participant, Replica, ReplicaTechnique, Task
from app.participants import failures
from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY, Api


@pytest.fixture
def settings(db_url: str) -> Settings:
    # Liveness must not turn "suspect" while a slow machine runs the test.
    return Settings(
        database_url=db_url,
        admin_key=ADMIN_KEY,
        environment="test",
        heartbeat_interval_seconds=60,
    )


FLIGHT = {"A": "grpc://10.0.0.1:7001", "B": "grpc://10.0.0.2:7001", "C": "grpc://10.0.0.3:7001"}


def abcd(api: Api) -> Api:
    for name in ("A", "B", "C", "D"):
        api.register(name)
        if name in FLIGHT:
            r = api.post(name, "/v1/participants/me/heartbeat", {"endpoint": FLIGHT[name]})
            assert r.status_code == 200, r.text
    return api


def lookup(api: Api, who: str, name: str) -> Any:
    return api.get(who, f"/v1/participants/{name}/endpoint")


def visible(api: Api, who: str) -> set[str]:
    """Whose endpoints ``who`` may look up, among the others."""
    return {n for n in "ABCD" if n != who and lookup(api, who, n).status_code == 200}


def test_admin_and_the_participant_itself_read_it(api: Api) -> None:
    abcd(api)
    r = lookup(api, "admin", "B")
    assert r.status_code == 200
    assert r.json() == {"name": "B", "endpoint": "grpc://10.0.0.2:7001", "liveness": "online"}
    assert lookup(api, "B", "B").json() == r.json()
    # D's agent never reported an endpoint.
    assert lookup(api, "D", "D").json() == {"name": "D", "endpoint": None, "liveness": "unknown"}


def test_strangers_get_404_as_for_an_unknown_name(api: Api) -> None:
    abcd(api)
    stranger = lookup(api, "C", "B")
    unknown = lookup(api, "C", "Nobody")
    assert (stranger.status_code, unknown.status_code) == (404, 404)
    assert stranger.json() == {"detail": "participant 'B' not found", "field": "name"}
    assert unknown.json() == {"detail": "participant 'Nobody' not found", "field": "name"}
    assert visible(api, "C") == set()


def test_an_active_contract_opens_both_ways_and_only_while_active(api: Api) -> None:
    abcd(api)
    proposed = api.propose("A", "B", price_min=0.2, price_max=0.3)
    assert "B" not in visible(api, "A")  # a proposal is not a contract yet
    assert (
        api.post("B", f"/v1/contracts/{proposed['id']}/accept", {"version": 1}).status_code == 200
    )
    assert visible(api, "A") == {"B"} and visible(api, "B") == {"A"}
    assert lookup(api, "A", "B").json()["endpoint"] == "grpc://10.0.0.2:7001"
    assert visible(api, "C") == set()
    ended = api.post("A", f"/v1/contracts/{proposed['id']}/terminate", {"version": 2})
    assert ended.status_code == 200, ended.text
    assert visible(api, "A") == set() and visible(api, "B") == set()


def test_hosting_a_task_of_the_other_opens_both_ways(api: Api, db_url: str) -> None:
    abcd(api)
    # A's task placed at C with no contract between them (as a federation file may place it).
    with unit_of_work(db_url) as session:
        ids = {p.name: p.id for p in session.query(Participant)}
        session.add(Task(name="A.q1", owner_id=ids["A"], host_id=ids["C"], load=5.0))
    assert visible(api, "A") == {"C"} and visible(api, "C") == {"A"}
    assert visible(api, "B") == set()


def test_hosting_a_replica_of_the_others_task_opens_both_ways(api: Api, db_url: str) -> None:
    abcd(api)
    with unit_of_work(db_url) as session:
        ids = {p.name: p.id for p in session.query(Participant)}
        task = Task(name="A.q1", owner_id=ids["A"], host_id=ids["A"], load=5.0)
        session.add(task)
        session.flush()
        session.add(
            Replica(
                task_id=task.id,
                participant_id=ids["D"],
                technique=ReplicaTechnique.passive_standby,
                load=1.0,
            )
        )
    assert visible(api, "A") == {"D"} and visible(api, "D") == {"A"}
    assert visible(api, "B") == set()


def _active(api: Api, a: str, b: str, **terms: Any) -> int:
    proposed = api.propose(a, b, price_min=0.2, price_max=0.3, **terms)
    accepted = api.post(b, f"/v1/contracts/{proposed['id']}/accept", {"version": 1})
    assert accepted.status_code == 200, accepted.text
    return int(proposed["id"])


def _place_at_b(db_url: str, *, replica_on: str | None = None) -> None:
    """A's task q1 runs at B (as a federation file may place it), its replica on ``replica_on``."""
    with unit_of_work(db_url) as session:
        ids = {p.name: p.id for p in session.query(Participant)}
        task = Task(name="q1", owner_id=ids["A"], host_id=ids["B"], load=5.0)
        session.add(task)
        session.flush()
        if replica_on is not None:
            technique = ReplicaTechnique.active_standby
            session.add(
                Replica(task_id=task.id, participant_id=ids[replica_on], technique=technique)
            )


def test_a_movement_in_flight_opens_both_ways_until_it_ends(api: Api, db_url: str) -> None:
    abcd(api)
    _active(api, "A", "C", availability={"recovery": "precise", "replica_hosting": True})
    _place_at_b(db_url, replica_on="C")
    assert "C" not in visible(api, "B") and "B" not in visible(api, "C")
    with unit_of_work(db_url) as session:  # the registry last heard of B an hour ago
        b = session.query(Participant).filter_by(name="B").one()
        b.last_heartbeat_at = b.last_heartbeat_at - timedelta(hours=1)
    with unit_of_work(db_url) as session:  # and its failure sweeper's round declares it failed
        failed = failures.sweep(session, checked_until=utcnow(), interval_seconds=1, misses=3)
        assert [p.name for p in failed] == ["B"]
    # C, which holds q1's replica, takes it over from the failed B (no contract between them).
    moved = api.post("C", "/v1/movements", {"task": "q1", "to": "C", "reason": "failover"})
    assert moved.status_code == 201, moved.text
    assert "C" in visible(api, "B") and "B" in visible(api, "C")
    assert lookup(api, "C", "B").json()["endpoint"] == FLIGHT["B"]
    assert "D" not in visible(api, "C")
    aborted = api.post("C", f"/v1/movements/{moved.json()['id']}/abort")
    assert aborted.status_code == 200, aborted.text
    assert "C" not in visible(api, "B") and "B" not in visible(api, "C")


def test_the_target_of_a_chain_s_last_hop_finds_the_owner(api: Api, db_url: str) -> None:
    """A's task runs at B and B sells it on to C, which has no contract with A: C must still
    reach A's endpoint (the task's inputs and output log live there), and only while it moves."""
    abcd(api)
    _active(api, "A", "B")
    bc = _active(api, "B", "C")
    _place_at_b(db_url)
    assert lookup(api, "C", "A").status_code == 404
    offer = api.post("B", "/v1/offers", {"contract_id": bc, "tasks": ["q1"], "price": 0.25})
    assert offer.status_code == 201, offer.text
    path = f"/v1/offers/{offer.json()['id']}/accept"
    accepted = api.post("C", path, {"version": offer.json()["version"]})
    assert accepted.status_code == 200, accepted.text
    found = lookup(api, "C", "A")
    assert found.status_code == 200, found.text
    assert found.json()["endpoint"] == FLIGHT["A"]
    assert lookup(api, "D", "A").status_code == 404  # a stranger still learns nothing
    movement = accepted.json()["movement_ids"][0]
    assert api.post("C", f"/v1/movements/{movement}/abort").status_code == 200
    assert lookup(api, "C", "A").status_code == 404
