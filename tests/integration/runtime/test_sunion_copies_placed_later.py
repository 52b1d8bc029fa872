"""An input's active copy placed after the fragment started: read without a restart.

The agent lists each input's alternates in a file (``FragmentRuntime.alternates_file``) that
SUnion re-reads whenever it changes, so a fragment started before its producer's copies were
placed reads them from then on. Against real Flight logs, the reader driven directly, then on
Spark through the runtime.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterator
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


@pytest.fixture
def primary(servers) -> Iterator[StreamClient]:
    client = declare(servers["source"], "up.out")
    yield client
    client.close()


@pytest.fixture
def copy(servers) -> Iterator[StreamClient]:
    client = declare(servers["home"], COPY)
    yield client
    client.close()


@pytest.fixture
def listing(tmp_path: Path) -> Path:
    return tmp_path / "alternates" / "down.json"


@pytest.fixture
def reader(servers, listing: Path) -> Iterator[SUnionReader]:
    """A reader started with no alternates and told where the agent lists them."""
    inputs = [{"location": servers["source"].location, "stream": "up.out"}]
    first = min(b for b, _ in split_buckets(GENERATOR.seconds(0, 1), BUCKET))
    made = SUnionReader(
        {
            "inputs": json.dumps(inputs),
            "consumer": "down",
            "call_timeout_ms": "300",
            "start_bucket": str(first),
            "alternates_file": str(listing),
        },
        CONNECTION_SCHEMA,
    )
    yield made
    made.stop()


def list_alternates(listing: Path, listed: object) -> None:
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text(json.dumps(listed))
    # Two writes within the file system's timestamp granularity would look unchanged.
    stamp = listing.stat().st_mtime_ns + 10_000_000
    os.utime(listing, ns=(stamp, stamp))


def test_a_copy_listed_after_the_start_is_read_and_acknowledged(
    servers, primary, copy, reader, listing
):
    data = GENERATOR.seconds(0, 6)
    first = min(b for b, _ in split_buckets(data, BUCKET))
    # The primary is behind (two buckets), the copy has six, and nobody has listed the copy.
    publish(primary, "up.out", GENERATOR.seconds(0, 2), BUCKET)
    publish(copy, COPY, data, BUCKET)
    start = reader.initialOffset()
    middle = reader.latestOffset(start, None)
    assert middle == {"bucket": first + 2}
    head = reader_rows(reader, start, middle)
    reader.commit(middle)
    assert copy.info(COPY)["acks"] == {}

    key = f"{servers['source'].location}/up.out"
    list_alternates(listing, {key: [{"location": servers["home"].location, "stream": COPY}]})
    end = reader.latestOffset(middle, None)
    assert end == {"bucket": first + 6}
    (part,) = reader.partitions(middle, end)
    assert part.source == (servers["home"].location, COPY)
    tail = reader_rows(reader, middle, end)
    assert sorted_rows(pa.concat_tables([head, tail])) == sorted_rows(data)
    reader.commit(end)
    assert copy.info(COPY)["acks"] == {"down": first + 6}

    # The copy dropped from the list (its replica went away): the primary alone again.
    list_alternates(listing, {key: []})
    assert reader.latestOffset(end, None) == end
    assert reader.inputs[0]["alternates"] == []


@pytest.mark.parametrize(
    ("listed", "says"),
    [
        ("[1, 2]", "expected an object"),
        ('{"KEY": [{"location": "grpc://127.0.0.1:1"}]}', "each needs exactly"),
        ('{"KEY": "grpc://127.0.0.1:1"}', "expected a list"),
        ('{"KEY": [', "Expecting"),
    ],
)
def test_a_bad_listing_changes_nothing_and_says_what_is_wrong(
    servers, primary, copy, reader, listing, listed, says, caplog
):
    key = f"{servers['source'].location}/up.out"
    good = [{"location": servers["home"].location, "stream": COPY}]
    list_alternates(listing, {key: good})
    start = reader.initialOffset()
    reader.latestOffset(start, None)
    assert reader.inputs[0]["alternates"] == good
    listing.write_text(listed.replace("KEY", key))
    stamp = listing.stat().st_mtime_ns + 20_000_000
    os.utime(listing, ns=(stamp, stamp))
    with caplog.at_level(logging.ERROR, logger="spark_jobs.runtime.sunion"):
        reader.latestOffset(start, None)
    assert reader.inputs[0]["alternates"] == good
    assert any(says in r.getMessage() and "down" in r.getMessage() for r in caplog.records)


def test_an_input_the_listing_does_not_name_keeps_its_alternates(servers, reader, listing):
    """A redo copy may start before its fragment rewrote a listing an earlier run left, for
    inputs by other names: those say nothing about this query's inputs."""
    reader.inputs[0]["alternates"] = [{"location": servers["home"].location, "stream": COPY}]
    list_alternates(listing, {"grpc://elsewhere:1/other.out": []})
    reader._refresh_alternates()
    assert reader.inputs[0]["alternates"] == [
        {"location": servers["home"].location, "stream": COPY}
    ]


@pytest.mark.spark
def test_a_running_fragment_takes_a_copy_placed_later_and_outlives_the_primary(
    servers, make_runtime
):
    """On Spark: the fragment started reading the primary alone; the runtime hands it a copy
    while it runs (no restart: the same query), the primary's host goes away mid-window, and
    the output equals the unreplicated reference."""
    seconds = 12
    expected = run_reference(
        make_runtime,
        servers,
        lambda c: publish(c, "conns-ref", GENERATOR.seconds(0, seconds), BUCKET),
    )
    holder = StreamServer()  # the active copy's host, placed after the fragment started
    primary, copy = declare(servers["source"], "up.out"), declare(holder, COPY)
    declare(servers["home"], "out").close()
    spec = ports_fragment("down", servers["source"], "up.out", servers["home"], "out")
    spec = dataclasses.replace(spec, options={"call_timeout_ms": "300"})
    host = make_runtime("D")
    try:
        for client, stream in ((primary, "up.out"), (copy, COPY)):
            publish(client, stream, GENERATOR.seconds(0, 6), BUCKET)
        query = host.start(spec, epoch=0)
        query.processAllAvailable()
        replicated = (
            StreamRef(servers["source"].location, "up.out", (StreamRef(holder.location, COPY),)),
        )
        assert host.update_alternates("down", replicated) is True
        assert host.update_alternates("down", replicated) is False  # nothing new
        with pytest.raises(ValueError, match="a new input log needs a restart"):
            host.update_alternates("down", (StreamRef(holder.location, COPY),))
        # Held at once, before the source reads there: no other consumer's ack trims it.
        assert "down" in copy.info(COPY)["acks"]
        primary.close()
        servers["source"].shutdown()
        publish(copy, COPY, GENERATOR.seconds(6, seconds), BUCKET)
        host.query("down").processAllAvailable()
        assert host.query("down") is query  # the same query: no restart
        host.stop("down")
        assert rows(servers["home"].log.table("out")) == expected
        assert copy.info(COPY)["acks"]["down"] >= min(
            b for b, _ in split_buckets(GENERATOR.seconds(seconds - 1, seconds), BUCKET)
        )
    finally:
        copy.close()
        holder.shutdown()


@pytest.mark.spark
def test_alternates_for_a_fragment_not_running_here_are_refused(make_runtime):
    host = make_runtime("D")
    with pytest.raises(KeyError, match="down does not run on D"):
        host.update_alternates("down", ())
