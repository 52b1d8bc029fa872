"""A crash and its failover, all through the REST API and the registry's own failure detection,
for the admin UI's Availability page tests.

O owns and hosts O.t and O.u; R holds a passive standby of each under a contract O-R whose
availability terms say ``precise`` recovery with a delay budget X of 3 s. O heartbeats once and
goes silent: the service's failure sweeper declares it failed (``wait_failed``); R then fails
O.t over to itself and commits. O.u keeps its standby on R and no failover.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tests.integration.admin.seeding import Federation

TERMS = {"recovery": "precise", "max_delay_seconds": 3.0, "replica_hosting": True}


@dataclass(frozen=True)
class SeededFailover:
    movement: dict[str, Any]
    failed_at: str


def register(fed: Federation, name: str) -> None:
    created = fed.call("post", "admin", "/v1/participants", {"name": name, "capacity": 100})
    fed.keys[name] = created["api_key"]


def seed_failover(fed: Federation) -> SeededFailover:
    for name in ("O", "R"):
        register(fed, name)
    contract = fed.call(
        "post",
        "O",
        "/v1/contracts",
        {"partner": "R", "price_min": 0.2, "price_max": 0.3, "availability": TERMS},
    )
    fed.call("post", "R", f"/v1/contracts/{contract['id']}/accept", {"version": 1})
    for task in ("O.t", "O.u"):
        fed.call("post", "O", "/v1/tasks", {"name": task, "load": 5})
        placed = fed.call(
            "post", "O", f"/v1/tasks/{task}/replicas", {"k": 1, "technique": "passive_standby"}
        )
        assert [r["host"] for r in placed] == ["R"], placed
    # O's agent heartbeats once and goes silent. R's never heartbeats here: the registry judges
    # only participants it has heard (a test cannot keep a heartbeat loop going for R).
    fed.call("post", "O", "/v1/participants/me/heartbeat", {})
    failed_at = wait_failed(fed, "O")
    movement = fed.call(
        "post", "R", "/v1/movements", {"task": "O.t", "to": "R", "reason": "failover"}
    )
    committed = fed.call(
        "post", "R", f"/v1/movements/{movement['id']}/commit", {"epoch": movement["epoch"]}
    )
    return SeededFailover(movement=dict(committed), failed_at=failed_at)


def wait_failed(fed: Federation, name: str, timeout: float = 30.0) -> str:
    """Until the service's failure sweeper declares ``name`` failed; returns when it did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = fed.call("get", "admin", f"/v1/participants/{name}")
        if seen["failed_at"] is not None:
            return str(seen["failed_at"])
        time.sleep(0.05)
    raise AssertionError(f"{name} was not declared failed within {timeout} s")
