"""An agent taking a replica hands the movement to its mover, as it does a primary: the mover
(here a recording one, the boundary under test) carries the standby and commits or aborts the
movement in the real registry, over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from app.participant.bpm_decisions import BpmDecisions
from app.participant.client import FedloadClient
from app.participant.command import RegistryLoads
from app.participant.node import Agent, MoveEvent
from app.participant.ports import MovementRecord, Received
from app.settings import Settings
from tests.support.federation import register_participants, sign_contract
from tests.support.live_server import serve

ADMIN = "replica-mover-admin-key"
CAPACITY = {"A": 35.0, "B": 35.0, "D": 100.0}
# A places q's replica on B; B, as loaded as A, sheds the replica to D.
CONTRACTS = [("A", "B", 0.10), ("B", "D", 0.08)]
ONLINE = {name: "online" for name in CAPACITY}


@pytest.fixture
def clients(db_url: str) -> Iterator[dict[str, FedloadClient]]:
    with serve(Settings(database_url=db_url, admin_key=ADMIN, environment="test")) as url:
        out = register_participants(url, ADMIN, CAPACITY)
        for a, b, low in CONTRACTS:
            sign_contract(out, a, b, low, hosting=True)
        out["A"]._call("POST", "/v1/tasks", json={"name": "A.q", "load": 30})
        out["A"]._call("POST", "/v1/tasks/A.q/replicas", json={"k": 1})
        yield out
        for client in out.values():
            client.close()


@dataclass
class RecordingMover:
    """Records what the agent hands it; commits a replica's movement, or aborts it and fails as
    a mover whose standby could not follow does."""

    client: FedloadClient
    standby_follows: bool = True
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def receive(self, movement: MovementRecord) -> Received:
        self.calls.append(("receive", movement.task, movement.source, movement.target))
        self.client.commit(movement.id, movement.epoch)
        return Received()

    def receive_replica(self, movement: MovementRecord) -> Received:
        self.calls.append(("receive_replica", movement.task, movement.source, movement.target))
        if not self.standby_follows:
            self.client.abort(movement.id)
            raise RuntimeError("the checkpoint did not reach the new host")
        self.client.commit(movement.id, movement.epoch)
        return Received()


def agent(name: str, client: FedloadClient, mover: Any, moves: list[MoveEvent]) -> Agent:
    decisions = BpmDecisions.for_model({"kind": "mm1"}, CAPACITY[name], 0.01)
    return Agent(name, client, decisions, RegistryLoads(client), mover, on_move=moves.append)


def offer_the_replica(clients: dict, moves: list[MoveEvent]) -> None:
    b = agent("B", clients["B"], RecordingMover(clients["B"]), moves)
    b.tick(0.0, liveness=ONLINE)
    (offer,) = clients["B"].offers()
    assert (offer["to"], offer["tasks"], offer["replicas"]) == ("D", [], ["A.q"])


def test_a_taken_replica_goes_through_the_mover(clients: dict) -> None:
    moves: list[MoveEvent] = []
    offer_the_replica(clients, moves)
    mover = RecordingMover(clients["D"])
    d = agent("D", clients["D"], mover, moves)
    d.tick(0.0, liveness=ONLINE)
    assert mover.calls == [("receive_replica", "A.q", "B", "D")]
    (movement,) = clients["D"].movements()
    assert (movement["status"], movement["replica"], movement["epoch"]) == ("committed", True, 1)
    (replica,) = clients["admin"].replicas()
    assert replica["host"] == "D"
    assert [(m.task, m.src, m.dst) for m in moves] == [("A.q", "B", "D")]
    assert clients["A"].lease("A.q")["host"] == "A" and d.state.errors == []


def test_a_standby_that_cannot_follow_leaves_the_replica_where_it_was(clients: dict) -> None:
    moves: list[MoveEvent] = []
    offer_the_replica(clients, moves)
    mover = RecordingMover(clients["D"], standby_follows=False)
    d = agent("D", clients["D"], mover, moves)
    d.tick(0.0, liveness=ONLINE)
    assert mover.calls == [("receive_replica", "A.q", "B", "D")]
    (movement,) = clients["D"].movements()
    assert (movement["status"], movement["replica"]) == ("aborted", True)
    (replica,) = clients["admin"].replicas()
    assert replica["host"] == "B"
    assert moves == []
    assert d.state.errors == ["move A.q: the checkpoint did not reach the new host"]
