"""A contract, its history and its ledger exist only for its two parties and admins."""

from __future__ import annotations

import pytest

from tests.integration.api.conftest import Api

ENDPOINTS = [
    ("get", ""),
    ("get", "/history"),
    ("get", "/ledger"),
    ("post", "/counter"),
    ("post", "/accept"),
    ("post", "/reject"),
    ("post", "/terminate"),
]


@pytest.mark.parametrize(("method", "suffix"), ENDPOINTS)
def test_outsider_gets_404_like_a_missing_contract(abc: Api, method: str, suffix: str) -> None:
    cid = abc.propose("A", "B")["id"]
    body: dict[str, object] = {"version": 1}
    if suffix == "/counter":
        body |= {"price_min": 0.5, "price_max": 0.6}
    kwargs = {"json": body} if method == "post" else {}
    outsider = getattr(abc.client, method)(
        f"/v1/contracts/{cid}{suffix}", headers=abc.headers("C"), **kwargs
    )
    missing = getattr(abc.client, method)(
        f"/v1/contracts/9999{suffix}", headers=abc.headers("C"), **kwargs
    )
    assert outsider.status_code == 404
    assert missing.status_code == 404
    # Same shape, so an outsider cannot tell "exists but not yours" from "does not exist".
    assert outsider.json()["detail"] == f"contract {cid} not found"
    assert missing.json()["detail"] == "contract 9999 not found"
    assert abc.get("A", f"/v1/contracts/{cid}").json()["version"] == 1


def test_listing_shows_only_own_contracts(abc: Api) -> None:
    abc.propose("A", "B")
    bc = abc.propose("B", "C")["id"]
    assert [c["id"] for c in abc.get("C", "/v1/contracts").json()] == [bc]
    assert len(abc.get("B", "/v1/contracts").json()) == 2
    assert abc.get("A", "/v1/contracts").json()[0]["partner"] == "B"
