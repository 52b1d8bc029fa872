"""SOutput: the sink of every fragment, appending each micro-batch to the fragment's output log.

Implemented with ``foreachBatch`` rather than a Python ``DataSourceStreamWriter``, because:

- a batch is written as one Flight DoPut from the driver, so the log sees it whole or not at
  all; a data-source writer writes one piece per Spark task from executor workers and would need
  a staging area plus a commit step to get the same atomicity;
- the batch id arrives with the data, and the log deduplicates on it: when Spark re-runs the
  batch after a restart or a move (its offsets were logged but not committed), the second write
  is dropped, so the log holds each batch once;
- the lease epoch travels with every write and the log refuses an epoch below its fence, so a
  host that lost the fragment cannot write after the move is committed.

Fragment outputs are small (alerts per window), so collecting a batch to the driver is cheap.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from spark_jobs.runtime.transport import StreamClient

# A fragment restarted from empty state by a failover numbers its micro-batches from 0 again,
# and the output log drops an id it has seen: from then on its batch ids live in a space of
# their own, namespace << 32 | Spark's batch id (a query runs far fewer than 2**32 batches).
NAMESPACE_BITS = 32
# The namespace travels with the fragment's checkpoint (a move ships the whole directory, and
# Spark ignores files it does not know there), so a later move keeps writing in that space.
NAMESPACE_FILE = "fedload-output-namespace"
# A warm copy that caught up in coarse steps ran the source's batches under ids of its own
# (``spark_jobs.runtime.warm``): which of its batches stand for which of the source's travels
# with the checkpoint too, so that any host that runs one of them again logs it under the
# source's id, where the output log already has it.
MIRROR_FILE = "fedload-output-mirror"


@dataclass(frozen=True)
class Mirror:
    """Batches ``<= upto`` ran a source's batches: batch ``b`` is the source's ``b + shift``,
    with ``shift`` the one of the last segment ``(first, shift)`` starting at or below ``b``
    (0 below the first), logged in the source's ``namespace``."""

    namespace: int
    segments: tuple[tuple[int, int], ...]
    upto: int

    def shift_of(self, batch_id: int) -> int:
        shift = 0
        for first, segment_shift in self.segments:
            if first <= batch_id:
                shift = segment_shift
        return shift

    def source_id(self, batch_id: int) -> int:
        return batch_id + self.shift_of(batch_id)


def read_mirror(checkpoint_dir: Path) -> Mirror | None:
    try:
        body = json.loads((Path(checkpoint_dir) / MIRROR_FILE).read_text())
    except FileNotFoundError:
        return None
    return Mirror(
        int(body["namespace"]),
        tuple((int(first), int(shift)) for first, shift in body["segments"]),
        int(body["upto"]),
    )


def write_mirror(checkpoint_dir: Path, mirror: Mirror) -> None:
    directory = Path(checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    body = {"namespace": mirror.namespace, "segments": mirror.segments, "upto": mirror.upto}
    (directory / MIRROR_FILE).write_text(json.dumps(body) + "\n")


def read_namespace(checkpoint_dir: Path) -> int:
    """The output batch-id namespace a checkpoint carries (0: Spark's own ids)."""
    try:
        return int((Path(checkpoint_dir) / NAMESPACE_FILE).read_text().strip())
    except FileNotFoundError:
        return 0


def write_namespace(checkpoint_dir: Path, namespace: int) -> None:
    directory = Path(checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / NAMESPACE_FILE).write_text(f"{namespace}\n")


def _in_namespace(namespace: int, batch_id: int) -> int:
    return (namespace << NAMESPACE_BITS) | batch_id if namespace else batch_id


class SOutput:
    def __init__(
        self,
        location: str,
        stream: str,
        epoch: int,
        *,
        namespace: int = 0,
        mirror: Mirror | None = None,
    ) -> None:
        self.location = location
        self.stream = stream
        self.epoch = epoch
        self.namespace = namespace
        self.mirror = mirror
        self.written = 0
        self.skipped = 0

    def log_batch_id(self, batch_id: int) -> int:
        """The id Spark's batch ``batch_id`` has in the output log."""
        if self.mirror is not None and batch_id <= self.mirror.upto:
            return _in_namespace(self.mirror.namespace, self.mirror.source_id(batch_id))
        return _in_namespace(self.namespace, batch_id)

    def holds_boundaries(self) -> bool:
        """True while the output BOUNDARY must not advance (a DPC sink in failure)."""
        return False

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.write(batch, batch_id)

    def write(self, batch: DataFrame, batch_id: int) -> bool:
        """Append one micro-batch; False if the log already had it. Raises FencedError if stale."""
        table = batch.toArrow()
        with StreamClient(self.location) as client:
            fresh = client.append(
                self.stream, table, batch_id=self.log_batch_id(batch_id), epoch=self.epoch
            )
        if fresh:
            self.written += 1
        else:
            self.skipped += 1
        return fresh


def row_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """A row as a hashable key for counting rows: a struct (a window's start and end) or a
    list in a participant's output is made a tuple, recursively."""
    return tuple(_hashable(value) for value in row.values())


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def row_counts(table: pa.Table) -> Counter[tuple[Any, ...]]:
    """How many times each row is in ``table`` (what a failover leaves out once each)."""
    return Counter(row_key(r) for r in table.to_pylist())


def leave_out(table: pa.Table, written: Counter[tuple[Any, ...]]) -> tuple[pa.Table, int]:
    """``table`` without the rows ``written`` still counts (each taken once from the count),
    and how many were left out."""
    if not table.num_rows:
        return table, 0
    keep = []
    for row in table.to_pylist():
        key = row_key(row)
        seen = written[key] > 0
        if seen:
            written[key] -= 1
        keep.append(not seen)
    return table.filter(pa.array(keep)), keep.count(False)
