"""Every bad input is a 4xx naming what is wrong and where, and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.api.conftest import Api
from tests.support.snapshot import registry_snapshot

GOOD = {"partner": "B", "price_min": 0.8, "price_max": 1.0}

CASES: list[tuple[str, Any, int, str, str]] = [
    # (case, body, status, field, words the message must contain)
    ("price_min above price_max", {**GOOD, "price_min": 2.0}, 422, "price_max", "below price_min"),
    ("zero price", {**GOOD, "price_min": 0}, 422, "price_min", "greater than 0"),
    ("negative price", {**GOOD, "price_max": -1}, 422, "price_max", "greater than 0"),
    ("unknown partner", {**GOOD, "partner": "Nobody"}, 422, "partner", "unknown partner"),
    ("contract with oneself", {**GOOD, "partner": "A"}, 422, "partner", "yourself"),
    (
        "term end before start",
        {**GOOD, "starts_at": "2030-01-02T00:00:00Z", "ends_at": "2030-01-01T00:00:00Z"},
        422,
        "ends_at",
        "after starts_at",
    ),
    (
        "term already over",
        {**GOOD, "starts_at": "2001-01-01T00:00:00Z", "ends_at": "2001-02-01T00:00:00Z"},
        422,
        "ends_at",
        "ended",
    ),
    ("naive timestamp", {**GOOD, "starts_at": "2030-01-01T00:00:00"}, 422, "starts_at", "timezone"),
    ("wrong type", {**GOOD, "price_min": "cheap"}, 422, "price_min", "number"),
    ("missing partner", {"price_min": 0.8, "price_max": 1.0}, 422, "partner", "required"),
    ("unknown field", {**GOOD, "discount": 5}, 422, "discount", "not permitted"),
    (
        "bad recovery",
        {**GOOD, "availability": {"recovery": "hope"}},
        422,
        "availability.recovery",
        "gap",
    ),
    (
        "negative min move",
        {**GOOD, "min_move_seconds": -1},
        422,
        "min_move_seconds",
        "greater than or equal",
    ),
    ("not an object", [1, 2], 422, "body", "valid dictionary"),
]


@pytest.mark.parametrize(
    ("case", "body", "status", "field", "words"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_proposal_is_refused_and_writes_nothing(
    abc: Api, db_url: str, case: str, body: Any, status: int, field: str, words: str
) -> None:
    before = registry_snapshot(db_url)
    response = abc.post("A", "/v1/contracts", body)
    assert response.status_code == status, response.text
    assert response.json()["field"] == field
    assert words in response.json()["detail"]
    assert registry_snapshot(db_url) == before


def test_malformed_json_is_400_and_writes_nothing(abc: Api, db_url: str) -> None:
    before = registry_snapshot(db_url)
    response = abc.client.post(
        "/v1/contracts",
        content=b'{"partner": "B", price_min: }',
        headers={**abc.headers("A"), "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["field"] == "body"
    assert "malformed JSON" in response.json()["detail"]
    assert registry_snapshot(db_url) == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"version": "two", "price_min": 1, "price_max": 2}, "version"),
        ({"version": 1, "price_min": 3, "price_max": 2}, "price_max"),
        ({"price_min": 1, "price_max": 2}, "version"),
    ],
)
def test_bad_counter_is_refused_and_writes_nothing(
    abc: Api, db_url: str, body: dict[str, Any], field: str
) -> None:
    cid = abc.propose("A", "B")["id"]
    before = registry_snapshot(db_url)
    response = abc.post("B", f"/v1/contracts/{cid}/counter", body)
    assert response.status_code == 422
    assert response.json()["field"] == field
    assert registry_snapshot(db_url) == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "A B", "capacity": 1}, "name"),
        ({"name": "Z", "capacity": 0}, "capacity"),
        (
            {
                "name": "Z",
                "capacity": 1,
                "cost_model": {"kind": "piecewise", "points": [[0, 0], [1, 5], [2, 6]]},
            },
            "cost_model.points[1]",
        ),
    ],
)
def test_bad_participant_is_refused_and_writes_nothing(
    api: Api, db_url: str, body: dict[str, Any], field: str
) -> None:
    before = registry_snapshot(db_url)
    response = api.post("admin", "/v1/participants", body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert registry_snapshot(db_url) == before
