"""Live agents trade a replica over real HTTP: the overloaded host sheds it to the partner whose
contract allows replica hosting, and the owner never offers its primary to the replica's host."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.participant.bpm_decisions import BpmDecisions
from app.participant.client import FedloadClient
from app.participant.command import RegistryLoads, RegistryOnlyMover
from app.participant.node import Agent, MoveEvent
from app.settings import Settings
from tests.support.federation import register_participants, sign_contract
from tests.support.live_server import serve

ADMIN = "replica-agents-admin-key"
CAPACITY = {"A": 35.0, "B": 35.0, "C": 100.0, "D": 100.0}
# (giver, taker, price_min, replica hosting): C is B's cheapest partner but refuses replicas.
CONTRACTS = [("A", "B", 0.10, True), ("B", "C", 0.04, False), ("B", "D", 0.08, True)]
ONLINE = {name: "online" for name in CAPACITY}


@pytest.fixture
def clients(db_url: str) -> Iterator[dict[str, FedloadClient]]:
    with serve(Settings(database_url=db_url, admin_key=ADMIN, environment="test")) as url:
        out = register_participants(url, ADMIN, CAPACITY)
        for a, b, low, hosting in CONTRACTS:
            sign_contract(out, a, b, low, hosting=hosting)
        out["A"]._call("POST", "/v1/tasks", json={"name": "A.q", "load": 30})
        out["A"]._call("POST", "/v1/tasks/A.q/replicas", json={"k": 1})
        yield out
        for client in out.values():
            client.close()


def agent(name: str, client: FedloadClient, moves: list[MoveEvent]) -> Agent:
    decisions = BpmDecisions.for_model({"kind": "mm1"}, CAPACITY[name], 0.01)
    return Agent(
        name,
        client,
        decisions,
        RegistryLoads(client),
        RegistryOnlyMover(client),
        on_move=moves.append,
    )


def test_the_replica_goes_to_the_hosting_partner_and_the_primary_stays(clients: dict) -> None:
    moves: list[MoveEvent] = []
    a, b, d = (agent(n, clients[n], moves) for n in ("A", "B", "D"))
    assert [r["host"] for r in clients["admin"].replicas()] == ["B"]

    # A is as loaded as B, but its only partner hosts q's replica: it offers nothing.
    a.tick(0.0, liveness=ONLINE)
    assert clients["A"].offers() == [] and a.state.errors == []
    assert a.state.held_by == {"B": {"A.q"}}

    b.tick(0.0, liveness=ONLINE)
    (offer,) = clients["B"].offers()
    assert (offer["to"], offer["tasks"], offer["replicas"]) == ("D", [], ["A.q"])
    assert offer["price"] == pytest.approx(0.09)

    d.tick(0.0, liveness=ONLINE)
    assert [(m.task, m.src, m.dst) for m in moves] == [("A.q", "B", "D")]
    (replica,) = clients["admin"].replicas()
    assert (replica["host"], replica["price"]) == ("D", pytest.approx(0.09))
    (movement,) = clients["D"].movements()
    assert (movement["status"], movement["replica"]) == ("committed", True)
    assert clients["A"].lease("A.q")["host"] == "A"
    assert b.state.errors == [] and d.state.errors == []
