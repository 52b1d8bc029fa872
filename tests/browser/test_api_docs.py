"""Swagger UI and ReDoc render the API in Debian's chromium with every non-local host blocked:
the documentation works on a machine without Internet access (issue 15, item 7)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx
import pytest

from app.server import serve_in_thread
from app.settings import Settings
from tests.browser.conftest import SCREENSHOTS

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Route

pytestmark = pytest.mark.browser
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


@pytest.fixture(scope="module")
def docs_service(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[str]:
    db = tmp_path_factory.mktemp("browser-docs") / "registry.db"
    shutil.copy(sqlite_template, db)
    with serve_in_thread(Settings(database_url=f"sqlite:///{db}", environment="test")) as base:
        yield base


@pytest.fixture
def offline_tab(browser: Browser) -> Iterator[tuple[Page, list[str]]]:
    """A page whose requests to any host but this machine are refused and recorded."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    blocked: list[str] = []

    def only_local(route: Route) -> None:
        if urlsplit(route.request.url).hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", only_local)
    page = context.new_page()
    yield page, blocked
    context.close()


def _operations(base: str) -> int:
    paths = httpx.get(f"{base}/openapi.json", timeout=60).json()["paths"]
    return sum(len(methods) for methods in paths.values())


def test_swagger_ui_renders_every_operation_offline(
    docs_service: str, offline_tab: tuple[Page, list[str]]
) -> None:
    from playwright.sync_api import expect

    page, blocked = offline_tab
    page.goto(f"{docs_service}/docs")
    blocks = page.locator(".opblock")
    expect(blocks.first).to_be_visible(timeout=60_000)
    assert blocks.count() == _operations(docs_service)
    # The request body's example is the one from app/openapi_examples.py.
    create = page.locator(".opblock-post", has_text="/v1/participants").first
    create.locator(".opblock-summary").click()
    expect(create.locator(".body-param__example, .highlight-code").first).to_contain_text(
        '"capacity": 100', timeout=30_000
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "api-docs-swagger-ui.png"))
    assert blocked == []


def test_redoc_renders_offline(docs_service: str, offline_tab: tuple[Page, list[str]]) -> None:
    from playwright.sync_api import expect

    page, blocked = offline_tab
    page.goto(f"{docs_service}/redoc")
    expect(page.locator("h1").first).to_contain_text("fedload", timeout=60_000)
    expect(page.get_by_text("/v1/participants").first).to_be_attached(timeout=60_000)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "api-docs-redoc.png"))
    assert blocked == []
