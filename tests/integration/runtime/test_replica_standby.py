"""A passive standby follows its replica when the market moves it, and failover restores it.

A runs the fragment (the primary); the replica sits on B, then moves to C. The standby is the
primary's checkpoint in the replica host's Flight inbox. Input is published three buckets at a
time in one append (the fragment plans at most three per micro-batch), so A and a host restoring
an older checkpoint plan the same batches: a re-run batch is then the same batch, which SOutput
drops by its id. Every run ends compared with the failure-free reference.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from app.participant.bpm_decisions import BpmDecisions
from app.participant.client import FedloadClient
from app.participant.command import RegistryLoads
from app.participant.node import Agent, MoveEvent
from app.settings import Settings
from spark_jobs.runtime import (
    AlreadyShipped,
    InMemoryCoordinator,
    MoveAborted,
    PackedCheckpoint,
    StreamClient,
    TransferError,
    relocate,
)
from spark_jobs.runtime.registry_coordinator import RegistryCoordinator
from spark_jobs.runtime.standby import STANDBY_SHIPMENT, StandbyKeeper
from spark_jobs.scenarios.inprocess_mover import InProcessMover
from tests.integration.runtime.conftest import (
    BUCKET,
    GENERATOR,
    declare,
    ports_fragment,
    rows,
    run_reference,
)
from tests.support.failures import declare_failed
from tests.support.federation import register_participants, sign_contract
from tests.support.live_server import serve

pytestmark = pytest.mark.spark

SECONDS = 15
FIRST = int(GENERATOR.epoch.timestamp() // BUCKET)
# The registry tracks a replica apart from its primary; the in-memory coordinator does so by name.
REPLICA = "A.frag/replica"


def publish_atomically(client: StreamClient, stream: str, lo: int, hi: int) -> None:
    """Seconds [lo, hi) and their BOUNDARY in one append: a trigger sees all of them or none."""
    client.append(stream, GENERATOR.seconds(lo, hi), boundary=FIRST + hi)


def reference(make_runtime, servers) -> list[tuple]:
    return run_reference(
        make_runtime,
        servers,
        lambda source: publish_atomically(source, "conns-ref", 0, SECONDS),
    )


def wait_for(condition, what: str, limit_s: float = 120.0) -> None:
    # A bound against a hung test, not a timing assertion: the value is checked after.
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_replica_move_ships_the_latest_checkpoint_and_failover_from_it_is_exact(
    servers, make_runtime
):
    expected = reference(make_runtime, servers)
    declare(servers["source"], "conns").close()
    declare(servers["home"], "out").close()
    spec = ports_fragment("A.frag", servers["source"], "conns", servers["home"], "out")
    a, b, c = make_runtime("A"), make_runtime("B"), make_runtime("C")
    coordinator = InMemoryCoordinator({"A.frag": "A", REPLICA: "B"})
    keeper = StandbyKeeper(spec, a, b, every_s=0.3)
    keeper.hold()
    with declare(servers["source"]) as source:
        publish_atomically(source, "conns", 0, 3)
        a.start(spec, epoch=0).processAllAvailable()
        keeper.start()
        try:
            wait_for(lambda: any(s.host == "B" for s in keeper.shipments), "a shipment to B")
            publish_atomically(source, "conns", 3, 6)
            a.query("A.frag").processAllAvailable()

            moved = keeper.move(c, coordinator, record=REPLICA)
            shipped_after_move = len(keeper.shipments)
            wait_for(
                lambda: any(s.host == "C" for s in keeper.shipments[shipped_after_move:]),
                "a periodic shipment to C",
            )
        finally:
            keeper.stop()
        # The copy C got is the primary's latest (every bucket published so far), not B's.
        assert (moved.shipment.host, moved.shipment.offset) == ("C", FIRST + 6)
        assert (coordinator.host(REPLICA), coordinator.status(moved.movement_id)) == (
            "C",
            "committed",
        )
        assert (coordinator.host("A.frag"), keeper.replica) == ("A", c)
        with pytest.raises(TransferError):
            b.server.take_checkpoint("A.frag", STANDBY_SHIPMENT)  # B's copy is gone
        assert {s.host for s in keeper.shipments[shipped_after_move:]} == {"C"}
        # The move shipped C the whole checkpoint; the periodic shipments after it only what
        # changed, applied to C's copy (the failover below restores that copy).
        assert not moved.shipment.delta and moved.shipment.bytes == moved.shipment.full_bytes
        periodic = keeper.shipments[shipped_after_move:]
        assert periodic and all(s.delta and s.bytes < s.full_bytes for s in periodic)

        # A goes on past the standby's checkpoint, then dies with its disk.
        publish_atomically(source, "conns", 6, 9)
        a.query("A.frag").processAllAvailable()
        acks = servers["source"].log.info("conns")["acks"]
        assert acks["A.frag"] == FIRST + 9 and acks["A.frag.standby"] == FIRST + 6
        written_by_a = servers["home"].log.info("out")["written"]
        a.discard("A.frag")

        failover = relocate(
            spec,
            AlreadyShipped("A", STANDBY_SHIPMENT),
            c,
            coordinator=coordinator,
            reason="failover",
        )
        assert (coordinator.host("A.frag"), failover.epoch) == ("C", 1)
        c.query("A.frag").processAllAvailable()
        # C re-ran the batches A had written after the standby's checkpoint: each was dropped.
        assert c.sink("A.frag").skipped >= 1
        publish_atomically(source, "conns", 9, 12)
        c.query("A.frag").processAllAvailable()
        publish_atomically(source, "conns", 12, SECONDS)
        c.query("A.frag").processAllAvailable()
        c.stop("A.frag")
    written = servers["home"].log.info("out")["written"]
    assert set(written_by_a) < set(written)
    assert rows(servers["home"].log.table("out")) == expected


def test_failed_ship_aborts_the_move_and_the_old_standby_stays(servers, make_runtime):
    declare(servers["source"], "conns").close()
    declare(servers["home"], "out").close()
    spec = ports_fragment("A.frag", servers["source"], "conns", servers["home"], "out")
    a, b, c = make_runtime("A"), make_runtime("B"), make_runtime("C")
    coordinator = InMemoryCoordinator({"A.frag": "A", REPLICA: "B"})
    keeper = StandbyKeeper(spec, a, b)
    keeper.hold()
    with declare(servers["source"]) as source:
        publish_atomically(source, "conns", 0, 3)
        a.start(spec, epoch=0).processAllAvailable()
        at_b = keeper.ship_and_acknowledge()
        assert at_b is not None and (at_b.host, at_b.offset) == ("B", FIRST + 3)

        c.server.shutdown()  # the new host went away before the checkpoint reached it
        with pytest.raises(MoveAborted, match="unavailable"):
            keeper.move(c, coordinator, record=REPLICA)
        assert (coordinator.host(REPLICA), coordinator.status(1)) == ("B", "aborted")
        assert keeper.replica is b

        # B still holds the very checkpoint shipped before, and keeps receiving the new ones.
        assert b.server.take_checkpoint("A.frag", STANDBY_SHIPMENT).sha256 == at_b.sha256
        publish_atomically(source, "conns", 3, 6)
        a.query("A.frag").processAllAvailable()
        again = keeper.ship_and_acknowledge()
        assert again is not None and (again.host, again.offset) == ("B", FIRST + 6)
        assert b.server.take_checkpoint("A.frag", STANDBY_SHIPMENT).sha256 == again.sha256
        a.stop("A.frag")


ADMIN = "replica-standby-admin-key"
CAPACITY = {"A": 35.0, "B": 35.0, "D": 100.0}
ONLINE = {name: "online" for name in CAPACITY}


@pytest.fixture
def registry(db_url: str) -> Iterator[dict[str, FedloadClient]]:
    """A owns ``frag`` (30 load units) with its replica on B; B, as loaded as A, sheds the
    replica to D, the one partner left that hosts replicas and holds no copy."""
    with serve(Settings(database_url=db_url, admin_key=ADMIN, environment="test")) as url:
        out = register_participants(url, ADMIN, CAPACITY)
        sign_contract(out, "A", "B", 0.10, hosting=True)
        out["A"]._call("POST", "/v1/tasks", json={"name": "A.frag", "load": 30})
        out["A"]._call("POST", "/v1/tasks/A.frag/replicas", json={"k": 1})
        sign_contract(out, "B", "D", 0.08, hosting=True)
        # D backs A up too (after the placement, which had only B): the backup that notices
        # A's failure must hold a replica-hosting contract with the owner.
        sign_contract(out, "A", "D", 0.10, hosting=True)
        yield out
        for client in out.values():
            client.close()


def agent(name: str, client: FedloadClient, mover: InProcessMover, moves: list[MoveEvent]) -> Agent:
    decisions = BpmDecisions.for_model({"kind": "mm1"}, CAPACITY[name], 0.01)
    return Agent(name, client, decisions, RegistryLoads(client), mover, on_move=moves.append)


def trade_the_replica(registry: dict, runtimes: dict, spec, keeper: StandbyKeeper) -> Agent:
    """B offers the replica to D; D's agent accepts and its InProcessMover moves the standby."""
    mover = InProcessMover(registry, runtimes, {"A.frag": spec}, {"A.frag": keeper})
    moves: list[MoveEvent] = []
    assert [r["host"] for r in registry["admin"].replicas()] == ["B"]
    agent("B", registry["B"], mover, moves).tick(0.0, liveness=ONLINE)
    (offer,) = registry["B"].offers()
    assert (offer["to"], offer["replicas"]) == ("D", ["A.frag"])
    d = agent("D", registry["D"], mover, moves)
    d.tick(0.0, liveness=ONLINE)
    return d


