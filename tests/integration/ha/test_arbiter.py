"""Reconciliation permission when a peer replica cannot be reached: the arbiter decides.

Real Flight servers on loopback: a node whose peer's port has nothing behind it must not take
that silence as permission (a partitioned peer may be reconciling), and two replicas cut off
from each other get the arbiter's one permit in turn, from the scenarios' Flight arbiter or
from the registry's REST one (real service over TCP, SQLite and PostgreSQL).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from app.participant.client import FedloadClient
from app.settings import Settings
from spark_jobs.ha.arbiter import ArbiterServer, ReconciliationLeases
from spark_jobs.ha.cluster import free_port
from spark_jobs.ha.node import HANode
from tests.integration.api.conftest import ADMIN_KEY
from tests.support.live_server import serve

pytestmark = pytest.mark.timeout(60)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_holder_per_fragment_until_release_or_lease_end() -> None:
    clock = Clock()
    leases = ReconciliationLeases(lease_ms=2_000, clock=clock)
    assert leases.request("C", "C1")
    assert not leases.request("C", "C2")
    assert leases.request("D", "D2"), "another fragment has its own permit"
    assert leases.request("C", "C1"), "the holder renews"
    leases.release("C", "C2")  # not the holder: no effect
    assert leases.holder("C") == "C1"
    leases.release("C", "C1")
    assert leases.request("C", "C2")
    clock.now += 1.999
    assert not leases.request("C", "C1")
    clock.now += 0.002
    # The holder died without releasing: its lease is over, the next asker gets the permit.
    assert leases.holder("C") is None
    assert leases.request("C", "C1")
    assert leases.decisions == [
        ("C", "C1", True),
        ("C", "C2", False),
        ("D", "D2", True),
        ("C", "C1", True),
        ("C", "C2", True),
        ("C", "C1", False),
        ("C", "C1", True),
    ]


def test_lease_must_be_positive() -> None:
    with pytest.raises(ValueError, match="lease_ms must be positive, got 0"):
        ReconciliationLeases(lease_ms=0)


def _node(
    name: str,
    peers: dict[str, str],
    arbiter: str | None,
    *,
    key: str | None = None,
    fragment: str = "C",
) -> HANode:
    config: dict[str, Any] = {
        "name": name,
        "fragment": fragment,
        "role": "fragment",
        "t0": time.time(),
        "operator": {"type": "passthrough"},
        "inputs": {"a": {"replicas": {"A": f"grpc://127.0.0.1:{free_port()}"}}},
        "peers": peers,
    }
    if arbiter is not None:
        config["arbiter"] = arbiter
    if key is not None:
        config["arbiter_key"] = key
        # The registry's arbiter commits a row per call: the node's 2 s default was passed by a
        # release under a loaded CI run (session 28), which the node then leaves to the lease.
        # Here a release must land, so it may take the lease's length.
        config["arbiter_timeout_ms"] = 10_000
    return HANode(config)


@pytest.fixture
def arbiter() -> Iterator[ArbiterServer]:
    server = ArbiterServer()
    yield server
    server.shutdown()


def test_unreachable_peer_without_arbiter_is_no_permission() -> None:
    nobody = f"grpc://127.0.0.1:{free_port()}"
    node = _node("C1", {"C2": nobody}, arbiter=None)
    try:
        assert node._ask_peers("C") is False
        assert node._ask_peers("C") is False
        assert node.status()["refused_for_unreachable_peers"] == 2
        assert not [e for e in node.events if e["event"] == "reconcile_permitted"]
    finally:
        node.server.shutdown()


def test_replicas_cut_off_from_each_other_take_turns(arbiter: ArbiterServer) -> None:
    # Each one's peer address leads nowhere: the partition between them.
    c1 = _node("C1", {"C2": f"grpc://127.0.0.1:{free_port()}"}, arbiter.location)
    c2 = _node("C2", {"C1": f"grpc://127.0.0.1:{free_port()}"}, arbiter.location)
    try:
        assert c1._ask_peers("C") is True
        assert c2._ask_peers("C") is False, "C1 holds the permit"
        assert arbiter.leases.holder("C") == "C1"
        c1._release_peers("C")
        assert arbiter.leases.holder("C") is None
        assert c2._ask_peers("C") is True
        assert arbiter.leases.decisions == [
            ("C", "C1", True),
            ("C", "C2", False),
            ("C", "C2", True),
        ]
        permitted = [e for e in c1.events if e["event"] == "reconcile_permitted"]
        assert permitted and permitted[0]["arbitrated"] is True
    finally:
        c1.server.shutdown()
        c2.server.shutdown()


def test_reachable_peer_decides_without_the_arbiter(arbiter: ArbiterServer) -> None:
    c1_port = free_port()
    c2 = _node("C2", {"C1": f"grpc://127.0.0.1:{c1_port}"}, arbiter.location)
    c1 = HANode(
        {
            "name": "C1",
            "fragment": "C",
            "role": "fragment",
            "t0": time.time(),
            "port": c1_port,
            "operator": {"type": "passthrough"},
            "inputs": {"a": {"replicas": {"A": f"grpc://127.0.0.1:{free_port()}"}}},
            "peers": {"C2": c2.server.location},
            "arbiter": arbiter.location,
        }
    )
    try:
        assert c2._ask_peers("C") is True
        # C1 granted C2 its turn and remembers it: C1 does not ask while C2 reconciles.
        assert c1._ask_peers("C") is False
        assert arbiter.leases.decisions == [], "reachable replicas never bother the arbiter"
    finally:
        c1.server.shutdown()
        c2.server.shutdown()


@pytest.fixture
def registry(db_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    """The registry service over TCP with participants A and B (each hosting one replica)."""
    settings = Settings(database_url=db_url, admin_key=ADMIN_KEY, environment="test")
    with serve(settings) as url:
        admin = FedloadClient(url, ADMIN_KEY)
        keys = {
            n: admin._call("POST", "/v1/participants", json={"name": n, "capacity": 100})["api_key"]
            for n in ("A", "B")
        }
        admin.close()
        # The registry arbitrates registered tasks for the participants holding a copy: A hosts
        # fragment A.C, B its replica (the nodes ask under their node names, C1 and C2).
        a, b = FedloadClient(url, keys["A"]), FedloadClient(url, keys["B"])
        terms = {"partner": "B", "price_min": 0.5, "price_max": 0.6}
        proposed = a._call(
            "POST", "/v1/contracts", json={**terms, "availability": {"replica_hosting": True}}
        )
        b._call("POST", f"/v1/contracts/{proposed['id']}/accept", json={"version": 1})
        a._call("POST", "/v1/tasks", json={"name": "A.C", "load": 1.0})
        a._call("POST", "/v1/tasks/A.C/replicas", json={"k": 1})
        a.close()
        b.close()
        yield url, keys


def test_replicas_cut_off_take_turns_through_the_registry_arbiter(
    registry: tuple[str, dict[str, str]],
) -> None:
    url, keys = registry
    c1 = _node("C1", {"C2": f"grpc://127.0.0.1:{free_port()}"}, url, key=keys["A"], fragment="A.C")
    c2 = _node("C2", {"C1": f"grpc://127.0.0.1:{free_port()}"}, url, key=keys["B"], fragment="A.C")
    admin = FedloadClient(url, ADMIN_KEY)
    try:
        assert c1._ask_peers("A.C") is True
        assert c2._ask_peers("A.C") is False, "C1 holds the permit"
        assert [(p["holder"], p["participant"], p["fence"]) for p in admin.permits()] == [
            ("C1", "A", 1)
        ]
        c1._release_peers("A.C")
        assert [(p["holder"], p["held"]) for p in admin.permits()] == [(None, False)]
        assert c2._ask_peers("A.C") is True
        assert [(p["holder"], p["participant"], p["fence"]) for p in admin.permits()] == [
            ("C2", "B", 2)
        ]
        assert c2.status()["refused_for_unreachable_peers"] == 1
    finally:
        admin.close()
        c1.server.shutdown()
        c2.server.shutdown()


def test_registry_arbiter_without_a_key_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="REST arbiter and needs 'arbiter_key'"):
        _node("C1", {}, "http://127.0.0.1:9")
