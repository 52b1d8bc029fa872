"""Movements: reading one by id, and the registry aborting prepared movements past their lease."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from app.db.session import session_factory, unit_of_work
from app.main import create_app
from app.models import AuditEntry, Movement, MovementStatus
from app.movements.service import abort_stale
from app.movements.sweeper import StaleMovementSweeper, sweep_interval
from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY, Api
from tests.support.databases import _truncate_all
from tests.support.live_server import serve


def prepared_move(api: Api, task: str = "A.q1") -> tuple[dict[str, Any], int]:
    """A contract A-B, a task of A's, and an accepted offer: one prepared movement A -> B."""
    contract = api.propose("A", "B", price_min=0.2, price_max=0.3)
    assert (
        api.post("B", f"/v1/contracts/{contract['id']}/accept", {"version": 1}).status_code == 200
    )
    assert api.post("A", "/v1/tasks", {"name": task, "load": 5.0}).status_code == 201
    offer = api.post(
        "A", "/v1/offers", {"contract_id": contract["id"], "tasks": [task], "price": 0.25}
    )
    accepted = api.post("B", f"/v1/offers/{offer.json()['id']}/accept", {"version": 1})
    assert accepted.status_code == 200, accepted.text
    return contract, int(accepted.json()["movement_ids"][0])


def without_lease(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "lease_seconds_left"}


def test_a_prepared_movement_tells_its_lease_time_left_and_a_finished_one_does_not(
    abc: Api,
) -> None:
    _, mid = prepared_move(abc)
    lease = Settings().movement_lease_seconds
    first = abc.get("B", f"/v1/movements/{mid}").json()["lease_seconds_left"]
    assert 0 < first <= lease
    time.sleep(0.3)
    later = abc.get("B", f"/v1/movements/{mid}").json()["lease_seconds_left"]
    assert later <= first - 0.25
    epoch = abc.get("B", f"/v1/movements/{mid}").json()["epoch"]
    committed = abc.post("B", f"/v1/movements/{mid}/commit", {"epoch": epoch})
    assert committed.status_code == 200, committed.text
    assert committed.json()["lease_seconds_left"] is None
    assert abc.get("A", f"/v1/movements/{mid}").json()["lease_seconds_left"] is None


def test_a_movement_is_read_by_its_parties_and_admins_only(abc: Api) -> None:
    _, mid = prepared_move(abc)
    listed = next(m for m in abc.get("A", "/v1/movements").json() if m["id"] == mid)
    for who in ("A", "B", "admin"):
        r = abc.get(who, f"/v1/movements/{mid}")
        assert r.status_code == 200, (who, r.text)
        # The lease's time left is computed at each read; everything else is the same record.
        assert without_lease(r.json()) == without_lease(listed)
    assert (listed["task"], listed["from"], listed["to"], listed["status"], listed["epoch"]) == (
        "A.q1",
        "A",
        "B",
        "prepared",
        1,
    )
    # A stranger learns nothing: the same answer as for a movement that does not exist.
    stranger = abc.get("C", f"/v1/movements/{mid}")
    unknown = abc.get("A", "/v1/movements/999")
    assert (stranger.status_code, stranger.json()["field"]) == (404, "id")
    assert (unknown.status_code, unknown.json()["field"]) == (404, "id")
    assert stranger.json()["detail"] == f"movement {mid} not found"
    assert abc.get("A", "/v1/movements/x").json()["field"] == "path.movement_id"


