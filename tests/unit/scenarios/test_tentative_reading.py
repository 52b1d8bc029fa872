"""What the tentative scenario reads, without agents: a DPC copy's companion stream over Flight
(as the copy's sink writes it) followed by the one consumer rule, and the paper's latency per
input bucket from the copy's batch records."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.availability.consumer import ReplicaConsumer
from app.availability.tuples import Kind, Row
from spark_jobs.runtime.dpc import DPCOutput
from spark_jobs.runtime.transport import StreamClient, StreamServer
from spark_jobs.scenarios.replicas import FlightCompanion
from spark_jobs.scenarios.tentative import (
    CopyLatency,
    _stabilizations,
    first_version_latency,
    node_latencies,
    stood_down,
)

LOG = "O.x.out@T"


@pytest.fixture
def server() -> Iterator[StreamServer]:
    server = StreamServer()
    yield server
    server.shutdown()


def test_the_companion_reads_what_the_copy_sent_in_order_and_the_consumer_follows_it(
    server: StreamServer, tmp_path: Path
) -> None:
    companion = FlightCompanion(server.location, LOG, None, 5.0)
    # Nothing sent yet: the copy declares its companion at its first batch.
    assert companion.messages(-1) == []
    sink = DPCOutput(server.location, LOG, 0, tmp_path / "frag")
    consumer = ReplicaConsumer("O.x.out", ("T",), next_bucket=0)
    with StreamClient(server.location) as client:
        client.declare(f"{LOG}.dpc", 1.0)
        sink._send(client, sink.rules.tentative([Row(2000, "a"), Row(3000, "b")]))
        first = consumer.follow({"T": companion})
        assert [r.tid for r in first.tentative] == ["a", "b"]
        assert [r.tid for r in consumer.tentative] == ["a", "b"]
        sink._send(client, sink.rules.begin_corrections())
        sink._send(client, sink.rules.stable([Row(2000, "a2"), Row(3000, "b2")]))
        sink._send(client, sink.rules.rec_done())
    sent = companion.messages(1)
    assert [s.seq for s in sent] == [2, 3, 4, 5]
    assert [s.message.kind for s in sent] == [
        Kind.UNDO,
        Kind.STABLE,
        Kind.STABLE,
        Kind.REC_DONE,
    ]
    assert sent[1].message.row == Row(2000, "a2")
    second = consumer.follow({"T": companion})
    assert (second.undos, second.undone, second.corrections, second.rec_dones) == (1, 2, 2, 1)
    assert consumer.tentative == []
    # Read again: nothing new.
    assert consumer.follow({"T": companion}).tentative == ()
    assert companion.messages(5) == []
    companion.close()


def test_node_latency_is_first_processing_of_each_bucket_after_its_end() -> None:
    offset_s = 1000.0
    holder = {
        "clock_offset_ms": round(offset_s * 1000),
        "batches": [
            # One past the last bucket, tentative, sent at (wall seconds).
            [11, False, offset_s + 11.5],
            [13, True, offset_s + 15.5],
            # A redo's batch sent at the switch: those buckets were processed already.
            [13, False, offset_s + 20.0],
            [14, False, offset_s + 21.0],
        ],
    }
    found = node_latencies(holder)
    assert found[10] == pytest.approx((0.5, False))
    assert found[11] == pytest.approx((3.5, True))
    assert found[12] == pytest.approx((2.5, True))
    assert found[13] == pytest.approx((7.0, False))
    assert sorted(found) == [10, 11, 12, 13]


def _copy(history: list[list[object]], batches: list[list[object]]) -> dict[str, object]:
    return {
        "clock_offset_ms": 0,
        "max_delay_seconds": 3.0,
        "bucket_ms": 1000,
        "history": history,
        "batches": batches,
    }


def test_a_copy_reconciling_alone_did_not_serve_from_its_stand_down_to_stable() -> None:
    history = [
        ["STABLE", 0.0],
        ["UP_FAILURE", 10.0],
        ["STABILIZATION", 30.0],  # stood down for its redo
        ["STABILIZATION", 40.0],  # the switch (the state machine's own)
        ["STABLE", 42.0],
        ["UP_FAILURE", 50.0],
        ["STABILIZATION", 60.0],  # a second redo, dropped: serving again at 65
        ["UP_FAILURE", 65.0],
        ["STABILIZATION", 70.0],  # standing down when the run ended
    ]
    assert stood_down(_copy(history, [])) == [
        (30.0, 42.0),
        (60.0, 65.0),
        (70.0, float("inf")),
    ]
    # The report's STABILIZATION periods (ms since the start) read the same: from the stand-down.
    assert _stabilizations(history, 0.0) == [[30000, 42000], [60000, 65000], [70000, None]]


def test_buckets_a_copy_left_to_the_other_while_stood_down_count_for_the_other_only() -> None:
    # T stands down at 20 with buckets 17-19 not sent yet (its batches ran behind) and switches
    # at 32.5: buckets 17-31 first leave in its redo's batch then. U served every bucket 1.5 s
    # after its end; the first version of those is U's, and T's own figure leaves them out only
    # when the run reconciled alone.
    serving = [[b + 1, False, b + 2.0] for b in [*range(17), *range(32, 40)]]
    t = _copy(
        [["STABLE", 0.0], ["UP_FAILURE", 12.0], ["STABILIZATION", 20.0], ["STABLE", 33.0]],
        sorted([*serving, [32, False, 32.5]], key=lambda batch: batch[2]),
    )
    u = _copy([["STABLE", 0.0]], [[b + 1, False, b + 2.5] for b in range(40)])
    together = CopyLatency.of(t, 0.0, 10.0)
    alone = CopyLatency.of(t, 0.0, 10.0, alone=True)
    assert together.added == pytest.approx(32.5 - 18.0 - 1.0)  # bucket 17: ended at 18
    # Left out: the buckets first sent during the stand-down (at the switch), 17 to 31.
    assert {16, 32} <= set(alone.live) and not set(range(17, 32)) & set(alone.live)
    assert alone.added == pytest.approx(0.0)
    first = first_version_latency([alone, CopyLatency.of(u, 0.0, 10.0)], 0.0, 10.0)
    assert first["max_added_latency_ms"] == pytest.approx(500.0)  # U's 1.5 s against 1 s
    alongside = first_version_latency([together], 0.0, 10.0)
    assert alongside["max_added_latency_ms"] == pytest.approx(13500.0)
