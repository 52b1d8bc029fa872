"""Deterministic fragment operators for the DPC engine.

DPC keeps replicas consistent only if processing is deterministic given the serialised input
(SUnion's buckets). These operators are: their output depends only on the bucket sequence, and
they emit rows in (stime, tid) order. Their state snapshots are JSON-able, so a checkpoint can be
shipped between hosts like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from app.availability.tuples import Row


class Operator(Protocol):
    def process(self, bucket: int, rows: Sequence[Row]) -> list[Row]:
        """Consume one bucket (rows in (stime, tid) order); return the output rows, sorted."""
        ...

    def snapshot(self) -> Any:
        """The state, JSON-able (a checkpoint), sharing nothing mutable with the operator."""
        ...

    def restore(self, snapshot: Any) -> None:
        """Adopt a snapshot's state without keeping references into it (a checkpoint may be
        restored more than once)."""
        ...


class Passthrough:
    """A stateless filter: drops rows whose value (payload[1]) is a multiple of ``drop_multiple``.

    Output rows keep their stime and tid, so a downstream bucket equals the upstream one.
    """

    def __init__(self, drop_multiple: int = 0) -> None:
        self.drop_multiple = drop_multiple

    def process(self, bucket: int, rows: Sequence[Row]) -> list[Row]:
        if not self.drop_multiple:
            return list(rows)
        return [row for row in rows if int(row.payload[1]) % self.drop_multiple]

    def snapshot(self) -> Any:
        return {}

    def restore(self, snapshot: Any) -> None:
        return None


class WindowCount:
    """Count and sum of value (payload[1]) per key (payload[0]) in tumbling windows.

    A window [start, end) is emitted when the bucket holding ``end - 1`` has been processed, as a
    row with stime ``end - 1`` (inside that bucket, so the node's output boundary stays exact)
    and tid ``"<end>:<key>"``. State is one counter per (open window, key): the thing that grows
    with the window and that reconciliation must rebuild.
    """

    def __init__(self, window_ms: int, bucket_ms: int) -> None:
        if window_ms <= 0 or bucket_ms <= 0 or window_ms % bucket_ms:
            raise ValueError(
                f"WindowCount: window_ms ({window_ms}) must be a positive multiple of "
                f"bucket_ms ({bucket_ms})"
            )
        self.window_ms = window_ms
        self.bucket_ms = bucket_ms
        self.windows: dict[int, dict[str, list[int]]] = {}

    def process(self, bucket: int, rows: Sequence[Row]) -> list[Row]:
        for row in rows:
            start = row.stime // self.window_ms * self.window_ms
            counter = self.windows.setdefault(start, {}).setdefault(str(row.payload[0]), [0, 0])
            counter[0] += 1
            counter[1] += int(row.payload[1])
        horizon = (bucket + 1) * self.bucket_ms
        out: list[Row] = []
        for start in sorted(s for s in self.windows if s + self.window_ms <= horizon):
            end = start + self.window_ms
            for key, (count, total) in sorted(self.windows.pop(start).items()):
                out.append(Row(end - 1, f"{end}:{key}", (key, count, total)))
        return out

    def state_rows(self) -> int:
        return sum(len(keys) for keys in self.windows.values())

    def snapshot(self) -> Any:
        return {
            str(start): {k: list(v) for k, v in keys.items()}
            for start, keys in self.windows.items()
        }

    def restore(self, snapshot: Any) -> None:
        self.windows = {
            int(start): {k: [int(v[0]), int(v[1])] for k, v in keys.items()}
            for start, keys in snapshot.items()
        }
