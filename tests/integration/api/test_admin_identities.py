"""Named admins: several admin keys, each audited by its own name, in the API and the UI."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.main import create_app
from app.settings import Settings
from tests.integration.admin.conftest import csrf_of
from tests.integration.api.conftest import ADMIN_KEY

# What these tests check does not depend on the database: once is enough.
SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
ALICE, BOB = "alice-key-0123456789", "bob-key-0123456789"


@pytest.fixture
def named(db_url: str) -> Iterator[TestClient]:
    settings = Settings(
        database_url=db_url,
        admin_key=ADMIN_KEY,
        admin_keys=f"alice:{ALICE}, bob:{BOB}",
        session_secret="test-session-secret",
        environment="test",
    )
    with TestClient(create_app(settings)) as client:
        yield client


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_each_admin_is_audited_by_name_in_the_api_and_the_ui(
    named: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fedload.access")
    for name, key in (("A", ALICE), ("B", BOB), ("C", ADMIN_KEY)):
        created = named.post(
            "/v1/participants", json={"name": name, "capacity": 10}, headers=bearer(key)
        )
        assert created.status_code == 201, created.text

    ui = TestClient(named.app)
    token = csrf_of(ui.get("/admin/login").text)
    signed_in = ui.post(
        "/admin/login", data={"csrf_token": token, "key": BOB}, follow_redirects=False
    )
    assert signed_in.status_code == 303
    page = ui.get("/admin/participants/A/suspend")
    suspended = ui.post(
        "/admin/participants/A/suspend",
        data={"csrf_token": csrf_of(page.text)},
        follow_redirects=False,
    )
    assert suspended.status_code == 303
    ui_log = caplog.records[-1].fields  # type: ignore[attr-defined]
    assert (ui_log["route"], ui_log["principal"]) == (
        "/admin/participants/{name}/{verb}",
        "admin:bob",
    )

    entries = named.get("/v1/audit", headers=bearer(ALICE)).json()["items"]
    assert [(e["actor"], e["action"]) for e in reversed(entries)] == [
        ("admin:alice", "participant.created"),
        ("admin:bob", "participant.created"),
        ("admin", "participant.created"),
        ("admin:bob", "participant.suspended"),
    ]


@SQLITE_ONLY
def test_an_unknown_key_opens_neither_the_api_nor_the_ui(named: TestClient) -> None:
    assert named.get("/v1/audit", headers=bearer("carol-key")).status_code == 401
    ui = TestClient(named.app)
    token = csrf_of(ui.get("/admin/login").text)
    refused = ui.post("/admin/login", data={"csrf_token": token, "key": "carol-key"})
    assert refused.status_code == 401


@pytest.mark.parametrize(
    ("admin_keys", "message"),
    [
        ("alice", "FEDLOAD_ADMIN_KEYS item 1: expected name:key"),
        ("alice:k1,alice:k2", "item 2: admin 'alice' is named twice"),
        ("alice:k1,bob:k1", "item 2: admin 'bob' has another admin's key"),
        ("al ice:k1", "item 1: admin name 'al ice' must be"),
    ],
)
def test_malformed_admin_keys_are_refused_naming_the_item(admin_keys: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(admin_keys=admin_keys)


def test_which_admin_keys_are_in_force() -> None:
    assert Settings(admin_key="k0").admins == {"admin": "k0"}
    # Named admins alone: the development default key is not silently left open beside them.
    assert Settings(admin_keys="alice:k1").admins == {"alice": "k1"}
    assert Settings(admin_key="k0", admin_keys="alice:k1").admins == {"admin": "k0", "alice": "k1"}
    production = {
        "environment": "production",
        "session_secret": "s3cret",
        "dataplane_key_file": "/etc/fedload/dataplane.pem",
    }
    assert Settings(admin_keys="alice:k1", **production).admins == {"alice": "k1"}  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="FEDLOAD_ADMIN_KEY is still the development"):
        Settings(**production)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="names an admin 'admin'"):
        Settings(admin_key="k0", admin_keys="admin:k1")
