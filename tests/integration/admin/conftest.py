from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.integration.admin.seeding import Federation, apply_demo
from tests.integration.api.conftest import ADMIN_KEY

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = CSRF.search(html)
    assert match, "no CSRF token in the page"
    return match.group(1)


def sign_in(client: TestClient, key: str = ADMIN_KEY) -> TestClient:
    token = csrf_of(client.get("/admin/login").text)
    response = client.post(
        "/admin/login", data={"csrf_token": token, "key": key}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    return client


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return Settings(
        database_url=db_url,
        admin_key=ADMIN_KEY,
        session_secret="test-session-secret",
        environment="test",
        reports_dir=tmp_path / "reports",
    )


@pytest.fixture
def app_client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def federation(settings: Settings, app_client: TestClient) -> Federation:
    """The Borealis demo federation, with load reports and one market move of A.q01 to B."""
    keys = apply_demo(settings.database_url)
    fed = Federation(client=app_client, admin_key=ADMIN_KEY, keys=keys)
    fed.heartbeat("A", 92.0, marginal_cost=1.9, threshold=79.5)
    fed.heartbeat("B", 30.0, marginal_cost=0.2, threshold=79.5)
    fed.load_move("A.q01", "A", "B")
    return fed


@pytest.fixture
def admin(app_client: TestClient, federation: Federation) -> TestClient:
    """A browser-like client holding a signed-in admin session (shares the app's registry)."""
    return sign_in(TestClient(app_client.app))


@pytest.fixture
def anonymous(app_client: TestClient, federation: Federation) -> TestClient:
    return TestClient(app_client.app)
