"""Browser tests: Debian's chromium driven by Playwright against the service in real uvicorn.

Never a downloaded browser: Playwright launches /usr/bin/chromium. Under CI=true a missing
chromium or Playwright fails the test with what to install; elsewhere it skips.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from app.db.migrate import upgrade
from app.settings import Settings
from tests.integration.admin.seeding import Federation, apply_demo
from tests.support.components import require
from tests.support.live_server import serve

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
ADMIN_KEY = "browser-admin-key"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


def _missing(why: str) -> None:
    require("the browser tests' browser", why)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        _missing(f"Debian chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright for Python (.venv/bin/pip install playwright; no browser download)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield launched
        launched.close()


def _write_report(reports_dir: Path) -> None:
    """A what-if style report directory with a real PNG plot and an HTML page."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory = reports_dir / "borealis-whatif"
    directory.mkdir(parents=True)
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([0, 60, 120, 180], [92, 80, 78, 77], label="A")
    ax.set_title("load per participant")
    ax.legend()
    fig.savefig(directory / "loads.png", dpi=80)
    plt.close(fig)
    (directory / "report.html").write_text(
        "<!doctype html><title>what-if</title><h1>What-if: load doubles at A</h1>"
        "<p>acceptable after 42 s</p><img src='loads.png' alt='loads'>"
    )
    (directory / "summary.json").write_text('{"acceptable": true, "seconds": 42}')


@dataclass
class LiveService:
    url: str
    federation: Federation
    screenshots: Path = field(default=SCREENSHOTS)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveService]:
    """The service on a free loopback port, seeded with the Borealis demo, loads and a move."""
    work = tmp_path_factory.mktemp("browser")
    url = f"sqlite:///{work / 'registry.db'}"
    upgrade(url)
    keys = apply_demo(url)
    _write_report(work / "reports")
    settings = Settings(
        database_url=url,
        admin_key=ADMIN_KEY,
        session_secret="browser-session-secret",
        environment="test",
        reports_dir=work / "reports",
        # These pages are fed by hand, not by agents: nobody is declared failed (and fenced)
        # for not sending heartbeats between the steps of a test.
        heartbeat_interval_seconds=3600,
    )
    with serve(settings) as base, httpx.Client(base_url=base, timeout=30) as client:
        federation = Federation(client=client, admin_key=ADMIN_KEY, keys=keys)
        for name, load, mc in (("A", 92.0, 1.9), ("B", 30.0, 0.2), ("C", 45.0, 0.33)):
            federation.heartbeat(name, load, marginal_cost=mc, threshold=79.5)
            federation.heartbeat(name, load - 2, marginal_cost=mc * 0.9, threshold=79.5)
        federation.load_move("A.q01", "A", "B")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        yield LiveService(url=base, federation=federation)


@dataclass
class Console:
    errors: list[str] = field(default_factory=list)
    # Chromium logs every 4xx document as "Failed to load resource"; a test that provokes
    # one on purpose (a refused sign-in is a 403) names it here. Nothing else is forgiven.
    expected: list[str] = field(default_factory=list)

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(x in e for x in self.expected)]


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def tab(browser: Browser, live: LiveService, console: Console) -> Iterator[Page]:
    """A fresh browser context; every console error or uncaught exception fails the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    opened = context.new_page()

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            console.errors.append(f"{opened.url}: {message.text}")

    opened.on("console", on_console)
    opened.on("pageerror", lambda exc: console.errors.append(f"{opened.url}: {exc}"))
    yield opened
    context.close()
    unexpected = console.unexpected()
    assert unexpected == [], "JavaScript console errors:\n" + "\n".join(unexpected)


def sign_in(tab: Page, live: LiveService, key: str = ADMIN_KEY) -> None:
    tab.goto(f"{live.url}/admin/")
    tab.wait_for_url(re.compile(r"/admin/login\?next="))
    tab.fill("#key", key)
    tab.click("button[type=submit]")


def shot(tab: Page, live: LiveService, name: str) -> Path:
    path = live.screenshots / f"{name}.png"
    tab.screenshot(path=str(path), full_page=True)
    return path


def wait_live(tab: Page) -> None:
    """Wait until the page's poller has fetched its live region at least once."""
    from playwright.sync_api import expect

    # A locator assertion, not wait_for_function: the admin CSP rightly forbids eval.
    expect(tab.locator("#live-status")).to_have_text(re.compile(r"^live · "), timeout=10_000)
