"""A small federation built through the real API: participants and accepted contracts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.participant.client import FedloadClient


def register_participants(
    url: str, admin_key: str, capacity: Mapping[str, float]
) -> dict[str, FedloadClient]:
    """The admin's client under "admin" and one client per participant, by its own key."""
    admin = FedloadClient(url, admin_key)
    out = {"admin": admin}
    for name, cap in capacity.items():
        body = {"name": name, "capacity": cap}
        out[name] = FedloadClient(
            url, admin._call("POST", "/v1/participants", json=body)["api_key"]
        )
    return out


def sign_contract(
    clients: Mapping[str, FedloadClient], giver: str, taker: str, price_min: float, *, hosting: bool
) -> None:
    """``giver`` proposes a contract with a 0.02 price band, ``taker`` accepts it."""
    terms: dict[str, Any] = {
        "partner": taker,
        "price_min": price_min,
        "price_max": price_min + 0.02,
    }
    terms["availability"] = {"replica_hosting": hosting}
    made = clients[giver]._call("POST", "/v1/contracts", json=terms)
    clients[taker]._call("POST", f"/v1/contracts/{made['id']}/accept", json={"version": 1})
