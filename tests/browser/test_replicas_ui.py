"""The admin Replicas page in a real browser: each task's copies, their DPC state and epoch,
the reconciliation permit's holder and lease, and replicas per participant as bars."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import cast

import httpx
import pytest
from playwright.sync_api import Page, expect

from app.db.migrate import upgrade
from app.settings import Settings
from tests.browser.conftest import ADMIN_KEY, SCREENSHOTS, LiveService, shot, sign_in, wait_live
from tests.integration.admin.replica_seeding import SeededReplicas, seed_replicas
from tests.integration.admin.seeding import Federation, HttpClient, apply_demo
from tests.support.live_server import serve

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def seeded(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LiveService, SeededReplicas]]:
    """A service of its own (replicas would change what the other browser tests' pages show),
    seeded with the demo federation, then replicas, a state report and a permit via the API."""
    work = tmp_path_factory.mktemp("browser-replicas")
    url = f"sqlite:///{work / 'registry.db'}"
    upgrade(url)
    keys = apply_demo(url)
    settings = Settings(
        database_url=url,
        admin_key=ADMIN_KEY,
        session_secret="browser-session-secret",
        environment="test",
        reports_dir=work / "reports",
        # An hour, not the 10 s default: on a loaded machine the page may be read more than
        # 10 s after the seeding, and a lapsed lease is rightly shown as no holder.
        permit_lease_seconds=3600,
    )
    with serve(settings) as base, httpx.Client(base_url=base, timeout=30) as client:
        # httpx.Client's keyword-only signature is what HttpClient's **kwargs stand for.
        federation = Federation(client=cast(HttpClient, client), admin_key=ADMIN_KEY, keys=keys)
        replicas = seed_replicas(federation, client)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        yield LiveService(url=base, federation=federation), replicas


@pytest.fixture(scope="module")
def live(seeded: tuple[LiveService, SeededReplicas]) -> LiveService:
    return seeded[0]


def test_admin_sees_replicas_states_epochs_and_the_permit(
    tab: Page, live: LiveService, seeded: tuple[LiveService, SeededReplicas]
) -> None:
    _, replicas = seeded
    assert replicas.hosts == {"C.q01": ["D", "E"], "C.q02": ["D"]}
    sign_in(tab, live)
    tab.click("nav >> text=Replicas")
    expect(tab).to_have_url(f"{live.url}/admin/replicas")
    expect(tab.locator("h1")).to_have_text("Replicas")
    rows = tab.locator("table.replicas tbody tr")
    expect(rows).to_have_count(3)

    d_copy = tab.locator('tr[data-task="C.q01"][data-host="D"]')
    expect(d_copy.locator("td.primary")).to_contain_text("C")
    expect(d_copy.locator("td.host")).to_contain_text("D")
    expect(d_copy.locator("td.state")).to_have_text("UP_FAILURE")
    expect(d_copy.locator("td.epoch")).to_have_text("0")
    permit = d_copy.locator("td.permit")
    expect(permit.locator(".holder")).to_have_text("C.q01@D")
    expect(permit).to_contain_text("(D), fence 1")
    expires = datetime.fromisoformat(replicas.permit["expires_at"])
    expect(permit.locator("time.expires")).to_have_text(expires.strftime("%Y-%m-%d %H:%M:%S"))

    e_copy = tab.locator('tr[data-task="C.q01"][data-host="E"]')
    expect(e_copy.locator("td.state")).to_have_text("STABLE")
    q02 = tab.locator('tr[data-task="C.q02"][data-host="D"]')
    expect(q02.locator("td.state")).to_have_text("STABLE")
    expect(q02.locator("td.permit")).to_have_text("none held")

    bars = tab.locator("svg.count-bars g.count-bar")
    expect(bars).to_have_count(5)
    expect(tab.locator('g.count-bar[data-name="D"]')).to_have_attribute("data-count", "2")
    expect(tab.locator('g.count-bar[data-name="E"]')).to_have_attribute("data-count", "1")
    # Drawn to one scale: D's bar is twice E's.
    d_width = float(tab.locator('g.count-bar[data-name="D"] rect').get_attribute("width") or 0)
    e_width = float(tab.locator('g.count-bar[data-name="E"] rect').get_attribute("width") or 0)
    assert d_width == pytest.approx(2 * e_width) and e_width > 0
    wait_live(tab)
    shot(tab, live, "20-replicas")


def test_a_state_report_shows_up_on_the_live_page(
    tab: Page, live: LiveService, seeded: tuple[LiveService, SeededReplicas]
) -> None:
    sign_in(tab, live)
    tab.goto(f"{live.url}/admin/replicas")
    e_state = tab.locator('tr[data-task="C.q01"][data-host="E"] td.state')
    expect(e_state).to_have_text("STABLE")
    fed = live.federation
    assert isinstance(fed.client, httpx.Client)
    reported = fed.client.put(
        "/v1/replicas/C.q01/state",
        json={"state": "STABILIZATION", "epoch": 0},
        headers=fed.headers("E"),
    )
    assert reported.status_code == 200, reported.text
    # No reload: the page's live region polls and picks the new state up.
    expect(e_state).to_have_text("STABILIZATION", timeout=20_000)
    expect(tab).to_have_url(re.compile(r"/admin/replicas$"))
