"""The one rule by which a file or broker source writes its task's log, and the position it keeps.

A source reads rows in batches (a Spark micro-batch of new files, a fetch of broker messages).
Each row's bucket is the bucket of its ``stime`` (its declared event time). The source keeps the
rows of *open* buckets to itself and appends a bucket to the log only when it closes, whole, with
its BOUNDARY: so the log never holds a bucket that can still change, and a restart needs to
rebuild only the open buckets, which it keeps on disk.

- **Boundary.** After a batch, the boundary is the bucket of (latest event time seen -
  ``lateness``), never lower than before: that bucket is still open, every one below is closed.
  With ``lateness`` 0 (the default) the bucket of the latest event stays open.
- **Late rows.** A row whose bucket is below the boundary reached *before* its batch (a reader
  may have released that bucket already) is late: dropped, counted (``Clock.late``, persisted)
  and logged once. Rows of one batch are judged against the same boundary, so the rule does not
  depend on the order of rows inside a batch.
- **Idle.** The boundary follows the data's own event time. With ``idle_advance`` (event times
  that track the wall clock) a source without new rows also closes buckets as if an event at
  ``now`` had been seen.

``step`` is the rule, pure; ``SourceLog`` applies it to a log through a ``StreamClient`` and keeps
the source's position with it in ``StateStore``.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.publish import boundary_after, buckets_of

log = logging.getLogger("fedload.sources")


@dataclass(frozen=True)
class Clock:
    """Where a source's log stands: buckets below ``boundary`` are closed (None: none yet)."""

    boundary: int | None = None
    max_event_us: int | None = None
    late: int = 0


@dataclass(frozen=True)
class Step:
    """What one batch does to the log."""

    closed: list[tuple[int, pa.Table]]  # buckets that close now, with all their rows, in order
    open: pa.Table  # the rows of buckets still open (kept by the source)
    late: int  # rows of this batch below the boundary the log had before it
    clock: Clock  # the clock after the batch


def step(
    clock: Clock,
    kept: pa.Table,
    rows: pa.Table,
    *,
    bucket_seconds: float,
    lateness_s: float = 0.0,
    now_us: int | None = None,
) -> Step:
    """Apply the rule (module docstring) to a batch ``rows`` given the open rows ``kept``.

    Both tables carry ``stime`` and the same columns. ``now_us``: the wall clock, for a source
    with ``idle_advance`` (it counts as an event seen)."""
    buckets = buckets_of(rows, bucket_seconds) if rows.num_rows else np.zeros(0, np.int64)
    late = 0
    if clock.boundary is not None and rows.num_rows:
        on_time = buckets >= clock.boundary
        late = int(rows.num_rows - on_time.sum())
        rows, buckets = rows.filter(pa.array(on_time)), buckets[on_time]
    latest = clock.max_event_us
    if rows.num_rows:
        seen = int(rows.column("stime").cast(pa.int64()).to_numpy().max())
        latest = seen if latest is None else max(latest, seen)
    candidates = [b for b in (clock.boundary,) if b is not None]
    if latest is not None:
        candidates.append(boundary_after(latest, lateness_s, bucket_seconds))
    if now_us is not None:
        candidates.append(boundary_after(now_us, lateness_s, bucket_seconds))
    boundary = max(candidates) if candidates else None
    pool = pa.concat_tables([kept, rows]) if kept.num_rows else rows
    pool_buckets = buckets_of(pool, bucket_seconds) if pool.num_rows else np.zeros(0, np.int64)
    closing = pool_buckets < boundary if boundary is not None else np.zeros(len(pool), bool)
    closed: list[tuple[int, pa.Table]] = []
    if closing.any():
        done = pool.filter(pa.array(closing))
        done_buckets = pool_buckets[closing]
        for bucket in np.unique(done_buckets).tolist():
            part = done.filter(pa.array(done_buckets == bucket))
            # Sorted by event time: the same rows give the same bucket whatever the batches.
            closed.append((int(bucket), part.sort_by("stime")))
    still_open = pool.filter(pa.array(~closing)) if pool.num_rows else pool
    return Step(closed, still_open, late, Clock(boundary, latest, clock.late + late))


class LogWriter(Protocol):
    """What ``SourceLog`` needs of a ``StreamClient``."""

    def append(
        self,
        stream: str,
        table: pa.Table,
        *,
        boundary: int | None = None,
        batch_id: int | None = None,
        epoch: int | None = None,
    ) -> bool: ...

    def advance(
        self,
        stream: str,
        boundary: int,
        epoch: int | None = None,
        bucket_seconds: float | None = None,
    ) -> None: ...


@dataclass
class Saved:
    """A source's persisted position: where it reads next, its clock and its open rows."""

    position: Any = None  # the source's own: a next stream sequence, a next Spark batch id
    clock: Clock = field(default_factory=Clock)
    open: pa.Table | None = None


