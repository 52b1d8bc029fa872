"""A task's output published to a NATS JetStream subject, one JSON message per row.

Each row goes out as a JSON object (``app.results.json_row``: the row's columns, timestamps as
ISO-8601) with the header ``Nats-Msg-Id: <task>:<bucket>:<row index within the bucket>``. A
bucket below the log's boundary is final and the log holds each batch once, so that id names
the same row every time the bucket is sent: a range sent again (the owner's agent restarted
from an older progress file) is dropped by JetStream's duplicate detection.

The limit: JetStream remembers ids for the stream's duplicate window only (``duplicate_window``,
2 minutes by default). A re-send later than that is stored twice. The writer sends a range at
most twice in practice (a crash between its publish and its progress file, which it writes
right after each range), so a window of a few minutes is enough; a stream created here gets
``DUPLICATE_WINDOW_SECONDS``.

With ``stream`` the stream is created when it is missing (capturing ``subject``); without, the
subject must belong to an existing stream, or each publish fails (no responders) and the writer
retries. nats-py is asyncio: the sink runs its own event loop in a thread of its own and the
writer's thread hands each range over and waits for every acknowledgement.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

import nats
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from app.results import json_row
from spark_jobs.sinks.writer import Chunk

log = logging.getLogger("fedload.agent.sinks")

DUPLICATE_WINDOW_SECONDS = 600.0
PUBLISH_TIMEOUT_S = 10.0
# Acknowledgements awaited together: one round trip each, one by one, would take 100 s for a
# range of 100 000 rows on loopback.
IN_FLIGHT = 256


def message_id(task: str, bucket: int, index: int) -> str:
    return f"{task}:{bucket}:{index}"


class NatsSink:
    def __init__(
        self,
        task: str,
        url: str,
        subject: str,
        *,
        stream: str | None = None,
        timeout: float = PUBLISH_TIMEOUT_S,
    ) -> None:
        self.task, self.url, self.subject, self.stream = task, url, subject, stream
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"nats-sink-{task}", daemon=True
        )
        self._thread.start()
        self._nc: Any = None
        self._js: Any = None

    def _run(self, coroutine: Any) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result()

    async def _connect(self) -> Any:
        if self._js is not None and self._nc is not None and self._nc.is_connected:
            return self._js

        async def note(error: Exception) -> None:
            # One line: nats-py's own handler prints a traceback per failed reconnect.
            log.warning("%s: NATS at %s: %r", self.task, self.url, error)

        self._nc = await nats.connect(
            self.url,
            connect_timeout=self.timeout,
            max_reconnect_attempts=3,
            allow_reconnect=True,
            error_cb=note,
        )
        self._js = self._nc.jetstream(timeout=self.timeout)
        if self.stream is not None:
            try:
                await self._js.stream_info(self.stream)
            except NotFoundError:
                await self._js.add_stream(
                    StreamConfig(
                        name=self.stream,
                        subjects=[self.subject],
                        duplicate_window=DUPLICATE_WINDOW_SECONDS,
                    )
                )
        return self._js

    def plan(self, lo: int, hi: int) -> tuple[int, int]:
        return lo, hi  # ids are per row, whatever the ranges: any range may be sent again

    def write(self, chunk: Chunk) -> None:
        self._run(self._publish(chunk))

    async def _publish(self, chunk: Chunk) -> None:
        js = await self._connect()
        buckets = chunk.buckets().tolist()
        pending: list[Any] = []
        index, previous = 0, None
        for bucket, record in zip(buckets, chunk.table.to_pylist(), strict=True):
            index = index + 1 if bucket == previous else 0
            previous = bucket
            payload = json.dumps(json_row(record)).encode()
            headers = {"Nats-Msg-Id": message_id(chunk.task, bucket, index)}
            pending.append(js.publish(self.subject, payload, headers=headers))
            if len(pending) >= IN_FLIGHT:
                await asyncio.gather(*pending)
                pending = []
        if pending:
            await asyncio.gather(*pending)

    def close(self) -> None:
        async def drain() -> None:
            if self._nc is not None and not self._nc.is_closed:
                await self._nc.close()

        try:
            self._run(drain())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
