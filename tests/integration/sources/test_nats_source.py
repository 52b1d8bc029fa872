"""A nats source against a real JetStream stream (created here under a unique name, deleted
after): the messages reach the log bucket by bucket as computed from the same messages, and a
restart resumes from the persisted sequence: nothing twice, nothing skipped."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from app.work.spec import SourceSpec, parse_ddl
from spark_jobs.runtime.transport import StreamServer
from spark_jobs.sources import SourceContext
from spark_jobs.sources.nats import NatsSource
from tests.integration.sources.conftest import STREAM, wait_for
from tests.support.components import nats_problem, nats_url, require
from tests.support.event_loop import run_coroutine

SCHEMA = parse_ddl("station STRING, ts TIMESTAMP, temp DOUBLE", ["schema"])
BASE_MS = 1_772_323_200_000  # 2026-03-01T00:00:00Z
FIRST = BASE_MS // 1000  # its 1 s bucket


async def _js(action: Any) -> Any:
    import nats

    connection = await nats.connect(nats_url(), connect_timeout=5)
    try:
        return await action(connection.jetstream())
    finally:
        await connection.close()


def publish(subject: str, rows: list[tuple[str, int, float]]) -> int:
    """(station, ms after BASE, temp): even rows with ISO times, odd ones with epoch ms. Returns
    the last sequence."""

    async def send(js: Any) -> int:
        last = 0
        for index, (station, offset, temp) in enumerate(rows):
            when: Any = BASE_MS + offset
            if index % 2 == 0:
                seconds, millis = divmod(when, 1000)
                when = f"2026-03-01T00:00:{seconds - FIRST:02d}.{millis:03d}Z"
            body = json.dumps({"station": station, "ts": when, "temp": temp}).encode()
            last = (await js.publish(subject, body)).seq
        return last

    return int(run_coroutine(_js(send)))


@pytest.fixture
def jetstream() -> Iterator[str]:
    require("NATS JetStream", nats_problem(nats_url()))
    from nats.js.api import StreamConfig

    name = f"fedload_src_{uuid.uuid4().hex[:10]}"

    async def create(js: Any) -> None:
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))

    async def delete(js: Any) -> None:
        await js.delete_stream(name)

    run_coroutine(_js(create))
    try:
        yield name
    finally:
        run_coroutine(_js(delete))


def logged(server: StreamServer) -> list[tuple[Any, ...]]:
    table = server.log.table(STREAM)
    if table.num_columns == 0:
        return []
    micros = table.column("stime").cast("int64").to_pylist()
    stations, temps = table.column("station").to_pylist(), table.column("temp").to_pylist()
    return sorted(zip(stations, micros, temps, strict=True))


def expected(rows: list[tuple[str, int, float]], below: int) -> list[tuple[Any, ...]]:
    """The rows whose bucket is below ``below``, as the log holds them."""
    out = [(s, (BASE_MS + ms) * 1000, t) for s, ms, t in rows]
    return sorted(r for r in out if r[1] // 1_000_000 < below)


def start(server: StreamServer, name: str, state: Path) -> tuple[NatsSource, threading.Thread]:
    spec = SourceSpec("nats", SCHEMA, "ts", {"url": nats_url(), "stream": name})
    context = SourceContext("src", STREAM, server.location, 1.0, state)
    source = NatsSource(spec, context)
    thread = threading.Thread(target=source.run, daemon=True)
    thread.start()
    return source, thread


@pytest.mark.timeout(300)
def test_messages_reach_the_log_and_a_restart_resumes_at_the_sequence(
    jetstream: str, server: StreamServer, tmp_path: Path
) -> None:
    subject, state = f"{jetstream}.readings", tmp_path / "state"
    first = [("x", 200, 1.0), ("y", 1500, 2.0), ("x", 900, 3.0), ("z", 3100, 4.0)]
    last = publish(subject, first)
    source, thread = start(server, jetstream, state)
    wait_for(lambda: source.position == last + 1, "the first messages")
    assert logged(server) == expected(first, FIRST + 3)
    assert server.log.info(STREAM)["boundary"] == FIRST + 3
    source.stop()
    thread.join(30)
    assert not thread.is_alive()

    # Published while the source is down; 2500 ms is late (bucket 2 closed at boundary 3).
    second = [("y", 3500, 5.0), ("x", 2500, 6.0), ("z", 6200, 7.0), ("x", 5400, 8.0)]
    last = publish(subject, second)
    again, thread = start(server, jetstream, state)
    wait_for(lambda: again.position == last + 1, "the second messages")
    on_time = [r for r in [*first, *second] if r[1] != 2500]
    assert logged(server) == expected(on_time, FIRST + 6)
    assert again.log is not None and again.log.late == 1
    assert server.log.info(STREAM)["boundary"] == FIRST + 6
    again.stop()
    thread.join(30)

    # The owner restarted: an empty log, closed at once up to the saved boundary, gets what
    # follows the saved sequence (and the open bucket kept on disk), nothing before it.
    fresh = StreamServer()
    try:
        fresh.log.declare(STREAM, 1.0)
        third = [("y", 7100, 9.0)]
        last = publish(subject, third)
        restarted, thread = start(fresh, jetstream, state)
        wait_for(lambda: restarted.position == last + 1, "the third message")
        assert fresh.log.info(STREAM)["boundary"] == FIRST + 7
        assert logged(fresh) == expected([("z", 6200, 7.0)], FIRST + 7)
        restarted.stop()
        thread.join(30)
    finally:
        fresh.shutdown()


@pytest.mark.timeout(120)
def test_a_sunion_reader_downstream_releases_the_buckets_the_source_closed(
    jetstream: str, server: StreamServer, tmp_path: Path
) -> None:
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

    from spark_jobs.runtime.sunion import SUnionReader

    rows = [("x", 200, 1.0), ("y", 1500, 2.0), ("z", 4100, 3.0)]
    last = publish(f"{jetstream}.readings", rows)
    source, thread = start(server, jetstream, tmp_path / "state")
    wait_for(lambda: source.position == last + 1, "the messages")
    schema = StructType(
        [
            StructField("station", StringType()),
            StructField("ts", TimestampType()),
            StructField("temp", DoubleType()),
            StructField("stime", TimestampType()),
        ]
    )
    options = {
        "inputs": json.dumps([{"location": server.location, "stream": STREAM}]),
        "consumer": "downstream",
        "start_bucket": str(FIRST),
    }
    reader = SUnionReader(options, schema)
    try:
        start_at = reader.initialOffset()
        end = reader.latestOffset(start_at, None)
        assert end == {"bucket": FIRST + 4}, "released up to the source's boundary"
        got = pa.Table.from_batches(
            [b for part in reader.partitions(start_at, end) for b in reader.read(part)]
        )
        assert sorted(got.column("station").to_pylist()) == ["x", "y"]
    finally:
        reader.stop()
        source.stop()
        thread.join(30)
