"""Delay-Process-Correct on Spark: tentative buckets, checkpoint/redo with Spark's own checkpoint.

The pure rules live in ``app.availability`` (bucket release in ``sunion``, the node states in
``states``, UNDO/duplicates/REC_DONE in ``soutput``); this module wires them to a streaming
query (Borealis SIGMOD 2005, sections 4-5):

- The SUnion source (``spark_jobs/runtime/sunion.py``) releases a bucket TENTATIVE once the
  delay budget (0.9 X) has passed without every input's BOUNDARY, and marks such an end offset
  with ``tentative_from``. Spark writes the offset to its offset log *before* running the batch,
  so the sink reads it there: that is how the sink knows a batch is tentative, with nothing
  shared in memory with the source's Python process.
- ``DPCOutput`` (the sink) moves the node to UP_FAILURE on the first tentative batch and, at
  that moment, packs the checkpoint directory. foreachBatch runs before the batch's state is
  computed (the DataFrame is lazy), so the directory then holds exactly the state after the
  previous, all-stable batch, plus the tentative batch's offset entry, which a restore deletes.
  From then on every output row is TENTATIVE (the state has diverged) until reconciliation.
- ``DPCFragment.poll`` notices the heal (every bucket released since the checkpoint now has all
  its boundaries), asks for the reconciliation permit, stops the query, unpacks the checkpoint
  over the fragment's checkpoint directory and starts the query again: Spark resumes from the
  last stable offset and re-reads the now-stable buckets from the producers' logs (which kept
  them: the source acknowledges nothing at or after the first tentative bucket). The sink sends
  UNDO first, drops regenerated rows already sent stably, and sends REC_DONE once the redo has
  passed the last bucket processed tentatively.

Where output goes: STABLE rows to the fragment's output stream (the schema downstream SUnions
read, so only stable rows and only stable boundaries), and every message in order, tentative rows
and UNDO/REC_DONE included, to the companion stream ``<output>.dpc`` (``kind`` column), bucketed by
the time it was sent so bucket order is sending order.

Row identity for duplicates is (stime, the other columns as JSON): fragments emit keyed,
deterministic rows (a window and a group), and in append mode later batches emit later windows,
so keys only grow along the stable output, as ``app.availability.soutput`` requires. A fragment
that can emit two identical rows in one window would have one dropped; none of ours does.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from app.availability.node import Checkpoint
from app.availability.soutput import SOutput as StabilisingOutput
from app.availability.states import NodeEvent, NodeState, transition
from app.availability.sunion import DelayStrategy, SUnion
from app.availability.tuples import Kind, Message, Row
from spark_jobs.runtime.host import (
    FragmentRuntime,
    FragmentSpec,
    StreamRef,
    pack_directory,
    unpack_directory,
)
from spark_jobs.runtime.soutput import SOutput
from spark_jobs.runtime.transport import PackedCheckpoint, StreamClient

# Borealis: the budget is 0.9 of the maximum incremental delay, the rest is for processing.
BUDGET_SHARE = 0.9

DPC_SCHEMA = pa.schema(
    [
        pa.field("stime", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        # The row's own stime (ms) and identity; null for UNDO and REC_DONE.
        pa.field("row_stime_ms", pa.int64()),
        pa.field("row", pa.string()),
    ]
)


@dataclass(frozen=True)
class DPCSettings:
    """DPC parameters of one fragment: the application's maximum delay X and the clock."""

    max_delay_seconds: float
    strategy: DelayStrategy = DelayStrategy.DELAY_EACH
    # An injected clock: "now" in stime ms is this stream's boundary. None: wall time.
    clock: StreamRef | None = None
    # Wall clock only: now = wall ms - offset (maps wall time onto the sources' stime).
    clock_offset_ms: int = 0

    def __post_init__(self) -> None:
        if self.max_delay_seconds <= 0:
            raise ValueError(
                f"DPCSettings.max_delay_seconds must be positive, got {self.max_delay_seconds}"
            )

    @property
    def delay_budget_ms(self) -> int:
        return round(BUDGET_SHARE * self.max_delay_seconds * 1000)

    def source_options(self, bucket_seconds: float) -> dict[str, str]:
        options = {
            "delay_budget_ms": str(self.delay_budget_ms),
            "bucket_ms": str(round(bucket_seconds * 1000)),
            "delay_strategy": DelayStrategy(self.strategy).value,
            "clock_offset_ms": str(self.clock_offset_ms),
        }
        if self.clock is not None:
            options["clock_location"] = self.clock.location
            options["clock_stream"] = self.clock.stream
        return options


def offset_entry(checkpoint_dir: Path, batch_id: int) -> dict[str, Any] | None:
    """The source's end offset Spark logged for ``batch_id`` (None if not logged)."""
    path = checkpoint_dir / "offsets" / str(batch_id)
    if not path.exists():
        return None
    # Format: "v1", the batch metadata, then one line per source (SUnion is the only one).
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    try:
        entry: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: no JSON source offset on its last line") from error
    return entry


