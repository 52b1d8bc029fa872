"""Heartbeats make a participant online; silence makes it suspect, and the service's failure
sweeper then declares it failed (when it happens, with no one listing), audited."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.db.session import unit_of_work
from app.main import create_app
from app.models import AuditEntry, Participant, ParticipantSample
from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY, Api


@pytest.fixture
def fast_api(db_url: str) -> Iterator[Api]:
    settings = Settings(
        database_url=db_url,
        admin_key=ADMIN_KEY,
        environment="test",
        heartbeat_interval_seconds=0.2,
        heartbeat_misses=3,
        failure_sweep_interval_seconds=0.05,
    )
    with TestClient(create_app(settings)) as client:  # with its lifespan: the sweeper runs
        api = Api(client=client, keys={})
        api.register("A")
        yield api


def liveness_of(api: Api, name: str) -> str:
    return next(
        p["liveness"] for p in api.get("admin", "/v1/participants").json() if p["name"] == name
    )


def test_heartbeat_records_sample_and_silence_is_detected(fast_api: Api, db_url: str) -> None:
    assert liveness_of(fast_api, "A") == "unknown"
    beat = fast_api.post(
        "A",
        "/v1/participants/me/heartbeat",
        {
            "endpoint": "grpc://127.0.0.1:9999",
            "load": 42.5,
            "marginal_cost": 0.1,
            "threshold": 80,
            "node_state": "STABLE",
        },
    )
    assert beat.status_code == 200, beat.text
    assert beat.json()["endpoint"] == "grpc://127.0.0.1:9999"
    assert liveness_of(fast_api, "A") in ("online", "suspect")  # suspect: a slow machine
    time.sleep(0.3)
    # Silent past one interval: suspect, unless the sweeper has already declared it failed.
    assert liveness_of(fast_api, "A") in ("suspect", "failed")
    # Nobody lists participants now: the sweeper alone declares the failure.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with unit_of_work(db_url) as session:
            failed_at = session.scalars(select(Participant.failed_at)).one()
        if failed_at is not None:
            break
        time.sleep(0.05)
    assert failed_at is not None
    assert liveness_of(fast_api, "A") == "failed"
    with unit_of_work(db_url) as session:
        sample = session.scalars(select(ParticipantSample)).one()
        assert (sample.load, sample.threshold, sample.node_state) == (42.5, 80, "STABLE")
        actions = [a.action for a in session.scalars(select(AuditEntry).order_by(AuditEntry.id))]
    assert actions[-1] == "participant.failed"


def test_bad_heartbeat_is_refused(fast_api: Api) -> None:
    r = fast_api.post("A", "/v1/participants/me/heartbeat", {"node_state": "HAPPY"})
    assert r.status_code == 422 and r.json()["field"] == "node_state"
