"""The NATS sink against the real server: a range sent again (a restart from an older progress
file) is dropped by JetStream's duplicate detection, so the stream holds each row once.

Needs NATS with JetStream (127.0.0.1:4222 on the development machines; FEDLOAD_TEST_NATS_URL):
under CI=true a missing server fails with what to start, elsewhere the test is skipped."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pyarrow as pa
import pytest

from spark_jobs.runtime.transport import StreamServer
from spark_jobs.sinks.nats import NatsSink, message_id
from spark_jobs.sinks.writer import Chunk, Progress, SinkWriter
from tests.support.components import nats_problem, nats_url, require
from tests.support.event_loop import run_coroutine

TASK, LOG = "A.q", "A.q.out"


@pytest.fixture
def names() -> Iterator[tuple[str, str]]:
    require("NATS JetStream", nats_problem())
    suffix = uuid.uuid4().hex[:8]
    stream, subject = f"FEDLOAD_TEST_{suffix}", f"fedload.test.{suffix}"
    yield stream, subject
    run_coroutine(_delete(stream))


async def _connect() -> Any:
    return await nats.connect(nats_url(), connect_timeout=5)


async def _delete(stream: str) -> None:
    client = await _connect()
    try:
        await client.jetstream().delete_stream(stream)
    except Exception:
        pass  # never created (the test failed before)
    finally:
        await client.close()


async def _stored(stream: str) -> list[tuple[str, dict[str, Any]]]:
    """(message id, row) of every message in the stream, in order."""
    client = await _connect()
    try:
        js = client.jetstream()
        count = (await js.stream_info(stream)).state.messages
        out = []
        for seq in range(1, count + 1):
            message = await js.get_msg(stream, seq)
            out.append((message.headers["Nats-Msg-Id"], json.loads(message.data)))
        return out
    finally:
        await client.close()


def rows(*seconds: float) -> pa.Table:
    return pa.table(
        {
            "stime": pa.array([round(s * 1e6) for s in seconds], pa.timestamp("us", tz="UTC")),
            "v": pa.array([int(s * 10) for s in seconds], pa.int64()),
        }
    )


def test_a_range_sent_again_is_kept_once(names: tuple[str, str]) -> None:
    stream, subject = names
    sink = NatsSink(TASK, nats_url(), subject, stream=stream)  # creates the missing stream
    try:
        chunk = Chunk(TASK, 0, 2, rows(0.1, 0.5, 2.2), 1_000_000)
        sink.write(chunk)
        sink.write(chunk)  # the same range again
        sink.write(Chunk(TASK, 2, 2, rows(2.2), 1_000_000))  # part of it, by another range
    finally:
        sink.close()
    stored = run_coroutine(_stored(stream))
    assert [m for m, _ in stored] == [
        message_id(TASK, 0, 0),
        message_id(TASK, 0, 1),
        message_id(TASK, 2, 0),
    ]
    assert [r["v"] for _, r in stored] == [1, 5, 22]
    assert stored[0][1]["stime"] == "1970-01-01T00:00:00.100000+00:00"


def test_a_writer_restarted_from_an_older_progress_file_sends_no_duplicate(
    names: tuple[str, str], tmp_path: Path
) -> None:
    stream, subject = names
    progress_file = tmp_path / "sinks" / f"{TASK}.json"
    spec = {"kind": "nats", "subject": subject, "stream": stream}
    expected = 0
    for attempt in range(2):
        server = StreamServer()
        try:
            server.log.declare(LOG, 1.0)
            # The same batches each time (the log holds each batch once; after a failover the
            # producer re-writes them into a log that still has them, or a fresh one).
            server.log.append(LOG, rows(0.1, 0.2, 1.5), batch_id=0, boundary=2)
            server.log.append(LOG, rows(2.5, 3.0, 3.1, 3.2), batch_id=1, boundary=4)
            expected = 7
            if attempt == 1:
                Progress(progress_file, spec).save(0)  # older than what was sent
            sink = NatsSink(TASK, nats_url(), subject, stream=stream)
            writer = SinkWriter(server.log, TASK, LOG, sink, Progress(progress_file, spec))
            writer.hold()
            try:
                while writer.step():
                    pass
            finally:
                sink.close()
            assert writer.next == 4
        finally:
            server.shutdown()
    stored = run_coroutine(_stored(stream))
    assert len(stored) == expected
    assert len({m for m, _ in stored}) == expected
