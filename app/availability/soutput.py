"""SOutput: the stabilising end of a DPC node (Borealis SIGMOD 2005, section 4.4).

It remembers the key of the last STABLE row it sent and how much tentative output followed.
When the node reconciles it sends UNDO (discard the tentative suffix), then the corrections (the
rows the redo produces), dropping every regenerated row the consumer already holds stably, and
finally REC_DONE. A restored checkpoint makes the node recompute rows it had sent before the
failure: those are the duplicates dropped here, so downstream sees each stable row exactly once.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.availability.tuples import Key, Kind, Message, Row


class SOutput:
    def __init__(self) -> None:
        self.last_stable: Key | None = None
        self.tentative_pending = 0
        self.stable_sent = 0
        self.tentative_sent = 0
        self.duplicates_dropped = 0
        self.corrections_sent = 0
        self.undos_sent = 0
        self.correcting = False

    def stable(self, rows: Iterable[Row]) -> list[Message]:
        out: list[Message] = []
        for row in rows:
            if self.last_stable is not None and row.key <= self.last_stable:
                self.duplicates_dropped += 1
                continue
            if self.tentative_pending:
                # Never a stable row on top of tentative ones without an UNDO first: the
                # consumer would keep the tentative rows forever.
                raise RuntimeError("SOutput: stable output while tentative rows are pending")
            self.last_stable = row.key
            self.stable_sent += 1
            if self.correcting:
                self.corrections_sent += 1
            out.append(Message.stable(row))
        return out

    def tentative(self, rows: Iterable[Row]) -> list[Message]:
        out = [Message.tentative(row) for row in rows]
        self.tentative_pending += len(out)
        self.tentative_sent += len(out)
        return out

    def begin_corrections(self) -> list[Message]:
        """Start of reconciliation: UNDO the tentative suffix, if there is one."""
        self.correcting = True
        if not self.tentative_pending:
            return []
        self.tentative_pending = 0
        self.undos_sent += 1
        last = self.last_stable[0] if self.last_stable is not None else -1
        return [Message(Kind.UNDO, None, last)]

    def rec_done(self) -> list[Message]:
        self.correcting = False
        return [Message(Kind.REC_DONE)]
