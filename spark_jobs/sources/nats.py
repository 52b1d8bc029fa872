"""A NATS JetStream stream as a source task's log (``source: {kind: nats, url, stream, subject?}``).

The source reads the stream by sequence number with an ephemeral pull consumer (no acks: the
position is the source's own) starting at the sequence after the last one it applied, which it
keeps with its bucket boundary and open rows under the agent's data directory
(``spark_jobs.sources.buckets``): a restart, or a failover that carries the directory, reads on
from exactly there. ``subject`` filters the stream (default: every subject of it).

Messages are JSON objects with the declared columns (names as declared, or in any case).
Timestamp columns are ISO-8601 strings (``"2026-01-01T00:00:00.250Z"``; no offset means UTC) or
epoch milliseconds (a number). A message that is no JSON object, lacks the event time or has a
value that does not fit its column is dropped and counted (``malformed``), and logged once.

The asyncio client runs in the source's own thread (its own event loop), never the agent's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from app.publish import arrow_schema, conform, lateness_seconds
from app.work.spec import DEFAULT_NATS_URL, SourceSpec
from spark_jobs.runtime.transport import StreamClient
from spark_jobs.sources import SourceContext, idle_advance
from spark_jobs.sources.buckets import SourceLog

log = logging.getLogger("fedload.sources.nats")

FETCH_BATCH = 1000
# A broken connection or a consumer the server dropped is set up again after this long.
RETRY_SECONDS = 1.0


def _timestamp(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is no timestamp")
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value / 1000.0, UTC)
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def decode(messages: Sequence[bytes], spec: SourceSpec) -> tuple[pa.Table, int]:
    """The log rows of ``messages`` (see the module docstring) and how many were malformed."""
    declared = spec.schema
    types = {c.name: c.type for c in declared.columns}
    target = arrow_schema(declared)
    good: list[dict[str, Any]] = []
    malformed = 0
    for raw in messages:
        try:
            row = json.loads(raw)
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
            lowered = {str(k).lower(): v for k, v in row.items()}
            picked = {name: row.get(name, lowered.get(name.lower())) for name in declared.names}
            for name, kind in types.items():
                if kind in ("timestamp", "timestamp_ntz"):
                    picked[name] = _timestamp(picked[name])
            if picked[spec.event_time] is None:
                raise ValueError(f"no event time {spec.event_time!r}")
            # One row at a time: a value that does not fit its column drops its message only.
            pa.Table.from_pylist([picked], schema=_declared_schema(target))
        except (ValueError, TypeError, OverflowError, pa.ArrowException):
            malformed += 1
            continue
        good.append(picked)
    table = pa.Table.from_pylist(good, schema=_declared_schema(target))
    return conform(table, declared, spec.event_time), malformed


def _declared_schema(target: pa.Schema) -> pa.Schema:
    return (
        pa.schema([f for f in target if f.name != "stime"]) if "stime" in target.names else target
    )


class NatsSource:
    """The runner of a nats source (``spark_jobs.sources.Runner``)."""

    def __init__(self, spec: SourceSpec, context: SourceContext) -> None:
        self.spec, self.context = spec, context
        self.stopped = threading.Event()
        self.schema = arrow_schema(spec.schema)
        self.url = str(spec.options.get("url", DEFAULT_NATS_URL))
        self.stream = str(spec.options["stream"])
        self.subject: str | None = spec.options.get("subject")
        self.idle = idle_advance(spec.options)
        self.lateness_s = lateness_seconds(spec.options)
        self.malformed = 0
        self.log: SourceLog | None = None
        self.error: str | None = None

    @property
    def position(self) -> int | None:
        """The next stream sequence to read (None before the first start)."""
        return None if self.log is None else self.log.position

    def run(self) -> None:
        with StreamClient(self.context.location) as client:
            self.log = self.context.source_log(client, self.schema, self.lateness_s)
            while not self.stopped.is_set():
                try:
                    asyncio.run(self._consume())
                except Exception as error:
                    self._failed(f"{type(error).__name__}: {error}")
                    self.stopped.wait(RETRY_SECONDS)

    def stop(self) -> None:
        self.stopped.set()

    def _failed(self, message: str) -> None:
        text = f"{self.context.task}: nats source {self.url} stream {self.stream}: {message}"
        if text != self.error:  # said once per distinct trouble, not once per retry
            self.error = text
            log.warning("%s", text)
            if self.context.on_error is not None:
                self.context.on_error(text)

    async def _consume(self) -> None:
        import nats
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        assert self.log is not None

        async def quiet(error: Exception) -> None:
            log.debug("%s: nats: %s", self.context.task, error)  # _failed says it once

        # A few reconnects inside the client; past them the connection closes, the fetch
        # fails and ``run`` connects again from the position, so an outage of any length ends.
        connection = await nats.connect(
            self.url,
            connect_timeout=5,
            max_reconnect_attempts=3,
            reconnect_time_wait=1,
            error_cb=quiet,
        )
        try:
            js = connection.jetstream()
            subject = self.subject or await self._all_subjects(js)
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=int(self.log.position or 1),
                ack_policy=AckPolicy.NONE,
                inactive_threshold=60.0,
            )
            subscription = await js.pull_subscribe(subject, stream=self.stream, config=config)
            self.error = None
            wait = max(0.05, min(1.0, self.context.bucket_seconds))
            while not self.stopped.is_set():
                try:
                    messages = await subscription.fetch(batch=FETCH_BATCH, timeout=wait)
                except (TimeoutError, NatsTimeout):
                    # nats-py raises its own timeout, or asyncio's when the fetch's inner wait
                    # is what ran out: either way nothing came within ``wait``.
                    messages = []
                if not messages:  # a fetch may also answer with none before its timeout
                    if self.idle:
                        self.log.idle(time.time_ns() // 1000)
                    continue
                self._apply(messages)
            await subscription.unsubscribe()
        finally:
            await connection.close()

    async def _all_subjects(self, js: Any) -> str:
        info = await js.stream_info(self.stream)
        subjects = list(info.config.subjects or [])
        # One consumer filters on one subject: a stream of several reads them all through ">".
        return subjects[0] if len(subjects) == 1 else ">"

    def _apply(self, messages: Sequence[Any]) -> None:
        assert self.log is not None
        table, malformed = decode([m.data for m in messages], self.spec)
        if malformed:
            if not self.malformed:
                log.warning(
                    "%s: %d messages of %s are not rows of its schema and were dropped "
                    "(counted in malformed; said once)",
                    self.context.task,
                    malformed,
                    self.stream,
                )
            self.malformed += malformed
        after = int(messages[-1].metadata.sequence.stream) + 1
        now = time.time_ns() // 1000 if self.idle else None
        self.log.add(table, after, now_us=now)
