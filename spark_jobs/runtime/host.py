"""A host (one participant's Spark) running fragments as streaming queries.

``FragmentRuntime`` owns a checkpoint root and a Flight ``StreamServer``; it starts a fragment as
``SUnion -> fragment function -> SOutput`` with the fragment's checkpoint under its root, and can
stop it after its last committed micro-batch, pack the checkpoint, and restore a checkpoint that
was shipped to its server. Several runtimes may share one SparkSession (tests, the one-process
demo): the session stays warm, only queries stop and start.

Size: one module past 600 lines because ``FragmentRuntime`` is one object (start, stop, copy,
adopt, pack and install share its maps of running queries and checkpoint directories) and the
listener that publishes boundaries reads those maps. Its seam is the boundary listener and the
alternates file, which could move to a module of their own without touching the runtime's state.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from spark_jobs.runtime.checkpoint_store import CheckpointStore
from spark_jobs.runtime.dataplane import client_defaults
from spark_jobs.runtime.listeners import ProgressBook, ProgressListener
from spark_jobs.runtime.soutput import Mirror, SOutput, read_mirror, read_namespace
from spark_jobs.runtime.sunion import SUnionDataSource
from spark_jobs.runtime.transport import PackedCheckpoint, StreamClient, StreamServer

log = logging.getLogger(__name__)
# Registering a consumer is one small call; a producer that does not answer within this is cut
# off or gone, and the fragment starts without the hold rather than wait for TCP.
HOLD_TIMEOUT_S = 5.0
SCHEDULER_POOL = "spark.scheduler.pool"


@dataclass(frozen=True)
class StreamRef:
    """A stream in some host's output log, addressed over the network."""

    location: str
    stream: str
    # The same stream's stable logs written by active copies of its producer: the fragment
    # reads each bucket from whichever holds it (``spark_jobs.runtime.sunion``, "Replicated
    # inputs"), so a primary cut off or behind does not hold it back.
    alternates: tuple[StreamRef, ...] = ()

    def source(self) -> dict[str, Any]:
        """The SUnion source's ``inputs`` entry for this stream."""
        entry: dict[str, Any] = {"location": self.location, "stream": self.stream}
        if self.alternates:
            entry["alternates"] = [
                {"location": a.location, "stream": a.stream} for a in self.alternates
            ]
        return entry


@dataclass(frozen=True)
class FragmentSpec:
    """What a host needs to run a fragment; identical wherever the fragment runs."""

    name: str
    # The fragment: a pure function of its (unioned) input; bind parameters with partial().
    build: Callable[[DataFrame], DataFrame]
    input_schema: StructType
    inputs: tuple[StreamRef, ...]
    output: StreamRef
    bucket_seconds: float = 1.0
    trigger_seconds: float = 0.5
    max_buckets_per_batch: int | None = None
    options: dict[str, str] = field(default_factory=dict)


class _BoundaryPublisher(ProgressListener):
    """Sends each fragment's output BOUNDARY after every micro-batch, so fragments can chain.

    Fragments report windows with ``stime`` = window end, and in append mode a window is emitted
    in the batch whose watermark reaches its end; every window still in state ends after that
    watermark. So after batch N, no output row below the watermark of batch N can come any more:
    the output stream's boundary is the bucket holding that watermark. A fragment without a
    watermark (stateless) passes stime through, and its boundary is SUnion's end offset.
    Progress events reach this listener after the batch's SOutput write, in batch order.
    """

    def __init__(self) -> None:
        self.outputs: dict[str, tuple[str, str, int, float]] = {}
        # Sinks that may hold the boundary back (DPC: no BOUNDARY while output is tentative).
        self.sinks: dict[str, SOutput] = {}
        self.errors: list[str] = []
        # Every query's recent progress, for pollers (see ``listeners``): one listener delivers
        # it, so each batch crosses from the JVM once.
        self.book = ProgressBook()

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        self.book.record(progress)
        target = self.outputs.get(str(progress.id))
        if target is None:
            return
        sink = self.sinks.get(str(progress.id))
        if sink is not None and sink.holds_boundaries():
            return
        location, stream, epoch, bucket_seconds = target
        boundary = _output_boundary(progress.eventTime, progress.sources, bucket_seconds)
        if boundary is None:
            return
        try:
            with StreamClient(location) as client:
                client.advance(stream, boundary, epoch, bucket_seconds)
        except Exception as error:  # a fenced old host, or the log's host is gone: not fatal
            message = f"{stream}: {error}"
            if message not in self.errors:
                # Once per distinct error: a fenced host or a width mismatch repeats at every
                # batch, and one line says it (the list was kept and never shown before).
                log.warning("BOUNDARY of %s", message)
            self.errors = [*self.errors[-49:], message]


