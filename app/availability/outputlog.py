"""A producer's output log and a consumer's view of a DPC stream.

``OutputLog`` is what a host keeps per output stream (upstream backup: stable rows stay until
every consumer acknowledged them). A consumer reads it sequentially; when it switches to another
replica it resynchronises by key instead: "every stable row after the last one I hold, then your
current tentative suffix", which means the same at every replica because stable output is
identical across replicas (see tuples.py).

``StreamView`` applies a stream's messages at the consumer: stable rows accumulate, tentative
rows sit in a suffix that UNDO discards, and it counts what a report needs (tentative rows,
corrections, duplicates, when each row was first seen).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.availability.tuples import Key, Kind, Message, Row


class OutputLog:
    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._first_seq = 0
        self.suffix: list[Row] = []
        self.boundary: int | None = None
        self.acks: dict[str, int] = {}

    @property
    def next_seq(self) -> int:
        return self._first_seq + len(self._messages)

    @property
    def first_seq(self) -> int:
        return self._first_seq

    def append(self, messages: list[Message]) -> None:
        for message in messages:
            if message.kind is Kind.TENTATIVE:
                assert message.row is not None
                self.suffix.append(message.row)
            elif message.kind in (Kind.UNDO, Kind.STABLE):
                self.suffix.clear()
            elif message.kind is Kind.BOUNDARY:
                self.boundary = message.stime
            self._messages.append(message)

    def read(
        self, from_seq: int, limit: int | None = None, *, after: Key | None = None
    ) -> tuple[list[Message], int]:
        """Messages from position ``from_seq``; with ``after`` (the key of the last stable row
        the reader holds), rows at or before it are left out: a consumer that switched to a
        replica that was behind it gets that replica's stream from where the consumer is,
        never a row twice (Borealis: the downstream says where it is, the upstream sends
        from there)."""
        if from_seq < self._first_seq:
            raise KeyError(
                f"output log: position {from_seq} was trimmed (first kept: {self._first_seq})"
            )
        start = from_seq - self._first_seq
        end = len(self._messages) if limit is None else min(len(self._messages), start + limit)
        messages = self._messages[start:end]
        if after is not None:
            messages = [
                m
                for m in messages
                if m.row is None or m.kind is Kind.TENTATIVE or m.row.key > after
            ]
        return messages, self._first_seq + end

    def resync(self, after: Key | None) -> tuple[list[Message], int]:
        """Stable rows after ``after``, the boundary, then the current tentative suffix."""
        out = [
            m
            for m in self._messages
            if m.kind is Kind.STABLE and m.row is not None and (after is None or m.row.key > after)
        ]
        if self.boundary is not None:
            out.append(Message.boundary(self.boundary))
        out.extend(Message.tentative(row) for row in self.suffix)
        return out, self.next_seq

    def register(self, consumer: str) -> None:
        """A consumer that will read this log: nothing is trimmed before it acknowledges.
        Consumers register before the first trim, or they could miss rows."""
        self.acks.setdefault(consumer, -(1 << 62))

    def ack(self, consumer: str, stime: int) -> None:
        """``consumer`` no longer needs stable rows below ``stime``; trim what all released."""
        self.acks[consumer] = max(self.acks.get(consumer, stime), stime)
        low = min(self.acks.values())
        drop = 0
        for message in self._messages:
            if message.kind in (Kind.STABLE, Kind.BOUNDARY) and message.stime < low:
                drop += 1
            else:
                break
        if drop:
            del self._messages[:drop]
            self._first_seq += drop

    def stable_rows(self) -> list[Row]:
        return [m.row for m in self._messages if m.kind is Kind.STABLE and m.row is not None]


@dataclass
class StreamView:
    stable: list[Row] = field(default_factory=list)
    tentative: list[Row] = field(default_factory=list)
    boundary: int | None = None
    tentative_total: int = 0
    corrections: int = 0
    undos: int = 0
    rec_dones: int = 0
    duplicates: int = 0
    correcting: bool = False
    # When each row key was first seen (stable or tentative), in the caller's clock.
    first_seen: dict[Key, float] = field(default_factory=dict)
    stable_seen: dict[Key, float] = field(default_factory=dict)

    @property
    def last_key(self) -> Key | None:
        return self.stable[-1].key if self.stable else None

    def apply(self, message: Message, now: float = 0.0) -> None:
        if message.kind is Kind.STABLE:
            assert message.row is not None
            row = message.row
            if self.last_key is not None and row.key <= self.last_key:
                self.duplicates += 1
                return
            if self.tentative:
                # A stable row without a prior UNDO replaces the tentative suffix up to it:
                # this happens only after a switch; a well-behaved SOutput sends UNDO first.
                self.tentative.clear()
            self.stable.append(row)
            if self.correcting:
                self.corrections += 1
            self.first_seen.setdefault(row.key, now)
            self.stable_seen[row.key] = now
        elif message.kind is Kind.TENTATIVE:
            assert message.row is not None
            if self.last_key is not None and message.row.key <= self.last_key:
                # From a replica behind this consumer: already superseded by a stable row.
                return
            self.tentative.append(message.row)
            self.tentative_total += 1
            self.first_seen.setdefault(message.row.key, now)
        elif message.kind is Kind.UNDO:
            self.undos += 1
            self.tentative.clear()
            self.correcting = True
        elif message.kind is Kind.REC_DONE:
            self.rec_dones += 1
            self.correcting = False
        elif message.kind is Kind.BOUNDARY and (
            self.boundary is None or message.stime > self.boundary
        ):
            self.boundary = message.stime

    def switch(self) -> None:
        """Reading from another replica now: its resync resends its own tentative suffix."""
        self.tentative.clear()
