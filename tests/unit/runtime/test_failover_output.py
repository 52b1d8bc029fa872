"""A precise failover's output leaves out exactly the rows the failed host already wrote."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from spark_jobs.runtime.failover import leave_out


def test_rows_already_written_are_left_out_once_each() -> None:
    written = Counter({(8, "10.0.0.1", 3): 1, (8, "10.0.0.2", 5): 2})
    batch = pa.table(
        {
            "stime": [8, 8, 8, 8, 12],
            "src_ip": ["10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.2", "10.0.0.1"],
            "connections": [3, 5, 5, 5, 4],
        }
    )
    kept, dropped = leave_out(batch, written)
    assert dropped == 3
    # The third copy of (8, 10.0.0.2, 5) was never written before: it is new output.
    assert kept.to_pylist() == [
        {"stime": 8, "src_ip": "10.0.0.2", "connections": 5},
        {"stime": 12, "src_ip": "10.0.0.1", "connections": 4},
    ]
    assert +written == Counter()
    # Nothing left to leave out: the next batch passes whole.
    again, none = leave_out(batch, written)
    assert (again.num_rows, none) == (5, 0)
