"""The one consumer of a replicated stream (app.availability.consumer): choice, background
switch, resume point, versions. Pure: fake links, no clock."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from app.availability.consumer import ReplicaConsumer, ReplicaStatus, Row
from app.availability.states import NodeState

STABLE, UP, STAB = NodeState.STABLE, NodeState.UP_FAILURE, NodeState.STABILIZATION


class FakeLog:
    """A replica's log: rows per bucket, complete below ``boundary_at``."""

    def __init__(self, rows: dict[int, list[Row]], boundary_at: int | None) -> None:
        self.rows = rows
        self.boundary_at = boundary_at
        self.reads: list[tuple[int, int]] = []

    def boundary(self) -> int | None:
        return self.boundary_at

    def read(self, lo: int, hi: int) -> Sequence[Row]:
        self.reads.append((lo, hi))
        return [r for b in range(lo, hi) for r in self.rows.get(b, [])]


def same_rows(upto: int) -> dict[int, list[Row]]:
    # Deterministic replicas: the same rows per bucket.
    return {b: [(b, "k1"), (b, "k2")] for b in range(upto)}


def status(name: str, state: NodeState | None, reachable: bool = True, boundary: int | None = None):
    return ReplicaStatus(name, state, reachable, boundary)


def test_reads_the_primary_first_while_both_are_stable() -> None:
    c = ReplicaConsumer("X.out", ("B", "R"), next_bucket=0)
    assert c.choose([status("B", STABLE, boundary=3), status("R", STABLE, boundary=3)], 1.0) is None
    logs = {"B": FakeLog(same_rows(10), 3), "R": FakeLog(same_rows(10), 3)}
    assert c.pull(logs) == 6
    assert c.next_bucket == 3
    assert logs["R"].reads == []
    assert c.rows_by_version() == {"B v0": 6}


def test_an_unreachable_replica_is_left_at_once_and_reading_resumes_at_the_next_bucket() -> None:
    c = ReplicaConsumer("X.out", ("B", "R"), next_bucket=0)
    logs = {"B": FakeLog(same_rows(10), 4), "R": FakeLog(same_rows(10), 2)}
    c.pull(logs)
    # B cut off; R is behind B, but B cannot be read at all: switch now, resume at 4.
    switch = c.choose([status("B", STABLE, reachable=False), status("R", STABLE, boundary=2)], 5.0)
    assert switch is not None and (switch.from_replica, switch.to_replica) == ("B", "R")
    assert switch.version == 1
    assert c.switches[0][1] == 4
    assert c.pull(logs) == 0  # R has not reached bucket 4 yet: nothing, no re-read
    logs["R"].boundary_at = 7
    assert c.pull(logs) == 6
    assert logs["R"].reads == [(4, 7)]
    assert not c.duplicates
    assert c.output() == sorted(r for b in range(7) for r in same_rows(10)[b])
    assert c.rows_by_version() == {"B v0": 8, "R v1": 6}


def test_stays_with_the_replica_it_switched_to_after_the_heal() -> None:
    c = ReplicaConsumer("X.out", ("B", "R"), next_bucket=0)
    c.choose([status("B", STABLE, reachable=False), status("R", STABLE, boundary=0)], 1.0)
    assert c.current == "R"
    # B answers again, as good as R: a switch costs a resynchronisation, so stay.
    assert c.choose([status("B", STABLE, boundary=9), status("R", STABLE, boundary=9)], 2.0) is None
    assert c.current == "R" and c.version == 1


def test_prefers_stable_over_up_failure_over_stabilization() -> None:
    c = ReplicaConsumer("X.out", ("B", "R", "S"), next_bucket=0)
    views = [status("B", STAB, boundary=5), status("R", UP, boundary=5), status("S", STAB)]
    switch = c.choose(views, 1.0)
    assert switch is not None and switch.to_replica == "R"
    views = [
        status("B", STAB, boundary=5),
        status("R", UP, boundary=5),
        status("S", STABLE, boundary=5),
    ]
    switch = c.choose(views, 2.0)
    assert switch is not None and switch.to_replica == "S"


def test_a_better_replica_that_is_behind_is_switched_to_in_the_background() -> None:
    c = ReplicaConsumer("X.out", ("B", "R"), next_bucket=0)
    logs = {"B": FakeLog(same_rows(10), 6), "R": FakeLog(same_rows(10), 2)}
    c.pull(logs)
    # B went UP_FAILURE; R is STABLE but its log is behind what the consumer has: wait.
    views = [status("B", UP, boundary=6), status("R", STABLE, boundary=2)]
    assert c.choose(views, 1.0) is None
    assert c.deferred == 1 and c.current == "B"
    views = [status("B", UP, boundary=7), status("R", STABLE, boundary=6)]
    switch = c.choose(views, 2.0)
    assert switch is not None and switch.to_replica == "R"
    assert c.switches[-1][1] == 6


def test_nothing_reachable_means_no_switch() -> None:
    c = ReplicaConsumer("X.out", ("B", "R"), next_bucket=0)
    views = [status("B", STABLE, reachable=False), status("R", STABLE, reachable=False)]
    assert c.choose(views, 1.0) is None
    assert c.current == "B"


def test_duplicates_are_dropped_and_counted() -> None:
    c = ReplicaConsumer("X.out", ("B",), next_bucket=0, key=lambda r: r[:2])
    log = FakeLog({0: [(0, "a", 1), (0, "a", 2)]}, 1)
    assert c.pull({"B": log}) == 1
    assert c.duplicates == [(0, "a")]


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one replica"):
        ReplicaConsumer("X.out", (), next_bucket=0)
    with pytest.raises(ValueError, match="repeat"):
        ReplicaConsumer("X.out", ("B", "B"), next_bucket=0)
    c = ReplicaConsumer("X.out", ("B",), next_bucket=0)
    with pytest.raises(ValueError, match="unknown replicas"):
        c.choose([status("Z", STABLE)], 1.0)
