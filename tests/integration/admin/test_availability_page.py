"""The admin Availability page's read model and page: per task its replicas with the contract's
recovery type and X, every failover with its technique and recovery time, and the failures the
registry declared, after a real declared failure and a failover through the REST API."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.admin import availability
from app.db.session import unit_of_work
from app.main import create_app
from app.settings import Settings
from tests.integration.admin.availability_seeding import SeededFailover, seed_failover
from tests.integration.admin.conftest import sign_in
from tests.integration.admin.seeding import Federation
from tests.integration.api.conftest import ADMIN_KEY


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    # A short window, so that the service's own sweeper declares O failed within a second.
    return Settings(
        database_url=db_url,
        admin_key=ADMIN_KEY,
        session_secret="test-session-secret",
        environment="test",
        reports_dir=tmp_path / "reports",
        heartbeat_interval_seconds=0.1,
        failure_sweep_interval_seconds=0.05,
    )


@pytest.fixture
def seeded(settings: Settings) -> Iterator[tuple[TestClient, SeededFailover]]:
    with TestClient(create_app(settings)) as client:
        fed = Federation(client=client, admin_key=ADMIN_KEY, keys={})
        yield client, seed_failover(fed)


def test_read_model_shows_replicas_terms_failovers_and_failures(
    seeded: tuple[TestClient, SeededFailover], settings: Settings
) -> None:
    _, seed = seeded
    with unit_of_work(settings.database_url) as session:
        view = availability.availability(session, settings)
    assert [t.task for t in view.tasks] == ["O.t", "O.u"]
    moved, kept = view.tasks
    # O.t: R took it over; its standby became the task, so no replica is left.
    assert (moved.host, moved.replicas) == ("R", [])
    [failover] = moved.failovers
    assert (failover.src, failover.to, failover.reason, failover.status) == (
        "O",
        "R",
        "failover",
        "committed",
    )
    assert (failover.technique, failover.recovery) == ("passive_standby", "precise")
    assert failover.movement_id == seed.movement["id"]
    assert failover.failed_at == datetime.fromisoformat(seed.failed_at)
    assert failover.recovery_seconds is not None and failover.recovery_seconds > 0
    assert failover.detection_seconds is not None
    # The registry declares a failure only once the whole window closed without a heartbeat.
    assert failover.detection_seconds >= 0.3 - 1e-6
    # O.u: still on O (failed), its standby on R under the contract's terms.
    assert (kept.host, kept.host_liveness, kept.failovers) == ("O", "failed", [])
    [standby] = kept.replicas
    assert (standby.host, standby.technique, standby.state) == ("R", "passive_standby", "STABLE")
    assert (standby.recovery, standby.max_delay_seconds) == ("precise", 3.0)
    [failure] = view.failures
    assert (failure.participant, failure.rejoined_at) == ("O", None)
    assert view.failovers == [failover]


def test_availability_page_draws_the_timeline_and_lists_the_failover(
    seeded: tuple[TestClient, SeededFailover],
) -> None:
    client, seed = seeded
    page = sign_in(client).get("/admin/availability")
    assert page.status_code == 200, page.text
    html = page.text
    assert 'aria-label="failures and failovers"' in html
    assert html.count('class="mark mark-failed"') == 1
    assert html.count('class="mark mark-failover"') == 1
    assert f'data-movement="{seed.movement["id"]}"' in html
    assert "passive standby" in html and "precise" in html
    anonymous = TestClient(client.app).get("/admin/availability", follow_redirects=False)
    assert anonymous.status_code == 303