class StateStore:
    """``state.json`` and ``open-<generation>.parquet`` in a directory of the agent's data dir.
    The JSON names the open rows' file, so a crash between the two writes leaves the previous
    pair in force (the new file is written first, the JSON replaced atomically after)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    @property
    def _state(self) -> Path:
        return self.directory / "state.json"

    def load(self, schema: pa.Schema) -> Saved:
        try:
            data = json.loads(self._state.read_text())
        except FileNotFoundError:
            return Saved(open=schema.empty_table())
        clock = Clock(data.get("boundary"), data.get("max_event_us"), int(data.get("late", 0)))
        name = data.get("open")
        table = pq.read_table(self.directory / name) if name else schema.empty_table()
        return Saved(data.get("position"), clock, table.cast(schema))

    def save(self, saved: Saved) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        previous = self._generation()
        name = None
        if saved.open is not None and saved.open.num_rows:
            name = f"open-{previous + 1}.parquet"
            pq.write_table(saved.open, self.directory / name)
        state = {
            "position": saved.position,
            "boundary": saved.clock.boundary,
            "max_event_us": saved.clock.max_event_us,
            "late": saved.clock.late,
            "open": name,
            "generation": previous + 1,
        }
        descriptor, scratch = tempfile.mkstemp(dir=self.directory, prefix=".state-")
        with os.fdopen(descriptor, "w") as out:
            json.dump(state, out)
        os.replace(scratch, self._state)
        for old in self.directory.glob("open-*.parquet"):
            if old.name != name:
                old.unlink(missing_ok=True)

    def _generation(self) -> int:
        try:
            return int(json.loads(self._state.read_text()).get("generation", 0))
        except FileNotFoundError:
            return 0


class SourceLog:
    """Writes a source's batches into its log by the rule of ``step`` and keeps its position.

    Order per batch: the closed buckets are appended (each under its bucket number as batch id,
    so a bucket repeated after a crash between the append and the save is kept once by a log
    that survived), the boundary advanced, then the position saved. A restart loads the saved
    position, clock and open rows: it reads on from there, so the log gets every row after the
    saved position exactly once. An owner's restart starts its log empty: it holds the buckets
    from the saved boundary on (the restart advances it there at once, so readers do not wait
    for buckets it had closed); the closed buckets the old log held are not rebuilt."""

    def __init__(
        self,
        client: LogWriter,
        stream: str,
        schema: pa.Schema,
        store: StateStore,
        *,
        bucket_seconds: float,
        lateness_s: float = 0.0,
    ) -> None:
        self._client, self.stream, self.schema = client, stream, schema
        self._store, self.bucket_seconds, self.lateness_s = store, bucket_seconds, lateness_s
        self._saved = Saved(open=schema.empty_table())
        self._warned = False

    @property
    def position(self) -> Any:
        return self._saved.position

    @property
    def clock(self) -> Clock:
        return self._saved.clock

    @property
    def late(self) -> int:
        return self._saved.clock.late

    def resume(self) -> Any:
        """Load the saved position (None: a first start) and close the log up to its boundary."""
        self._saved = self._store.load(self.schema)
        boundary = self._saved.clock.boundary
        if boundary is not None:
            self._client.advance(self.stream, boundary, bucket_seconds=self.bucket_seconds)
        if self._saved.position is not None:
            log.info("%s resumes at %s (boundary %s)", self.stream, self.position, boundary)
        return self._saved.position

    def add(self, rows: pa.Table, position: Any, *, now_us: int | None = None) -> Step:
        """One batch read up to ``position`` (the source's next position after it)."""
        kept = self._saved.open if self._saved.open is not None else self.schema.empty_table()
        done = step(
            self._saved.clock,
            kept,
            rows.cast(self.schema) if rows.num_rows else self.schema.empty_table(),
            bucket_seconds=self.bucket_seconds,
            lateness_s=self.lateness_s,
            now_us=now_us,
        )
        before = self._saved.clock.boundary
        for bucket, part in done.closed:
            self._client.append(self.stream, part, boundary=bucket + 1, batch_id=bucket)
        if done.clock.boundary is not None and done.clock.boundary != before:
            self._client.advance(
                self.stream, done.clock.boundary, bucket_seconds=self.bucket_seconds
            )
        if done.late and not self._warned:
            self._warned = True
            log.warning(
                "%s: %d rows arrived after their bucket closed (boundary %s) and were dropped; "
                "the source counts them (late) and says this once",
                self.stream,
                done.late,
                before,
            )
        changed = (
            bool(rows.num_rows) or done.clock != self._saved.clock or position != self.position
        )
        self._saved = Saved(position, done.clock, done.open)
        if changed:
            self._store.save(self._saved)
        return done

    def idle(self, now_us: int) -> Step:
        """No new rows: close what the wall clock closes (a source with ``idle_advance``)."""
        return self.add(self.schema.empty_table(), self.position, now_us=now_us)

    def with_clock(self, clock: Clock) -> None:
        """Tests: start from ``clock`` as if it had been saved."""
        self._saved = replace(self._saved, clock=clock)
