"""DPC's reconciliation state on disk (no Spark session): what a restarted driver resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from pyspark.sql.types import StructType

from app.availability.node import Checkpoint
from app.availability.states import NodeState
from app.availability.tuples import Kind, Row
from spark_jobs.generators import ConnectionGenerator
from spark_jobs.runtime import StreamClient, publish
from spark_jobs.runtime.dpc import DPCOutput, DPCStore
from spark_jobs.runtime.sunion import Spool, SUnionReader
from spark_jobs.runtime.transport import PackedCheckpoint, StreamServer

ROWS = [Row(1000, "a"), Row(2000, "b")]
SOURCE = ConnectionGenerator(seed=5)


def _output(root: Path) -> DPCOutput:
    return DPCOutput("grpc://127.0.0.1:1", "out", 3, root / "frag", DPCStore(root / "frag.dpc"))


def test_a_new_output_on_the_same_store_resumes_the_dedup_state(tmp_path):
    first = _output(tmp_path)
    assert not first.resumed
    first.rules.stable(ROWS)
    first.rules.tentative([Row(3000, "c")])
    first.state = NodeState.UP_FAILURE
    packed = PackedCheckpoint.of(b"the all-stable directory")
    first.checkpoint = Checkpoint(3, (7, packed))
    first.store.save_checkpoint(packed)  # type: ignore[union-attr]
    first.processed_end = 5
    first.redo_count = 2
    first._persist()

    second = _output(tmp_path)
    assert second.resumed
    assert second.state is NodeState.UP_FAILURE
    assert second.checkpoint == Checkpoint(3, (7, packed))
    assert second.processed_end == 5
    assert second.redo_count == 2
    assert second.rules.last_stable == ROWS[-1].key
    assert second.rules.tentative_pending == 1
    # Rows the dead driver sent stably are duplicates now; the tentative suffix is undone first.
    assert second.rules.stable(ROWS) == []
    assert [m.kind for m in second.rules.begin_corrections()] == [Kind.UNDO]
    assert [m.row for m in second.rules.stable([*ROWS, Row(3000, "d")])] == [Row(3000, "d")]


def test_state_is_replaced_whole_and_leaves_no_temporary_file(tmp_path):
    store = DPCStore(tmp_path / "s")
    store.save({"n": 1})
    store.save({"n": 2})
    assert store.load() == {"n": 2}
    assert sorted(p.name for p in store.directory.iterdir()) == ["state.json"]
    assert json.loads(store.state_path.read_text()) == {"n": 2}


def test_the_ack_limit_file_caps_acknowledgements_while_it_exists(tmp_path):
    store = DPCStore(tmp_path / "s")
    options = {
        "inputs": json.dumps([{"location": "grpc://127.0.0.1:1", "stream": "a"}]),
        "consumer": "frag",
        "ack_limit_file": str(store.ack_limit_path),
        "first_tentative": "9",
    }
    reader = SUnionReader(options, StructType([]))
    assert reader._ack_limit() is None
    store.limit_acks(4)
    assert reader._ack_limit() == 4
    store.limit_acks(None)
    assert reader._ack_limit() is None
    # A reader restarted in failure is in failure from the first tentative bucket.
    assert reader._first_tentative == 9


def test_spool_holds_whole_buckets_and_trims_below_a_bucket(tmp_path):
    """The SUnion spool (no Spark, no network): one file per input and bucket, written whole,
    read back equal, and trimmed below the acknowledged bucket only for that input."""
    spool = Spool(str(tmp_path / "spool"))
    location = "grpc://127.0.0.1:4000"
    table = pa.table({"stime": pa.array([1, 2], pa.timestamp("us", tz="UTC")), "x": [7, 8]})
    for bucket in (10, 11, 12):
        spool.put(location, "b", bucket, table)
    spool.put(location, "a", 10, table.slice(0, 0))
    assert pa.Table.from_batches(spool.get(location, "b", 11), table.schema) == table
    assert pa.Table.from_batches(spool.get(location, "a", 10), table.schema).num_rows == 0
    spool.trim(location, "b", 12)
    assert [spool.has(location, "b", n) for n in (10, 11, 12)] == [False, False, True]
    assert spool.has(location, "a", 10), "trimming one input leaves the others"
    # No temporary file is left beside the buckets.
    leftovers = [p.name for p in (tmp_path / "spool").rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_a_paused_reader_plans_nothing_until_its_own_pause_file_goes(tmp_path):
    """A redo copy yields to the serving query through its pause file (real Flight log, no
    Spark): while the file exists the offset stays at the start; without it the reader moves on;
    another copy's pause file does not stop it."""
    server = StreamServer()
    try:
        with StreamClient(server.location) as client:
            client.declare("a", 1.0)
            publish(client, "a", SOURCE.seconds(0, 3), 1.0)
        store = DPCStore(tmp_path / "s")
        options = {
            "inputs": json.dumps([{"location": server.location, "stream": "a"}]),
            "consumer": "frag",
            "pause_file": str(store.pause_path("frag.redo-1")),
        }
        reader = SUnionReader(options, StructType([]))
        begin = reader.initialOffset()
        start = {"bucket": begin["bucket"], "tentative_from": begin["bucket"]}
        store.pause("frag.redo-1", True)
        assert reader.latestOffset(start) == start
        store.pause("frag.redo-2", True)
        store.pause("frag.redo-1", False)
        assert not store.pause_path("frag.redo-1").exists()
        assert reader.latestOffset({"bucket": begin["bucket"]}) == {"bucket": begin["bucket"] + 3}
    finally:
        server.shutdown()
