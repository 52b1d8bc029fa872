"""The admin UI in a real browser: sign in, read the federation, act, and watch it live."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, LiveService, shot, sign_in, wait_live

pytestmark = pytest.mark.browser


def test_sign_in_and_see_participants_and_allocation(tab: Page, live: LiveService) -> None:
    tab.goto(f"{live.url}/admin/allocation")
    expect(tab).to_have_url(re.compile(r"/admin/login\?next=/admin/allocation"))
    expect(tab.locator("h1")).to_have_text("Sign in")
    shot(tab, live, "01-sign-in")
    tab.fill("#key", "browser-admin-key")
    tab.click("button[type=submit]")
    # Sign-in returns to the page that asked for it.
    expect(tab).to_have_url(f"{live.url}/admin/allocation")

    tab.click("nav >> text=Overview")
    rows = tab.locator("table.participants tbody tr")
    expect(rows).to_have_count(4)
    expect(rows.locator("td:first-child")).to_have_text(["A", "B", "C", "D"])
    expect(tab.locator("#verdict")).to_contain_text("Not an acceptable allocation")
    expect(tab.locator("#verdict")).to_contain_text("A is over its threshold (90.0 > 79.5)")
    expect(tab.locator('tr[data-participant="A"] [data-load]')).to_have_text("90.0")
    wait_live(tab)
    shot(tab, live, "02-overview")

    tab.click("nav >> text=Allocation")
    expect(tab.locator("table.tasks tbody tr")).to_have_count(37)  # 36 loads and A.conns
    tab.select_option("#participant", "B")
    tab.click("form.filter button")
    expect(tab).to_have_url(re.compile(r"participant=B"))
    moved = tab.locator('tr[data-task="A.q01"]')
    expect(moved.locator("td").nth(1)).to_have_text("A")
    expect(moved.locator("td").nth(2)).to_have_text("B")
    expect(moved.locator("td").nth(5)).to_have_text("0.250")
    expect(tab.locator("table.tasks tbody tr")).to_have_count(7)
    shot(tab, live, "03-allocation")


def test_follow_a_task_to_its_move_history(tab: Page, live: LiveService) -> None:
    sign_in(tab, live)
    tab.click("nav >> text=Allocation")
    tab.click('tr[data-task="A.q01"] >> text=A.q01')
    expect(tab).to_have_url(f"{live.url}/admin/tasks/A.q01")
    expect(tab.locator("h1")).to_have_text("Task A.q01")
    history = tab.locator("table.moves tbody tr")
    expect(history).to_have_count(1)
    expect(history.first).to_contain_text("load")
    expect(history.first).to_contain_text("A → B")
    expect(history.first).to_contain_text("committed")
    shot(tab, live, "04-task-history")


def test_suspend_a_participant_and_see_it_audited(tab: Page, live: LiveService) -> None:
    sign_in(tab, live)
    tab.goto(f"{live.url}/admin/participants/C")
    tab.click("#suspend")
    expect(tab.locator("h1")).to_have_text("Suspend participant C?")
    shot(tab, live, "05-confirm-suspend")
    tab.click("#confirm")
    expect(tab).to_have_url(f"{live.url}/admin/participants/C")
    expect(tab.locator("#flash")).to_have_text("participant C is now suspended")
    expect(tab.locator("#participant-status")).to_have_text("suspended")
    # The suspension is real: C's API key is refused by the REST API.
    refused = live.federation.client.get(
        "/v1/participants/me", headers=live.federation.headers("C")
    )
    assert refused.status_code == 403

    tab.click("nav >> text=Audit log")
    entry = tab.locator('tr[data-action="participant.suspended"]').first
    expect(entry).to_contain_text("admin")
    expect(entry).to_contain_text("participant")
    shot(tab, live, "06-audit-log")

    tab.goto(f"{live.url}/admin/participants/C")
    tab.click("#reinstate")
    tab.click("#confirm")
    expect(tab.locator("#participant-status")).to_have_text("active")


def test_pages_update_live_without_reload(tab: Page, live: LiveService) -> None:
    sign_in(tab, live)
    wait_live(tab)
    # A marker on the window survives only if the page is never reloaded.
    tab.evaluate("window.__notReloaded = true")
    load = tab.locator('tr[data-participant="D"] [data-load]')
    expect(load).to_have_text(re.compile(r"^0\.0"))
    live.federation.heartbeat("D", 63.5, marginal_cost=0.07, threshold=79.5)
    expect(load).to_have_text("63.5", timeout=10_000)
    # Its first report: no longer "never" reported.
    expect(tab.locator('tr[data-participant="D"] td').last).not_to_have_text("never")

    tab.click("nav >> text=Movements")
    wait_live(tab)
    tab.evaluate("window.__notReloaded = true")
    before = tab.locator("table.moves tbody tr").count()
    live.federation.load_move("A.q02", "A", "C", price=0.26)
    expect(tab.locator("table.moves tbody tr")).to_have_count(before + 1, timeout=10_000)
    newest = tab.locator("table.moves tbody tr").first
    expect(newest).to_contain_text("A.q02")
    expect(newest).to_contain_text("A → C")
    expect(newest).to_contain_text("0.260")
    assert tab.evaluate("window.__notReloaded === true")
    shot(tab, live, "07-movements-live")


def test_a_participant_key_is_refused(tab: Page, live: LiveService, console: Console) -> None:
    console.expected.append(
        "/admin/login: Failed to load resource: the server responded with a status of 403"
    )
    sign_in(tab, live, key=live.federation.keys["B"])
    expect(tab.locator("#signin-error")).to_contain_text("participant's API key")
    expect(tab.locator("h1")).to_have_text("Sign in")
    shot(tab, live, "08-participant-key-refused")
    tab.goto(f"{live.url}/admin/")
    expect(tab).to_have_url(re.compile(r"/admin/login"))


PAGES = [
    ("09-contracts", "/admin/contracts", "Contracts"),
    ("10-contract", "/admin/contracts/1", "Contract #1: A ↔ B"),
    ("11-participant", "/admin/participants/A", "Participant A"),
    ("12-reports", "/admin/reports", "What-if reports"),
    ("13-report", "/admin/reports/borealis-whatif", "Report borealis-whatif"),
    ("14-confirm-terminate", "/admin/contracts/3/terminate", "Terminate contract #3"),
    ("15-confirm-pin", "/admin/tasks/B.q01/pin", "Pin task B.q01?"),
]


def test_every_page_renders_without_console_errors(tab: Page, live: LiveService) -> None:
    sign_in(tab, live)
    for name, path, heading in PAGES:
        tab.goto(f"{live.url}{path}")
        expect(tab.locator("h1")).to_contain_text(heading)
        if tab.locator("[data-live]").count():
            wait_live(tab)
        shot(tab, live, name)
    # The graph is drawn: four participants, four active contracts with price ranges.
    tab.goto(f"{live.url}/admin/contracts")
    expect(tab.locator("svg.graph .node")).to_have_count(4)
    expect(tab.locator("svg.graph .edge-active")).to_have_count(4)
    # The report's own page and its PNG load from the server, never from elsewhere.
    tab.goto(f"{live.url}/admin/reports/borealis-whatif")
    image = tab.locator("figure img")
    expect(image).to_have_count(1)
    assert tab.evaluate("document.querySelector('figure img').naturalWidth") > 100
    tab.click("#open-html")
    expect(tab.locator("h1")).to_have_text("What-if: load doubles at A")
    shot(tab, live, "16-report-html")
