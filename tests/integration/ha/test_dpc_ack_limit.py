"""A DPC copy's first tentative batch caps the acknowledgements of its inputs where its redo
will read again: the batch's start, not its first tentative bucket. With 100 ms buckets a batch
holds several buckets, and capping at the first tentative one let the logs trim the batch's
stable buckets, which the redo (restored to the state before the batch) reads first.

Real Spark DataFrame, real Flight log for the output, Spark's offset-log format written as
Spark writes it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.availability.states import NodeState
from spark_jobs.runtime.dpc import NO_FURTHER_ACKS, DPCOutput, DPCStore, redo_reads_from
from spark_jobs.runtime.transport import StreamServer

STREAM = "O.x.out@T"


def _offset(directory: Path, batch_id: int, entry: dict[str, Any]) -> None:
    offsets = directory / "offsets"
    offsets.mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
    (offsets / str(batch_id)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(entry)}\n")


@pytest.fixture
def server():
    server = StreamServer()
    server.log.declare(STREAM, 0.1)
    yield server
    server.shutdown()


def _batch(spark):
    stime = datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)
    return spark.createDataFrame(
        [("10.0.0.1", 3, stime)], "src_ip string, ports int, stime timestamp"
    )


def test_the_first_tentative_batch_caps_acks_at_its_start(spark, server, tmp_path) -> None:
    checkpoint = tmp_path / "frag"
    # Batch 6 read buckets [100, 106); batch 7 reads [106, 112), tentative from bucket 109.
    _offset(checkpoint, 6, {"bucket": 106})
    _offset(checkpoint, 7, {"bucket": 112, "tentative_from": 109})
    store = DPCStore(tmp_path / "frag.dpc")
    output = DPCOutput(server.location, STREAM, 0, checkpoint, store)
    assert output.write_from(output.serving, _batch(spark), 7)
    assert output.state is NodeState.UP_FAILURE
    assert output.checkpoint is not None and output.checkpoint.next_bucket == 109
    # The redo restores the state before batch 7 and reads from 106 again.
    assert store.ack_limit_path.read_text() == "106"


def test_a_first_batch_that_is_tentative_stops_acks_where_they_stand(
    spark, server, tmp_path
) -> None:
    checkpoint = tmp_path / "frag"
    _offset(checkpoint, 0, {"bucket": 5, "tentative_from": 3})
    store = DPCStore(tmp_path / "frag.dpc")
    output = DPCOutput(server.location, STREAM, 0, checkpoint, store)
    output.write_from(output.serving, _batch(spark), 0)
    assert int(store.ack_limit_path.read_text()) == NO_FURTHER_ACKS


def test_where_a_redo_reads_from() -> None:
    assert redo_reads_from({"bucket": 40}) == 40
    assert redo_reads_from(None) == NO_FURTHER_ACKS
