"""What the service remembers between requests to save queries (bench/api/README.md), and
what it must not: a suspended participant, a revoked key, a name that was never committed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.auth.key_cache import KeyCache
from app.auth.principal import Principal
from app.db import session as db_session
from app.db.session import DatabaseOptions, get_engine, session_factory
from app.main import create_app
from app.models import Participant, ParticipantStatus
from app.participants import repository
from app.participants.name_cache import SESSION_INFO_KEY, NameCache
from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY, Api
from tests.support.databases import _truncate_all

A = Principal(participant_id=1, name="A")


def test_a_key_is_remembered_for_its_seconds_only() -> None:
    now = [100.0]
    cache = KeyCache(1.0, clock=lambda: now[0])
    cache.put("h", A)
    assert cache.get("h") == A
    now[0] = 100.999
    assert cache.get("h") == A
    now[0] = 101.0
    assert cache.get("h") is None
    # Never a key in its grace period after a rotation, and nothing when the cache is off.
    cache.put("old", Principal(participant_id=1, name="A", by_previous_key=True))
    assert cache.get("old") is None
    off = KeyCache(0.0)
    off.put("h", A)
    assert off.get("h") is None


@pytest.fixture
def app(db_url: str) -> FastAPI:
    # A long cache: only the invalidation can make the refusals below immediate.
    return create_app(
        Settings(database_url=db_url, admin_key=ADMIN_KEY, environment="test", key_cache_seconds=60)
    )


@pytest.fixture
def api(app: FastAPI) -> Iterator[Api]:
    with TestClient(app) as client:
        yield Api(client=client, keys={})


def test_a_suspension_takes_effect_at_once_despite_the_cache(app: FastAPI, api: Api) -> None:
    api.register("A")
    assert api.get("A", "/v1/participants/me").status_code == 200  # now remembered
    # As the admin UI suspends: through the application's own sessions.
    with app.state.session_factory() as session:
        participant = session.scalars(sa.select(Participant).filter_by(name="A")).one()
        participant.status = ParticipantStatus.suspended
        session.commit()
    refused = api.get("A", "/v1/participants/me")
    assert (refused.status_code, refused.json()["field"]) == (403, "Authorization")


def test_a_revoked_key_is_refused_at_once_despite_the_cache(api: Api) -> None:
    api.register("A")
    old = api.keys["A"]
    assert api.get("A", "/v1/participants/me").status_code == 200
    rotated = api.post("A", "/v1/participants/me/keys?revoke_old=true")
    assert rotated.status_code in (200, 201), rotated.text
    api.keys["A"] = rotated.json()["api_key"]
    assert api.get("A", "/v1/participants/me").status_code == 200
    refused = api.client.get("/v1/participants/me", headers={"Authorization": f"Bearer {old}"})
    assert refused.status_code == 401


def test_only_committed_names_are_remembered(db_url: str) -> None:
    cache = NameCache()
    factory = session_factory(db_url)
    factory.configure(info={SESSION_INFO_KEY: cache})
    with factory() as session:
        gone = Participant(name="Gone", capacity=1, api_key_hash="g" * 64)
        session.add(gone)
        session.flush()
        assert repository.names_by_id(session, [gone.id]) == {gone.id: "Gone"}
        session.rollback()
    assert cache.known([gone.id]) == {}
    with factory() as session:
        kept = Participant(name="Kept", capacity=1, api_key_hash="k" * 64)
        session.add(kept)
        session.flush()
        assert repository.names_by_id(session, [kept.id]) == {kept.id: "Kept"}
        session.commit()
    assert cache.known([kept.id]) == {kept.id: "Kept"}
    # Known now: the next read of that name sends no statement.
    sent: list[str] = []
    engine = factory.kw["bind"]
    sa.event.listen(engine, "before_cursor_execute", lambda *args: sent.append(args[2]))
    with factory() as session:
        assert repository.names_by_id(session, [kept.id]) == {kept.id: "Kept"}
    assert sent == []


@pytest.mark.postgres
def test_an_idle_connection_that_died_is_replaced_at_checkout(
    postgres_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _truncate_all(postgres_database)
    engine = get_engine(postgres_database, DatabaseOptions(pool_size=1, max_overflow=0))
    with engine.connect() as conn:
        first = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    # The server drops it while it sits in the pool (a restart, an idle timeout).
    killer = sa.create_engine(postgres_database)
    with killer.connect() as conn:
        conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
    killer.dispose()
    time.sleep(0.1)
    monkeypatch.setattr(db_session, "IDLE_PING_SECONDS", 0.0)  # it has been idle long enough
    with engine.connect() as conn:
        second = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    assert second != first
    engine.dispose()