def test_abort_stale_aborts_only_movements_past_their_lease(abc: Api, db_url: str) -> None:
    _, mid = prepared_move(abc)
    with unit_of_work(db_url) as session:
        movement = session.get(Movement, mid)
        assert movement is not None
        prepared_at = movement.prepared_at
    with unit_of_work(db_url) as session:
        early = prepared_at + timedelta(seconds=9.9)
        assert abort_stale(session, lease_seconds=10, now=early) == 0
    assert abc.get("A", f"/v1/movements/{mid}").json()["status"] == "prepared"
    with unit_of_work(db_url) as session:
        assert (
            abort_stale(session, lease_seconds=10, now=prepared_at + timedelta(seconds=10.1)) == 1
        )
    body = abc.get("A", f"/v1/movements/{mid}").json()
    assert body["status"] == "aborted" and body["finished_at"] is not None
    with unit_of_work(db_url) as session:
        entry = session.scalar(
            select(AuditEntry).where(
                AuditEntry.action == "movement.aborted", AuditEntry.entity_id == mid
            )
        )
        assert entry is not None and entry.actor == "system"
        assert entry.detail == {"why": "prepare timed out", "lease_seconds": 10}
    # A late commit by the target is refused: the task stayed with A.
    late = abc.post("B", f"/v1/movements/{mid}/commit", {"epoch": 1})
    assert late.status_code == 409 and late.json()["field"] == "status"
    assert abc.get("A", "/v1/tasks/A.q1/lease").json() == {
        "task": "A.q1",
        "host": "A",
        "epoch": 0,
        "moving": False,
    }


def test_the_sweep_interval_follows_the_lease() -> None:
    assert sweep_interval(60) == 5
    assert sweep_interval(2) == 0.5
    with pytest.raises(ValueError, match="> 0"):
        StaleMovementSweeper(session_factory("sqlite://"), 0)


def test_the_lease_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDLOAD_MOVEMENT_LEASE_SECONDS", raising=False)
    assert Settings().movement_lease_seconds == 60
    monkeypatch.setenv("FEDLOAD_MOVEMENT_LEASE_SECONDS", "2.5")
    assert Settings().movement_lease_seconds == 2.5
    monkeypatch.setenv("FEDLOAD_MOVEMENT_LEASE_SECONDS", "0")
    with pytest.raises(ValueError, match="movement_lease_seconds"):
        Settings()


def test_the_service_runs_the_sweeper_while_it_runs(settings: Settings) -> None:
    app = create_app(settings)
    assert not hasattr(app.state, "movement_sweeper")  # nothing runs before the lifespan
    with TestClient(app):
        sweeper = app.state.movement_sweeper
        assert sweeper.running and sweeper.lease_seconds == 60
    assert not sweeper.running


def test_the_sweeper_survives_database_errors(
    abc: Api, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, mid = prepared_move(abc)
    real = session_factory(db_url)
    calls = {"n": 0}

    def flaky() -> Any:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise ConnectionError("the database went away")
        return real()

    sweeper = StaleMovementSweeper(flaky, lease_seconds=0.2)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="app.movements.sweeper"):
        sweeper.start()
        try:
            deadline = time.monotonic() + 10
            while abc.get("A", f"/v1/movements/{mid}").json()["status"] == "prepared":
                assert time.monotonic() < deadline, "the sweeper never recovered"
                time.sleep(0.05)
        finally:
            sweeper.stop()
    assert not sweeper.running
    assert calls["n"] >= 3
    assert sum("sweeping stale movements failed" in r.message for r in caplog.records) == 2
    assert abc.get("A", f"/v1/movements/{mid}").json()["status"] == "aborted"


