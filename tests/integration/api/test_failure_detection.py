"""The registry declares a participant failed when a heartbeat window closes unanswered, fences
it, answers its late heartbeats with ``fenced``, and lets it rejoin (app.participants.failures).

The sweeper's rounds are run here by hand (``failures.sweep``) on the times they would see; the
service's own sweeper, in the background, is kept out of the way by a long heartbeat interval.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.db.session import unit_of_work
from app.main import create_app
from app.models import AuditEntry, Participant, ParticipantFailure
from app.participants import failures
from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY, Api
from tests.integration.api.test_movements import prepared_move

INTERVAL, MISSES = 0.1, 3


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    settings = Settings(
        database_url=db_url, admin_key=ADMIN_KEY, environment="test", heartbeat_interval_seconds=60
    )
    with TestClient(create_app(settings)) as client:
        api = Api(client=client, keys={})
        for name in ("A", "B"):
            api.register(name)
        yield api


def sweep(db_url: str, seconds_after_b: float, listening_from: float | None = None) -> list[str]:
    """One sweeper round that checked every heartbeat up to ``seconds_after_b`` past B's last."""
    with unit_of_work(db_url) as session:
        b = session.scalars(select(Participant).where(Participant.name == "B")).one()
        assert b.last_heartbeat_at is not None
        checked = b.last_heartbeat_at + timedelta(seconds=seconds_after_b)
        since = (
            None
            if listening_from is None
            else b.last_heartbeat_at + timedelta(seconds=listening_from)
        )
    with unit_of_work(db_url) as session:
        found = failures.sweep(
            session,
            checked_until=checked,
            listening_since=since,
            interval_seconds=INTERVAL,
            misses=MISSES,
        )
        return [p.name for p in found]


def beat(api: Api, who: str) -> dict[str, Any]:
    answer = api.post(who, "/v1/participants/me/heartbeat", {})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_failed_only_once_the_checked_window_closed_then_fenced_until_it_rejoins(
    api: Api, db_url: str
) -> None:
    _, movement = prepared_move(api)  # A sells q1 to B; B has not committed yet
    assert beat(api, "B")["fenced"] is False
    # Up to a moment short of the window, the registry has not seen the window close.
    assert sweep(db_url, INTERVAL * MISSES - 0.01) == []
    assert api.get("admin", "/v1/participants/B").json()["failed_at"] is None
    # Never-heard A is not judged at all: no agent runs it.
    assert sweep(db_url, INTERVAL * MISSES) == ["B"]
    assert sweep(db_url, 10.0) == []  # declared once

    read = api.get("admin", "/v1/participants/B").json()
    assert read["liveness"] == "failed" and read["failed_at"] is not None
    public = next(p for p in api.get("A", "/v1/participants").json() if p["name"] == "B")
    assert (public["liveness"], public["failed_at"]) == ("failed", read["failed_at"])
    # Its prepared movement was aborted at once (the task stays with A, free to move again).
    moved = api.get("A", f"/v1/movements/{movement}").json()
    assert moved["status"] == "aborted"
    with unit_of_work(db_url) as session:
        entries = {
            e.action: e
            for e in session.scalars(select(AuditEntry).where(AuditEntry.action.like("%.%")))
        }
        assert entries["movement.aborted"].detail["why"] == "B failed"
        assert entries["participant.failed"].detail["aborted_movements"] == [movement]
        failure = session.scalars(select(ParticipantFailure)).one()
        assert (failure.aborted_movements, failure.rejoined_at) == (1, None)

    # Late heartbeats are answered, telling B it is fenced; they do not end the fence.
    late = beat(api, "B")
    assert (late["fenced"], late["liveness"]) == (True, "failed")
    assert (late["heartbeat_interval_seconds"], late["heartbeat_misses"]) == (60, 3)
    assert api.get("admin", "/v1/participants/B").json()["liveness"] == "failed"
    # Fenced: it may not act as a host (offer, take, commit) until it rejoins.
    offer = api.post("A", "/v1/offers", {"contract_id": 1, "tasks": ["A.q1"], "price": 0.25})
    assert offer.status_code == 201, offer.text
    taken = api.post("B", f"/v1/offers/{offer.json()['id']}/accept", {"version": 1})
    assert (taken.status_code, taken.json()["field"]) == (409, "participant"), taken.text
    assert "fenced" in taken.json()["detail"]

    # The rule: drop what you ran, then rejoin. The fence ends; a second rejoin changes nothing.
    back = api.post("B", "/v1/participants/me/rejoin")
    assert back.status_code == 200, back.text
    assert (back.json()["was_fenced"], back.json()["liveness"], back.json()["failed_at"]) == (
        True,
        "online",
        None,
    )
    assert api.post("B", "/v1/participants/me/rejoin").json()["was_fenced"] is False
    assert beat(api, "B")["fenced"] is False
    taken = api.post("B", f"/v1/offers/{offer.json()['id']}/accept", {"version": 1})
    assert taken.status_code == 200, taken.text
    with unit_of_work(db_url) as session:
        failure = session.scalars(select(ParticipantFailure)).one()
        assert failure.rejoined_at is not None
        actions = [e.action for e in session.scalars(select(AuditEntry).order_by(AuditEntry.id))]
    assert "participant.rejoined" in actions


def test_a_suspended_participant_is_left_to_its_suspension(api: Api, db_url: str) -> None:
    beat(api, "B")
    suspended = api.client.patch(
        "/v1/participants/B", json={"status": "suspended"}, headers=api.headers("admin")
    )
    assert suspended.status_code == 200
    # A suspended participant is already out of the market; the sweeper leaves it be.
    assert sweep(db_url, 3600) == []


def test_the_registrys_own_outage_is_no_participants_silence(api: Api, db_url: str) -> None:
    """A service that started (again) 0.2 s after B's last heartbeat counts B's window from its
    own start: B fails only once it has listened for a whole window."""
    beat(api, "B")
    assert sweep(db_url, 0.45, listening_from=0.2) == []
    assert sweep(db_url, 0.5, listening_from=0.2) == ["B"]


def test_a_move_away_from_a_failed_host_is_left_to_its_target(api: Api, db_url: str) -> None:
    """A sells q1 to B, then A fails: B may hold the checkpoint already, so the move that saves
    the task is not aborted; B commits it and becomes the host."""
    _, movement = prepared_move(api)
    beat(api, "A")
    with unit_of_work(db_url) as session:
        a = session.scalars(select(Participant).where(Participant.name == "A")).one()
        assert a.last_heartbeat_at is not None
        checked = a.last_heartbeat_at + timedelta(seconds=1)
    with unit_of_work(db_url) as session:
        failed = failures.sweep(
            session, checked_until=checked, interval_seconds=INTERVAL, misses=MISSES
        )
        assert [p.name for p in failed] == ["A"]
    assert api.get("B", f"/v1/movements/{movement}").json()["status"] == "prepared"
    committed = api.post("B", f"/v1/movements/{movement}/commit", {"epoch": 1})
    assert committed.status_code == 200, committed.text
    assert api.get("admin", "/v1/tasks/A.q1/lease").json()["host"] == "B"
