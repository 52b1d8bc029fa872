"""The admin Replicas page and its read model: each task's copies, their DPC state and epoch,
and who holds the reconciliation permit until when, seeded through the REST API."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.admin import readmodels
from app.db.session import unit_of_work
from app.settings import Settings
from tests.integration.admin.replica_seeding import SeededReplicas, seed_replicas
from tests.integration.admin.seeding import Federation
from tests.integration.api.conftest import ADMIN_KEY


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    """The admin tests' settings with an hour's permit lease (not the 10 s default): on a
    loaded machine the page may be read more than 10 s after the seeding, and a lapsed lease
    is rightly shown as no holder."""
    return Settings(
        database_url=db_url,
        admin_key=ADMIN_KEY,
        session_secret="test-session-secret",
        environment="test",
        reports_dir=tmp_path / "reports",
        permit_lease_seconds=3600,
    )


def _seed(federation: Federation, app_client: TestClient) -> SeededReplicas:
    seeded = seed_replicas(federation, app_client)
    assert seeded.hosts == {"C.q01": ["D", "E"], "C.q02": ["D"]}
    return seeded


def test_read_model_lists_copies_states_epochs_and_the_permit(
    federation: Federation, app_client: TestClient, settings: Settings
) -> None:
    seeded = _seed(federation, app_client)
    with unit_of_work(settings.database_url) as session:
        view = readmodels.replica_overview(session, settings)
    assert [t.task for t in view.tasks] == ["C.q01", "C.q02"]
    q01, q02 = view.tasks
    assert (q01.owner, q01.primary_host, q02.primary_host) == ("C", "C", "C")
    assert [(r.host, r.state, r.epoch, r.technique, r.load) for r in q01.replicas] == [
        ("D", "UP_FAILURE", 0, "active_standby", 5.0),
        ("E", "STABLE", 0, "active_standby", 5.0),
    ]
    assert [(r.host, r.state) for r in q02.replicas] == [("D", "STABLE")]
    assert q01.permit is not None
    expires = datetime.fromisoformat(seeded.permit["expires_at"])
    assert (q01.permit.holder, q01.permit.participant, q01.permit.fence) == ("C.q01@D", "D", 1)
    assert q01.permit.expires_at == expires
    assert q02.permit is None
    # Every participant, with how many replicas it hosts.
    assert view.per_participant == [("A", 0), ("B", 0), ("C", 0), ("D", 2), ("E", 1)]

    # Once the lease is over nobody holds the permit: the page must not show a stale holder.
    with unit_of_work(settings.database_url) as session:
        later = readmodels.replica_overview(session, settings, now=expires + timedelta(seconds=1))
    assert later.tasks[0].permit is None


def test_read_model_without_replicas_is_empty(federation: Federation, settings: Settings) -> None:
    with unit_of_work(settings.database_url) as session:
        view = readmodels.replica_overview(session, settings)
    assert view.tasks == []
    assert [n for _, n in view.per_participant] == [0, 0, 0, 0]


def test_replicas_page_shows_each_copy_and_the_permit(
    admin: TestClient, federation: Federation, app_client: TestClient
) -> None:
    assert "No task has replicas." in admin.get("/admin/replicas").text
    seeded = _seed(federation, app_client)
    page = admin.get("/admin/replicas").text
    assert re.findall(r'<tr data-task="([^"]+)" data-host="([^"]+)"', page) == [
        ("C.q01", "D"),
        ("C.q01", "E"),
        ("C.q02", "D"),
    ]
    d_row = page.split('data-task="C.q01" data-host="D"')[1].split("</tr>")[0]
    assert 'class="primary"><a href="/admin/participants/C">C</a>' in d_row
    assert "badge-node-up_failure" in d_row and ">UP_FAILURE<" in d_row
    assert '<td class="num epoch">0</td>' in d_row
    assert '<span class="holder">C.q01@D</span> (D), fence 1' in d_row
    assert f'datetime="{datetime.fromisoformat(seeded.permit["expires_at"]).isoformat()}"' in d_row
    q02 = page.split('data-task="C.q02" data-host="D"')[1].split("</tr>")[0]
    assert ">STABLE<" in q02 and "none held" in q02
    assert 'data-name="D" data-count="2"' in page and 'data-name="E" data-count="1"' in page
    assert 'data-name="A" data-count="0"' in page
    assert "2 tasks with replicas; 3 replicas in all." in page
    live = admin.get("/admin/replicas?partial=live").text
    assert "<html" not in live and 'data-host="E"' in live


def test_replicas_page_needs_an_admin_session(anonymous: TestClient) -> None:
    response = anonymous.get("/admin/replicas", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"].endswith("/admin/login?next=/admin/replicas")
