"""A producer's log keeps what each of its consumers has still to read.

The log trims below the lowest acknowledgement it knows; a consumer it has not heard from yet
must hold its place first. The demo's failure this pins: two fragments read one connection
stream, the first one's acknowledgement trimmed buckets the second had planned but not yet
read, and the second's 10 s window came out with 42 ports instead of 60.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_jobs.runtime import FragmentRuntime, StreamClient, StreamServer
from tests.integration.runtime.conftest import GENERATOR, declare, ports_fragment


def _publish_seconds(client: StreamClient, stream: str, seconds: range) -> list[int]:
    buckets = []
    for second in seconds:
        table = GENERATOR.second(second)
        bucket = int(table.column("stime").cast(pa.int64())[0].as_py() // 1_000_000)
        client.append(stream, table, boundary=bucket + 1)
        buckets.append(bucket)
    return buckets


def _held_buckets(server: StreamServer, stream: str) -> list[int]:
    table = server.log.table(stream)
    micros = table.column("stime").cast(pa.int64()).to_pylist()
    return sorted({m // 1_000_000 for m in micros})


def test_an_ack_does_not_trim_what_a_held_consumer_has_not_read(servers):
    source = servers["source"]
    client = declare(source, "conns")
    buckets = _publish_seconds(client, "conns", range(6))
    client.hold("conns", "second")
    client.ack("conns", "first", buckets[4])
    assert _held_buckets(source, "conns") == buckets
    client.ack("conns", "second", buckets[2])
    assert _held_buckets(source, "conns") == buckets[2:]
    assert client.info("conns")["first"] == buckets[2]


def test_hold_never_moves_a_known_consumer_back(servers):
    source = servers["source"]
    client = declare(source, "conns")
    buckets = _publish_seconds(client, "conns", range(4))
    client.ack("conns", "only", buckets[2])
    client.hold("conns", "only", buckets[0])
    client.hold("conns", "only")
    assert client.info("conns")["acks"] == {"only": buckets[2]}
    assert _held_buckets(source, "conns") == buckets[2:]


def test_first_follows_the_trim_so_a_late_consumer_starts_at_a_held_bucket(servers):
    source = servers["source"]
    client = declare(source, "conns")
    buckets = _publish_seconds(client, "conns", range(5))
    client.ack("conns", "early", buckets[3])
    # A consumer joining now starts from "first"; reading a trimmed bucket would be refused.
    assert client.info("conns")["first"] == buckets[3]
    rows = client.read_table("conns", client.info("conns")["first"], buckets[-1] + 1)
    assert rows.num_rows == GENERATOR.second(3).num_rows + GENERATOR.second(4).num_rows


@pytest.mark.parametrize("replay_from", [None, 2], ids=["fresh", "replay-point"])
def test_a_started_fragment_reads_everything_a_sibling_acknowledged_first(
    servers, make_runtime, replay_from: int | None
):
    source, home = servers["source"], servers["home"]
    client = declare(source, "conns")
    declare(home, "q.out")
    buckets = _publish_seconds(client, "conns", range(6))
    runtime: FragmentRuntime = make_runtime("A")
    spec = ports_fragment("q", source, "conns", home, "q.out")
    start = None if replay_from is None else buckets[replay_from]
    query = runtime.start(spec, epoch=0, replay_from=start)
    # A sibling fragment on the same stream, faster: it has read and acknowledged everything.
    client.ack("conns", "sibling", buckets[-1] + 1)
    query.processAllAvailable()
    read = sum(progress["numInputRows"] for progress in query.recentProgress)
    seconds = range(6) if replay_from is None else range(replay_from, 6)
    assert read == sum(GENERATOR.second(s).num_rows for s in seconds)
    assert client.info("conns")["acks"]["q"] == buckets[-1] + 1
