from __future__ import annotations

from tests.integration.api.conftest import Api


def test_admin_registers_participant_and_key_is_shown_once(api: Api) -> None:
    created = api.register("A", capacity=120)
    assert created["name"] == "A"
    assert created["capacity"] == 120
    assert created["api_key"].startswith("fl_")
    me = api.get("A", "/v1/participants/me")
    assert me.status_code == 200
    assert me.json()["name"] == "A"
    assert "api_key" not in me.json()
    assert me.json()["cost_model"] == {"kind": "mm1"}


def test_public_listing_hides_capacity_and_cost_model(abc: Api) -> None:
    response = abc.get("B", "/v1/participants")
    assert response.status_code == 200
    listed = response.json()
    assert [p["name"] for p in listed] == ["A", "B", "C"]
    for p in listed:
        assert set(p) == {"id", "name", "profile", "status", "liveness", "failed_at"}


def test_only_admin_registers_participants(abc: Api) -> None:
    response = abc.post("A", "/v1/participants", {"name": "Z", "capacity": 10})
    assert response.status_code == 403
    assert response.json()["field"] == "Authorization"


def test_missing_and_unknown_keys_are_401(api: Api) -> None:
    assert api.client.get("/v1/participants/me").status_code == 401
    bad = api.client.get("/v1/participants/me", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401
    assert bad.json() == {"detail": "unknown API key", "field": "Authorization"}


def test_duplicate_name_is_409_and_names_the_field(abc: Api) -> None:
    response = abc.post("admin", "/v1/participants", {"name": "A", "capacity": 10})
    assert response.status_code == 409
    assert response.json()["field"] == "name"


def test_suspended_participant_is_refused(abc: Api) -> None:
    response = abc.client.patch(
        "/v1/participants/B", json={"status": "suspended"}, headers=abc.headers("admin")
    )
    assert response.status_code == 200
    assert response.json()["status"] == "suspended"
    refused = abc.get("B", "/v1/participants/me")
    assert refused.status_code == 403
    assert "suspended" in refused.json()["detail"]
