"""The admin Availability page in a real browser: a participant the registry declared failed, a
failover of its task to the standby's host, the contract's recovery type and X, and the timeline
of failures and failovers drawn where a person would rather look."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import cast

import httpx
import pytest
from playwright.sync_api import Page, expect

from app.db.migrate import upgrade
from app.settings import Settings
from tests.browser.conftest import ADMIN_KEY, SCREENSHOTS, LiveService, shot, sign_in, wait_live
from tests.integration.admin.availability_seeding import SeededFailover, seed_failover
from tests.integration.admin.seeding import Federation, HttpClient
from tests.support.live_server import serve

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def seeded(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LiveService, SeededFailover]]:
    """A service of its own, with a 100 ms x 3 heartbeat window, a declared failure and a
    failover, all through the API and the service's own failure sweeper."""
    work = tmp_path_factory.mktemp("browser-availability")
    url = f"sqlite:///{work / 'registry.db'}"
    upgrade(url)
    settings = Settings(
        database_url=url,
        admin_key=ADMIN_KEY,
        session_secret="browser-session-secret",
        environment="test",
        reports_dir=work / "reports",
        heartbeat_interval_seconds=0.1,
        failure_sweep_interval_seconds=0.05,
    )
    with serve(settings) as base, httpx.Client(base_url=base, timeout=30) as client:
        federation = Federation(client=cast(HttpClient, client), admin_key=ADMIN_KEY, keys={})
        failover = seed_failover(federation)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        yield LiveService(url=base, federation=federation), failover


@pytest.fixture(scope="module")
def live(seeded: tuple[LiveService, SeededFailover]) -> LiveService:
    return seeded[0]


def test_admin_sees_failures_failovers_and_recovery_terms(
    tab: Page, live: LiveService, seeded: tuple[LiveService, SeededFailover]
) -> None:
    _, failover = seeded
    sign_in(tab, live)
    tab.click("nav >> text=Availability")
    expect(tab).to_have_url(f"{live.url}/admin/availability")
    expect(tab.locator("h1")).to_have_text("Availability")
    wait_live(tab)

    # The timeline: one failure (red) and one failover (blue) in O's lane, joined by the
    # recovery bar, each with a tooltip naming what happened.
    chart = tab.locator('svg[aria-label="failures and failovers"]')
    expect(chart).to_be_visible()
    expect(chart.locator("circle.mark-failed")).to_have_count(1)
    expect(chart.locator("circle.mark-failover")).to_have_count(1)
    expect(chart.locator("rect.span")).to_have_count(1)
    expect(chart.locator("circle.mark-failover title")).to_contain_text(
        "O.t: O → R by passive standby (committed), recovered"
    )

    # Per task: O.t now on R, no replica left; O.u on failed O, its standby on R with the
    # contract's recovery type and X.
    kept = tab.locator('table.availability tr[data-task="O.u"]')
    expect(kept.locator("td.host")).to_contain_text("O")
    expect(kept.locator("td.host .badge")).to_have_text("failed")
    expect(kept.locator("td.replica-host")).to_contain_text("R")
    expect(kept.locator("td.state")).to_have_text("STABLE")
    expect(kept.locator("td.recovery")).to_have_text("precise")
    expect(kept.locator("td.budget")).to_have_text("3")
    moved = tab.locator('table.availability tr[data-task="O.t"]')
    expect(moved.locator("td.host")).to_contain_text("R")

    row = tab.locator(f'table.failovers tr[data-movement="{failover.movement["id"]}"]')
    expect(row.locator("td.from")).to_have_text("O")
    expect(row.locator("td.to")).to_have_text("R")
    expect(row.locator("td.technique")).to_have_text("passive standby")
    expect(row.locator("td.recovery-time")).to_have_text(re.compile(r"^\d+\.\d\d$"))
    expect(tab.locator('table.failures tr[data-participant="O"]')).to_contain_text("fenced")
    shot(tab, live, "availability")
