"""A log declared with ``keep_rows`` keeps its newest acknowledged rows for readers."""

from __future__ import annotations

import pyarrow as pa

from spark_jobs.runtime.transport import StreamLog

US = 1_000_000


def _bucket(log: StreamLog, stream: str, bucket: int, rows: int) -> None:
    stime = pa.array([bucket * US] * rows, pa.timestamp("us", tz="UTC"))
    log.append(stream, pa.table({"v": list(range(rows)), "stime": stime}), boundary=bucket + 1)


def test_acked_buckets_go_without_keep_rows():
    log = StreamLog()
    log.declare("s", 1.0)
    for bucket in range(10, 15):
        _bucket(log, "s", bucket, 3)
    log.ack("s", "sink", 15)
    assert log.table("s").num_rows == 0
    assert log.info("s")["first"] == 15


def test_the_newest_acked_rows_stay_up_to_keep_rows_and_first_follows_them():
    log = StreamLog()
    log.declare("s", 1.0, keep_rows=7)
    for bucket in range(10, 15):
        _bucket(log, "s", bucket, 3)
    log.ack("s", "sink", 15)
    kept = log.table("s")
    # Whole buckets only: 14 and 13 (6 rows); 12 would make 9.
    assert sorted(set(kept.column("stime").cast(pa.int64()).to_pylist())) == [13 * US, 14 * US]
    assert log.info("s")["first"] == 13
    _bucket(log, "s", 15, 3)
    log.ack("s", "sink", 16)
    assert log.info("s")["first"] == 14
    assert log.table("s").num_rows == 6


def test_kept_buckets_can_be_read_from_first_and_older_ones_are_refused():
    log = StreamLog()
    log.declare("s", 1.0, keep_rows=3)
    for bucket in range(10, 13):
        _bucket(log, "s", bucket, 3)
    log.ack("s", "sink", 13)
    _schema, batches = log.read("s", 12, 13)
    assert sum(b.num_rows for b in batches) == 3
    try:
        log.read("s", 11, 13)
    except KeyError as error:
        assert "below 12" in str(error)
    else:
        raise AssertionError("a read below the kept buckets must fail, not answer empty")


def test_rows_with_a_window_struct_are_counted_and_left_out_once_each():
    from spark_jobs.runtime.soutput import leave_out, row_counts

    window = {"start": 0, "end": 60}
    table = pa.table({"w": [window, window, {"start": 60, "end": 120}], "n": [1, 1, 2]})
    written = row_counts(table.slice(0, 1))
    kept, dropped = leave_out(table, written)
    assert dropped == 1
    assert kept.to_pylist() == [{"w": window, "n": 1}, {"w": {"start": 60, "end": 120}, "n": 2}]
