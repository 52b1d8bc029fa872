"""A replicated input: SUnion reads each bucket from whichever copy's stable log holds it.

Against real Flight logs, the reader driven directly (no Spark): the primary's log ("source")
and an active copy's log of the same stream ("home", under the copy's name) hold the same
stable rows per bucket, as every copy of a deterministic fragment writes them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.fragments import CONNECTION_SCHEMA
from spark_jobs.generators import split_buckets
from spark_jobs.runtime import StreamRef, StreamServer
from spark_jobs.runtime.sunion import SUnionReader
from spark_jobs.runtime.transport import StreamClient, publish
from tests.integration.runtime.conftest import (
    BUCKET,
    GENERATOR,
    declare,
    ports_fragment,
    reader_rows,
    rows,
    run_reference,
    sorted_rows,
)

COPY = "up.out@T"
GHOST = "up.out@U"


def replicated(servers, **extra) -> SUnionReader:
    inputs = [
        {
            "location": servers["source"].location,
            "stream": "up.out",
            "alternates": [{"location": servers["home"].location, "stream": COPY}],
        }
    ]
    # A short deadline: a cut-off primary costs each trigger this much at most.
    options = {"inputs": json.dumps(inputs), "consumer": "down", "call_timeout_ms": "300"}
    return SUnionReader({**options, **extra}, CONNECTION_SCHEMA)


@pytest.fixture
def logs(servers) -> Iterator[tuple[StreamClient, StreamClient]]:
    """Clients of the primary's log (``up.out`` declared) and of the copy's host (each test
    declares ``COPY`` when its copy has begun its log)."""
    primary, copy = declare(servers["source"], "up.out"), StreamClient(servers["home"].location)
    yield primary, copy
    primary.close()
    copy.close()


@pytest.fixture
def make_reader(servers) -> Iterator[Callable[..., SUnionReader]]:
    made: list[SUnionReader] = []

    def make(**extra: str) -> SUnionReader:
        made.append(replicated(servers, **extra))
        return made[-1]

    yield make
    for reader in made:
        reader.stop()


def test_a_bucket_complete_in_any_copy_is_released_and_read_from_it(servers, logs, make_reader):
    primary, copy = logs
    copy.declare(COPY, BUCKET)
    data = GENERATOR.seconds(0, 6)
    first = min(b for b, _ in split_buckets(data, BUCKET))
    reader = make_reader(start_bucket=str(first))
    # The primary is behind (two buckets), its copy has six.
    publish(primary, "up.out", GENERATOR.seconds(0, 2), BUCKET)
    publish(copy, COPY, data, BUCKET)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end == {"bucket": first + 6}
    (part,) = reader.partitions(start, end)
    assert part.source == (servers["home"].location, COPY)
    assert sorted_rows(reader_rows(reader, start, end)) == sorted_rows(data)
    # Both sources keep what the fragment may read again, so both get its acknowledgement,
    # each up to its own boundary: the primary has completed two buckets only.
    reader.commit(end)
    assert primary.info("up.out")["acks"] == {"down": first + 2}
    assert copy.info(COPY)["acks"] == {"down": first + 6}


def test_a_primary_behind_is_acknowledged_up_to_its_boundary_and_then_as_it_catches_up(
    servers, logs, make_reader
):
    """An ack past a source's boundary would trim what its writer appends there next (and
    move its ``first`` back below what it dropped): a primary behind gets its boundary."""
    primary, copy = logs
    copy.declare(COPY, BUCKET)
    data = GENERATOR.seconds(0, 8)
    first = min(b for b, _ in split_buckets(data, BUCKET))
    reader = make_reader(start_bucket=str(first))
    publish(primary, "up.out", GENERATOR.seconds(0, 2), BUCKET)
    publish(copy, COPY, GENERATOR.seconds(0, 6), BUCKET)
    start = reader.initialOffset()
    middle = reader.latestOffset(start, None)
    assert middle == {"bucket": first + 6}
    reader.commit(middle)
    assert primary.info("up.out")["boundary"] == first + 2
    assert primary.info("up.out")["acks"] == {"down": first + 2}
    assert copy.info(COPY)["acks"] == {"down": first + 6}

    # The primary catches up: what it appends now stays until the fragment has read past it.
    caught_up = GENERATOR.seconds(2, 6)
    publish(primary, "up.out", caught_up, BUCKET)
    assert sorted_rows(primary.read_table("up.out", first + 2, first + 6)) == sorted_rows(caught_up)
    publish(primary, "up.out", GENERATOR.seconds(6, 8), BUCKET)
    publish(copy, COPY, GENERATOR.seconds(6, 8), BUCKET)
    end = reader.latestOffset(middle, None)
    assert end == {"bucket": first + 8}
    reader.commit(end)
    assert primary.info("up.out")["acks"] == {"down": first + 8}
    assert copy.info(COPY)["acks"] == {"down": first + 8}


def test_a_copy_behind_is_acknowledged_up_to_its_boundary_and_none_without_one(
    servers, logs, make_reader
):
    primary, copy = logs
    copy.declare(COPY, BUCKET)
    first = min(b for b, _ in split_buckets(GENERATOR.seconds(0, 6), BUCKET))
    reader = make_reader(start_bucket=str(first))
    publish(primary, "up.out", GENERATOR.seconds(0, 3), BUCKET)
    start = reader.initialOffset()
    middle = reader.latestOffset(start, None)
    assert middle == {"bucket": first + 3}
    reader.commit(middle)
    # The copy has begun its log but completed nothing yet: nothing to acknowledge there.
    assert copy.info(COPY)["acks"] == {}

    publish(copy, COPY, GENERATOR.seconds(0, 1), BUCKET)
    publish(primary, "up.out", GENERATOR.seconds(3, 6), BUCKET)
    end = reader.latestOffset(middle, None)
    assert end == {"bucket": first + 6}
    reader.commit(end)
    assert primary.info("up.out")["acks"] == {"down": first + 6}
    assert copy.info(COPY)["acks"] == {"down": first + 1}
    # A later commit that asks for less moves no acknowledgement back.
    reader.commit(middle)
    assert copy.info(COPY)["acks"] == {"down": first + 1}
    assert primary.info("up.out")["acks"] == {"down": first + 6}


def test_the_primary_is_read_while_it_holds_the_range(servers, logs, make_reader):
    primary, copy = logs
    copy.declare(COPY, BUCKET)
    data = GENERATOR.seconds(0, 4)
    first = min(b for b, _ in split_buckets(data, BUCKET))
    reader = make_reader(start_bucket=str(first))
    publish(primary, "up.out", data, BUCKET)
    publish(copy, COPY, GENERATOR.seconds(0, 3), BUCKET)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end == {"bucket": first + 4}
    (part,) = reader.partitions(start, end)
    assert part.source == (servers["source"].location, "up.out")


def test_a_primary_cut_off_is_passed_over_without_waiting_for_it(servers, logs, make_reader):
    primary, copy = logs
    copy.declare(COPY, BUCKET)
    data = GENERATOR.seconds(0, 6)
    first = min(b for b, _ in split_buckets(data, BUCKET))
    reader = make_reader(start_bucket=str(first))
    publish(primary, "up.out", GENERATOR.seconds(0, 3), BUCKET)
    publish(copy, COPY, GENERATOR.seconds(0, 3), BUCKET)
    start = reader.initialOffset()
    middle = reader.latestOffset(start, None)
    assert middle == {"bucket": first + 3}
    head = reader_rows(reader, start, middle)
    reader.commit(middle)
    # The primary's host goes away; its copy goes on.
    primary.close()
    servers["source"].shutdown()
    publish(copy, COPY, GENERATOR.seconds(3, 6), BUCKET)
    end = reader.latestOffset(middle, None)
    assert end == {"bucket": first + 6}
    assert not reader.reachable(servers["source"].location)
    tail = reader_rows(reader, middle, end)
    # Nothing lost, nothing read twice across the switch at the bucket edge.
    assert sorted_rows(pa.concat_tables([head, tail])) == sorted_rows(data)
    reader.commit(end)
    assert copy.info(COPY)["acks"] == {"down": first + 6}


def test_the_spool_fills_each_bucket_from_a_copy_that_holds_it(
    servers, logs, make_reader, tmp_path: Path
):
    primary, copy = logs
    copy.declare(COPY, BUCKET)
    data = GENERATOR.seconds(0, 5)
    first = min(b for b, _ in split_buckets(data, BUCKET))
    # DPC's path: complete buckets are spooled before release; a long budget, so nothing goes
    # tentative here.
    reader = make_reader(
        start_bucket=str(first),
        delay_budget_ms="600000",
        spool_dir=str(tmp_path / "spool"),
    )
    publish(primary, "up.out", GENERATOR.seconds(0, 2), BUCKET)
    publish(copy, COPY, data, BUCKET)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end == {"bucket": first + 5}  # stable: no tentative_from
    spool = reader.spool
    assert spool is not None
    location = servers["source"].location  # the input's name in the spool
    assert all(spool.has(location, "up.out", b) for b in range(first, first + 5))
    assert sorted_rows(reader_rows(reader, start, end)) == sorted_rows(data)


def test_an_alternate_without_the_stream_yet_is_no_source_and_no_failure(
    servers, logs, make_reader
):
    """An active copy that has not begun its log (its query is starting) answers "unknown
    stream": the input is read from the primary meanwhile, and from the copy once it has it."""
    primary, copy = logs
    data = GENERATOR.seconds(0, 4)
    first = min(b for b, _ in split_buckets(data, BUCKET))
    reader = make_reader(start_bucket=str(first))
    publish(primary, "up.out", GENERATOR.seconds(0, 2), BUCKET)
    start = reader.initialOffset()
    middle = reader.latestOffset(start, None)
    assert middle == {"bucket": first + 2}
    assert sorted_rows(reader_rows(reader, start, middle)) == sorted_rows(GENERATOR.seconds(0, 2))
    reader.commit(middle)  # no ack reaches a log that is not there, and none fails
    copy.declare(COPY, BUCKET)
    publish(copy, COPY, data, BUCKET)
    end = reader.latestOffset(middle, None)
    assert end == {"bucket": first + 4}
    (part,) = reader.partitions(middle, end)
    assert part.source == (servers["home"].location, COPY)


