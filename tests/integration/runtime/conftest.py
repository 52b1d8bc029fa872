"""Hosts for runtime tests: Flight servers on free loopback ports, runtimes on the shared session.

Everything started here is stopped in the fixture's teardown, so a failing test leaves no query,
server or gRPC thread behind.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest

from spark_jobs.fragments import CONNECTION_SCHEMA, distinct_port_counts
from spark_jobs.generators import ConnectionGenerator, RateSchedule
from spark_jobs.runtime import FragmentRuntime, FragmentSpec, StreamClient, StreamRef, StreamServer
from spark_jobs.runtime.sunion import SUnionReader

BUCKET = 1.0


@pytest.fixture
def servers() -> Iterator[dict[str, StreamServer]]:
    """A producer of raw connections ("source") and the query owner holding outputs ("home")."""
    made = {"source": StreamServer(), "home": StreamServer()}
    try:
        yield made
    finally:
        for server in made.values():
            server.shutdown()


@pytest.fixture
def make_runtime(spark, tmp_path) -> Iterator[Callable[..., FragmentRuntime]]:
    """Hosts with their own checkpoint root and Flight server, sharing the warm session."""
    made: list[FragmentRuntime] = []

    def make(name: str, **options) -> FragmentRuntime:
        made.append(FragmentRuntime(name, spark, tmp_path / name, **options))
        return made[-1]

    try:
        yield make
    finally:
        for runtime in made:
            runtime.close()


def declare(server: StreamServer, *streams: str) -> StreamClient:
    client = StreamClient(server.location)
    for stream in streams:
        client.declare(stream, BUCKET)
    return client


def ports_fragment(
    name: str, source: StreamServer, in_stream: str, home: StreamServer, out_stream: str
) -> FragmentSpec:
    """Fragment (b) with second-scale windows: stateful (a port set per source and window)."""
    return FragmentSpec(
        name=name,
        build=functools.partial(distinct_port_counts, window_seconds=4, threshold=3),
        input_schema=CONNECTION_SCHEMA,
        inputs=(StreamRef(source.location, in_stream),),
        output=StreamRef(home.location, out_stream),
        bucket_seconds=BUCKET,
        trigger_seconds=0.2,
        max_buckets_per_batch=3,
    )


GENERATOR = ConnectionGenerator(seed=11, schedule=RateSchedule.constant(40), scan_rate=4)


def run_reference(
    make_runtime: Callable[..., FragmentRuntime],
    servers: dict[str, StreamServer],
    fill: Callable[[StreamClient], None],
) -> list[tuple]:
    """The ports fragment alone, no moves, over "conns-ref" as ``fill`` publishes it: what a
    moved or failed-over run must equal."""
    declare(servers["source"], "conns-ref").close()
    declare(servers["home"], "out-ref").close()
    with declare(servers["source"]) as source:
        fill(source)
    spec = ports_fragment("ref", servers["source"], "conns-ref", servers["home"], "out-ref")
    host = make_runtime("R")
    host.start(spec, epoch=0).processAllAvailable()
    host.stop("ref")
    out = rows(servers["home"].log.table("out-ref"))
    assert out, "the reference must emit windows, or the comparisons prove nothing"
    return out


def rows(table) -> list[tuple]:
    """A log's rows as sorted tuples: equal lists mean nothing lost and nothing duplicated."""
    return sorted(tuple(r.values()) for r in table.to_pylist())


def sorted_rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def reader_rows(reader: SUnionReader, start: dict[str, int], end: dict[str, int]) -> pa.Table:
    """What a SUnion reader driven directly (no Spark) gives for the offsets [start, end)."""
    batches = [b for part in reader.partitions(start, end) for b in reader.read(part)]
    return pa.Table.from_batches(batches).select(CONNECTION_SCHEMA.names)
