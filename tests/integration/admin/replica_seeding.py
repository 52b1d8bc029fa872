"""Replicas and a reconciliation permit on top of the seeded demo federation, all through the
REST API (as the agents would do it), for the admin UI's Replicas page tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tests.integration.admin.seeding import Federation


class PutClient(Protocol):
    # Keyword-only, as both httpx.Client.put and TestClient.put declare them.
    def put(self, url: str, *, json: Any = ..., headers: dict[str, str] = ...) -> Any: ...


@dataclass(frozen=True)
class SeededReplicas:
    # Task -> its replica hosts, as the API placed them.
    hosts: dict[str, list[str]]
    permit: dict[str, Any]


def seed_replicas(fed: Federation, client: PutClient) -> SeededReplicas:
    """E joins with a replica-hosting contract with C; C gives C.q01 two replicas (D and E,
    the only partners allowing replica hosting) and C.q02 one; D reports its copy of C.q01 in
    UP_FAILURE, then takes C.q01's reconciliation permit under the node name ``C.q01@D``."""
    registered = fed.call("post", "admin", "/v1/participants", {"name": "E", "capacity": 100})
    fed.keys["E"] = registered["api_key"]
    proposed = fed.call(
        "post",
        "C",
        "/v1/contracts",
        {
            "partner": "E",
            "price_min": 0.3,
            "price_max": 0.35,
            "availability": {"replica_hosting": True},
        },
    )
    fed.call("post", "E", f"/v1/contracts/{proposed['id']}/accept", {"version": 1})
    hosts = {
        "C.q01": [r["host"] for r in fed.call("post", "C", "/v1/tasks/C.q01/replicas", {"k": 2})],
        "C.q02": [r["host"] for r in fed.call("post", "C", "/v1/tasks/C.q02/replicas", {"k": 1})],
    }
    reported = client.put(
        "/v1/replicas/C.q01/state",
        json={"state": "UP_FAILURE", "epoch": 0},
        headers=fed.headers("D"),
    )
    assert reported.status_code == 200, reported.text
    permit = fed.call("post", "D", "/v1/permits/C.q01/request", {"replica": "C.q01@D"})
    assert permit["granted"] is True, permit
    return SeededReplicas(hosts=hosts, permit=dict(permit))
