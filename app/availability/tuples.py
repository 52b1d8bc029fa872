"""What travels on a DPC stream: data rows and the control messages around them.

Times (``stime``) are integer milliseconds, so bucket arithmetic is exact. A row's identity is
``(stime, tid)``: fragments are deterministic and emit rows in that order, so every replica of a
fragment produces the same stable sequence, and a position in it (the key of the last stable
row seen) means the same thing at every replica. That is what lets a consumer switch replicas
and lets SOutput recognise duplicates after a replay.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Kind(enum.StrEnum):
    STABLE = "STABLE"
    TENTATIVE = "TENTATIVE"
    # Punctuation: no more STABLE rows with stime below ``stime`` will follow.
    BOUNDARY = "BOUNDARY"
    # Discard every TENTATIVE row received since the last STABLE one.
    UNDO = "UNDO"
    # The corrections after an UNDO are complete.
    REC_DONE = "REC_DONE"


Key = tuple[int, str]


@dataclass(frozen=True, order=True)
class Row:
    stime: int
    tid: str
    payload: tuple[Any, ...] = ()

    @property
    def key(self) -> Key:
        return (self.stime, self.tid)

    def to_json(self) -> list[Any]:
        return [self.stime, self.tid, list(self.payload)]

    @classmethod
    def from_json(cls, data: list[Any]) -> Row:
        return cls(int(data[0]), str(data[1]), tuple(data[2]))


@dataclass(frozen=True)
class Message:
    kind: Kind
    row: Row | None = None
    # BOUNDARY: the promised stime; UNDO: the stime of the last stable row kept (or -1).
    stime: int = 0

    @classmethod
    def stable(cls, row: Row) -> Message:
        return cls(Kind.STABLE, row, row.stime)

    @classmethod
    def tentative(cls, row: Row) -> Message:
        return cls(Kind.TENTATIVE, row, row.stime)

    @classmethod
    def boundary(cls, stime: int) -> Message:
        return cls(Kind.BOUNDARY, None, stime)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "row": self.row.to_json() if self.row is not None else None,
            "stime": self.stime,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Message:
        try:
            kind = Kind(data["kind"])
        except (KeyError, ValueError) as error:
            raise ValueError(f"message {data!r}: bad or missing 'kind'") from error
        row = Row.from_json(data["row"]) if data.get("row") is not None else None
        if kind in (Kind.STABLE, Kind.TENTATIVE) and row is None:
            raise ValueError(f"message {data!r}: a {kind} message needs a 'row'")
        return cls(kind, row, int(data.get("stime", 0)))