def _credential_options(spec: FragmentSpec) -> dict[str, str]:
    """Where the query's Spark processes find this agent's data-plane tokens and trusted
    certificates (they run apart from this process, so the process defaults do not reach
    them; see ``spark_jobs.runtime.dataplane``)."""
    defaults = client_defaults()
    options = {}
    if defaults.token_file is not None:
        options["token_file"] = defaults.token_file
    if defaults.tls_roots_file is not None:
        options["tls_roots_file"] = defaults.tls_roots_file
    return options


def _output_boundary(event_time: dict[str, str], sources: Any, bucket_seconds: float) -> int | None:
    bucket_micros = round(bucket_seconds * 1_000_000)
    watermark = event_time.get("watermark")
    if watermark is not None:
        moment = datetime.fromisoformat(watermark.replace("Z", "+00:00"))
        micros = round(moment.timestamp() * 1_000_000)
        return micros // bucket_micros if micros > 0 else None
    if sources:
        end = json.loads(sources[0].endOffset or "null")
        return int(end["bucket"]) if end else None
    return None


def only_alternates_differ(running: Sequence[StreamRef], wanted: Sequence[StreamRef]) -> bool:
    """Whether ``wanted`` reads the same input logs as ``running`` with other alternates: what
    ``FragmentRuntime.update_alternates`` applies to a running query (other logs: a restart)."""
    return _logs(running) == _logs(wanted) and tuple(running) != tuple(wanted)


def _logs(refs: Sequence[StreamRef]) -> list[tuple[str, str]]:
    return [(ref.location, ref.stream) for ref in refs]


def _write_alternates(path: Path, inputs: Sequence[StreamRef]) -> None:
    """The file SUnion's ``alternates_file`` names: each input's alternates under its key,
    written whole (a reader sees the old file or the new, never half of one)."""
    listed = {
        f"{ref.location}/{ref.stream}": [
            {"location": a.location, "stream": a.stream} for a in ref.alternates
        ]
        for ref in inputs
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, scratch = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(descriptor, "w") as out:
        json.dump(listed, out)
    os.replace(scratch, path)


@dataclass(frozen=True)
class FragmentStats:
    """What an agent needs to price a fragment, from Spark's last progress report."""

    batch_id: int
    input_rows_per_second: float
    processed_rows_per_second: float
    batch_seconds: float
    state_rows: int


@dataclass
class _Running:
    spec: FragmentSpec
    query: StreamingQuery
    sink: SOutput
    epoch: int
    # Asked once: the run's key in the progress book (each ask of the query is a Py4J call).
    run_id: str


def stop_after_commit(query: StreamingQuery, timeout: float = 30.0) -> None:
    """Stop a query between micro-batches, so its last batch is committed.

    Spark has no graceful stop. The quiet moment is when the trigger is idle, but a query whose
    batches take longer than its trigger interval runs them back to back and has none: waiting
    for one took 0.6-4.2 s per move in the demo. So the wait also ends as soon as the batch
    running at the call has committed; the stop then cuts at most the start of the next one.
    A cut batch has its offsets logged but not committed, and the next host re-runs it from the
    checkpoint (SOutput drops its output if it got that far), so this wait is about speed, not
    correctness.
    """
    deadline = time.monotonic() + timeout
    running_after = _last_completed_batch(query)
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        if _last_completed_batch(query) > running_after:
            break
        time.sleep(0.005)
    query.stop()


def _last_completed_batch(query: StreamingQuery) -> int:
    progress = query.lastProgress
    return int(progress["batchId"]) if progress else -1


def pack_directory(directory: Path) -> PackedCheckpoint:
    buffer = io.BytesIO()
    # Plain tar: RocksDB's files are already compressed, gzip would cost time for little.
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(directory, arcname=".")
    return PackedCheckpoint.of(buffer.getvalue())


def unpack_directory(packed: PackedCheckpoint, directory: Path) -> None:
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(packed.data), mode="r") as tar:
        tar.extractall(directory, filter="data")