@pytest.mark.parametrize(
    "alternate",
    [{"location": "grpc://127.0.0.1:1"}, "grpc://127.0.0.1:1", {"stream": "s", "x": 1}],
)
def test_an_alternate_without_location_and_stream_is_refused(servers, alternate):
    inputs = [{"location": servers["source"].location, "stream": "up.out"}]
    inputs[0]["alternates"] = [alternate]  # type: ignore[assignment]
    with pytest.raises(ValueError, match=r"inputs\[0\]\.alternates: each needs exactly"):
        SUnionReader({"inputs": json.dumps(inputs), "consumer": "down"}, CONNECTION_SCHEMA)


@pytest.mark.spark
def test_a_fragment_reading_a_replicated_input_outlives_the_primary(servers, make_runtime):
    """On Spark: the executors read what the planner chose, and the fragment's output equals
    the unreplicated reference although the primary's host went away mid-stream."""
    seconds = 12
    expected = run_reference(
        make_runtime,
        servers,
        lambda c: publish(c, "conns-ref", GENERATOR.seconds(0, seconds), BUCKET),
    )
    holder = StreamServer()  # the active copy's host
    primary, copy = declare(servers["source"], "up.out"), declare(holder, COPY)
    declare(servers["home"], "out").close()
    spec = ports_fragment("down", servers["source"], "up.out", servers["home"], "out")
    spec = dataclasses.replace(
        spec,
        inputs=(
            StreamRef(
                servers["source"].location,
                "up.out",
                # U's copy never begins its log: held, read and acknowledged around.
                alternates=(StreamRef(holder.location, COPY), StreamRef(holder.location, GHOST)),
            ),
        ),
        options={"call_timeout_ms": "300"},
    )
    host = make_runtime("D")
    try:
        # Second 6 is mid-window ([4, 8)): the switch happens inside a window's state.
        for client, stream in ((primary, "up.out"), (copy, COPY)):
            publish(client, stream, GENERATOR.seconds(0, 6), BUCKET)
        host.start(spec, epoch=0).processAllAvailable()
        primary.close()
        servers["source"].shutdown()
        publish(copy, COPY, GENERATOR.seconds(6, seconds), BUCKET)
        host.query("down").processAllAvailable()
        host.stop("down")
        assert rows(servers["home"].log.table("out")) == expected
        # The copy was told how far the fragment got, so it may trim.
        assert copy.info(COPY)["acks"]["down"] >= min(
            b for b, _ in split_buckets(GENERATOR.seconds(seconds - 1, seconds), BUCKET)
        )
    finally:
        copy.close()
        holder.shutdown()


