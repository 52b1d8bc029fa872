"""SUnion's per-bucket helpers: the spool's one-listing view of its buckets, and the coalescing
of a range's many small batches (one per 100 ms bucket) into few, rows and order unchanged."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.runtime.sunion import Spool, coalesce

SCHEMA = pa.schema([("stime", pa.int64()), ("port", pa.int32())])


def _batch(*stimes: int, schema: pa.Schema = SCHEMA) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(stimes, pa.int64()), pa.array([s % 7 for s in stimes], pa.int32())],
        schema=schema,
    )


def test_buckets_lists_whole_files_only_and_matches_has(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path))
    assert spool.buckets("grpc://h:1", "s") == set()
    for bucket in (-2, 0, 5, 17):
        spool.put("grpc://h:1", "s", bucket, pa.Table.from_batches([_batch(bucket)]))
    spool.put("grpc://h:1", "other", 3, pa.Table.from_batches([_batch(3)]))
    folder = Path(spool.path("grpc://h:1", "s", 0)).parent
    # A writer's temp file (not renamed yet) and a stranger are not buckets.
    (folder / ".9.abc.tmp").write_bytes(b"partial")
    (folder / "notes.txt").write_text("x")
    listed = spool.buckets("grpc://h:1", "s")
    assert listed == {-2, 0, 5, 17}
    assert listed == {b for b in range(-5, 20) if spool.has("grpc://h:1", "s", b)}
    spool.trim("grpc://h:1", "s", 5)
    assert spool.buckets("grpc://h:1", "s") == {5, 17}
    assert spool.buckets("grpc://h:1", "other") == {3}


def test_coalesce_keeps_rows_and_order_in_fewer_batches() -> None:
    batches = [_batch(1, 2), _batch(), _batch(3), _batch(4, 5, 6), _batch()]
    out = list(coalesce(batches))
    assert len(out) == 1
    assert out[0].schema == SCHEMA
    assert out[0].column("stime").to_pylist() == [1, 2, 3, 4, 5, 6]
    assert out[0].column("port").to_pylist() == [s % 7 for s in range(1, 7)]


def test_coalesce_does_not_merge_across_schemas() -> None:
    nullable = pa.schema([pa.field("stime", pa.int64(), nullable=False), ("port", pa.int32())])
    batches = [_batch(1), _batch(2), _batch(3, schema=nullable), _batch(4)]
    out = list(coalesce(batches))
    assert [b.column("stime").to_pylist() for b in out] == [[1, 2], [3], [4]]
    assert [b.schema for b in out] == [SCHEMA, nullable, SCHEMA]


@pytest.mark.parametrize("max_rows", [1, 2, 3, 5])
def test_coalesce_caps_a_batch_at_max_rows(max_rows: int) -> None:
    batches = [_batch(1, 2), _batch(3), _batch(4), _batch(5, 6, 7, 8), _batch(9)]
    out = list(coalesce(batches, max_rows=max_rows))
    assert [s for b in out for s in b.column("stime").to_pylist()] == list(range(1, 10))
    # A batch is over the cap only when it came in alone and bigger than the cap.
    for b in out:
        assert b.num_rows <= max_rows or any(b.equals(x) for x in batches)


def test_coalesce_of_nothing_is_nothing() -> None:
    assert list(coalesce([])) == []
    assert list(coalesce([_batch(), _batch()])) == []
