"""SUnion's input tag (``fedload_input``): rows in the declared columns by name, tagged with
their input's index, and null in the columns only other inputs have."""

from __future__ import annotations

import pyarrow as pa

from spark_jobs.runtime.sunion import INPUT_COLUMN, SUnionReader, _tagged


def test_a_batch_is_matched_by_name_tagged_and_null_filled():
    stime = pa.array([1, 2], pa.timestamp("us", tz="UTC"))
    batch = pa.RecordBatch.from_pydict({"stime": stime, "temp": [1.5, 2.5], "station": ["n", "s"]})
    target = pa.schema(
        [
            ("station", pa.string()),
            ("temp", pa.float64()),
            ("level", pa.int32()),
            ("stime", pa.timestamp("us", tz="UTC")),
            (INPUT_COLUMN, pa.int32()),
        ]
    )
    out = _tagged(batch, 1, target)
    assert out.schema == target
    assert out.to_pydict() == {
        "station": ["n", "s"],
        "temp": [1.5, 2.5],
        "level": [None, None],
        "stime": stime.to_pylist(),
        INPUT_COLUMN: [1, 1],
    }


def test_each_partition_carries_its_inputs_index():
    reader = SUnionReader.__new__(SUnionReader)
    reader.inputs = [
        {"location": "grpc://a:1", "stream": "x"},
        {"location": "grpc://b:1", "stream": "y"},
    ]
    reader.tokens = None
    parts = reader.partitions({"bucket": 0}, {"bucket": 2})
    assert [(p.stream, p.index) for p in parts] == [("x", 0), ("y", 1)]
