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
  its boundaries) and asks for the reconciliation permit. It does not stop the serving query:
  Borealis keeps output flowing during reconciliation by letting another copy serve, and here
  the other copy is a second streaming query in the same session. The packed checkpoint is
  unpacked into a new directory (``<name>.redo-<n>``, batches from the first tentative one
  forgotten, a fresh query id), and the redo copy starts there: Spark resumes from the last
  stable offset and re-reads the now-stable buckets from the producers' logs (which kept them:
  no query of the node acknowledges at or past the first tentative bucket, see
  ``ack_limit_file``). Meanwhile the serving query goes on, its output TENTATIVE, sent within
  the budget. The redo's sink holds its batches back.
- Once the redo has processed what the serving query has, ``poll`` switches: it stops the
  serving query, then, under the output's lock, sends UNDO, the held corrections (dropping rows
  already sent stably), and from then on the redo copy is the fragment's query
  (``FragmentRuntime.adopt``: its directory becomes the fragment's checkpoint) and its output is
  stable; REC_DONE follows once it has passed the last bucket processed tentatively. While
  the redo runs it yields: it plans no batch while the serving query has one running or due
  (``DPCFragment.yield_redo`` says why), so new buckets still leave within X after the heal.
  A redo that meets tentative input itself (a new failure) is dropped and tried again after the
  next heal.
- Reconciling alone (``DPCSettings.serve_while_reconciling`` off, ``fedload agent --reconcile
  alone``) is Borealis's own way when a second copy exists: the serving query stops when the
  redo starts and the copy advertises STABILIZATION (``advertised_state``), so consumers read the
  other copy; the redo does not yield, and a dropped redo brings the serving query back.
  ``DPCSettings.stand_down_when_served`` (``--reconcile auto``) does so only when the registry,
  granting the permit, names another copy that serves, and reconciles alongside otherwise.
- The reconciliation state (the all-stable checkpoint, SOutput's dedup state, the sequence
  number, the node state, which directory is the fragment's) is written atomically under
  ``<root>/<name>.dpc`` after every batch (``DPCStore``). A new ``DPCFragment`` for the same
  fragment and root resumes it, so a driver that dies during UP_FAILURE still reconciles from the
  right checkpoint and drops duplicates. Messages on the wire are keyed by sequence number, so a
  batch the dead driver sent but did not record is kept once.

A cut link into the node (not a quiet producer but an unreachable one) is the source's business:
its Flight calls have deadlines, an unreachable input counts as "no new boundary", and complete
input buckets are spooled under ``<root>/<name>.dpc/spool`` before they are released, so Spark's
executors never need a cut producer for a stable range (``sunion.py`` explains it). The heal
check here uses a deadline too: a cut input is simply not healed yet.

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
import os
import shutil
import statistics
import threading
import time
import uuid
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
from spark_jobs.runtime.sunion import ANSWERED_WITH_ERROR, UNREACHABLE, TimedClient
from spark_jobs.runtime.transport import PackedCheckpoint, StreamClient

# Borealis: the budget is 0.9 of the maximum incremental delay, the rest is for processing.
BUDGET_SHARE = 0.9
# The heal check's Flight calls: a cut input must not stall the poller.
CALL_TIMEOUT_S = 0.5


class InputCutOff(Exception):
    """None of an input's logs answered."""


def input_boundary(ref: StreamRef, timeout_s: float | None = None) -> int | None:
    """The furthest boundary among ``ref``'s logs that answer: its own and its active copies'
    (every copy writes the same stable buckets, and the redo's SUnion reads whichever holds
    them, so a node whose inputs' copies are reachable has healed even while an input's own
    log is still cut off). An alternate that answers with an error (its log has not begun)
    is passed over; the input's own log's error is raised. InputCutOff when none answers."""
    answered, furthest = False, None
    for source, alternate in ((ref, False), *((a, True) for a in ref.alternates)):
        client = TimedClient(source.location, CALL_TIMEOUT_S if timeout_s is None else timeout_s)
        try:
            boundary = client.info(source.stream)["boundary"]
        except UNREACHABLE:
            continue
        except ANSWERED_WITH_ERROR:
            if not alternate:
                raise
            continue
        finally:
            client.close()
        answered = True
        if boundary is not None:
            furthest = int(boundary) if furthest is None else max(furthest, int(boundary))
    if not answered:
        raise InputCutOff(f"no log of {ref.stream} answered ({ref.location} and its copies)")
    return furthest


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
    # The paper's budget is X minus the processing time; 0.9 X assumes processing takes 0.1 X.
    # On: the poller measures the serving query's recent batches and lowers the budget to
    # X - (median recent batch + a trigger), never above 0.9 X (see DPCFragment.adapt_budget).
    adaptive_budget: bool = False
    # On: a redo copy yields to the serving query (DPCFragment.yield_redo): it plans no new
    # batch while a serving batch runs or a bucket that ended less than X ago waits to be sent.
    redo_yields: bool = True
    # The adaptive budget never drops below this share of X. When batches take most of X,
    # X cannot hold for stable output either, and a budget near zero only turns every late
    # input (a producer's scheduling hiccup on a loaded machine) into a failure whose
    # reconciliation loads the machine further. 0: no floor.
    min_budget_share: float = 0.0
    # The deadline of the source's per-trigger boundary query on the planning path (option
    # ``info_timeout_ms``; None: the source's own default).
    info_timeout_ms: int | None = None
    # How often a reconciling copy renews its permit. The registry's lease is 10 s by default
    # (FEDLOAD_PERMIT_LEASE_SECONDS) and a redo takes a minute or more on a loaded machine: a
    # permit asked for once ran out mid-redo and went to the next copy, and both reconciled at
    # once. Every 2 s leaves room for a few slow polls or registry calls within one lease.
    permit_renew_seconds: float = 2.0
    # Off, Borealis's way (SIGMOD 2005, section 4.5: replicas reconcile in turn while another
    # serves): a reconciling copy stops its serving query for its redo's time and advertises
    # STABILIZATION, so consumers read the other copy (UP_FAILURE or STABLE) and the redo has
    # the copy's cores to itself instead of yielding. On: the serving query goes on beside the
    # redo (tentative within X), which a copy with no other copy to fall back on needs.
    serve_while_reconciling: bool = True
    # With serve_while_reconciling on, stand down all the same when another copy serves the
    # fragment's consumers at the grant (``others_serving``: the registry's answer with the
    # permit), Borealis's way then, and serve alongside the redo otherwise (``fedload agent
    # --reconcile auto``).
    stand_down_when_served: bool = False

    def __post_init__(self) -> None:
        if self.max_delay_seconds <= 0:
            raise ValueError(
                f"DPCSettings.max_delay_seconds must be positive, got {self.max_delay_seconds}"
            )
        if not 0 <= self.min_budget_share <= BUDGET_SHARE:
            raise ValueError(
                f"DPCSettings.min_budget_share must be within [0, {BUDGET_SHARE}], "
                f"got {self.min_budget_share}"
            )
        if self.info_timeout_ms is not None and self.info_timeout_ms <= 0:
            raise ValueError(
                f"DPCSettings.info_timeout_ms must be positive, got {self.info_timeout_ms}"
            )
        if self.permit_renew_seconds <= 0:
            raise ValueError(
                "DPCSettings.permit_renew_seconds must be positive, "
                f"got {self.permit_renew_seconds}"
            )

    @property
    def delay_budget_ms(self) -> int:
        return round(BUDGET_SHARE * self.max_delay_seconds * 1000)

    @property
    def min_budget_ms(self) -> int:
        return round(self.min_budget_share * self.max_delay_seconds * 1000)

    def source_options(self, bucket_seconds: float) -> dict[str, str]:
        options = {
            "delay_budget_ms": str(self.delay_budget_ms),
            "bucket_ms": str(round(bucket_seconds * 1000)),
            "delay_strategy": DelayStrategy(self.strategy).value,
            "clock_offset_ms": str(self.clock_offset_ms),
        }
        if self.info_timeout_ms is not None:
            options["info_timeout_ms"] = str(self.info_timeout_ms)
        if self.clock is not None:
            options["clock_location"] = self.clock.location
            options["clock_stream"] = self.clock.stream
        return options


def budget_for(settings: DPCSettings, durations_ms: list[int], trigger_ms: int) -> int:
    """The adaptive delay budget: X minus the median recent batch and one trigger, within
    [``min_budget_ms``, 0.9 X]; 0.9 X while no batch has been measured."""
    cap = settings.delay_budget_ms
    if not durations_ms:
        return cap
    # The median, not the max: the first batches of a query (and a redo's start) take seconds,
    # and one of them would set the budget to nothing for ten batches.
    typical = statistics.median(durations_ms)
    spare = round(settings.max_delay_seconds * 1000 - typical - trigger_ms)
    return max(settings.min_budget_ms, min(cap, spare))


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


# An acknowledgement limit below any bucket: acknowledgements only grow, so it stops them
# where they stand.
NO_FURTHER_ACKS = -(2**62)


def redo_reads_from(start: dict[str, Any] | None) -> int:
    """Where a redo from the checkpoint packed before a batch reads again: that batch's start
    (the previous batch's end offset), not its first tentative bucket. A batch holds several
    buckets once they are shorter than a trigger (five or more at 100 ms), and acknowledging up
    to the first tentative one let the logs trim the batch's stable buckets the redo needs
    (seen at 100 ms buckets: "buckets below N were acknowledged", the redo query dead). For the
    first batch (no previous offset) acknowledgements stop where they stand."""
    if start is None or "bucket" not in start:
        return NO_FURTHER_ACKS
    return int(start["bucket"])


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


class DPCStore:
    """A fragment's reconciliation state on disk, beside its checkpoint (``<root>/<name>.dpc``).

    The all-stable checkpoint and SOutput's dedup state must outlive the driver: a driver that
    restarts during UP_FAILURE must still redo from the right checkpoint and must not resend rows
    the consumers already hold. Every file is written whole (temp file, fsync, os.replace), so a
    crash leaves the previous version or the new one, never a torn one.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.state_path = self.directory / "state.json"
        self.checkpoint_path = self.directory / "stable.tar"
        # Read by the SUnion readers of every query of the node (option ack_limit_file).
        self.ack_limit_path = self.directory / "ack_limit"
        # The SUnion readers' local copy of complete input buckets (option spool_dir).
        self.spool_path = self.directory / "spool"
        # The current delay budget in ms, when it adapts to the batch time (option budget_file).
        self.budget_path = self.directory / "budget"

    def pause_path(self, copy: str) -> Path:
        """While this file exists, the redo copy ``copy`` plans no new batch (option
        ``pause_file``). One per copy: a copy becomes the serving query at the switch and must
        not read the next redo's pause."""
        return self.directory / f"pause-{copy}"

    def stable_only_path(self, copy: str) -> Path:
        """While this file exists, the redo copy ``copy`` releases stable buckets only (option
        ``stable_only_file``); removed when the copy becomes the serving query."""
        return self.directory / f"stable-only-{copy}"

    def pause(self, copy: str, paused: bool) -> None:
        if paused:
            self.pause_path(copy).touch()
        else:
            self.pause_path(copy).unlink(missing_ok=True)

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        temp = path.with_name(f".{path.name}.tmp")
        with open(temp, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)

    def save(self, state: dict[str, Any]) -> None:
        self._write(self.state_path, json.dumps(state, sort_keys=True).encode())

    def load(self) -> dict[str, Any] | None:
        if not self.state_path.exists():
            return None
        loaded: dict[str, Any] = json.loads(self.state_path.read_text())
        return loaded

    def save_checkpoint(self, packed: PackedCheckpoint) -> None:
        self._write(self.checkpoint_path, packed.data)

    def load_checkpoint(self) -> PackedCheckpoint:
        return PackedCheckpoint.of(self.checkpoint_path.read_bytes())

    def write_budget(self, budget_ms: int) -> None:
        self._write(self.budget_path, str(budget_ms).encode())

    def limit_acks(self, bucket: int | None) -> None:
        if bucket is None:
            self.ack_limit_path.unlink(missing_ok=True)
        else:
            self._write(self.ack_limit_path, str(bucket).encode())


class QuerySink(SOutput):
    """The foreachBatch target of one of a DPC node's queries: the serving one or a redo copy.
    Which one it is decides what ``DPCOutput`` does with its batches."""

    def __init__(self, output: DPCOutput, checkpoint_dir: Path) -> None:
        super().__init__(output.location, output.stream, output.epoch)
        self.output = output
        self.checkpoint_dir = Path(checkpoint_dir)

    def holds_boundaries(self) -> bool:
        return self.output.holds_boundaries()

    def write(self, batch: DataFrame, batch_id: int) -> bool:
        written = self.output.write_from(self, batch, batch_id)
        if written:
            self.written += 1
        else:
            self.skipped += 1
        return written


def _drain(batch: DataFrame) -> None:
    """Run a batch whose rows are not wanted. Spark 4 checks that every state store of a
    stateful batch committed, and fails the query otherwise (STATE_STORE_COMMIT_VALIDATION_FAILED,
    seen on an aborted redo at load 17): a batch left unread is a query that dies, not one
    that skips."""
    batch.write.format("noop").mode("append").save()


@dataclass(frozen=True)
class _Pending:
    """A redo batch held back until the switch."""

    batch_id: int
    start: int | None
    end: int | None
    table: pa.Table
    rows: list[Row]
    by_key: dict[tuple[int, str], int]


@dataclass
class Redo:
    """A redo copy in progress: its query runs beside the serving one and sends nothing."""

    copy: str
    sink: QuerySink
    began: float
    pending: list[_Pending] = dataclasses.field(default_factory=list)
    # One past the last bucket the redo has processed.
    end: int | None = None
    # It met tentative input itself (a new failure): drop it, try again after the next heal.
    aborted: bool = False


class DPCOutput(SOutput):
    """The output side of a DPC node: its state, SOutput's rules, and every message sent.

    It outlives the node's queries (``QuerySink`` per query) and, through ``DPCStore``, the
    driver."""

    def __init__(
        self,
        location: str,
        stream: str,
        epoch: int,
        checkpoint_dir: Path,
        store: DPCStore | None = None,
    ) -> None:
        super().__init__(location, stream, epoch)
        self.dpc_stream = f"{stream}.dpc"
        self.rules = StabilisingOutput()
        self.state = NodeState.STABLE
        self._lock = threading.Lock()
        self.store = store
        self.serving = QuerySink(self, checkpoint_dir)
        self.redo: Redo | None = None
        self.redo_count = 0
        # The last all-stable checkpoint: first bucket released tentatively after it, and
        # (id of the first tentative batch, the packed directory).
        self.checkpoint: Checkpoint | None = None
        # One past the last bucket the serving query processed, and what the redo must pass.
        self.processed_end: int | None = None
        self.redo_end: int | None = None
        # (wall time sent, message), in sending order, by this process: what a consumer sees.
        self.messages: list[tuple[float, Message]] = []
        # (state, wall time) on every change, for reports.
        self.history: list[tuple[NodeState, float]] = [(self.state, time.time())]
        self.tentative_batches = 0
        # Where the node's first batch began, when its query started from a replay point: a
        # redo from the checkpoint packed before that batch starts there too.
        self.first_bucket: int | None = None
        self.batches: list[BatchRecord] = []
        self._seq = 0
        self._last_sent_us = 0
        self.resumed = store is not None and self._resume(store)

    @property
    def checkpoint_dir(self) -> Path:
        return self.serving.checkpoint_dir

    # -- durable state ------------------------------------------------------------------------
    def _snapshot(self) -> dict[str, Any]:
        rules = self.rules
        return {
            "state": self.state.value,
            "checkpoint_dir": str(self.checkpoint_dir),
            "checkpoint": (
                None
                if self.checkpoint is None
                else {
                    "next_bucket": self.checkpoint.next_bucket,
                    "batch_id": self.checkpoint.state[0],
                }
            ),
            "processed_end": self.processed_end,
            "redo_end": self.redo_end,
            "redo_count": self.redo_count,
            "seq": self._seq,
            "last_sent_us": self._last_sent_us,
            "tentative_batches": self.tentative_batches,
            "first_bucket": self.first_bucket,
            "rules": {
                "last_stable": list(rules.last_stable) if rules.last_stable else None,
                "tentative_pending": rules.tentative_pending,
                "stable_sent": rules.stable_sent,
                "tentative_sent": rules.tentative_sent,
                "duplicates_dropped": rules.duplicates_dropped,
                "corrections_sent": rules.corrections_sent,
                "undos_sent": rules.undos_sent,
                "correcting": rules.correcting,
            },
        }

    def _persist(self) -> None:
        if self.store is not None:
            self.store.save(self._snapshot())

    def _resume(self, store: DPCStore) -> bool:
        saved = store.load()
        if saved is None:
            return False
        self.state = NodeState(saved["state"])
        self.history = [(self.state, time.time())]
        self.serving = QuerySink(self, Path(saved["checkpoint_dir"]))
        if saved["checkpoint"] is not None:
            packed = store.load_checkpoint()
            batch_id = int(saved["checkpoint"]["batch_id"])
            self.checkpoint = Checkpoint(
                int(saved["checkpoint"]["next_bucket"]), (batch_id, packed)
            )
        self.processed_end = saved["processed_end"]
        self.redo_end = saved["redo_end"]
        self.redo_count = int(saved["redo_count"])
        self._seq = int(saved["seq"])
        self._last_sent_us = int(saved["last_sent_us"])
        self.tentative_batches = int(saved["tentative_batches"])
        first = saved.get("first_bucket")  # files written before session 30 have none
        self.first_bucket = None if first is None else int(first)
        rules = saved["rules"]
        last = rules.pop("last_stable")
        for name, value in rules.items():
            setattr(self.rules, name, value)
        self.rules.last_stable = (int(last[0]), str(last[1])) if last else None
        return True

    def note_advertised(self, state: NodeState) -> None:
        """Record a state the node advertises without its state machine moving (its serving
        query standing down for a redo, and back): reports read the history as what consumers
        were told."""
        with self._lock:
            if self.history[-1][0] is not state:
                self.history.append((state, time.time()))

    def note_first_bucket(self, bucket: int) -> None:
        with self._lock:
            self.first_bucket = bucket
            self._persist()

    # -- sending ------------------------------------------------------------------------------
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
        first = self._seq
        for index, message in enumerate(messages):
            columns["stime"].append(sent_us + index)
            columns["seq"].append(self._seq)
            columns["kind"].append(message.kind.value)
            columns["row_stime_ms"].append(message.row.stime if message.row else None)
            columns["row"].append(message.row.tid if message.row else None)
            self._seq += 1
            self.messages.append((now, message))
        # Keyed by the first seq: a driver that dies after sending and before persisting sends
        # the same messages with the same seq again, and the log keeps one copy.
        client.append(
            self.dpc_stream, pa.table(columns, schema=DPC_SCHEMA), batch_id=first, epoch=self.epoch
        )

    def write(self, batch: DataFrame, batch_id: int) -> bool:
        return self.write_from(self.serving, batch, batch_id)

    def write_from(self, sink: QuerySink, batch: DataFrame, batch_id: int) -> bool:
        with self._lock:
            if self.redo is not None and sink is self.redo.sink:
                return self._hold(self.redo, batch, batch_id)
            if sink is not self.serving:
                # A late batch of a query that no longer serves (stopped at the switch).
                _drain(batch)
                return False
            written = self._serve(batch, batch_id)
            self._persist()
            return written

    def _serve(self, batch: DataFrame, batch_id: int) -> bool:
        directory = self.checkpoint_dir
        end = offset_entry(directory, batch_id)
        start = offset_entry(directory, batch_id - 1) if batch_id > 0 else None
        tentative_input = end is not None and "tentative_from" in end
        if tentative_input and self.state is not NodeState.UP_FAILURE:
            assert end is not None
            # Before this batch's state exists: the directory is the all-stable state.
            packed = pack_directory(directory)
            first = int(end["tentative_from"])
            self.checkpoint = Checkpoint(first, (batch_id, packed))
            if self.store is not None:
                self.store.save_checkpoint(packed)
                self.store.limit_acks(redo_reads_from(start))
        if tentative_input:
            self.tentative_batches += 1
            self._fire(NodeEvent.TENTATIVE_INPUT)
        if end is not None:
            self.processed_end = int(end["bucket"])
        table = batch.toArrow()
        rows, by_key = _rows(table)
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
            start_bucket = int(start["bucket"]) if start is not None else None
            return self._stable(client, _Pending(batch_id, start_bucket, None, table, rows, by_key))

    def _stable(self, client: StreamClient, batch: _Pending) -> bool:
        sent = self.rules.stable(batch.rows)
        fresh = [batch.by_key[m.row.key] for m in sent if m.row is not None]
        written = client.append(
            self.stream,
            batch.table.take(pa.array(fresh, type=pa.int64())),
            batch_id=batch.batch_id,
            epoch=self.epoch,
        )
        self._send(client, sent)
        if (
            self.state is NodeState.STABILIZATION
            and self.redo_end is not None
            and batch.start is not None
            and batch.start >= self.redo_end
        ):
            # This batch began past everything processed tentatively, after the watermark of
            # the redo: every correction has been sent.
            self._send(client, self.rules.rec_done())
            self._fire(NodeEvent.RECONCILED)
            self.redo_end = None
        return written

    def _hold(self, redo: Redo, batch: DataFrame, batch_id: int) -> bool:
        end = offset_entry(redo.sink.checkpoint_dir, batch_id)
        start = offset_entry(redo.sink.checkpoint_dir, batch_id - 1) if batch_id > 0 else None
        if end is not None and "tentative_from" in end:
            redo.aborted = True
        if redo.aborted:
            _drain(batch)
            return False
        table = batch.toArrow()
        rows, by_key = _rows(table)
        end_bucket = int(end["bucket"]) if end is not None else None
        start_bucket = int(start["bucket"]) if start is not None else None
        redo.pending.append(_Pending(batch_id, start_bucket, end_bucket, table, rows, by_key))
        if end_bucket is not None:
            redo.end = end_bucket
        return True

    # -- reconciliation -----------------------------------------------------------------------
    def open_redo(self, copy: str, checkpoint_dir: Path) -> QuerySink:
        with self._lock:
            sink = QuerySink(self, checkpoint_dir)
            self.redo = Redo(copy, sink, time.time())
            self.redo_count += 1
            self._persist()
            return sink

    def drop_redo(self) -> Redo | None:
        with self._lock:
            redo, self.redo = self.redo, None
            return redo

    def caught_up(self) -> bool:
        """The redo has processed at least what the serving query has."""
        redo = self.redo
        return (
            redo is not None
            and not redo.aborted
            and redo.end is not None
            and (self.processed_end is None or redo.end >= self.processed_end)
        )

    def switch(self) -> None:
        """UP_FAILURE -> STABILIZATION, once the serving query has stopped: UNDO the tentative
        suffix, send the redo's held corrections, and serve from the redo from now on."""
        with self._lock:
            redo = self.redo
            if redo is None:
                raise RuntimeError(f"{self.stream}: no redo to switch to")
            self._fire(NodeEvent.HEALED)
            self.redo_end = self.processed_end
            self.redo = None
            self.serving = redo.sink
            if redo.end is not None:
                self.processed_end = redo.end
            with StreamClient(self.location) as client:
                client.declare(self.dpc_stream, 1.0)
                self._send(client, self.rules.begin_corrections())
                for pending in redo.pending:
                    self.batches.append(
                        BatchRecord(
                            pending.batch_id, pending.end, False, len(pending.rows), time.time()
                        )
                    )
                    self._stable(client, pending)
            self.checkpoint = None
            # Recorded before the acknowledgements may pass the old first tentative bucket: a
            # restart must not find the producers trimmed while it still believes it is in
            # failure. (A driver dying between the UNDO and this line still resends after its
            # restart: the switch is not atomic with respect to a crash.)
            self._persist()
            if self.store is not None:
                self.store.limit_acks(None)

    def begin_reconciliation(self) -> None:
        """Kept for callers of the stop/restore/restart path: UNDO now, the redo follows."""
        with self._lock:
            self._fire(NodeEvent.HEALED)
            self.redo_end = self.processed_end
            with StreamClient(self.location) as client:
                client.declare(self.dpc_stream, 1.0)
                self._send(client, self.rules.begin_corrections())
            self._persist()


def _rows(table: pa.Table) -> tuple[list[Row], dict[tuple[int, str], int]]:
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


def restore_stable_checkpoint(
    checkpoint_dir: Path, packed: PackedCheckpoint, batch_id: int
) -> None:
    """Put the directory packed before batch ``batch_id`` at ``checkpoint_dir`` and forget that
    batch and later ones, so Spark plans them again (from the producers' logs, now stable)."""
    unpack_directory(packed, checkpoint_dir)
    for log in ("offsets", "commits"):
        folder = checkpoint_dir / log
        if not folder.exists():
            continue
        for path in folder.iterdir():
            name = path.name.lstrip(".").removesuffix(".crc")
            if name.isdigit() and int(name) >= batch_id:
                path.unlink()
    if batch_id == 0:
        # Packed before the first batch: a new query, to Spark. The directory still holds the
        # state's schema files, written when batch 0 was planned, and Spark 4 refuses a new
        # query whose state location is not empty (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY):
        # every redo died at its start and the copy stayed UP_FAILURE for good (bench/ha,
        # session 30: 58 redos in 9 minutes).
        shutil.rmtree(checkpoint_dir / "state", ignore_errors=True)


class CutWatch:
    """Whether an input, missing while a redo runs, has stayed missing for ``grace_s`` (X):
    then the redo, which releases stable buckets only, would stand still holding the permit.
    A single failed heal check is no new failure: a boundary query that timed out on a loaded
    machine, or an input late by less than X."""

    def __init__(self, grace_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._grace_s, self._clock = grace_s, clock
        self._since: float | None = None

    def reset(self) -> None:
        self._since = None

    def cut_again(self, healed: bool) -> bool:
        if healed:
            self._since = None
            return False
        now = self._clock()
        if self._since is None:
            self._since = now
        return now - self._since >= self._grace_s


class PermitHold:
    """The reconciliation permit as one copy holds it: asked for before its redo, renewed while
    it reconciles, given back once it is STABLE.

    ``request(name)`` asks the arbiter: True granted (or renewed), False refused (another copy
    holds it), None not asked (the arbiter unreachable: the lease granted last still runs, ask
    again at the next poll). A refused renewal means the lease ran out and the permit went to
    another copy: it is no longer held, and the caller must stop reconciling."""

    def __init__(
        self,
        name: str,
        request: Callable[[str], bool | None],
        release: Callable[[str], None],
        renew_every_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._request, self._release = request, release
        self._every, self._clock = renew_every_s, clock
        self.held = False
        self._granted_at = 0.0
        # Renewals refused while reconciling (the permit lost to another copy).
        self.lost = 0

    def acquire(self) -> bool:
        granted = self._request(self.name) is True
        if granted:
            self.held, self._granted_at = True, self._clock()
        return granted

    def keep(self) -> bool:
        """Renew when due; False once the permit is not held (refused: lost to another copy)."""
        if not self.held:
            return False
        now = self._clock()
        if now - self._granted_at < self._every:
            return True
        answer = self._request(self.name)
        if answer is None:
            return True
        if not answer:
            self.held = False
            self.lost += 1
            return False
        self._granted_at = now
        return True

    def release(self) -> None:
        if self.held:
            self.held = False
            self._release(self.name)


class DPCFragment:
    """One DPC replica of a fragment on a ``FragmentRuntime``; call ``poll`` regularly.

    A new DPCFragment for the same fragment and runtime root picks up the state a previous
    driver left in ``<root>/<name>.dpc`` (``resumed``)."""

    def __init__(
        self,
        runtime: FragmentRuntime,
        spec: FragmentSpec,
        settings: DPCSettings,
        *,
        epoch: int,
        request_permission: Callable[[str], bool | None] | None = None,
        release_permission: Callable[[str], None] | None = None,
        others_serving: Callable[[str], bool] | None = None,
    ) -> None:
        """``others_serving(fragment)``: whether another copy serves the fragment's consumers,
        as known when the permit was last granted (``DPCSettings.stand_down_when_served``)."""
        self.runtime = runtime
        self._others_serving = others_serving or (lambda _name: False)
        self.settings = settings
        self.store = DPCStore(runtime.checkpoint_root / f"{spec.name}.dpc")
        self.spec = dataclasses.replace(
            spec,
            options={
                **spec.options,
                **settings.source_options(spec.bucket_seconds),
                "ack_limit_file": str(self.store.ack_limit_path),
                # Complete input buckets are copied here before they are released, so a batch
                # planned before a cut still reads after it; shared by the serving query and
                # the redo copies, trimmed where the producers trim.
                "spool_dir": str(self.store.spool_path),
                **(
                    {"budget_file": str(self.store.budget_path)} if settings.adaptive_budget else {}
                ),
                # The redo runs on a copy and the serving query goes on: new buckets are not held
                # for it (that would add the budget to their latency), they go out at once.
                "hold_healed": "false",
            },
        )
        self.epoch = epoch
        self.sink = DPCOutput(
            spec.output.location,
            spec.output.stream,
            epoch,
            runtime.checkpoint_dir(spec.name),
            self.store,
        )
        if self.sink.resumed:
            runtime.use_checkpoint_dir(spec.name, self.sink.checkpoint_dir)
        # A redo copy a dead driver left behind is not worth resuming: it sent nothing.
        for stale in runtime.checkpoint_root.glob(f"{spec.name}.redo-*"):
            if stale != self.sink.checkpoint_dir:
                shutil.rmtree(stale, ignore_errors=True)
        for pattern in ("pause-*", "stable-only-*"):
            for left in self.store.directory.glob(pattern):
                left.unlink(missing_ok=True)
        self.permit = PermitHold(
            spec.name,
            request_permission or (lambda _name: True),
            release_permission or (lambda _name: None),
            settings.permit_renew_seconds,
        )
        self.reconciliations: list[dict[str, float]] = []
        # Adaptive budget: the last one written, and (wall time, ms) on every change.
        self._budget: int | None = None
        self.budgets: list[tuple[float, int]] = []
        # Redo yielding: when the current pause began (None: not paused), seconds paused per redo.
        self._paused_since: float | None = None
        self.redo_paused_s = 0.0
        # Since when a healed node has waited for a gap to start its redo in (None: not waiting),
        # and the longest a redo yields at a time: X.
        self._gap_since: float | None = None
        self._yield_s = settings.max_delay_seconds
        self._unpaused_until = 0.0
        # Redo copies whose query died before the switch (each was dropped and started again).
        self.redo_failures = 0
        # The heal check while a redo runs, and the redo copies dropped because an input stayed
        # cut for X (each asked for the permit again after the next heal).
        self._cuts = CutWatch(settings.max_delay_seconds)
        self.redo_recuts = 0
        # Borealis's way (``serve_while_reconciling`` off): the serving query's spec while it is
        # stopped for a redo (None: it serves).
        self._stood_down: FragmentSpec | None = None

    @property
    def state(self) -> NodeState:
        return self.sink.state

    @property
    def advertised_state(self) -> NodeState:
        """What consumers and the registry are told: STABILIZATION while the serving query stands
        down for a redo (it sends nothing then), else the node's state."""
        return NodeState.STABILIZATION if self._stood_down is not None else self.sink.state

    @property
    def resumed(self) -> bool:
        return self.sink.resumed

    def start(self, *, replay_from: int | None = None) -> StreamingQuery:
        spec = self.spec
        checkpoint = self.sink.checkpoint
        if self.sink.state is NodeState.UP_FAILURE and checkpoint is not None:
            # Restarted in failure: the new reader must go on as one in failure (delay rules,
            # and no acknowledgement at or past the first tentative bucket).
            spec = dataclasses.replace(
                spec, options={**spec.options, "first_tentative": str(checkpoint.next_bucket)}
            )
        if replay_from is not None:
            self.sink.note_first_bucket(replay_from)
        return self.runtime.start(
            spec, epoch=self.epoch, replay_from=replay_from, sink=self.sink.serving
        )

    def query(self) -> StreamingQuery:
        return self.runtime.query(self.spec.name)

    def healed(self) -> bool:
        """Every bucket released since the checkpoint now has all its inputs' boundaries."""
        checkpoint, end = self.sink.checkpoint, self.sink.processed_end
        if self.sink.state is not NodeState.UP_FAILURE or checkpoint is None or end is None:
            return False
        # The inputs as the agent keeps them (their active copies placed since the start).
        running = self.runtime.running_spec(self.spec.name) or self._stood_down
        inputs = (running or self.spec).inputs
        names = [f"{i.location}/{i.stream}" for i in inputs]
        bucket_ms = round(self.spec.bucket_seconds * 1000)
        rules = SUnion(names, bucket_ms=bucket_ms, delay_budget_ms=self.settings.delay_budget_ms)
        for name, ref in zip(names, inputs, strict=True):
            try:
                boundary = input_boundary(ref)
            except InputCutOff:
                return False  # still cut off: not healed (the next poll asks again)
            if boundary is not None:
                rules.receive(name, Message.boundary(int(boundary) * bucket_ms))
        return all(rules.stable_ready(b) for b in range(checkpoint.next_bucket, end))

    def adapt_budget(self) -> int:
        """Budget = X - (median of the serving query's last batches + one trigger), capped at
        0.9 X (and at least ``min_budget_share`` X): a bucket released at its deadline then
        leaves within X even on a busy machine.
        Written for the source (option ``budget_file``) when it moves by 50 ms or more."""
        try:
            progress = self.runtime.recent_progress(self.spec.name, last=10)
        except KeyError:
            progress = []
        durations = [int(p["durationMs"].get("triggerExecution", 0)) for p in progress]
        budget = budget_for(self.settings, durations, round(self.spec.trigger_seconds * 1000))
        if self._budget is None or abs(budget - self._budget) >= 50:
            self.store.write_budget(budget)
            self._budget = budget
            self.budgets.append((time.time(), budget))
        return budget

    def serving_needs_cores(self) -> bool:
        """The serving query has a batch running, or (wall clock) a bucket that ended less than
        X ago and is not sent yet: a redo batch started now would stretch its latency past X."""
        status = self.query().status
        if status.get("isTriggerActive") and status.get("isDataAvailable"):
            return True
        end = self.sink.processed_end
        if self.settings.clock is not None or end is None:
            # An injected clock is a stream: asking it here would be a Flight call per poll.
            return False
        bucket_ms = round(self.spec.bucket_seconds * 1000)
        now_ms = time.time() * 1000 - self.settings.clock_offset_ms
        oldest_end_ms = (end + 1) * bucket_ms
        # Older than X: it has missed X already, and yielding for it would starve the redo once
        # the input stops (the clock goes on, nothing comes).
        return oldest_end_ms <= now_ms < oldest_end_ms + self.settings.max_delay_seconds * 1000

    def yield_redo(self, redo: Redo) -> None:
        """Pause the redo copy's planning while the serving query needs the cores.

        Why not the budget: after the heal every new bucket has all its boundaries and goes at
        once (``hold_healed=false``), so the budget does not delay it; its latency is the
        trigger plus the serving batch, and that batch ran 2-3x slower while the redo's batches
        (its first one restores state and plans, for seconds) took the two cores. The median of
        the serving query's recent batches cannot foresee that, and lowering the budget only
        makes more tentative rows. So the redo goes in the gaps: between serving batches, it
        plans its next one (up to ``max_buckets_per_batch`` buckets); a redo batch already
        running finishes, so the serving query shares the cores with at most one of them."""
        now = time.time()
        # Yield for X at most at a time: on a machine where every serving batch takes most of a
        # bucket there is no gap at all, and a redo that only ever yields never catches up (the
        # copy stayed UP_FAILURE for good at load 10). Past X it plans one batch, then yields
        # again.
        if self._paused_since is not None and now - self._paused_since > self._yield_s:
            # Two triggers unpaused: time for the redo's source to plan its next batch.
            self._unpaused_until = now + 2 * self.spec.trigger_seconds
        paused = now >= self._unpaused_until and self.serving_needs_cores()
        if paused and self._paused_since is None:
            self._paused_since = now
        elif not paused and self._paused_since is not None:
            self.redo_paused_s += now - self._paused_since
            self._paused_since = None
        self.store.pause(redo.copy, paused)

    def _unpause(self, copy: str) -> None:
        if self._paused_since is not None:
            self.redo_paused_s += time.time() - self._paused_since
            self._paused_since = None
        self.store.pause(copy, False)

    def poll(self) -> bool:
        """Advance reconciliation; True when it started a redo copy (the heal was noticed and
        the permit granted). The permit is held from the redo's start to REC_DONE."""
        if self.settings.adaptive_budget and self._stood_down is None:
            self.adapt_budget()
        redo = self.sink.redo
        if redo is None:
            if self.permit.held:
                if self.sink.state is NodeState.STABLE:
                    self.permit.release()
                else:
                    # Switched (STABILIZATION until REC_DONE): the UNDO is out, there is no
                    # going back, but the permit stays this copy's until it is STABLE.
                    self.permit.keep()
            if not self.healed():
                self._gap_since = None
                return False
            now = time.time()
            if self._gap_since is None:
                self._gap_since = now
            if (
                self.settings.redo_yields
                and self.settings.serve_while_reconciling
                and now - self._gap_since <= self._yield_s
                and self.serving_needs_cores()
            ):
                # Start the redo in a gap too: starting a query (its source's Python worker,
                # the checkpoint) costs a second or two of CPU on the same cores. For X at most:
                # a loaded machine may have no gap (see yield_redo). A copy that reconciles
                # alone stops its serving query for the redo: no gap to wait for.
                return False
            if not self.permit.acquire():
                return False
            self._gap_since = None
            self.begin_redo()
            return True
        if not redo.aborted and not self.permit.keep():
            # The renewal was refused: the lease ran out (this poller or the registry stalled
            # past it) and another copy may be reconciling now. Two at once is what the permit
            # exists to prevent, so this redo is dropped (it sent nothing) and asked for again.
            redo.aborted = True
        if not redo.aborted and self._cuts.cut_again(self.healed()):
            # The redo releases stable buckets only, so while an input is cut it stands still
            # and holds the permit that another copy, healed, may need. The serving query
            # covers X meanwhile; the redo starts again from the same checkpoint after the heal.
            redo.aborted = True
            self.redo_recuts += 1
        if not redo.aborted and not self.runtime.is_running(redo.copy):
            # The copy's query died (seen at load 24: its Python worker did not connect back in
            # time). It sent nothing, so drop it like one that met tentative input: the next
            # poll starts a new copy, instead of staying in UP_FAILURE for good.
            redo.aborted = True
            self.redo_failures += 1
        if redo.aborted:
            self._unpause(redo.copy)
            self._cuts.reset()
            self.runtime.stop(redo.copy)
            self.store.stable_only_path(redo.copy).unlink(missing_ok=True)
            self.sink.drop_redo()
            shutil.rmtree(redo.sink.checkpoint_dir, ignore_errors=True)
            self._serve_again()
            self.permit.release()
            return False
        if self.sink.caught_up():
            self.switch()
        elif self.settings.redo_yields and self._stood_down is None:
            self.yield_redo(redo)
        return False

    def reconciles_alone(self) -> bool:
        """Whether the redo about to start runs with the serving query stood down."""
        if not self.settings.serve_while_reconciling:
            return True
        return self.settings.stand_down_when_served and self._others_serving(self.spec.name)

    def _stand_down(self) -> None:
        """Borealis's way: stop the serving query for the redo's time. Its checkpoint stays the
        fragment's (the switch adopts the redo's; a dropped redo restarts it from there)."""
        self._stood_down = self.runtime.running_spec(self.spec.name) or self.spec
        self.runtime.stop(self.spec.name)
        self.sink.note_advertised(NodeState.STABILIZATION)

    def _serve_again(self) -> None:
        """The redo was dropped: the stood-down serving query resumes from its checkpoint, still
        in failure (tentative within X), until the next heal and permit."""
        stood_down, self._stood_down = self._stood_down, None
        if stood_down is None:
            return
        self.sink.note_advertised(self.sink.state)
        self.start()

    def begin_redo(self) -> None:
        """Start the redo copy from the all-stable checkpoint; the serving query goes on (or,
        reconciling alone, stands down)."""
        checkpoint = self.sink.checkpoint
        if checkpoint is None:
            raise RuntimeError(f"{self.spec.name}: no stable checkpoint to reconcile from")
        began = time.time()
        batch_id, packed = checkpoint.state
        copy = f"{self.spec.name}.redo-{self.sink.redo_count + 1}"
        directory = self.runtime.checkpoint_root / copy
        restore_stable_checkpoint(directory, packed, batch_id)
        # The copy is a new query to Spark: with the serving query's id, starting it would stop
        # the serving one (a restart of the same query, spark.sql.streaming.stopActiveRunOnRestart).
        (directory / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}) + "\n")
        sink = self.sink.open_redo(copy, directory)
        # Stable buckets only: near the live edge, an input late by more than the budget (at
        # 100 ms buckets, a producer's hiccup) would otherwise go tentative in the redo too and
        # the redo, useless then, would be dropped (bench/ha, session 28: an 8 s failure whose
        # first redo was dropped so, and the copy passed X while its second one ran).
        stable_only = self.store.stable_only_path(copy)
        stable_only.touch()
        self._cuts.reset()
        options = {**self.spec.options, "stable_only_file": str(stable_only)}
        if batch_id == 0 and self.sink.first_bucket is not None:
            # Tentative from its first batch (a start-up backlog past the budget): the redo is a
            # new query, and must begin where the serving one did.
            options["start_bucket"] = str(self.sink.first_bucket)
        alone = self.reconciles_alone()
        if self.settings.redo_yields and not alone:
            # Born paused: its first batch (state restore, planning) is the heaviest, and the next
            # poll decides whether the serving query can spare the cores for it now.
            self.store.pause(copy, True)
            self._paused_since = time.time()
            options["pause_file"] = str(self.store.pause_path(copy))
        spec = dataclasses.replace(self.spec, options=options)
        # Read before a stand-down stops the serving query (its progress goes with it).
        try:
            recent = self.runtime.recent_progress(self.spec.name)
        except KeyError:
            recent = []
        if alone:
            # Before the copy starts, so that it never shares the cores with a serving batch.
            self._stand_down()
        self.runtime.start_copy(spec, copy, directory, epoch=self.epoch, sink=sink)
        record: dict[str, float] = {"began": began, "redo_started": time.time()}
        # 1: the serving query stood down for this redo (alone, or auto with another serving).
        record["stood_down"] = 1.0 if alone else 0.0
        # State size at the heal, for reconciliation time vs state size: the packed all-stable
        # checkpoint the redo restores, and the rows in the serving query's state store.
        record["checkpoint_bytes"] = len(packed.data)
        record["state_rows"] = (
            max(
                (sum(int(op.get("numRowsTotal", 0)) for op in p.get("stateOperators") or []))
                for p in recent
            )
            if recent
            else 0
        )
        self.reconciliations.append(record)

    def switch(self) -> None:
        """Stop the serving query, then UNDO + corrections and serve from the redo copy."""
        redo = self.sink.redo
        assert redo is not None
        old = self.runtime.checkpoint_dir(self.spec.name)
        # The copy becomes the serving query: it must never read its pause file again.
        self._unpause(redo.copy)
        self.runtime.stop(self.spec.name)  # already stopped when it stood down
        self._stood_down = None
        self.sink.switch()
        # Only now: its batches go through the serving path from here, which handles a
        # tentative one (before, the redo's hold would have dropped it mid-switch).
        self.store.stable_only_path(redo.copy).unlink(missing_ok=True)
        self.runtime.adopt(self.spec.name, redo.copy)
        if old != redo.sink.checkpoint_dir:
            shutil.rmtree(old, ignore_errors=True)
        if self.reconciliations:
            self.reconciliations[-1]["switched"] = time.time()

    def reconcile(self) -> None:
        """Reconcile now, waiting for the redo to catch up (tests; ``poll`` does it in steps)."""
        if self.sink.redo is None:
            self.begin_redo()
        while not self.sink.caught_up():
            if self.sink.redo is None or self.sink.redo.aborted:
                raise RuntimeError(f"{self.spec.name}: the redo met tentative input")
            time.sleep(0.05)
        self.switch()


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
