"""One consumer of a replicated upstream stream (Borealis SIGMOD 2005, 4.3), transport injected.

A fragment's output may be produced by several replicas (the primary host and active replicas on
other participants), each writing the same stable rows to its own log. A consumer reads complete
buckets (below the stream's BOUNDARY), in order, from one replica at a time and:

- prefers a STABLE replica, then UP_FAILURE, then STABILIZATION; never an unreachable one
  (``upstream.UpstreamSelector``: it also keeps the current replica while no other is strictly
  better, so after a partition heals the consumer stays where it is);
- switches *in the background*: a switch to a strictly better replica while the current one is
  still reachable waits until the candidate's log covers the consumer's next bucket, so the
  consumer never stalls on a replica that is behind (a switch away from an unreachable replica
  happens at once: there is nothing to wait for);
- resumes at its own next bucket on the new replica: replicas of a deterministic fragment over
  SUnion-serialised input write the same rows per bucket, so neither duplicates nor gaps;
- carries stream versions: every switch opens a new version, and each delivered row records the
  version (and replica) it came through.

Pure: no threads, clock or network. Whoever runs it (``spark_jobs.scenarios.partition``) feeds
it each replica's view (DPC state, reachability by the one failure detector, boundary) and a
``Link`` per replica to read through.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.availability.states import NodeState
from app.availability.upstream import ReplicaView, Switch, UpstreamSelector

Row = tuple[Any, ...]


class Link(Protocol):
    """The consumer's reading end towards one replica's log of the stream."""

    def boundary(self) -> int | None:
        """The first bucket not yet complete in the replica's log (None: nothing yet)."""
        ...

    def read(self, lo: int, hi: int) -> Sequence[Row]:
        """The rows of buckets [lo, hi)."""
        ...


@dataclass(frozen=True)
class ReplicaStatus:
    """What the consumer knows of one replica now: its DPC state (None: unknown), whether the
    failure detector has it failed, and its log's boundary (None: unknown)."""

    name: str
    state: NodeState | None
    reachable: bool
    boundary: int | None = None


@dataclass(frozen=True)
class Delivered:
    row: Row
    replica: str
    version: int


@dataclass
class ReplicaConsumer:
    stream: str
    # In preference order for ties (the primary first).
    replicas: tuple[str, ...]
    # The first bucket to read (later: one past the last bucket delivered).
    next_bucket: int
    # A row's identity: delivering a key twice is a duplicate, counted and dropped.
    key: Callable[[Row], Hashable] = lambda row: row
    selector: UpstreamSelector = field(init=False)
    delivered: dict[Hashable, Delivered] = field(default_factory=dict)
    duplicates: list[Hashable] = field(default_factory=list)
    # Each switch with where the consumer resumed on the new replica.
    switches: list[tuple[Switch, int]] = field(default_factory=list)
    # Switches deferred because the better replica was behind (counted, for reports).
    deferred: int = 0

    def __post_init__(self) -> None:
        if not self.replicas:
            raise ValueError("ReplicaConsumer.replicas: name at least one replica")
        if len(set(self.replicas)) != len(self.replicas):
            raise ValueError(f"ReplicaConsumer.replicas: names repeat in {self.replicas}")
        self.selector = UpstreamSelector(self.stream, self.replicas, current=self.replicas[0])

    @property
    def current(self) -> str:
        assert self.selector.current is not None
        return self.selector.current

    @property
    def version(self) -> int:
        return self.selector.version

    def choose(self, statuses: Sequence[ReplicaStatus], now: float) -> Switch | None:
        """Switch now if the rule says so (see the module docstring); None to stay."""
        by_name = {s.name: s for s in statuses}
        unknown = set(by_name) - set(self.replicas)
        if unknown:
            raise ValueError(f"{self.stream}: statuses of unknown replicas {sorted(unknown)}")
        views = [ReplicaView(s.name, s.state, s.reachable) for s in statuses]
        best = self.selector.best(views)
        if best is None or best == self.current:
            return None
        here = by_name.get(self.current)
        current_usable = here is not None and here.reachable and here.state is not None
        candidate = by_name[best]
        if current_usable and (candidate.boundary is None or candidate.boundary < self.next_bucket):
            # Better but behind: keep reading here, look again next time.
            self.deferred += 1
            return None
        switch = self.selector.decide(views, now)
        if switch is not None:
            self.switches.append((switch, self.next_bucket))
        return switch

    def pull(self, links: Mapping[str, Link]) -> int:
        """Read the complete buckets from ``next_bucket`` on from the current replica; the
        number of rows delivered (duplicates dropped)."""
        link = links[self.current]
        boundary = link.boundary()
        if boundary is None or boundary <= self.next_bucket:
            return 0
        fresh = 0
        for row in link.read(self.next_bucket, boundary):
            key = self.key(row)
            if key in self.delivered:
                self.duplicates.append(key)
                continue
            self.delivered[key] = Delivered(row, self.current, self.version)
            fresh += 1
        self.next_bucket = boundary
        return fresh

    def output(self) -> list[Row]:
        return sorted(d.row for d in self.delivered.values())

    def rows_by_version(self) -> dict[str, int]:
        """Delivered rows per "<replica> v<version>"."""
        counts: dict[str, int] = {}
        for d in self.delivered.values():
            label = f"{d.replica} v{d.version}"
            counts[label] = counts.get(label, 0) + 1
        return counts
