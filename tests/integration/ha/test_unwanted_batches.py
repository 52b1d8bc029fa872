"""A DPC node's query whose batch is not wanted (an aborted redo, a late batch of a query that
no longer serves) must still run it: Spark 4 fails a stateful query whose foreachBatch left a
state store uncommitted (STATE_STORE_COMMIT_VALIDATION_FAILED), so a skipped batch would kill
the query instead of skipping. Real Spark, a stateful aggregation over a memory stream."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.runtime.dpc import _drain


def _run(spark: SparkSession, tmp_path: Any, unwanted: Callable[[DataFrame], None]) -> Any:
    frame = spark.readStream.format("rate").option("rowsPerSecond", 50).load()
    counts = frame.groupBy((F.col("value") % 3).alias("key")).count()

    def sink(batch: DataFrame, batch_id: int) -> None:
        unwanted(batch)  # every batch unwanted: what an aborted redo's sink does with its own

    query = (
        counts.writeStream.outputMode("update")
        .foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        # Bounded: a query that neither progresses nor dies fails the test, never hangs it.
        deadline = time.monotonic() + 120
        while query.isActive and len(query.recentProgress) < 4 and time.monotonic() < deadline:
            try:
                query.awaitTermination(0.5)
            except StreamingQueryException:
                break  # read below through query.exception()
        return query.isActive, query.exception(), len(query.recentProgress)
    finally:
        if query.isActive:
            query.stop()


def test_an_unwanted_batch_run_to_nothing_leaves_the_query_running(spark, tmp_path) -> None:
    active, error, batches = _run(spark, tmp_path, _drain)
    assert error is None
    assert active and batches >= 4


def test_an_unwanted_batch_left_unread_kills_a_stateful_query(spark, tmp_path) -> None:
    # Why _drain exists: the behaviour it works around, pinned so that a Spark that drops the
    # check shows up here rather than as dead code.
    active, error, _ = _run(spark, tmp_path, lambda batch: None)
    assert not active
    assert error is not None
    # (STATE_STORE_COMMIT_VALIDATION_FAILED in the driver's log; PySpark's exception carries
    # only the outer "Exception thrown in awaitResult".)
