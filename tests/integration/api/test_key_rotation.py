"""API key rotation: a new key at once, the old one for a grace period or not at all."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from app.db.base import utcnow
from app.db.session import unit_of_work
from app.models import Participant
from tests.integration.api.conftest import Api

# What these tests check does not depend on the database: once is enough.
SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def as_key(api: Api, key: str, path: str = "/v1/participants/me") -> int:
    return int(api.client.get(path, headers={"Authorization": f"Bearer {key}"}).status_code)


def rotate(api: Api, key: str, **params: str) -> dict[str, object]:
    response = api.client.post(
        "/v1/participants/me/keys", headers={"Authorization": f"Bearer {key}"}, params=params
    )
    assert response.status_code == 201, response.text
    body: dict[str, object] = response.json()
    return body


def test_old_key_works_within_the_grace_period_and_not_after(abc: Api, db_url: str) -> None:
    old = abc.keys["A"]
    before = utcnow()
    rotated = rotate(abc, old)
    new = str(rotated["api_key"])
    assert new.startswith("fl_") and new != old
    assert as_key(abc, new) == 200 and as_key(abc, old) == 200
    assert (
        abc.client.get("/v1/participants/me", headers={"Authorization": f"Bearer {old}"}).json()[
            "name"
        ]
        == "A"
    )
    valid_until = str(rotated["previous_key_valid_until"])
    assert (
        before + timedelta(seconds=599) < _parse(valid_until) <= utcnow() + timedelta(seconds=600)
    )

    # A replaced key may still work, but not rotate: a leaked old key must not get the new one.
    refused = abc.client.post(
        "/v1/participants/me/keys", headers={"Authorization": f"Bearer {old}"}
    )
    assert (refused.status_code, refused.json()["field"]) == (403, "Authorization")
    assert as_key(abc, new) == 200

    with unit_of_work(db_url) as session:  # the grace period runs out
        session.execute(
            sa.update(Participant)
            .where(Participant.name == "A")
            .values(previous_key_expires_at=utcnow() - timedelta(seconds=1))
        )
    assert as_key(abc, old) == 401 and as_key(abc, new) == 200


def test_revoke_old_ends_the_old_key_at_once_and_is_audited(abc: Api) -> None:
    old = abc.keys["B"]
    rotated = rotate(abc, old, revoke_old="true")
    assert rotated["previous_key_valid_until"] is None
    assert as_key(abc, old) == 401
    new = str(rotated["api_key"])
    assert as_key(abc, new) == 200
    entries = abc.client.get("/v1/audit", headers={"Authorization": f"Bearer {new}"}).json()
    newest = entries["items"][0]
    assert (newest["actor"], newest["action"], newest["participants"]) == (
        "participant:B",
        "participant.key_rotated",
        ["B"],
    )
    assert newest["detail"] == {"previous_key_valid_until": None, "revoke_old": True}
    assert new not in str(entries) and old not in str(entries)  # no key in the log


@SQLITE_ONLY
def test_a_second_rotation_ends_the_key_before_the_first(abc: Api) -> None:
    first = abc.keys["C"]
    second = str(rotate(abc, first)["api_key"])
    third = str(rotate(abc, second)["api_key"])
    assert (as_key(abc, first), as_key(abc, second), as_key(abc, third)) == (401, 200, 200)


@SQLITE_ONLY
def test_the_admin_key_has_no_key_to_rotate(abc: Api) -> None:
    response = abc.post("admin", "/v1/participants/me/keys")
    assert response.status_code == 403


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
