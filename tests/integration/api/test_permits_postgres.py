"""The permit check that only the row lock can make: a participant asking under a replica name
that another participant's copy was granted while the asker was between its authorisation and
the lock. Real PostgreSQL, two real transactions; the second is seen waiting on the first's
lock (pg_stat_activity) before the first commits, so the order is certain, not timed."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from app.auth.principal import Principal
from app.db.session import get_engine, session_factory, unit_of_work
from app.errors import Forbidden
from app.main import create_app
from app.models import Participant, ReconciliationPermit
from app.permits import service
from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY, Api
from tests.integration.api.test_permits import seed_copies
from tests.support.databases import _truncate_all

pytestmark = pytest.mark.postgres


def _waiting_on_a_lock(url: str, pid: int) -> bool:
    # By the backend's pid: other tests on this server may be waiting on locks of their own.
    with get_engine(url).connect() as conn:
        return bool(
            conn.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE pid = :pid AND wait_event_type = 'Lock'"
                ),
                {"pid": pid},
            )
        )


def test_a_renewal_under_a_name_granted_meanwhile_to_another_participant_is_refused(
    postgres_database: str,
) -> None:
    url = postgres_database
    _truncate_all(url)
    settings = Settings(database_url=url, admin_key=ADMIN_KEY, environment="test")
    with TestClient(create_app(settings)) as client:
        seed_copies(Api(client=client, keys={}))
    with unit_of_work(url) as session:
        ids = {name: pid for name, pid in session.execute(select(Participant.name, Participant.id))}
    a, b = Principal(ids["A"], "A"), Principal(ids["B"], "B")

    first = session_factory(url)()
    try:
        granted = service.request(first, a, "A.C", "C1", lease_seconds=3600)
        assert (granted.granted, granted.fence) == (True, 1)
        outcome: dict[str, object] = {}
        pid: list[int] = []
        ready = threading.Event()

        def second() -> None:
            try:
                with unit_of_work(url) as session:
                    pid.append(int(session.scalar(text("SELECT pg_backend_pid()")) or 0))
                    ready.set()
                    outcome["decision"] = service.request(
                        session, b, "A.C", "C1", lease_seconds=3600
                    )
            except Forbidden as error:
                outcome["error"] = error
            finally:
                ready.set()

        thread = threading.Thread(target=second)
        thread.start()
        # B authorised itself against a table without A's uncommitted row and now waits on it.
        assert ready.wait(120) and pid, outcome
        deadline = time.monotonic() + 120
        while not _waiting_on_a_lock(url, pid[0]):
            assert thread.is_alive(), f"B finished without waiting on A's lock: {outcome}"
            assert time.monotonic() < deadline, "B never waited on A's lock"
            time.sleep(0.05)
        first.commit()
    finally:
        first.close()
    thread.join(120)
    error = outcome.get("error")
    assert isinstance(error, Forbidden), outcome
    assert (error.field, error.detail) == (
        "replica",
        "replica 'C1' of fragment 'A.C' is not participant 'B''s copy: it names another "
        "participant or was granted to another participant's copy",
    )
    with unit_of_work(url) as session:
        row = session.scalar(select(ReconciliationPermit))
        assert row is not None
        assert (row.holder, row.participant_id, row.fence) == ("C1", ids["A"], 1)