# The registry is not what these two test (tests/integration/agent runs both backends): SQLite
# alone keeps the Spark runs to one each.
on_sqlite = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@on_sqlite
def test_agent_moves_the_standby_through_the_registry_and_fails_over_to_it(
    servers, make_runtime, registry, db_url
):
    expected = reference(make_runtime, servers)
    declare(servers["source"], "conns").close()
    declare(servers["home"], "out").close()
    spec = ports_fragment("A.frag", servers["source"], "conns", servers["home"], "out")
    runtimes = {n: make_runtime(n) for n in ("A", "B", "D")}
    a, d = runtimes["A"], runtimes["D"]
    keeper = StandbyKeeper(spec, a, runtimes["B"])
    keeper.hold()
    with declare(servers["source"]) as source:
        publish_atomically(source, "conns", 0, 3)
        a.start(spec, epoch=0).processAllAvailable()
        assert keeper.ship_and_acknowledge() is not None
        publish_atomically(source, "conns", 3, 6)
        a.query("A.frag").processAllAvailable()

        taker = trade_the_replica(registry, runtimes, spec, keeper)
        assert taker.state.errors == []
        (movement,) = registry["D"].movements()
        assert (movement["status"], movement["replica"]) == ("committed", True)
        assert [r["host"] for r in registry["admin"].replicas()] == ["D"]
        assert (keeper.replica, keeper.shipments[-1].offset) == (d, FIRST + 6)
        with pytest.raises(TransferError):
            runtimes["B"].server.take_checkpoint("A.frag", STANDBY_SHIPMENT)

        # A dies; D, the replica's host, notices and takes over from the standby it received.
        a.discard("A.frag")
        # The registry takes a failover only from a host it sees failed: A's heartbeats stopped
        # (this test runs no agent heartbeat loop: its last one is dated an hour back).
        declare_failed(db_url, "A")
        failover = relocate(
            spec,
            AlreadyShipped("A", STANDBY_SHIPMENT),
            d,
            coordinator=RegistryCoordinator({"D": registry["D"]}),
            reason="failover",
        )
        assert (registry["A"].lease("A.frag")["host"], failover.epoch) == ("D", 1)
        assert registry["admin"].replicas() == []  # the replica became the primary
        for lo in range(6, SECONDS, 3):
            publish_atomically(source, "conns", lo, min(lo + 3, SECONDS))
            d.query("A.frag").processAllAvailable()
        d.stop("A.frag")
    assert rows(servers["home"].log.table("out")) == expected