@pytest.mark.postgres
def test_the_sweep_skips_a_movement_whose_commit_is_in_progress(postgres_database: str) -> None:
    """A commit holds the movement's row: the sweep neither waits for it nor aborts it under
    the commit's feet; the next round sees the outcome."""
    _truncate_all(postgres_database)
    settings = Settings(database_url=postgres_database, admin_key=ADMIN_KEY, environment="test")
    with TestClient(create_app(settings)) as client:
        api = Api(client=client, keys={})
        for name in ("A", "B"):
            api.register(name)
        _, mid = prepared_move(api)
    later = timedelta(seconds=3600)
    with unit_of_work(postgres_database) as committer:
        held = committer.scalar(select(Movement).where(Movement.id == mid).with_for_update())
        assert held is not None
        started = time.monotonic()
        with unit_of_work(postgres_database) as sweeper:
            # Were the sweep to wait for the lock, it would fail here instead of hanging.
            sweeper.execute(text("SET LOCAL lock_timeout = '3s'"))
            assert abort_stale(sweeper, lease_seconds=1, now=held.prepared_at + later) == 0
        assert time.monotonic() - started < 3  # skipped, not waited for
        held.status = MovementStatus.committed
    with unit_of_work(postgres_database) as sweeper:
        assert abort_stale(sweeper, lease_seconds=1, now=held.prepared_at + later) == 0
        movement = sweeper.get(Movement, mid)
        assert movement is not None and movement.status is MovementStatus.committed


@pytest.fixture
def short_lease_server(db_url: str) -> Iterator[httpx.Client]:
    settings = Settings(
        database_url=db_url, admin_key=ADMIN_KEY, environment="test", movement_lease_seconds=2.0
    )
    with serve(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def test_a_prepared_movement_past_its_lease_is_aborted_by_the_running_service(
    short_lease_server: httpx.Client,
) -> None:
    client = short_lease_server
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    keys = {}
    for name in ("A", "B"):
        r = client.post("/v1/participants", json={"name": name, "capacity": 100}, headers=admin)
        keys[name] = {"Authorization": f"Bearer {r.json()['api_key']}"}
    contract = client.post(
        "/v1/contracts",
        json={"partner": "B", "price_min": 0.2, "price_max": 0.3},
        headers=keys["A"],
    ).json()
    client.post(f"/v1/contracts/{contract['id']}/accept", json={"version": 1}, headers=keys["B"])
    client.post("/v1/tasks", json={"name": "A.q1", "load": 5.0}, headers=keys["A"])

    def offer_and_accept() -> int:
        offer = client.post(
            "/v1/offers",
            json={"contract_id": contract["id"], "tasks": ["A.q1"], "price": 0.25},
            headers=keys["A"],
        )
        assert offer.status_code == 201, offer.text
        accepted = client.post(
            f"/v1/offers/{offer.json()['id']}/accept", json={"version": 1}, headers=keys["B"]
        )
        assert accepted.status_code == 200, accepted.text
        return int(accepted.json()["movement_ids"][0])

    started = time.monotonic()
    first = offer_and_accept()
    assert client.get("/v1/tasks/A.q1/lease", headers=keys["A"]).json()["moving"] is True
    # B never commits (it crashed). Within the lease plus a sweep interval, the service aborts.
    while client.get(f"/v1/movements/{first}", headers=keys["A"]).json()["status"] == "prepared":
        assert time.monotonic() - started < 15, "the stale movement was never aborted"
        time.sleep(0.1)
    assert time.monotonic() - started >= 2.0  # not before its lease was over
    assert client.get(f"/v1/movements/{first}", headers=keys["B"]).json()["status"] == "aborted"
    lease = client.get("/v1/tasks/A.q1/lease", headers=keys["A"]).json()
    assert lease == {"task": "A.q1", "host": "A", "epoch": 0, "moving": False}
    late = client.post(f"/v1/movements/{first}/commit", json={"epoch": 1}, headers=keys["B"])
    assert late.status_code == 409

    # The task is free again: offered, accepted and committed within the lease this time.
    second = offer_and_accept()
    committed = client.post(f"/v1/movements/{second}/commit", json={"epoch": 1}, headers=keys["B"])
    assert committed.status_code == 200, committed.text
    assert client.get("/v1/tasks/A.q1/lease", headers=keys["A"]).json() == {
        "task": "A.q1",
        "host": "B",
        "epoch": 1,
        "moving": False,
    }
    assert client.get(f"/v1/movements/{second}", headers=keys["A"]).json()["status"] == "committed"
