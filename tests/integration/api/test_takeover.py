"""No partner takes over a participant's task (issue 15, "A partner can take over").

A failover or replica switch hands a task to the host of one of its replicas, asked for by that
host, and only while the registry sees the current host failed; outside the market a task moves
only to its owner or one of the owner's partners. Every refusal writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from app.db.base import utcnow
from app.db.session import unit_of_work
from app.models import LedgerEntry, Participant, Task
from app.movements.payments import accrue_task
from app.settings import Settings
from tests.integration.api.authz_world import (  # noqa: F401 (a fixture)
    World,
    world_copy,
    world_for,
    world_settings,
    world_templates,
)
from tests.integration.api.conftest import Api
from tests.support.databases import BACKENDS
from tests.support.snapshot import registry_snapshot


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from world_copy(request)


@pytest.fixture
def settings(db_url: str) -> Settings:
    return world_settings(db_url)


@pytest.fixture
def world(request: pytest.FixtureRequest, api: Api, db_url: str) -> World:
    return world_for(request, api, db_url)


def move(world: World, who: str, task: str, to: str, reason: str = "failover") -> Any:
    return world.api.post(who, "/v1/movements", {"task": task, "to": to, "reason": reason})


def host_of(world: World, task: str) -> str:
    return str(world.api.get("admin", f"/v1/tasks/{task}/lease").json()["host"])


@pytest.mark.parametrize("reason", ["failover", "replica_switch"])
def test_a_partner_without_a_replica_cannot_take_the_owner_s_task(
    world: World, reason: str
) -> None:
    """The issue's attack: C has an active replica-hosting contract with A but no replica of
    q1, and asks to fail q1 over to itself while A is alive, then would commit it."""
    before = registry_snapshot(world.db_url)
    refused = move(world, "C", "A.q1", "C", reason)
    # C sees nothing of q1, so it learns nothing: the answer for an unknown name.
    assert refused.status_code == 404, refused.text
    assert refused.json() == {"detail": "task 'A.q1' not found", "field": "task"}
    assert move(world, "C", "no-such-task", "C", reason).json()["detail"] == (
        "task 'no-such-task' not found"
    )
    assert registry_snapshot(world.db_url) == before
    # Not even once the owner has failed: C holds no copy of q1.
    world.fail("A")
    before = registry_snapshot(world.db_url)
    assert move(world, "C", "A.q1", "C", reason).status_code == 404
    assert registry_snapshot(world.db_url) == before
    assert host_of(world, "A.q1") == "A"


def test_the_host_cannot_hand_the_owner_s_task_to_a_stranger(world: World) -> None:
    """C hosts A's q2 (sold under A-C); D has no contract with A. Neither a failover nor a
    reconciliation, by C, by A or by an admin, puts q2 on D."""
    before = registry_snapshot(world.db_url)
    by_host = move(world, "C", "A.q2", "D")
    assert by_host.status_code == 403, by_host.text
    assert by_host.json()["field"] == "to"
    assert move(world, "C", "A.q2", "D", "reconciliation").status_code == 403
    for who in ("A", "admin"):
        refused = move(world, who, "A.q2", "D", "reconciliation")
        assert refused.status_code == 403, refused.text
        assert refused.json()["field"] == "to"
        assert "no active contract with A" in refused.json()["detail"]
    assert registry_snapshot(world.db_url) == before
    assert host_of(world, "A.q2") == "C"


def test_a_replica_takes_over_only_from_a_failed_host(world: World) -> None:
    before = registry_snapshot(world.db_url)
    early = move(world, "B", "A.q1", "B")
    assert early.status_code == 409, early.text
    assert early.json()["field"] == "reason"
    assert "as online, not failed" in early.json()["detail"]
    # Another participant may not ask on the replica's behalf, nor B for a non-replica.
    assert move(world, "A", "A.q1", "B").status_code == 403
    assert move(world, "B", "A.q1", "C").status_code == 403
    assert registry_snapshot(world.db_url) == before

    world.fail("A")
    taken = move(world, "B", "A.q1", "B")
    assert taken.status_code == 201, taken.text
    movement = taken.json()
    assert (movement["from"], movement["to"], movement["reason"]) == ("A", "B", "failover")
    # The replica's host runs it under its contract with the owner, at the contract's minimum.
    assert (movement["contract_id"], movement["price"]) == (world.contracts["AB"], 0.8)
    commit = world.api.post(
        "B", f"/v1/movements/{movement['id']}/commit", {"epoch": movement["epoch"]}
    )
    assert commit.status_code == 200, commit.text
    task = world.api.get("A", "/v1/tasks/A.q1").json()
    assert (task["host"], task["contract_id"], task["price"]) == ("B", world.contracts["AB"], 0.8)
    assert world.api.get("A", "/v1/replicas").json() == []  # the replica is the task now

    # From the commit on, the owner pays the new host under their contract.
    with unit_of_work(world.db_url) as session:
        q1 = session.query(Task).filter_by(name="A.q1").one()
        charged = accrue_task(session, q1, utcnow() + timedelta(seconds=10))
        ids = {p.name: p.id for p in session.query(Participant)}
        entry = session.query(LedgerEntry).filter_by(task_id=q1.id, kind="accrual").one()
        assert (entry.payer_id, entry.payee_id, entry.contract_id) == (
            ids["A"],
            ids["B"],
            world.contracts["AB"],
        )
        assert charged == pytest.approx(5.0 * 0.8 * 10, rel=0.05)


def test_a_replica_switch_promotes_the_replica_like_a_failover(world: World) -> None:
    world.fail("A")
    taken = move(world, "B", "A.q1", "B", "replica_switch")
    assert taken.status_code == 201, taken.text
    body = taken.json()
    path = f"/v1/movements/{body['id']}/commit"
    assert world.api.post("B", path, {"epoch": body["epoch"]}).status_code == 200
    assert host_of(world, "A.q1") == "B"
    # Never a task and its replica on one participant.
    assert world.api.get("admin", "/v1/replicas").json() == []


def test_an_admin_fails_over_to_a_replica_only_from_a_failed_host(world: World) -> None:
    assert move(world, "admin", "A.q1", "B").status_code == 409
    assert move(world, "admin", "A.q1", "C").status_code == 403  # C holds no replica
    world.fail("A")
    assert move(world, "admin", "A.q1", "B").status_code == 201


def test_the_owner_relocates_its_task_to_a_partner_for_reconciliation(world: World) -> None:
    moved = move(world, "A", "A.q2", "A", "reconciliation")
    assert moved.status_code == 201, moved.text
    assert (moved.json()["contract_id"], moved.json()["price"]) == (None, None)
    aborted = world.api.post("A", f"/v1/movements/{moved.json()['id']}/abort")
    assert aborted.status_code == 200
    onward = move(world, "A", "A.q2", "B", "reconciliation")
    assert onward.status_code == 201, onward.text
    assert onward.json()["contract_id"] == world.contracts["AB"]
