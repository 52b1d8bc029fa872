"""The progress listener and book on Spark (``spark_jobs.runtime.listeners``): progress crosses
from the JVM as JSON, parsed into the same ``StreamingQueryProgress`` PySpark gives, and the
book holds what ``recentProgress`` holds, per run."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from pyspark.sql.streaming.listener import QueryProgressEvent

from spark_jobs.runtime.listeners import ProgressBook, ProgressListener

pytestmark = pytest.mark.spark


class Recorder(ProgressListener):
    def __init__(self) -> None:
        self.book = ProgressBook(keep=5)
        self.events: list[Any] = []
        self.lock = threading.Lock()

    def onQueryProgress(self, event: Any) -> None:
        with self.lock:
            self.events.append(event.progress)
        self.book.record(event.progress)


def _until(condition, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_progress_reaches_the_listener_as_pyspark_reports_it_and_stops_after_removal(
    spark, tmp_path, monkeypatch
) -> None:
    # PySpark's field-by-field conversion is the cost the listener avoids: were it still used,
    # no event would arrive.
    def converted_field_by_field(cls: Any, jevent: Any) -> Any:
        raise AssertionError("progress converted field by field over Py4J")

    monkeypatch.setattr(QueryProgressEvent, "fromJObject", classmethod(converted_field_by_field))
    recorder = Recorder()
    spark.streams.addListener(recorder)
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 20)
        .load()
        .writeStream.format("noop")
        .queryName("progress-listener")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    run_id = str(query.runId)
    try:
        assert _until(lambda: len(recorder.book.recent(run_id)) >= 5), recorder.events
        spark.streams.removeListener(recorder)
        # What the listener got is what the query itself reports for those batches.
        by_batch = {p["batchId"]: p for p in query.recentProgress}
        with recorder.lock:
            got = list(recorder.events)
        assert [p.batchId for p in got] == sorted(p.batchId for p in got)
        for progress in got:
            assert str(progress.id) == str(query.id) and str(progress.runId) == run_id
            own = by_batch[progress.batchId]
            assert progress["durationMs"] == own["durationMs"]
            assert progress.numInputRows == own["numInputRows"]
            assert progress.sources[0].description == own["sources"][0]["description"]
            assert progress.get("timestamp") == own["timestamp"]
        # The book keeps the last five of the run, oldest first.
        assert [p.batchId for p in recorder.book.recent(run_id)] == [p.batchId for p in got[-5:]]
        assert [p.batchId for p in recorder.book.recent(run_id, last=2)] == [
            p.batchId for p in got[-2:]
        ]
        # Removed: the query runs on, nothing more arrives.
        time.sleep(0.5)  # an event already on the bus at the removal may still land
        with recorder.lock:
            settled = len(recorder.events)
        last_batch = query.lastProgress["batchId"]
        assert _until(lambda: query.lastProgress["batchId"] >= last_batch + 3)
        with recorder.lock:
            assert len(recorder.events) == settled
    finally:
        query.stop()
        spark.streams.removeListener(recorder)


def test_the_book_keeps_runs_apart_and_forgets_one() -> None:
    book = ProgressBook(keep=3)

    def progress(run: str, batch: int) -> Any:
        from pyspark.sql.streaming.listener import StreamingQueryProgress

        return StreamingQueryProgress.fromJson(
            {
                "id": "00000000-0000-0000-0000-000000000001",
                "runId": run,
                "name": None,
                "timestamp": "2026-11-27T00:00:00.000Z",
                "batchId": batch,
                "batchDuration": 1,
                "numInputRows": 0,
                "inputRowsPerSecond": 0.0,
                "processedRowsPerSecond": 0.0,
                "durationMs": {"triggerExecution": 10},
                "stateOperators": [],
                "sources": [],
                "sink": {"description": "noop", "numOutputRows": 0},
            }
        )

    first, second = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"
    for batch in range(5):
        book.record(progress(first, batch))
    book.record(progress(second, 7))
    assert [p.batchId for p in book.recent(first)] == [2, 3, 4]
    assert [p.batchId for p in book.recent(second)] == [7]
    book.forget(first)
    assert book.recent(first) == [] and len(book.recent(second)) == 1
