"""A source task publishes each bucket as its time ends, at the federation's boundary interval
(``fedload agent --bucket-seconds``): at 100 ms, the Borealis sources' boundaries, a reader sees
a boundary every tenth of a second, not ten at once each second. A real Flight log; no Spark."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from app.participant.command import buckets_per_second
from spark_jobs.generators import bucket_of
from spark_jobs.runtime.participant_host import _Publisher, generator_of
from spark_jobs.runtime.transport import StreamClient, StreamServer

STREAM = "O.conns.out"


@pytest.fixture
def server() -> Iterator[StreamServer]:
    server = StreamServer()
    yield server
    server.shutdown()


def _watch(server: StreamServer, stop: threading.Event) -> list[tuple[float, int]]:
    seen: list[tuple[float, int]] = []

    def run() -> None:
        last = None
        while not stop.is_set():
            boundary = server.log.info(STREAM)["boundary"]
            if boundary is not None and boundary != last:
                seen.append((time.monotonic(), int(boundary)))
                last = boundary
            time.sleep(0.005)

    threading.Thread(target=run, daemon=True).start()
    return seen


@pytest.mark.parametrize("bucket_seconds", [0.1, 0.25, 1.0])
def test_each_bucket_closes_as_its_time_ends_with_the_seconds_rows(
    server: StreamServer, bucket_seconds: float
) -> None:
    params = {"seed": 5, "rate": 400}
    # The process's first generated second costs about a second (numpy's and Arrow's first
    # calls): not what this test times.
    generator_of(params).second(0)
    server.log.declare(STREAM, bucket_seconds)
    stop = threading.Event()
    seen = _watch(server, stop)
    publisher = _Publisher(
        STREAM,
        generator_of(params),
        2,
        server.location,
        threading.Event(),
        bucket_seconds=bucket_seconds,
    )
    began = time.monotonic()
    publisher.run()
    stop.set()
    assert publisher.published == 2
    generator = generator_of(params)
    expected = pa.concat_tables([generator.second(0), generator.second(1)])
    first = bucket_of(generator.second_start_us(0), bucket_seconds)
    per_second = buckets_per_second(bucket_seconds)
    boundaries = [b for _, b in seen]
    # Every bucket of the two seconds closed, in order, one boundary at a time: the watcher
    # (polling every 5 ms on a shared machine) saw most of them one by one.
    assert server.log.info(STREAM)["boundary"] == first + 2 * per_second
    assert boundaries == sorted(set(boundaries))
    # (The last may close after the watcher stopped.)
    assert len(boundaries) >= 0.6 * 2 * per_second - 1, boundaries
    # Never before its bucket's time has ended, and near it (not a second's worth at once).
    for at, boundary in seen:
        due = (boundary - first) * bucket_seconds
        assert due - 0.05 <= at - began <= due + 1.0, (boundary, at - began)
    with StreamClient(server.location) as client:
        got = client.read_table(STREAM)
    assert got.num_rows == expected.num_rows
    assert sorted(got.to_pylist(), key=str) == sorted(expected.to_pylist(), key=str)


@pytest.mark.parametrize("bad", [0.0, 0.3, 0.15, 2.0, 0.001])
def test_an_interval_that_does_not_divide_a_second_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="bucket_seconds must"):
        buckets_per_second(bad)
