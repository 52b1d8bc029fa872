"""SUnion's bucket rules, the heart of DPC (Borealis SIGMOD 2005, section 4.2).

SUnion serialises a node's inputs: rows are grouped by stime into buckets of ``bucket_ms``, and
buckets are released strictly in order. Bucket ``b`` covers [b * bucket_ms, (b + 1) * bucket_ms).

- STABLE release: every input's BOUNDARY has passed the end of the bucket and none of its rows
  is tentative, so no row of it can still arrive and every replica sees exactly these rows.
- TENTATIVE release: some input is missing (no boundary) or tentative. The bucket is due when
  its end passes on the clock (sources stamp stime with the time they produce a row), and waits
  at most the delay budget after that. Borealis sets the budget to 0.9 of the application's
  maximum incremental delay X, leaving the rest for normal processing.
- Two strategies during a failure (the paper's "delay" and "process" variants):
  ``DELAY_EACH`` waits the full budget for every tentative bucket, so a failure that heals in
  the meantime costs no tentative rows; ``DELAY_FIRST`` waits only before the first tentative
  bucket of a failure, then releases each bucket as soon as the available inputs pass it,
  keeping latency low at the price of more tentative rows.
- A bucket is released tentatively only when some input has actually passed it ("whenever input
  is available"): releasing empty buckets during a total outage would only add corrections.

Rows are kept after release (until ``trim``) because reconciliation replays them: checkpoint/redo
restores the last all-stable checkpoint and redoes the now-stable buckets.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.availability.tuples import Kind, Message, Row


class DelayStrategy(enum.StrEnum):
    DELAY_EACH = "delay_each"
    DELAY_FIRST = "delay_first"


@dataclass(frozen=True)
class Bucket:
    number: int
    rows: tuple[Row, ...]
    stable: bool


@dataclass
class _Input:
    boundary: int | None = None
    # Highest stime of a tentative row: a tentative upstream sends no boundaries, this is how
    # far its data has got.
    tentative_high: int | None = None
    stable: dict[int, dict[str, Row]] = field(default_factory=dict)
    tentative: dict[int, dict[str, Row]] = field(default_factory=dict)


class SUnion:
    def __init__(
        self,
        inputs: Sequence[str],
        *,
        bucket_ms: int,
        delay_budget_ms: int,
        strategy: DelayStrategy = DelayStrategy.DELAY_EACH,
        start_bucket: int = 0,
    ) -> None:
        if not inputs:
            raise ValueError("SUnion: needs at least one input")
        if len(set(inputs)) != len(inputs):
            raise ValueError(f"SUnion: input names must be distinct, got {list(inputs)}")
        if bucket_ms <= 0:
            raise ValueError(f"SUnion: bucket_ms must be positive, got {bucket_ms}")
        if delay_budget_ms < 0:
            raise ValueError(f"SUnion: delay_budget_ms must be >= 0, got {delay_budget_ms}")
        self.bucket_ms = bucket_ms
        self.delay_budget_ms = delay_budget_ms
        self.strategy = DelayStrategy(strategy)
        self.inputs = {name: _Input() for name in inputs}
        # The next bucket to release; every bucket below it was released (stable or not).
        self.next_bucket = start_bucket

    def bucket_of(self, stime: int) -> int:
        return stime // self.bucket_ms

    def end_of(self, bucket: int) -> int:
        return (bucket + 1) * self.bucket_ms

    def _input(self, name: str) -> _Input:
        try:
            return self.inputs[name]
        except KeyError:
            raise KeyError(
                f"SUnion: unknown input {name!r} (inputs: {sorted(self.inputs)})"
            ) from None

    def receive(self, name: str, message: Message) -> None:
        state = self._input(name)
        if message.kind in (Kind.STABLE, Kind.TENTATIVE):
            assert message.row is not None
            row = message.row
            bucket = self.bucket_of(row.stime)
            if message.kind is Kind.STABLE:
                # Keyed by tid: a row delivered twice (a replay, a replica switch) counts once.
                state.stable.setdefault(bucket, {})[row.tid] = row
                # A stable row supersedes its tentative version.
                state.tentative.get(bucket, {}).pop(row.tid, None)
            else:
                state.tentative.setdefault(bucket, {})[row.tid] = row
                high = state.tentative_high
                state.tentative_high = row.stime if high is None else max(high, row.stime)
        elif message.kind is Kind.BOUNDARY:
            if state.boundary is None or message.stime > state.boundary:
                state.boundary = message.stime
        elif message.kind is Kind.UNDO:
            state.tentative.clear()
            state.tentative_high = None
        # REC_DONE needs no action here: the corrections it closes arrived as STABLE rows.

    def forget_tentative(self, name: str) -> None:
        """Drop an input's tentative rows (the consumer switched to another upstream replica,
        which resends its own tentative suffix)."""
        self.receive(name, Message(Kind.UNDO))

    def stable_ready(self, bucket: int) -> bool:
        end = self.end_of(bucket)
        return all(
            state.boundary is not None and state.boundary >= end and not state.tentative.get(bucket)
            for state in self.inputs.values()
        )

    def available(self, bucket: int) -> bool:
        """Some input has passed the bucket, stably or tentatively."""
        end = self.end_of(bucket)
        for state in self.inputs.values():
            if state.boundary is not None and state.boundary >= end:
                return True
            if state.tentative_high is not None and state.tentative_high >= end:
                return True
        return False

    def due_at(self, bucket: int) -> int:
        return self.end_of(bucket)

    def bucket(self, number: int, *, stable: bool) -> Bucket:
        """The rows of a bucket from every input, in (stime, tid) order."""
        rows: list[Row] = []
        for state in self.inputs.values():
            rows.extend(state.stable.get(number, {}).values())
            if not stable:
                rows.extend(state.tentative.get(number, {}).values())
        rows.sort()
        return Bucket(number, tuple(rows), stable)

    def release(self, now: int, *, in_failure: bool) -> Bucket | None:
        """The next bucket if it may go now (stable, or tentative under the delay rules)."""
        number = self.next_bucket
        if self.stable_ready(number):
            self.next_bucket += 1
            return self.bucket(number, stable=True)
        if not self.available(number):
            return None
        wait = self.delay_budget_ms
        if in_failure and self.strategy is DelayStrategy.DELAY_FIRST:
            wait = 0
        if now < self.due_at(number) + wait:
            return None
        self.next_bucket += 1
        return self.bucket(number, stable=False)

    def trim(self, below: int) -> None:
        """Forget rows of buckets below ``below`` (covered by a stable checkpoint)."""
        for state in self.inputs.values():
            for store in (state.stable, state.tentative):
                for number in [b for b in store if b < below]:
                    del store[number]
