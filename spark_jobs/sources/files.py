"""A directory of files as a source task's log (``source: {kind: files, format, path, ...}``).

Spark's file stream source (``spark.readStream.format(json|csv|parquet).schema(ddl)``, with
``maxFilesPerTrigger`` and, for CSV, ``header``) reads files as they appear in the directory; each
micro-batch goes to the log through ``foreachBatch`` by the rule of ``spark_jobs.sources.buckets``.
Files are read once: Spark's checkpoint (``<data dir>/sources/<task>/spark``: its offsets and the
file source's own log of the files of each batch) replays an unfinished batch with the same files
after a restart, and the source's saved position (the next batch id, saved with the boundary and
the open rows once the batch is in the log) skips a batch it had applied before Spark could
record it as done. So across a restart every file's rows reach the log once.

Timestamps are what Spark's readers make of them with the declared schema (ISO-8601 strings in
JSON and CSV, timestamp columns in Parquet); a row whose event time is missing or does not parse
is dropped and counted (``malformed``). A local directory that does not exist is reported on
the task (``SourceContext.on_error``) and the source does not start; the agent tries again at a
later tick, so creating the directory is enough.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc

from app.publish import arrow_schema, conform, lateness_seconds
from app.work.spec import SourceSpec
from spark_jobs.runtime.transport import StreamClient
from spark_jobs.sources import SourceContext, idle_advance
from spark_jobs.sources.buckets import SourceLog

log = logging.getLogger("fedload.sources.files")

# Spark's file source lists the directory once per trigger: at the bucket interval, but not
# more often than this (a listing per 100 ms bucket would be most of the query's work).
MIN_TRIGGER_SECONDS = 0.5


def missing_directory(path: str) -> str | None:
    """Why a local ``path`` cannot be read (None: it can, or it is no local path to check)."""
    parsed = urlparse(path)
    if parsed.scheme not in ("", "file"):
        return None
    local = Path(parsed.path if parsed.scheme == "file" else path)
    if not local.exists():
        return f"the directory {path} does not exist"
    if not local.is_dir():
        return f"{path} is not a directory"
    return None


class FileSource:
    """The runner of a files source (``spark_jobs.sources.Runner``)."""

    def __init__(
        self, spec: SourceSpec, context: SourceContext, *, trigger_seconds: float | None = None
    ) -> None:
        self.spec, self.context = spec, context
        self.stopped = threading.Event()
        self.schema = arrow_schema(spec.schema)
        self.path = str(spec.options["path"])
        self.format = str(spec.options["format"])
        self.idle = idle_advance(spec.options)
        self.lateness_s = lateness_seconds(spec.options)
        self.trigger_seconds = trigger_seconds or max(context.bucket_seconds, MIN_TRIGGER_SECONDS)
        self.malformed = 0
        self.error: str | None = None
        self.log: SourceLog | None = None
        self.query: Any = None
        self._lock = threading.Lock()  # foreachBatch and the idle clock write the one log
        self.batches = 0  # batches applied by this run (tests wait on it)
        self._finished = threading.Event()

    @property
    def position(self) -> int | None:
        """The next Spark batch id to apply (None before the first)."""
        return None if self.log is None else self.log.position

    def run(self) -> None:
        try:
            self._run()
        finally:
            self._finished.set()

    def _run(self) -> None:
        missing = missing_directory(self.path)
        if missing is not None:
            self._failed(missing)
            return
        if self.context.spark is None:
            self._failed("no SparkSession to run Spark's file source in")
            return
        spark = self.context.spark()
        with StreamClient(self.context.location) as client:
            self.log = self.context.source_log(client, self.schema, self.lateness_s)
            self.query = self._start(spark)
            try:
                self._watch()
            finally:
                self.query.stop()

    def _watch(self) -> None:
        while not self.stopped.wait(self.trigger_seconds):
            failure = self.query.exception()
            if failure is not None:
                self._failed(f"Spark's file source stopped: {failure}")
                return
            if self.idle:
                with self._lock:
                    assert self.log is not None
                    self.log.idle(time.time_ns() // 1000)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop and wait for the query to end: the agent stops Spark right after."""
        self.stopped.set()
        self._finished.wait(timeout)

    def _failed(self, message: str) -> None:
        self.error = f"{self.context.task}: files source {self.path}: {message}"
        log.warning("%s", self.error)
        if self.context.on_error is not None:
            self.context.on_error(self.error)

    def _start(self, spark: Any) -> Any:
        reader = spark.readStream.format(self.format).schema(self.spec.schema.ddl())
        if "max_files_per_trigger" in self.spec.options:
            reader = reader.option(
                "maxFilesPerTrigger", int(self.spec.options["max_files_per_trigger"])
            )
        if self.format == "csv":
            reader = reader.option("header", bool(self.spec.options.get("header", False)))
        frame = reader.load(self.path)
        return (
            frame.writeStream.foreachBatch(self._batch)
            .queryName(f"source-{self.context.task}")
            .option("checkpointLocation", str(self.context.state_dir / "spark"))
            .trigger(processingTime=f"{self.trigger_seconds} seconds")
            .start()
        )

    def _batch(self, frame: Any, batch_id: int) -> None:
        with self._lock:
            assert self.log is not None
            if self.log.position is not None and batch_id < int(self.log.position):
                return  # applied before the restart; Spark had not recorded it as done
            table = self._rows(frame.toArrow())
            now = time.time_ns() // 1000 if self.idle else None
            self.log.add(table, batch_id + 1, now_us=now)
            self.batches += 1

    def _rows(self, table: pa.Table) -> pa.Table:
        event = table.column(self.spec.event_time)
        if event.null_count:
            self.malformed += event.null_count
            log.warning(
                "%s: %d rows without a readable %s dropped (counted in malformed)",
                self.context.task,
                event.null_count,
                self.spec.event_time,
            )
            table = table.filter(pc.is_valid(event))
        return conform(table, self.spec.schema, self.spec.event_time)
