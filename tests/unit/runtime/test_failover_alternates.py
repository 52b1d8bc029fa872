"""A passive standby and an upstream backup hold their inputs' alternate logs too.

The running fragment acknowledges at its inputs' alternates as well as at their primaries
(SUnion), so an alternate held by nobody else trims past what a restored standby or a replayed
backup reads again, and those are the logs read when the primary is cut off at the failover.
Real Flight endpoints (in-process); no Spark: the standby's checkpoint snapshot is stubbed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.participant.ports import TaskRecord
from spark_jobs.fragments import CONNECTION_SCHEMA
from spark_jobs.runtime import failover
from spark_jobs.runtime.failover import AgentFailover, _Shipping
from spark_jobs.runtime.host import FragmentSpec, StreamRef
from spark_jobs.runtime.transport import HOLD_ALL, StreamClient, StreamServer
from spark_jobs.scenarios.processes import free_port

TASK = "A.frag"
STANDBY = f"{TASK}.standby"
BACKUP = f"{TASK}.backup"


@pytest.fixture
def logs() -> Iterator[dict[str, Any]]:
    """The input's primary log, an alternate that answers, the fragment's output log, and the
    address of a second alternate that does not answer yet (``start_late`` brings it up)."""
    made = {name: StreamServer() for name in ("primary", "alternate", "output")}
    late_port = free_port()
    started: list[StreamServer] = []

    def start_late() -> StreamServer:
        server = StreamServer(port=late_port)
        _declare(server, "in")
        started.append(server)
        return server

    for name in ("primary", "alternate"):
        _declare(made[name], "in")
    _declare(made["output"], "out")
    try:
        yield {**made, "late": f"grpc://127.0.0.1:{late_port}", "start_late": start_late}
    finally:
        for server in [*made.values(), *started]:
            server.shutdown()


def _declare(server: StreamServer, stream: str) -> None:
    with StreamClient(server.location) as client:
        client.declare(stream, 1.0)


def _acks(location: str) -> dict[str, int]:
    with StreamClient(location) as client:
        acks: dict[str, int] = client.info("in")["acks"]
        return acks


def _spec(logs: dict[str, Any]) -> FragmentSpec:
    alternates = (StreamRef(logs["alternate"].location, "in"), StreamRef(logs["late"], "in"))
    return FragmentSpec(
        name=TASK,
        build=lambda df: df,
        input_schema=CONNECTION_SCHEMA,
        inputs=(StreamRef(logs["primary"].location, "in", alternates),),
        output=StreamRef(logs["output"].location, "out"),
    )


def _agent(spec: FragmentSpec, tmp_path: Path) -> AgentFailover:
    host = SimpleNamespace(
        name="B", data_dir=tmp_path, spec_of=lambda record: spec, runtime=None, bucket_seconds=1.0
    )
    # ``active`` given: these tests keep no active replica, and build none.
    return AgentFailover(host=host, active=SimpleNamespace())  # type: ignore[arg-type]


# No window parameter: a span of one bucket whatever the bucket width.
RECORD = TaskRecord(name=TASK, owner="A", host="A", load=1.0)


class _Shipper:
    """Records each shipment and which logs held the standby's consumer at that moment."""

    def __init__(self, locations: list[str]) -> None:
        self.locations = locations
        self.holding_at_ship: list[list[bool]] = []

    def ship(self, location: str, snapshot: Any) -> None:
        self.holding_at_ship.append([STANDBY in _acks(where) for where in self.locations])


def test_a_standby_holds_and_acknowledges_every_alternate_at_the_shipped_offset(
    logs, tmp_path, monkeypatch
):
    spec = _spec(logs)
    agent = _agent(spec, tmp_path)
    primary, alternate, late = logs["primary"].location, logs["alternate"].location, logs["late"]
    shipper = _Shipper([primary, alternate])
    state = _Shipping(shipper, "C", "grpc://holder", record=RECORD, spec=spec)  # type: ignore[arg-type]
    position = {"offset": 9}
    monkeypatch.setattr(
        failover, "snapshot_running", lambda runtime, name: SimpleNamespace(tree=None)
    )
    monkeypatch.setattr(failover, "committed_offset", lambda tree: (3, position["offset"]))

    agent._ship(RECORD, state)

    # Held before the copy went (its restore replays from its offset), acknowledged after.
    assert shipper.holding_at_ship == [[True, True]]
    assert _acks(primary)[STANDBY] == 9 and _acks(alternate)[STANDBY] == 9
    # The alternate that did not answer is noted and passed over: the rest went on.
    assert any(late in error for error in agent.errors)
    assert state.held == {(primary, "in"), (alternate, "in")}

    logs["start_late"]()
    position["offset"] = 12
    agent._ship(RECORD, state)

    # Held on the next period, then acknowledged at the same offset as the others.
    assert {where: _acks(where)[STANDBY] for where in (primary, alternate, late)} == {
        primary: 12,
        alternate: 12,
        late: 12,
    }
    assert (late, "in") in state.held


def test_an_upstream_backup_keeps_every_alternate_from_the_same_point(logs, tmp_path):
    spec = _spec(logs)
    agent = _agent(spec, tmp_path)
    primary, alternate, late = logs["primary"].location, logs["alternate"].location, logs["late"]
    with StreamClient(primary) as client:
        client.ack("in", TASK, 10)  # the fragment consumed every bucket below 10
    with StreamClient(logs["output"].location) as client:
        client.advance("out", 8)  # and emitted every window ending below bucket 8
    # backup_point(10, 8, span 1): one window before the output's boundary.
    expected = 7

    agent._keep_backup(RECORD)

    assert _acks(primary)[BACKUP] == expected and _acks(alternate)[BACKUP] == expected
    assert any(late in error for error in agent.errors)
    assert (TASK, late, "in") not in agent._backups_held

    logs["start_late"]()
    agent._keep_backup(RECORD)

    assert _acks(late)[BACKUP] == expected
    assert (TASK, late, "in") in agent._backups_held


def test_an_unreachable_primary_still_leaves_its_alternates_held(logs, tmp_path):
    """The primary cut off is when alternates matter: they are held even without a point."""
    cut = f"grpc://127.0.0.1:{free_port()}"
    spec = _spec(logs)
    ref = spec.inputs[0]
    spec = dataclasses.replace(spec, inputs=(StreamRef(cut, "in", ref.alternates),))
    agent = _agent(spec, tmp_path)

    agent._keep_backup(RECORD)

    # Held from everything it still has; no acknowledgement without the primary's point.
    assert _acks(logs["alternate"].location)[BACKUP] == HOLD_ALL
    assert any(error.startswith(f"upstream backup of {TASK}") for error in agent.errors)
