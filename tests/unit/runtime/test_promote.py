"""A promoted active copy's output: forwarded into the task's log, complete buckets only, the
failed host's rows left out once, under the failover's epoch, each range kept once on retry."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from spark_jobs.runtime.host import StreamRef
from spark_jobs.runtime.promote import FORWARD_BASE, Forwarder, covers, failed_host_rows
from spark_jobs.runtime.soutput import NAMESPACE_BITS
from spark_jobs.runtime.transport import FencedError, StreamClient, StreamLog, StreamServer

TASK_LOG = "P.x.out"
COPY_LOG = "P.x.out@T"


def _rows(*pairs: tuple[int, int]) -> pa.Table:
    """Rows (window start in seconds, count) of a per-source fragment."""
    return pa.table(
        {
            "stime": pa.array(
                [datetime.fromtimestamp(s, UTC) for s, _ in pairs], pa.timestamp("us", tz="UTC")
            ),
            "src_ip": ["10.0.0.1"] * len(pairs),
            "connections": [c for _, c in pairs],
        }
    )


@pytest.fixture
def owner() -> Iterator[StreamServer]:
    server = StreamServer()
    server.log.declare(TASK_LOG, 1.0)
    yield server
    server.shutdown()


def _task_log(owner: StreamServer) -> list[tuple[int, int]]:
    table = owner.log.table(TASK_LOG)
    return [(int(r["stime"].timestamp()), r["connections"]) for r in table.to_pylist()]


def test_the_copy_log_continues_the_task_log_without_loss_or_duplicate(owner) -> None:
    # The failed host wrote windows 0 and 4 (epoch 1), then died; its boundary is 8.
    owner.log.append(TASK_LOG, _rows((0, 3), (4, 5)), boundary=8, batch_id=0, epoch=1)
    copy = StreamLog()
    copy.declare(COPY_LOG, 1.0)
    # The copy started at bucket 4: it computed window 4 again, and windows 8 and 12 since.
    copy.append(COPY_LOG, _rows((4, 5), (8, 2)), boundary=12, batch_id=0, epoch=0)
    copy.append(COPY_LOG, _rows((12, 7)), batch_id=1, epoch=0)  # bucket 12: not complete yet
    written, boundary = failed_host_rows(StreamRef(owner.location, TASK_LOG))
    assert boundary == 8 and covers(4, boundary, span=4)
    with StreamClient(owner.location) as client:
        client.fence(TASK_LOG, 2)  # the failover's commit
    forwarder = Forwarder(copy, COPY_LOG, StreamRef(owner.location, TASK_LOG), 2, written)

    assert forwarder.forward() == 1
    assert _task_log(owner) == [(0, 3), (4, 5), (8, 2)]
    assert forwarder.left_out == 1
    info = owner.log.info(TASK_LOG)
    assert info["boundary"] == 12
    assert (2 << NAMESPACE_BITS) | FORWARD_BASE in info["written"]

    assert forwarder.forward() == 0  # nothing completed since
    copy.advance(COPY_LOG, 16)
    assert forwarder.forward() == 1
    assert _task_log(owner) == [(0, 3), (4, 5), (8, 2), (12, 7)]
    assert owner.log.info(TASK_LOG)["boundary"] == 16


def test_a_failed_append_is_retried_with_the_same_rows_and_id(owner) -> None:
    owner.log.append(TASK_LOG, _rows((0, 3)), boundary=4, batch_id=0, epoch=1)
    copy = StreamLog()
    copy.declare(COPY_LOG, 1.0)
    copy.append(COPY_LOG, _rows((0, 3), (4, 1)), boundary=8, batch_id=0, epoch=0)
    written, _ = failed_host_rows(StreamRef(owner.location, TASK_LOG))
    # A later host fenced the log above this forwarder's epoch: its append is refused.
    owner.log.fence(TASK_LOG, 3)
    forwarder = Forwarder(copy, COPY_LOG, StreamRef(owner.location, TASK_LOG), 2, written)
    with pytest.raises(FencedError):
        forwarder.forward()
    assert _task_log(owner) == [(0, 3)]
    # Once the log takes it (here: the same epoch allowed again), the kept range goes out whole,
    # the failed host's row still left out (the count was consumed once, not per attempt).
    forwarder.epoch = 3
    assert forwarder.forward() == 1
    assert _task_log(owner) == [(0, 3), (4, 1)]


@pytest.mark.parametrize(
    ("replay_from", "boundary", "covered"),
    [(4, 8, True), (4, 9, True), (8, 8, False), (4, None, False), (0, 4, True)],
)
def test_a_copy_covers_the_failed_host_only_if_its_first_window_was_emitted(
    replay_from: int, boundary: int | None, covered: bool
) -> None:
    assert covers(replay_from, boundary, span=4) is covered