def _micros(value: Any) -> int:
    if isinstance(value, datetime):
        return round(value.timestamp() * 1_000_000)
    return int(value)


@dataclass(frozen=True)
class BatchRecord:
    """One micro-batch as the sink saw it (for latency and reports)."""

    batch_id: int
    end_bucket: int | None
    tentative: bool
    rows: int
    sent_at: float


class DPCOutput(SOutput):
    """The sink of a DPC fragment; it survives the query restarts of reconciliation."""

    def __init__(self, location: str, stream: str, epoch: int, checkpoint_dir: Path) -> None:
        super().__init__(location, stream, epoch)
        self.checkpoint_dir = Path(checkpoint_dir)
        self.dpc_stream = f"{stream}.dpc"
        self.rules = StabilisingOutput()
        self.state = NodeState.STABLE
        self._lock = threading.Lock()
        # The last all-stable checkpoint: first bucket released tentatively after it, and
        # (id of the first tentative batch, the packed directory).
        self.checkpoint: Checkpoint | None = None
        # One past the last bucket processed so far, and what the redo must get past.
        self.processed_end: int | None = None
        self.redo_end: int | None = None
        # (wall time sent, message), in sending order: what a consumer sees.
        self.messages: list[tuple[float, Message]] = []
        # (state, wall time) on every change, for reports.
        self.history: list[tuple[NodeState, float]] = [(self.state, time.time())]
        self.tentative_batches = 0
        self.batches: list[BatchRecord] = []
        self._seq = 0
        self._last_sent_us = 0

    def holds_boundaries(self) -> bool:
        return self.state is not NodeState.STABLE

    def _fire(self, event: NodeEvent) -> None:
        new = transition(self.state, event)
        if new is not self.state:
            self.history.append((new, time.time()))
        self.state = new

    def _send(self, client: StreamClient, messages: list[Message]) -> None:
        if not messages:
            return
        now = time.time()
        # Bucketed by sending time: keep it strictly increasing so bucket order is send order.
        sent_us = max(round(now * 1_000_000), self._last_sent_us + 1)
        self._last_sent_us = sent_us + len(messages)
        columns: dict[str, list[Any]] = {name: [] for name in DPC_SCHEMA.names}
        for index, message in enumerate(messages):
            columns["stime"].append(sent_us + index)
            columns["seq"].append(self._seq)
            columns["kind"].append(message.kind.value)
            columns["row_stime_ms"].append(message.row.stime if message.row else None)
            columns["row"].append(message.row.tid if message.row else None)
            self._seq += 1
            self.messages.append((now, message))
        client.append(self.dpc_stream, pa.table(columns, schema=DPC_SCHEMA), epoch=self.epoch)

    def write(self, batch: DataFrame, batch_id: int) -> bool:
        end = offset_entry(self.checkpoint_dir, batch_id)
        start = offset_entry(self.checkpoint_dir, batch_id - 1) if batch_id > 0 else None
        tentative_input = end is not None and "tentative_from" in end
        with self._lock:
            if tentative_input and self.state is not NodeState.UP_FAILURE:
                assert end is not None
                # Before this batch's state exists: the directory is the all-stable state.
                packed = pack_directory(self.checkpoint_dir)
                self.checkpoint = Checkpoint(int(end["tentative_from"]), (batch_id, packed))
            if tentative_input:
                self.tentative_batches += 1
                self._fire(NodeEvent.TENTATIVE_INPUT)
            if end is not None:
                self.processed_end = int(end["bucket"])
            table = batch.toArrow()
            rows, by_key = self._rows(table)
            self.batches.append(
                BatchRecord(
                    batch_id,
                    self.processed_end if end is not None else None,
                    self.state is NodeState.UP_FAILURE,
                    len(rows),
                    time.time(),
                )
            )
            with StreamClient(self.location) as client:
                client.declare(self.dpc_stream, 1.0)
                if self.state is NodeState.UP_FAILURE:
                    self._send(client, self.rules.tentative(rows))
                    return True
                sent = self.rules.stable(rows)
                fresh = [by_key[m.row.key] for m in sent if m.row is not None]
                written = client.append(
                    self.stream,
                    table.take(pa.array(fresh, type=pa.int64())),
                    batch_id=batch_id,
                    epoch=self.epoch,
                )
                self._send(client, sent)
                if (
                    self.state is NodeState.STABILIZATION
                    and self.redo_end is not None
                    and start is not None
                    and int(start["bucket"]) >= self.redo_end
                ):
                    # This batch began past everything processed tentatively, after the
                    # watermark of the redo: every correction has been sent.
                    self._send(client, self.rules.rec_done())
                    self._fire(NodeEvent.RECONCILED)
                    self.redo_end = None
            if written:
                self.written += 1
            else:
                self.skipped += 1
            return written

    def _rows(self, table: pa.Table) -> tuple[list[Row], dict[tuple[int, str], int]]:
        records = table.to_pylist()
        rows: list[Row] = []
        by_key: dict[tuple[int, str], int] = {}
        for index, record in enumerate(records):
            stime_ms = _micros(record["stime"]) // 1000
            rest = {k: v for k, v in record.items() if k != "stime"}
            row = Row(stime_ms, json.dumps(rest, sort_keys=True, default=str))
            rows.append(row)
            by_key[row.key] = index
        rows.sort()
        return rows, by_key

    def begin_reconciliation(self) -> None:
        """UP_FAILURE -> STABILIZATION: UNDO the tentative suffix; the redo follows."""
        with self._lock:
            self._fire(NodeEvent.HEALED)
            self.redo_end = self.processed_end
            with StreamClient(self.location) as client:
                client.declare(self.dpc_stream, 1.0)
                self._send(client, self.rules.begin_corrections())


