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
  version (and replica) it came through;
- follows a DPC replica's companion stream (``<stream>.dpc``: every message the replica sent, in
  sending order, numbered by ``seq``) through ``follow``: TENTATIVE rows are held (what the
  application sees while no stable copy is reachable, Borealis's "process"), UNDO drops the
  held ones, the STABLE rows after an UNDO are counted as corrections and REC_DONE ends them
  ("correct"). Stable rows are only ever delivered from the stable log (``pull``), so a
  correction is delivered once, keyed like every stable row; a held tentative row whose bucket
  the stable log has since covered is superseded and dropped (after a switch to a replica that
  never went tentative, say).

Pure: no threads, clock or network. Whoever runs it (``spark_jobs.scenarios.partition``) feeds
it each replica's view (DPC state, reachability by the one failure detector, boundary) and a
``Link`` per replica to read through (and a ``CompanionLink`` for replicas that run DPC).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.availability.states import NodeState
from app.availability.tuples import Kind, Message
from app.availability.tuples import Row as DPCRow
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
class Sent:
    """One message of a DPC replica's companion stream, with its sequence number (the order the
    replica sent it in; a message read twice has the same one)."""

    seq: int
    message: Message


class CompanionLink(Protocol):
    """The consumer's reading end towards a DPC replica's companion stream."""

    def messages(self, after: int) -> Sequence[Sent]:
        """The messages numbered above ``after`` that the replica has sent (any order; more
        may follow)."""
        ...


@dataclass(frozen=True)
class Followed:
    """What one ``follow`` read changed: tentative rows newly held, UNDOs and the rows they
    dropped, corrections announced (their stable rows arrive through ``pull``), REC_DONEs."""

    tentative: tuple[DPCRow, ...] = ()
    undos: int = 0
    undone: int = 0
    corrections: int = 0
    rec_dones: int = 0


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
    # Stable-log buckets per companion stime unit: a row of stime s sits in bucket s // bucket_ms.
    bucket_ms: int = 1000
    # Per replica, its unresolved tentative rows in arrival order (only the current replica's
    # are in the view: the others' are their guesses, kept so that a switch back goes on from
    # where their companion was left).
    held: dict[str, list[DPCRow]] = field(default_factory=dict)
    # Per replica, the last companion message applied.
    companion_seq: dict[str, int] = field(default_factory=dict)
    # Per replica: inside corrections (an UNDO seen, no REC_DONE yet).
    correcting: dict[str, bool] = field(default_factory=dict)
    tentative_received: int = 0
    undos: int = 0
    undone: int = 0
    # Held rows dropped because the stable log covered their bucket without an UNDO.
    superseded: int = 0
    corrections: int = 0
    rec_dones: int = 0

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
        self._supersede()
        return fresh

    def follow(self, links: Mapping[str, CompanionLink]) -> Followed:
        """Apply the current replica's companion messages not yet applied, in ``seq`` order.

        A replica read for the first time has its whole history applied: an UNDO there drops
        the tentative rows before it, so what stays held is exactly the replica's unresolved
        tentative suffix. Tentative rows in buckets the consumer already has stable are stale
        and never held."""
        name = self.current
        after = self.companion_seq.get(name, -1)
        fresh = sorted((s for s in links[name].messages(after) if s.seq > after), key=_seq)
        held = self.held.setdefault(name, [])
        tentative: list[DPCRow] = []
        undos = undone = corrections = rec_dones = 0
        for sent in fresh:
            if sent.seq <= after:
                continue  # read twice in one answer
            after = sent.seq
            message = sent.message
            if message.kind is Kind.TENTATIVE:
                assert message.row is not None
                if self._bucket(message.row) >= self.next_bucket:
                    held.append(message.row)
                    tentative.append(message.row)
            elif message.kind is Kind.UNDO:
                undos += 1
                undone += len(held)
                held.clear()
                self.correcting[name] = True
            elif message.kind is Kind.STABLE and self.correcting.get(name):
                corrections += 1
            elif message.kind is Kind.REC_DONE:
                self.correcting[name] = False
                rec_dones += 1
        self.companion_seq[name] = after
        self.tentative_received += len(tentative)
        self.undos += undos
        self.undone += undone
        self.corrections += corrections
        self.rec_dones += rec_dones
        return Followed(tuple(tentative), undos, undone, corrections, rec_dones)

    @property
    def tentative(self) -> list[DPCRow]:
        """The tentative rows the application holds now: the current replica's."""
        return list(self.held.get(self.current, ()))

    def view(self) -> list[Row | DPCRow]:
        """What the application holds now: the stable output, then the held tentative rows."""
        return [*self.output(), *self.tentative]

    def _bucket(self, row: DPCRow) -> int:
        return row.stime // self.bucket_ms

    def _supersede(self) -> None:
        for name, rows in self.held.items():
            kept = [r for r in rows if self._bucket(r) >= self.next_bucket]
            if name == self.current:
                self.superseded += len(rows) - len(kept)
            self.held[name] = kept

    def output(self) -> list[Row]:
        return sorted(d.row for d in self.delivered.values())

    def rows_by_version(self) -> dict[str, int]:
        """Delivered rows per "<replica> v<version>"."""
        counts: dict[str, int] = {}
        for d in self.delivered.values():
            label = f"{d.replica} v{d.version}"
            counts[label] = counts.get(label, 0) + 1
        return counts


def _seq(sent: Sent) -> int:
    return sent.seq