class FragmentRuntime:
    def __init__(
        self,
        name: str,
        spark: SparkSession | Callable[[], SparkSession],
        checkpoint_root: Path | str,
        *,
        authorize_release: Callable[[str, int], bool] | None = None,
        server: StreamServer | None = None,
    ) -> None:
        """``spark`` is a session or a factory called when the first query starts (an agent
        serves its Flight endpoint from the start but pays for a JVM only once it hosts a real
        fragment). ``authorize_release(fragment, movement)`` guards remote release requests: an
        agent passes a check that the registry holds that movement as prepared from this host.
        ``server`` is the host's Flight endpoint (default: a new one on loopback).
        ``checkpoint_root`` is a path or a URI (``CheckpointStore``): on a cluster, storage the
        executors share; fragments' checkpoints are packed from and installed to it there. DPC's
        redo copies and warm standby read checkpoint directories as local paths."""
        self.name = name
        self._spark: SparkSession | None = None
        self._spark_lock = threading.Lock()
        self._spark_factory: Callable[[], SparkSession] | None = None
        if isinstance(spark, SparkSession):
            self._spark = spark
        else:
            self._spark_factory = spark
        self.store = CheckpointStore(checkpoint_root)
        # Local storage (a path or file:// URI) also serves DPC and standby, which read the tree.
        self.checkpoint_root = self.store.local_root or Path(self.store.root)
        self._pace_root = self.store.local_root or Path(tempfile.gettempdir()) / f"fedload-{name}"
        # The pace and alternates directories beside the root, and which of them this runtime
        # made: close() removes those whole (a temporary root would leave them in /tmp), and
        # from one it found only the files of its own fragments (it may be shared, or left by a
        # run that crashed; nothing in either survives a restart: see ``_remove_sidecars``).
        self._sidecar_dirs: dict[Path, bool] = {}
        self._sidecar_files: set[Path] = set()
        self.server = server if server is not None else StreamServer()
        self.server.handler = self
        self.location = self.server.location
        self._authorize_release = authorize_release
        self._running: dict[str, _Running] = {}
        # Specs of fragments this host ran, so a remote mover can ask it to reinstate one.
        self._specs: dict[str, FragmentSpec] = {}
        self._boundaries = _BoundaryPublisher()
        # A fragment whose checkpoint moved to another directory under the root (DPC adopts the
        # directory of its redo copy), and the directories of running copies.
        self._checkpoint_dirs: dict[str, Path] = {}
        self._copy_dirs: dict[str, Path] = {}
        if self._spark is not None:
            self._attach(self._spark)

    @property
    def spark(self) -> SparkSession:
        with self._spark_lock:  # a warm-up thread and the first start may ask at once
            if self._spark is None:
                assert self._spark_factory is not None
                spark = self._spark_factory()
                self._attach(spark)
                self._spark = spark
            return self._spark

    @property
    def has_spark(self) -> bool:
        return self._spark is not None

    def _attach(self, spark: SparkSession) -> None:
        spark.dataSource.register(SUnionDataSource)
        spark.streams.addListener(self._boundaries)

    def _location(self, fragment: str) -> str:
        if fragment in self._checkpoint_dirs:
            return str(self._checkpoint_dirs[fragment])
        return self.store.location(fragment)

    def checkpoint_dir(self, fragment: str) -> Path:
        return self._checkpoint_dirs.get(fragment, self.checkpoint_root / fragment)

    def output_namespace(self, fragment: str) -> int:
        """The output batch-id namespace ``fragment``'s checkpoint carries (``soutput``)."""
        if self.store.local_root is None:
            return 0
        return read_namespace(self.checkpoint_dir(fragment))

    def output_mirror(self, fragment: str) -> Mirror | None:
        """Which batches of ``fragment``'s checkpoint ran another host's batches (``soutput``)."""
        if self.store.local_root is None:
            return None
        return read_mirror(self.checkpoint_dir(fragment))

    def pace_file(self, fragment: str) -> Path:
        """Where a warm copy of ``fragment`` paces this host's query (``runtime.pace``): on the
        driver's disk (SUnion plans on the driver), beside the checkpoint root."""
        return self._sidecar(".pace", fragment)

    def use_checkpoint_dir(self, fragment: str, directory: Path) -> None:
        """Run ``fragment`` from ``directory`` from now on (a restarted DPC node that had
        adopted a redo copy's directory before the restart)."""
        self._checkpoint_dirs[fragment] = Path(directory)

    def is_running(self, fragment: str) -> bool:
        return fragment in self._running and self._running[fragment].query.isActive

    def query(self, fragment: str) -> StreamingQuery:
        return self._running[fragment].query

    def recent_progress(self, fragment: str, last: int | None = None) -> list[Any]:
        """The running query's latest progress reports, oldest first (``recentProgress`` without
        its cost: see ``listeners``); KeyError for a fragment not started here."""
        return self._boundaries.book.recent(self._running[fragment].run_id, last)

    def run_id(self, fragment: str) -> str | None:
        """The run id of the fragment's query here (its job group in Spark), None if none."""
        running = self._running.get(fragment)
        return None if running is None else running.run_id

    def started(self) -> list[str]:
        """Fragments (and copies) started here and not stopped since, whether running or not."""
        return list(self._running)

    def running_spec(self, fragment: str) -> FragmentSpec | None:
        running = self._running.get(fragment)
        return None if running is None else running.spec

    def failure(self, fragment: str) -> str | None:
        """Why a started fragment's query ended on its own (None while it runs or never ran)."""
        running = self._running.get(fragment)
        if running is None or running.query.isActive:
            return None
        error = running.query.exception()
        return None if error is None else str(error)

    def stats(self, fragment: str) -> FragmentStats | None:
        """Load of a running fragment (None before its first batch). An agent multiplies the
        processed rate by its per-tuple cost to get load units."""
        progress = self._running[fragment].query.lastProgress
        if progress is None:
            return None
        return FragmentStats(
            batch_id=int(progress["batchId"]),
            input_rows_per_second=float(progress.get("inputRowsPerSecond") or 0.0),
            processed_rows_per_second=float(progress.get("processedRowsPerSecond") or 0.0),
            batch_seconds=progress["durationMs"].get("triggerExecution", 0) / 1000,
            state_rows=sum(op.get("numRowsTotal", 0) for op in progress.get("stateOperators", [])),
        )

    def sink(self, fragment: str) -> SOutput:
        return self._running[fragment].sink

    def start(
        self,
        spec: FragmentSpec,
        *,
        epoch: int,
        replay_from: int | None = None,
        sink: SOutput | None = None,
    ) -> StreamingQuery:
        """Run the fragment from its checkpoint here (or, with none, from ``replay_from``).

        ``sink`` replaces the plain SOutput (DPC passes its own, kept across restarts)."""
        if self.is_running(spec.name):
            raise RuntimeError(f"{spec.name} already runs on {self.name}")
        return self._launch(spec, spec.name, self._location(spec.name), epoch, replay_from, sink)

    def start_copy(
        self, spec: FragmentSpec, copy: str, checkpoint_dir: Path, *, epoch: int, sink: SOutput
    ) -> StreamingQuery:
        """A second query of ``spec`` beside the fragment's, known here as ``copy``, on its own
        checkpoint directory under the root (DPC's redo). It reads as the same consumer, so the
        producers' acknowledgements stay the fragment's."""
        if self.is_running(copy):
            raise RuntimeError(f"{copy} already runs on {self.name}")
        self._copy_dirs[copy] = Path(checkpoint_dir)
        return self._launch(spec, copy, str(checkpoint_dir), epoch, None, sink)

    def adopt(self, fragment: str, copy: str) -> None:
        """The running copy becomes the fragment's query, its directory the fragment's
        checkpoint (stop the fragment's own query first)."""
        if fragment in self._running:
            raise RuntimeError(f"stop {fragment} on {self.name} before adopting {copy}")
        self._running[fragment] = self._running.pop(copy)
        self._checkpoint_dirs[fragment] = self._copy_dirs.pop(copy)

    def _launch(
        self,
        spec: FragmentSpec,
        slot: str,
        checkpoint_location: str,
        epoch: int,
        replay_from: int | None,
        sink: SOutput | None,
    ) -> StreamingQuery:
        inputs = [i.source() for i in spec.inputs]
        self._hold_inputs(spec, replay_from)
        alternates = self.alternates_file(spec.name)
        if slot == spec.name:
            # A copy (DPC's redo) reads the fragment's file, which the agent keeps current.
            _write_alternates(alternates, spec.inputs)
        reader = (
            self.spark.readStream.format(SUnionDataSource.name())
            .schema(spec.input_schema)
            .option("inputs", json.dumps(inputs))
            .option("consumer", spec.name)
            # Always: the reader's default (1 s) against logs of 100 ms buckets would read
            # every bucket number as another time (a DPC node's options said it; a plain
            # fragment's did not until the reader compared widths).
            .option("bucket_ms", str(round(spec.bucket_seconds * 1000)))
        )
        if replay_from is not None:
            reader = reader.option("start_bucket", str(replay_from))
        if spec.max_buckets_per_batch:
            reader = reader.option("max_buckets_per_batch", str(spec.max_buckets_per_batch))
        for key, value in _credential_options(spec).items():
            reader = reader.option(key, value)
        reader = reader.option("alternates_file", str(alternates))
        if slot == spec.name and "follow_file" not in spec.options:
            reader = reader.option("pace_file", str(self.pace_file(slot)))
        for key, value in spec.options.items():
            reader = reader.option(key, value)
        if sink is None:
            sink = SOutput(
                spec.output.location,
                spec.output.stream,
                epoch,
                namespace=self.output_namespace(slot),
                mirror=self.output_mirror(slot),
            )
        # A scheduler pool per query (the query's thread inherits this thread's local property,
        # and its foreachBatch jobs run in it): under spark.scheduler.mode=FAIR (an agent's
        # --spark-conf) the queries of one Spark share its cores task by task, where FIFO runs
        # a long DPC redo batch's tasks before a serving batch submitted after it. Unused under
        # FIFO, the default.
        context = self.spark.sparkContext
        context.setLocalProperty(SCHEDULER_POOL, slot)
        try:
            query = (
                spec.build(reader.load())
                .writeStream.queryName(f"{slot}@{self.name}")
                .outputMode("append")
                .foreachBatch(sink)
                .option("checkpointLocation", checkpoint_location)
                .trigger(processingTime=f"{int(spec.trigger_seconds * 1000)} milliseconds")
                .start()
            )
        finally:
            context.setLocalProperty(SCHEDULER_POOL, None)  # type: ignore[arg-type]
        self._boundaries.outputs[str(query.id)] = (
            spec.output.location,
            spec.output.stream,
            epoch,
            spec.bucket_seconds,
        )
        self._boundaries.sinks[str(query.id)] = sink
        self._running[slot] = _Running(spec, query, sink, epoch, str(query.runId))
        if slot == spec.name:
            self._specs[spec.name] = spec
        return query

    def _hold_inputs(self, spec: FragmentSpec, replay_from: int | None) -> None:
        """Register the fragment as a consumer of each input before its query reads anything,
        so no other consumer's acknowledgement trims what it is about to read (see
        ``StreamClient.hold``). From a checkpoint the fragment's own earlier acks already stand
        (hold never moves them back); a fresh start holds from its replay point or everything."""
        consumer = spec.options.get("consumer", spec.name)
        for ref, alternate in ((r, r is not i) for i in spec.inputs for r in (i, *i.alternates)):
            self._hold(spec.name, ref, consumer, replay_from, alternate=alternate)

    def _hold(
        self,
        fragment: str,
        ref: StreamRef,
        consumer: str,
        replay_from: int | None,
        *,
        alternate: bool,
    ) -> None:
        try:
            with StreamClient(ref.location, timeout=HOLD_TIMEOUT_S) as client:
                client.hold(ref.stream, consumer, replay_from)
                # Its query's own processes read with the tokens this process spills;
                # this call puts the read token among them (the hold put the ack token).
                client.info(ref.stream)
        except (flight.FlightUnavailableError, flight.FlightTimedOutError) as error:
            # A producer cut off now cannot be read either; the fragment registers with its
            # first acknowledgement there. Starting matters more (DPC runs on cut inputs).
            log.warning(
                "%s: could not hold %s at %s: %s", fragment, ref.stream, ref.location, error
            )
        except (flight.FlightError, pa.ArrowException) as error:
            if not alternate:
                raise
            # An active copy whose log has not begun: the source passes it over until it
            # has (sunion's replicated inputs) and acknowledges there from then on.
            log.info("%s: no alternate %s at %s yet: %s", fragment, ref.stream, ref.location, error)

    def alternates_file(self, fragment: str) -> Path:
        """Where ``fragment``'s inputs' alternates are listed for its source (SUnion's
        ``alternates_file``): on the driver's disk, where SUnion plans, beside the pace files."""
        return self._sidecar(".alternates", fragment)

    def _sidecar(self, suffix: str, fragment: str) -> Path:
        """``fragment``'s file in the directory ``<root><suffix>``, made here if it does not
        exist yet (then this runtime owns it), and remembered for ``close``."""
        directory = Path(f"{self._pace_root}{suffix}")
        if directory not in self._sidecar_dirs:
            try:
                directory.mkdir(parents=True)
                self._sidecar_dirs[directory] = True
            except FileExistsError:
                self._sidecar_dirs[directory] = False
        path = directory / f"{fragment}.json"
        self._sidecar_files.add(path)
        return path

    def _remove_sidecars(self) -> None:
        """Remove the pace and alternates files this runtime handed out, and the directories
        it made. Neither kind outlives a restart: ``_launch`` rewrites a fragment's alternates
        file before its query reads it (a DPC redo copy started first reads its own spec's
        alternates without one), and a pace file counts only ``pace.VALID_S`` after the warm
        copy's last poll, which writes it again."""
        for path in self._sidecar_files:
            path.unlink(missing_ok=True)
        for directory, made in self._sidecar_dirs.items():
            if made:
                shutil.rmtree(directory, ignore_errors=True)
            else:
                # Another runtime's files (or a crashed run's scratch files) stay; so does it.
                with contextlib.suppress(OSError):
                    directory.rmdir()
        self._sidecar_files.clear()
        self._sidecar_dirs.clear()

    def update_alternates(self, fragment: str, inputs: Sequence[StreamRef]) -> bool:
        """Point the running ``fragment`` (and its copies: DPC's redo) at ``inputs``'
        alternates without restarting it: each new one is held first, so that no other
        consumer's acknowledgement trims what the fragment may read there and its read token is
        among the spilled ones, then the file its source re-reads is rewritten. The inputs'
        own logs must be the running ones (a new primary is a restart). False when nothing
        changed."""
        running = self._running.get(fragment)
        if running is None:
            raise KeyError(f"{fragment} does not run on {self.name}")
        before = running.spec.inputs
        if _logs(before) != _logs(inputs):
            raise ValueError(
                f"{fragment}: its inputs are {_logs(before)}, not {_logs(inputs)}: "
                "a new input log needs a restart, not new alternates"
            )
        if not only_alternates_differ(before, inputs):
            return False
        held = {a for ref in before for a in ref.alternates}
        consumer = running.spec.options.get("consumer", fragment)
        for ref in inputs:
            for alternate in ref.alternates:
                if alternate not in held:
                    self._hold(fragment, alternate, consumer, None, alternate=True)
        running.spec = replace(running.spec, inputs=tuple(inputs))
        self._specs[fragment] = running.spec
        _write_alternates(self.alternates_file(fragment), running.spec.inputs)
        return True

    def stop(self, fragment: str) -> None:
        running = self._running.pop(fragment, None)
        self._copy_dirs.pop(fragment, None)
        if running is not None:
            stop_after_commit(running.query)
            self._boundaries.book.forget(running.run_id)
            self._boundaries.outputs.pop(str(running.query.id), None)
            self._boundaries.sinks.pop(str(running.query.id), None)

    def pack(self, fragment: str) -> PackedCheckpoint:
        if self.is_running(fragment):
            raise RuntimeError(f"stop {fragment} on {self.name} before packing its checkpoint")
        if fragment in self._checkpoint_dirs:
            return pack_directory(self.checkpoint_dir(fragment))
        return self.store.pack(fragment)

    def restore(self, fragment: str, movement: int) -> None:
        """Install the checkpoint shipped to this host's server for ``movement``."""
        packed = self.server.take_checkpoint(fragment, movement)
        if fragment in self._checkpoint_dirs:
            unpack_directory(packed, self.checkpoint_dir(fragment))
        else:
            self.store.unpack(fragment, packed)

    def discard(self, fragment: str) -> None:
        """Forget a fragment that moved away (its checkpoint now lives at the new host)."""
        self.stop(fragment)
        if fragment in self._checkpoint_dirs:
            shutil.rmtree(self.checkpoint_dir(fragment), ignore_errors=True)
        else:
            self.store.remove(fragment)

    # -- HostHandler: what a remote mover may ask of this host --------------------------------
    def release_for(self, fragment: str, movement: int) -> PackedCheckpoint:
        if self._authorize_release is not None and not self._authorize_release(fragment, movement):
            raise PermissionError(
                f"movement {movement} does not release {fragment} from {self.name}"
            )
        self.stop(fragment)
        return self.pack(fragment)

    def reinstate(self, fragment: str, epoch: int) -> None:
        # Unknown here means it never ran here: nothing to resume.
        if fragment in self._specs and not self.is_running(fragment):
            self.start(self._specs[fragment], epoch=epoch)

    def retire(self, fragment: str) -> None:
        self.discard(fragment)
        self._specs.pop(fragment, None)

    def close(self) -> None:
        for fragment in list(self._running):
            running = self._running.pop(fragment)
            if running.query.isActive:
                running.query.stop()
        if self._spark is not None:
            self._spark.streams.removeListener(self._boundaries)
        self.server.shutdown()
        # After the queries stopped: their sources read these files while they run.
        self._remove_sidecars()
