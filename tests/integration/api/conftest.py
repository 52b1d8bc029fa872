from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings

ADMIN_KEY = "test-admin-key"


@dataclass
class Api:
    """A thin test client that knows each participant's key."""

    client: TestClient
    keys: dict[str, str]

    def headers(self, who: str) -> dict[str, str]:
        key = ADMIN_KEY if who == "admin" else self.keys[who]
        return {"Authorization": f"Bearer {key}"}

    def post(self, who: str, path: str, json: Any = None, **kwargs: Any) -> Any:
        return self.client.post(path, json=json, headers=self.headers(who), **kwargs)

    def get(self, who: str, path: str, **kwargs: Any) -> Any:
        return self.client.get(path, headers=self.headers(who), **kwargs)

    def register(self, name: str, capacity: float = 100.0) -> dict[str, Any]:
        response = self.post("admin", "/v1/participants", {"name": name, "capacity": capacity})
        assert response.status_code == 201, response.text
        body = response.json()
        self.keys[name] = body["api_key"]
        return body

    def propose(self, who: str, partner: str, **terms: Any) -> dict[str, Any]:
        body = {"partner": partner, "price_min": 0.8, "price_max": 1.0, **terms}
        response = self.post(who, "/v1/contracts", body)
        assert response.status_code == 201, response.text
        return response.json()


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(database_url=db_url, admin_key=ADMIN_KEY, environment="test")


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    with TestClient(create_app(settings)) as client:
        yield Api(client=client, keys={})


@pytest.fixture
def abc(api: Api) -> Api:
    """Three registered participants, A, B and C."""
    for name in ("A", "B", "C"):
        api.register(name)
    return api