def test_a_run_of_buckets_is_spooled_in_one_read_and_split_by_bucket() -> None:
    """The spool copies a run of complete buckets with one log read, each bucket its own file
    with exactly its rows, empty buckets included (a call per bucket stalled latestOffset at
    100 ms buckets)."""
    from spark_jobs.runtime.sunion import split_by_bucket

    micros = 100_000  # 100 ms buckets
    stimes = [10 * micros + 5, 10 * micros + 7, 12 * micros, 13 * micros + 99_999]
    table = pa.table({"k": ["a", "b", "c", "d"], "stime": pa.array(stimes, pa.int64())})
    split = split_by_bucket(
        table.cast(pa.schema([("k", pa.string()), ("stime", pa.timestamp("us", tz="UTC"))])),
        10,
        14,
        micros,
    )
    assert sorted(split) == [10, 11, 12, 13]
    assert {b: t.column("k").to_pylist() for b, t in split.items()} == {
        10: ["a", "b"],
        11: [],
        12: ["c"],
        13: ["d"],
    }
    # An empty answer: every bucket of the run present and empty, with the schema.
    empty = split_by_bucket(table.schema.empty_table(), 3, 5, micros)
    assert sorted(empty) == [3, 4] and all(t.num_rows == 0 for t in empty.values())
