"""/docs and /redoc work offline: the pages and every asset they reference come from the
running service itself, never from another host (issue 15, item 7)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from app.server import serve_in_thread
from app.settings import Settings

# Attributes through which a page makes the browser fetch something.
FETCHING_ATTRIBUTES = {"src", "href", "spec-url", "data", "poster", "srcset"}
CSS_URL = re.compile(r"url\(\s*['\"]?([^'\")]+)['\"]?\s*\)")
# Swagger UI's page passes the OpenAPI document's address in its inline script.
SCRIPT_URL = re.compile(r"\burl:\s*'([^']+)'")


class References(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self._script: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [v for k, v in attrs if k in FETCHING_ATTRIBUTES and v]

    def handle_data(self, data: str) -> None:
        self.found += SCRIPT_URL.findall(data)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[str]:
    db = tmp_path_factory.mktemp("docs") / "registry.db"
    shutil.copy(sqlite_template, db)
    settings = Settings(database_url=f"sqlite:///{db}", environment="test")
    with serve_in_thread(settings) as base:
        yield base


def _same_origin(url: str, base: str) -> bool:
    return urlsplit(url)[:2] == urlsplit(base)[:2]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_page_and_everything_it_loads_come_from_the_service(service: str, page: str) -> None:
    with httpx.Client(timeout=60) as client:
        html = client.get(f"{service}{page}")
        assert html.status_code == 200
        # The browser may fetch from nowhere else, whatever the bundles link to.
        policy = html.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "img-src 'self' data:" in policy
        assert "http" not in policy
        parser = References()
        parser.feed(html.text)
        references = {urljoin(f"{service}{page}", ref) for ref in parser.found}
        assert f"{service}/openapi.json" in references
        scripts = [r for r in references if r.endswith(".js")]
        assert scripts, f"{page} loads no script: {references}"
        outside = sorted(r for r in references if not _same_origin(r, service))
        assert not outside, f"{page} loads from other hosts: {outside}"
        for url in sorted(references):
            response = client.get(url)
            assert response.status_code == 200, url
            assert len(response.content) > 0, url
            if url.endswith(".css"):
                # A stylesheet's own fetches: only inline data or the service's files.
                for ref in CSS_URL.findall(response.text):
                    if ref.startswith("data:"):
                        continue
                    target = urljoin(url, ref)
                    assert _same_origin(target, service), f"{url} loads {target}"
                    assert client.get(target).status_code == 200, target
        if page == "/redoc":
            assert "fonts.googleapis.com" not in html.text


def test_the_bundles_are_the_current_major_versions(service: str) -> None:
    # OpenAPI 3.1 (FastAPI's) needs Swagger UI 5; ReDoc 2 renders 3.1.
    swagger = httpx.get(f"{service}/docs/assets/swagger-ui-bundle.js", timeout=60).text
    assert re.search(r'PACKAGE_VERSION:"5\.\d+\.\d+"', swagger), "not Swagger UI 5"
    assert "openapi.json" in httpx.get(f"{service}/redoc", timeout=60).text