@on_sqlite
def test_agent_aborts_the_replica_move_in_the_registry_when_the_standby_cannot_follow(
    servers, make_runtime, registry
):
    declare(servers["source"], "conns").close()
    declare(servers["home"], "out").close()
    spec = ports_fragment("A.frag", servers["source"], "conns", servers["home"], "out")
    runtimes = {n: make_runtime(n) for n in ("A", "B", "D")}
    keeper = StandbyKeeper(spec, runtimes["A"], runtimes["B"])
    keeper.hold()
    with declare(servers["source"]) as source:
        publish_atomically(source, "conns", 0, 3)
        runtimes["A"].start(spec, epoch=0).processAllAvailable()
        at_b = keeper.ship_and_acknowledge()
        assert at_b is not None
        runtimes["D"].server.shutdown()

        taker = trade_the_replica(registry, runtimes, spec, keeper)
        (error,) = taker.state.errors
        assert error.startswith("move A.frag: standby of A.frag to D aborted")
        (movement,) = registry["D"].movements()
        assert (movement["status"], movement["replica"]) == ("aborted", True)
        assert [r["host"] for r in registry["admin"].replicas()] == ["B"]
        assert keeper.replica is runtimes["B"]
        assert (
            runtimes["B"].server.take_checkpoint("A.frag", STANDBY_SHIPMENT).sha256 == at_b.sha256
        )
        runtimes["A"].stop("A.frag")


def test_a_standby_copy_is_dropped_over_flight_so_its_host_may_be_another_process(servers):
    home = servers["home"]
    packed = PackedCheckpoint.of(b"a checkpoint nobody will restore")
    with StreamClient(home.location) as client:
        client.ship_checkpoint("A.frag", STANDBY_SHIPMENT, packed)
        assert client.discard_checkpoint("A.frag", STANDBY_SHIPMENT) is True
        assert client.discard_checkpoint("A.frag", STANDBY_SHIPMENT) is False
    with pytest.raises(TransferError, match=r"no verified checkpoint of A\.frag"):
        home.take_checkpoint("A.frag", STANDBY_SHIPMENT)