def restore_stable_checkpoint(
    checkpoint_dir: Path, packed: PackedCheckpoint, batch_id: int
) -> None:
    """Put back the directory packed before batch ``batch_id`` and forget that batch and later
    ones, so Spark plans them again (from the producers' logs, now stable) on restart."""
    unpack_directory(packed, checkpoint_dir)
    for log in ("offsets", "commits"):
        folder = checkpoint_dir / log
        if not folder.exists():
            continue
        for path in folder.iterdir():
            name = path.name.lstrip(".").removesuffix(".crc")
            if name.isdigit() and int(name) >= batch_id:
                path.unlink()


class DPCFragment:
    """One DPC replica of a fragment on a ``FragmentRuntime``; call ``poll`` regularly."""

    def __init__(
        self,
        runtime: FragmentRuntime,
        spec: FragmentSpec,
        settings: DPCSettings,
        *,
        epoch: int,
        request_permission: Callable[[str], bool] | None = None,
        release_permission: Callable[[str], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.settings = settings
        self.spec = dataclasses.replace(
            spec, options={**spec.options, **settings.source_options(spec.bucket_seconds)}
        )
        self.epoch = epoch
        self.sink = DPCOutput(
            spec.output.location, spec.output.stream, epoch, runtime.checkpoint_dir(spec.name)
        )
        self._request = request_permission or (lambda _name: True)
        self._release = release_permission or (lambda _name: None)
        self.reconciliations: list[dict[str, float]] = []

    @property
    def state(self) -> NodeState:
        return self.sink.state

    def start(self, *, replay_from: int | None = None) -> StreamingQuery:
        return self.runtime.start(
            self.spec, epoch=self.epoch, replay_from=replay_from, sink=self.sink
        )

    def query(self) -> StreamingQuery:
        return self.runtime.query(self.spec.name)

    def healed(self) -> bool:
        """Every bucket released since the checkpoint now has all its inputs' boundaries."""
        checkpoint, end = self.sink.checkpoint, self.sink.processed_end
        if self.sink.state is not NodeState.UP_FAILURE or checkpoint is None or end is None:
            return False
        names = [f"{i.location}/{i.stream}" for i in self.spec.inputs]
        bucket_ms = round(self.spec.bucket_seconds * 1000)
        rules = SUnion(names, bucket_ms=bucket_ms, delay_budget_ms=self.settings.delay_budget_ms)
        for name, ref in zip(names, self.spec.inputs, strict=True):
            with StreamClient(ref.location) as client:
                boundary = client.info(ref.stream)["boundary"]
            if boundary is not None:
                rules.receive(name, Message.boundary(int(boundary) * bucket_ms))
        return all(rules.stable_ready(b) for b in range(checkpoint.next_bucket, end))

    def poll(self) -> bool:
        """Reconcile if the failure healed and the permit is granted; True if it did."""
        if not self.healed() or not self._request(self.spec.name):
            return False
        try:
            self.reconcile()
        finally:
            self._release(self.spec.name)
        return True

    def reconcile(self) -> None:
        checkpoint = self.sink.checkpoint
        if checkpoint is None:
            raise RuntimeError(f"{self.spec.name}: no stable checkpoint to reconcile from")
        began = time.time()
        # Stop first: the query must not commit tentative batches over the restored directory.
        self.runtime.stop(self.spec.name)
        batch_id, packed = checkpoint.state
        restore_stable_checkpoint(self.runtime.checkpoint_dir(self.spec.name), packed, batch_id)
        self.sink.begin_reconciliation()
        self.start()
        self.reconciliations.append({"began": began, "restarted": time.time()})


def consumer_view(messages: list[Message]) -> list[Row]:
    """What a consumer holds after applying the messages in order: UNDO drops every tentative
    row since the last stable one (test and report helper)."""
    held: list[tuple[Kind, Row]] = []
    for message in messages:
        if message.kind in (Kind.STABLE, Kind.TENTATIVE):
            assert message.row is not None
            held.append((message.kind, message.row))
        elif message.kind is Kind.UNDO:
            while held and held[-1][0] is Kind.TENTATIVE:
                held.pop()
    return [row for _kind, row in held]
