"""Sink writers at the owner's host: each final bucket of a task's output log, written once.

A task's output log lives at its owner (``spark_jobs.runtime.transport``), wherever the task
runs, and it already holds each micro-batch once (writes carry batch ids; an old host is
fenced). So the owner's agent, not the host of the moment, writes the task's sink: one
``SinkWriter`` thread per owned task with a ``sink`` other than ``log`` follows the log in
process (``StreamLog``: the agent's own endpoint, no token, no network), and

- writes the buckets below the log's BOUNDARY (final: the producer promised no more rows for
  them), stable rows only, in ranges of whole buckets, each range by its bucket numbers, so
  that a range written again replaces or repeats itself (``parquet``, ``nats``);
- then records the next bucket to write in ``<data dir>/sinks/<task>.json`` (written to a temp
  name and renamed, so a crash leaves the old file or the new one), and only then acknowledges
  the log as the consumer ``<task>.sink``. It holds the log from its start, so no other
  consumer's acknowledgement trims a bucket it has not written.

A crash anywhere in that order costs a rewrite of the last range, never a gap: the progress
file is never ahead of the sink, and the log keeps everything from the progress file's bucket.

Internal columns are dropped before a sink sees a range: ``kind`` (a DPC copy's row kind; only
STABLE rows pass). ``stime``, the federation's event time, is kept.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.participant.ports import TaskRecord
from app.work.errors import FragmentError
from app.work.spec import SinkSpec, Work
from spark_jobs.runtime.transport import HOLD_ALL, StreamLog

log = logging.getLogger("fedload.agent.sinks")

KIND_COLUMN = "kind"
STABLE = "STABLE"
# Columns of a log that are the federation's, not the task's output.
INTERNAL_COLUMNS = (KIND_COLUMN,)
# A range is at most this many buckets: a writer far behind (after a restart) catches up in
# files of a bounded size rather than one file of everything.
MAX_BUCKETS_PER_RANGE = 60
POLL_SECONDS = 0.2
# After a failed write (a sink server down, say) the writer tries again this much later.
RETRY_SECONDS = 2.0
CONSUMER_SUFFIX = ".sink"


@dataclass(frozen=True)
class Chunk:
    """Buckets ``first``..``last`` (inclusive) of ``task``'s output: its stable rows in bucket
    order, internal columns dropped. ``bucket_us``: the log's bucket width."""

    task: str
    first: int
    last: int
    table: pa.Table
    bucket_us: int

    def buckets(self) -> np.ndarray:
        """The bucket of each row."""
        micros = self.table.column("stime").cast(pa.int64()).to_numpy(zero_copy_only=False)
        return np.asarray(micros // self.bucket_us, dtype=np.int64)


class Sink(Protocol):
    def plan(self, lo: int, hi: int) -> tuple[int, int]:
        """The range [lo', hi') to write next, within [lo, hi) and starting at or after lo:
        a sink that names what it wrote by ranges keeps a rewrite on the ranges it wrote."""
        ...

    def write(self, chunk: Chunk) -> None:
        """Write ``chunk``; writing the same range again must leave the sink as it was."""
        ...

    def close(self) -> None: ...


class Progress:
    """The next bucket a task's sink writes, in a small JSON file (with the sink it is for: a
    task given another sink starts that one from what the log still holds for the writer)."""

    def __init__(self, path: Path, sink: Mapping[str, Any]) -> None:
        self.path = path
        self.sink = dict(sink)

    def load(self) -> int | None:
        try:
            body = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        if body.get("sink") != self.sink:
            return None
        return int(body["next"])

    def save(self, next_bucket: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, scratch = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}-")
        with os.fdopen(descriptor, "w") as out:
            json.dump({"next": next_bucket, "sink": self.sink}, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(scratch, self.path)


def stable_rows(table: pa.Table) -> pa.Table:
    """The rows a sink writes: STABLE ones (a log without a kind column holds only those), the
    internal columns dropped."""
    if KIND_COLUMN in table.column_names:
        table = table.filter(pc.equal(table.column(KIND_COLUMN), STABLE))
    return table.drop_columns([c for c in INTERNAL_COLUMNS if c in table.column_names])


class SinkWriter:
    """Follows ``stream`` in ``log`` and writes its final buckets to ``sink`` (module doc)."""

    def __init__(
        self,
        log_: StreamLog,
        task: str,
        stream: str,
        sink: Sink,
        progress: Progress,
        *,
        poll_seconds: float = POLL_SECONDS,
        max_buckets: int = MAX_BUCKETS_PER_RANGE,
    ) -> None:
        self.log, self.task, self.stream, self.sink = log_, task, stream, sink
        self.progress = progress
        self.consumer = f"{task}{CONSUMER_SUFFIX}"
        self.poll_seconds, self.max_buckets = poll_seconds, max_buckets
        self.next: int | None = None
        self.written_ranges = 0
        self.error: str | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self) -> None:
        """Keep what this writer has not written: from its progress file's bucket, or all the
        log holds. Done before the thread starts, so no acknowledgement in between trims it."""
        self.next = self.progress.load()
        self.log.ack(self.stream, self.consumer, HOLD_ALL if self.next is None else self.next)

    def step(self) -> bool:
        """Write the next range of final buckets, if there is one; True if it advanced."""
        info = self.log.info(self.stream)
        boundary = info["boundary"]
        if boundary is None:
            return False
        lo = self.next
        if lo is None:
            # Everything the log holds; a log with no row yet holds nothing below its boundary.
            lo = int(info["first"]) if info["first"] is not None else int(boundary)
        acked = info["acks"].get(self.consumer)
        if acked is not None and lo < int(acked):
            # Written and acknowledged by this writer before (the log outlived a progress file
            # restored from a backup, say): the log holds those buckets no more.
            lo = int(acked)
        hi = min(int(boundary), lo + self.max_buckets)
        if lo >= hi:
            return False
        lo, hi = self.sink.plan(lo, hi)
        if lo < hi:
            schema, batches = self.log.read(self.stream, lo, hi)
            table = pa.Table.from_batches(batches, schema=schema) if schema is not None else None
            if table is not None:
                rows = stable_rows(table)
                if rows.num_rows:
                    self.sink.write(Chunk(self.task, lo, hi - 1, rows, int(info["bucket_us"])))
                    self.written_ranges += 1
        self.progress.save(hi)
        self.next = hi
        self.log.ack(self.stream, self.consumer, hi)
        return True

    def run(self) -> None:
        wait = 0.0
        while not self._stopped.wait(wait):
            try:
                while not self._stopped.is_set() and self.step():
                    pass
                self.error, wait = None, self.poll_seconds
            except Exception as error:  # a sink down: try again, the log keeps what we hold
                self.error = f"{type(error).__name__}: {error}"
                log.warning("%s: sink write failed (retrying): %s", self.task, self.error)
                wait = RETRY_SECONDS

    def start(self) -> None:
        self.hold()
        self._thread = threading.Thread(target=self.run, name=f"sink-{self.task}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.sink.close()


def build_sink(task: str, spec: SinkSpec, data_dir: Path) -> Sink:
    """The sink a task's ``sink:`` names. A relative Parquet path is the agent's working
    directory's, as a files source's directory is (and as ``fedload contracts apply`` checks
    paths from the operator's): one rule for every path a task names."""
    if spec.kind == "parquet":
        from spark_jobs.sinks.parquet import ParquetSink

        return ParquetSink(Path(str(spec.options["path"])).expanduser().absolute())
    if spec.kind == "nats":
        from spark_jobs.sinks.nats import NatsSink

        return NatsSink(
            task,
            str(spec.options["url"]),
            str(spec.options["subject"]),
            stream=spec.options.get("stream"),
        )
    raise ValueError(f"{task}: no writer for a {spec.kind} sink")


def sink_of(task: TaskRecord) -> SinkSpec | None:
    """The sink an owner writes for ``task``: None for none, the log (already written), or a
    stored form that does not parse (the registry checked it; nothing to write then)."""
    if not task.work or "sink" not in task.work:
        return None
    try:
        sink = Work.from_json(task.work).sink
    except FragmentError as error:
        log.warning("%s: its sink is not understood here: %s", task.name, error)
        return None
    return None if sink is None or sink.kind == "log" else sink


class SinkWriters:
    """The sink writers of one agent: ``sync`` each tick with the registry's records."""

    def __init__(
        self,
        log_: StreamLog,
        data_dir: Path,
        *,
        build: Callable[[str, SinkSpec, Path], Sink] = build_sink,
    ) -> None:
        self.log, self.data_dir, self._build = log_, Path(data_dir), build
        self.writers: dict[str, tuple[dict[str, Any], SinkWriter]] = {}
        self._lock = threading.Lock()

    def sync(self, me: str, tasks: Sequence[TaskRecord]) -> None:
        """Run a writer for each task ``me`` owns with a sink (its log declared already), stop
        the others. A writer whose sink cannot be built is tried again at the next tick.

        A stopped writer's position stays in the log (a log never moves a consumer back): a
        writer started again, for the same sink or another, goes on from there."""
        wanted: dict[str, tuple[TaskRecord, SinkSpec]] = {}
        for task in tasks:
            spec = sink_of(task) if task.owner == me else None
            if spec is not None:
                wanted[task.name] = (task, spec)
        with self._lock:
            for name in list(self.writers):
                spec_json, writer = self.writers[name]
                if name not in wanted or wanted[name][1].to_json() != spec_json:
                    del self.writers[name]
                    writer.stop()
            for name, (task, spec) in wanted.items():
                if name not in self.writers:
                    self._start(task, spec)

    def _start(self, task: TaskRecord, spec: SinkSpec) -> None:
        try:
            sink = self._build(task.name, spec, self.data_dir)
        except Exception as error:
            log.warning("%s: cannot open its %s sink: %s", task.name, spec.kind, error)
            return
        progress = Progress(self.data_dir / "sinks" / f"{task.name}.json", spec.to_json())
        writer = SinkWriter(self.log, task.name, task.output_stream, sink, progress)
        try:
            writer.start()
        except Exception as error:  # its log not declared yet: the next tick starts it
            log.warning("%s: its sink writer did not start: %s", task.name, error)
            sink.close()
            return
        self.writers[task.name] = (spec.to_json(), writer)

    def close(self) -> None:
        with self._lock:
            writers, self.writers = self.writers, {}
        for _, writer in writers.values():
            writer.stop()
