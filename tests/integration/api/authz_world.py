"""A small federation in which every kind of object exists, for the authorization tests.

Roles (issue 15, item 3): A owns the tasks; B is A's partner and hosts the replica of ``q1``;
C is A's partner too, with a replica-hosting contract but no copy of ``q1`` (the "wrong
partner" that tried to take it over); D works with nobody (the outsider).

- ``AB`` (replica hosting) and ``AC`` (replica hosting) are active; ``BC`` is proposed by B.
- ``q1``: A's, hosted by A, its replica on B; A holds its reconciliation permit as ``A``.
- ``q2``: A's, hosted by C (A sold it under ``AC``).
- ``q3``: A's, in A's open offer to C (``offer``).
- ``q4``: A's, sold to B: the movement A to B is prepared (``movement``), not committed.

Everyone has heartbeated a moment ago: the registry sees them online.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from app.db.base import utcnow
from app.db.session import unit_of_work
from app.models import Participant
from tests.integration.api.conftest import Api

OWNER, REPLICA_HOST, WRONG_PARTNER, OUTSIDER = "A", "B", "C", "D"


@dataclass
class World:
    api: Api
    db_url: str
    contracts: dict[str, int] = field(default_factory=dict)
    offer: int = 0
    movement: int = 0
    epoch: int = 0

    def ok(self, response: Any, status: int = 200) -> dict[str, Any]:
        assert response.status_code == status, response.text
        body: dict[str, Any] = response.json()
        return body

    def contract(self, proposer: str, partner: str, *, accept: bool) -> int:
        terms = {"availability": {"recovery": "precise", "replica_hosting": True}}
        made = self.api.propose(proposer, partner, **terms)
        if accept:
            self.ok(self.api.post(partner, f"/v1/contracts/{made['id']}/accept", {"version": 1}))
        return int(made["id"])

    def task(self, name: str) -> None:
        self.ok(self.api.post(OWNER, "/v1/tasks", {"name": name, "load": 5.0}), 201)

    def sell(self, task: str, contract: str, to: str, *, commit: bool) -> dict[str, Any]:
        body = {"contract_id": self.contracts[contract], "tasks": [task], "price": 0.9}
        offer = self.ok(self.api.post(OWNER, "/v1/offers", body), 201)
        accepted = self.ok(
            self.api.post(to, f"/v1/offers/{offer['id']}/accept", {"version": offer["version"]})
        )
        movement = self.ok(self.api.get(to, f"/v1/movements/{accepted['movement_ids'][0]}"))
        if commit:
            path = f"/v1/movements/{movement['id']}/commit"
            self.ok(self.api.post(to, path, {"epoch": movement["epoch"]}))
        return movement

    def fail(self, name: str) -> None:
        """The registry last heard of ``name`` an hour ago: it sees it failed."""
        with unit_of_work(self.db_url) as session:
            participant = session.query(Participant).filter_by(name=name).one()
            participant.last_heartbeat_at = utcnow() - timedelta(hours=1)


def build_world(api: Api, db_url: str) -> World:
    world = World(api=api, db_url=db_url)
    for name in (OWNER, REPLICA_HOST, WRONG_PARTNER, OUTSIDER):
        api.register(name)
    world.contracts["AB"] = world.contract(OWNER, REPLICA_HOST, accept=True)
    world.task("q1")
    # Placed while B is A's only replica-hosting partner: the replica lands on B.
    placed = world.ok(api.post(OWNER, "/v1/tasks/q1/replicas", {"k": 1}), 201)
    assert [r["host"] for r in placed] == [REPLICA_HOST]
    world.contracts["AC"] = world.contract(OWNER, WRONG_PARTNER, accept=True)
    world.contracts["BC"] = world.contract(REPLICA_HOST, WRONG_PARTNER, accept=False)
    world.ok(api.post(OWNER, "/v1/permits/q1/request", {"replica": OWNER}))
    for name in ("q2", "q3", "q4"):
        world.task(name)
    world.sell("q2", "AC", WRONG_PARTNER, commit=True)
    prepared = world.sell("q4", "AB", REPLICA_HOST, commit=False)
    world.movement, world.epoch = int(prepared["id"]), int(prepared["epoch"])
    body = {"contract_id": world.contracts["AC"], "tasks": ["q3"], "price": 0.9}
    world.offer = int(world.ok(api.post(OWNER, "/v1/offers", body), 201)["id"])
    for name in (OWNER, REPLICA_HOST, WRONG_PARTNER, OUTSIDER):
        world.ok(api.post(name, "/v1/participants/me/heartbeat", {}))
    return world
