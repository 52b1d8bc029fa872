"""The registry implements the runtime's movement coordinator, over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.participant.client import ApiError, FedloadClient
from app.settings import Settings
from spark_jobs.runtime.coordinator import MovementRefused
from spark_jobs.runtime.registry_coordinator import RegistryCoordinator
from tests.support.failures import declare_failed
from tests.support.live_server import serve

ADMIN = "coordinator-admin-key"


@pytest.fixture
def clients(db_url: str) -> Iterator[dict[str, FedloadClient]]:
    with serve(Settings(database_url=db_url, admin_key=ADMIN, environment="test")) as url:
        admin = FedloadClient(url, ADMIN)
        out = {}
        for name in ("A", "B", "C"):
            key = admin._call("POST", "/v1/participants", json={"name": name, "capacity": 100})[
                "api_key"
            ]
            out[name] = FedloadClient(url, key)
        contract = out["A"]._call(
            "POST", "/v1/contracts", json={"partner": "B", "price_min": 0.2, "price_max": 0.3}
        )
        out["B"]._call("POST", f"/v1/contracts/{contract['id']}/accept", json={"version": 1})
        replica = out["A"]._call(
            "POST",
            "/v1/contracts",
            json={
                "partner": "C",
                "price_min": 0.2,
                "price_max": 0.3,
                "availability": {"recovery": "precise", "replica_hosting": True},
            },
        )
        out["C"]._call("POST", f"/v1/contracts/{replica['id']}/accept", json={"version": 1})
        out["A"]._call("POST", "/v1/tasks", json={"name": "A.frag", "load": 7})
        out["contract"] = contract  # type: ignore[assignment]
        yield out
        for client in (admin, out["A"], out["B"], out["C"]):
            client.close()


def test_load_move_adopts_the_accepted_offer_and_commit_fences(clients: dict) -> None:
    a, b = clients["A"], clients["B"]
    coordinator = RegistryCoordinator({"A": a, "B": b})
    with pytest.raises(MovementRefused, match="no accepted offer"):
        coordinator.prepare("A.frag", "A", "B", "load")
    offer = a.offer(clients["contract"]["id"], ["A.frag"], 0.25)
    b.accept(offer["id"], offer["version"])
    move = coordinator.prepare("A.frag", "A", "B", "load")
    assert (move.source, move.target, move.epoch) == ("A", "B", 1)
    assert coordinator.host("A.frag") == "A"
    assert coordinator.commit(move.movement_id) == 1
    assert (coordinator.host("A.frag"), coordinator.current_epoch("A.frag")) == ("B", 1)
    with pytest.raises(MovementRefused):
        coordinator.commit(move.movement_id)


def test_failover_prepare_abort_is_idempotent_and_keeps_host(clients: dict, db_url: str) -> None:
    a, c = clients["A"], clients["C"]
    coordinator = RegistryCoordinator({"A": a, "C": c})
    # Only the replica's host takes the task over, and only from a host seen failed (issue 15):
    # without a copy, C does not even see the task.
    with pytest.raises(MovementRefused, match=r"task 'A\.frag' not found"):
        coordinator.prepare("A.frag", "A", "C", "failover")
    a._call("POST", "/v1/tasks/A.frag/replicas", json={"k": 1})
    with pytest.raises(MovementRefused, match="as unknown, not failed"):
        coordinator.prepare("A.frag", "A", "C", "failover")
    declare_failed(db_url, "A")  # A's agent last heartbeated an hour ago
    move = coordinator.prepare("A.frag", "A", "C", "failover")
    with pytest.raises(MovementRefused, match=r"already being moved"):
        coordinator.prepare("A.frag", "A", "C", "failover")
    coordinator.abort(move.movement_id, "target crashed")
    coordinator.abort(move.movement_id, "again")
    assert (coordinator.host("A.frag"), coordinator.current_epoch("A.frag")) == ("A", 0)
    # Nor does the failed host take anything over: it is fenced until it rejoins.
    with pytest.raises(MovementRefused, match=r"A was declared failed .* is fenced"):
        coordinator.prepare("A.frag", "C", "A", "failover")


def test_client_reports_field_and_detail(clients: dict) -> None:
    with pytest.raises(ApiError) as info:
        clients["A"].offer(clients["contract"]["id"], ["A.frag"], 5.0)
    assert (info.value.status, info.value.field) == (422, "price")


def test_failover_needs_a_replica_hosting_contract(clients: dict) -> None:
    # B's contract with A has no replica hosting: B cannot take A's task by failover.
    with pytest.raises(MovementRefused, match="not found"):
        RegistryCoordinator({"B": clients["B"]}).prepare("A.frag", "A", "B", "failover")
