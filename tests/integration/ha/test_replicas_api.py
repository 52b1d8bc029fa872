"""Replicas through the API: placement as priced load, state reports, visibility, bad input."""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from app.db.session import unit_of_work
from app.main import create_app
from app.models import LedgerEntry, Replica
from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY, Api
from tests.support.snapshot import registry_snapshot


def contract(api: Api, a: str, b: str, *, hosting: bool) -> dict[str, Any]:
    proposed = api.propose(
        a, b, price_min=0.5, price_max=0.6, availability={"replica_hosting": hosting}
    )
    accepted = api.post(b, f"/v1/contracts/{proposed['id']}/accept", {"version": 1})
    assert accepted.status_code == 200, accepted.text
    return accepted.json()


def setup(api: Api) -> None:
    for name in ("A", "B", "C", "D"):
        api.register(name)
    contract(api, "A", "B", hosting=True)
    contract(api, "A", "C", hosting=True)
    contract(api, "A", "D", hosting=False)
    assert api.post("A", "/v1/tasks", {"name": "A.q1", "load": 10.0}).status_code == 201


def test_owner_places_replicas_on_distinct_hosting_partners(api: Api, db_url: str) -> None:
    setup(api)
    placed = api.post("A", "/v1/tasks/A.q1/replicas", {"k": 2, "technique": "passive_standby"})
    assert placed.status_code == 201, placed.text
    rows = placed.json()
    assert sorted(r["host"] for r in rows) == ["B", "C"]
    assert {r["technique"] for r in rows} == {"passive_standby"}
    assert all(r["load"] == 10.0 and r["price"] == 0.5 for r in rows)
    # Already has 2: asking for 2 again places nothing; asking for 3 finds no third host.
    assert api.post("A", "/v1/tasks/A.q1/replicas", {"k": 2}).json() == []
    refused = api.post("A", "/v1/tasks/A.q1/replicas", {"k": 3})
    assert refused.status_code == 409
    assert "D: its contract does not allow replica hosting" in refused.json()["detail"]
    with unit_of_work(db_url) as session:
        assert len(session.scalars(select(Replica)).all()) == 2


def test_host_reports_state_admin_sees_it_and_the_owner_pays(api: Api, db_url: str) -> None:
    setup(api)
    api.post("A", "/v1/tasks/A.q1/replicas", {"k": 1})
    time.sleep(0.05)
    report = api.client.put(
        "/v1/replicas/A.q1/state", json={"state": "UP_FAILURE"}, headers=api.headers("B")
    )
    assert report.status_code == 200, report.text
    seen = api.get("admin", "/v1/replicas").json()
    assert [(r["task"], r["host"], r["state"]) for r in seen] == [("A.q1", "B", "UP_FAILURE")]
    # The owner sees its task's replica; an unrelated participant sees nothing.
    assert len(api.get("A", "/v1/replicas").json()) == 1
    assert api.get("D", "/v1/replicas").json() == []
    with unit_of_work(db_url) as session:
        entries = session.scalars(select(LedgerEntry).where(LedgerEntry.kind == "replica")).all()
        assert len(entries) == 1
        entry = entries[0]
        assert entry.load == 10.0 and entry.price == 0.5 and entry.amount > 0


def test_bad_input_is_refused_and_changes_nothing(api: Api, db_url: str) -> None:
    setup(api)
    before = registry_snapshot(db_url)
    assert api.post("A", "/v1/tasks/A.q1/replicas", {"k": 0}).status_code == 422
    assert api.post("A", "/v1/tasks/nope/replicas", {"k": 1}).status_code == 404
    # B holds no copy of q1: the same 404 as for an unknown name (issue 15).
    refused = api.post("B", "/v1/tasks/A.q1/replicas", {"k": 1})
    assert refused.status_code == 404
    assert refused.json() == api.post("B", "/v1/tasks/nope/replicas", {"k": 1}).json() | {
        "detail": "no task named 'A.q1'"
    }
    bad_state = api.client.put(
        "/v1/replicas/A.q1/state", json={"state": "HAPPY"}, headers=api.headers("B")
    )
    assert bad_state.status_code == 422
    not_hosted = api.client.put(
        "/v1/replicas/A.q1/state", json={"state": "STABLE"}, headers=api.headers("B")
    )
    assert not_hosted.status_code == 404
    assert registry_snapshot(db_url) == before


def test_a_silent_host_shows_its_replica_failed(db_url: str) -> None:
    settings = Settings(
        database_url=db_url,
        admin_key=ADMIN_KEY,
        environment="test",
        heartbeat_interval_seconds=0.1,
        heartbeat_misses=3,
    )
    with TestClient(create_app(settings)) as client:
        api = Api(client=client, keys={})
        setup(api)
        api.post("A", "/v1/tasks/A.q1/replicas", {"k": 1})
        api.post("B", "/v1/participants/me/heartbeat", {"endpoint": "grpc://127.0.0.1:1"})
        assert api.get("admin", "/v1/replicas").json()[0]["state"] == "STABLE"
        # The service's failure sweeper declares B failed once its window closed unanswered
        # (0.3 s after its heartbeat's answer, as far as the service has checked); on a loaded
        # machine that round may come a while later.
        deadline = time.monotonic() + 20
        seen = api.get("admin", "/v1/replicas").json()[0]
        while seen["host_liveness"] != "failed" and time.monotonic() < deadline:
            time.sleep(0.05)
            seen = api.get("admin", "/v1/replicas").json()[0]
        assert (seen["state"], seen["reported_state"], seen["host_liveness"]) == (
            "FAILED",
            "STABLE",
            "failed",
        )
