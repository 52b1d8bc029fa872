"""SOutput: the sink of every fragment, appending each micro-batch to the fragment's output log.

Implemented with ``foreachBatch`` rather than a Python ``DataSourceStreamWriter``, because:

- a batch is written as one Flight DoPut from the driver, so the log sees it whole or not at
  all; a data-source writer writes one piece per Spark task from executor workers and would need
  a staging area plus a commit step to get the same atomicity;
- the batch id arrives with the data, and the log deduplicates on it: when Spark re-runs the
  batch after a restart or a move (its offsets were logged but not committed), the second write
  is dropped, so the log holds each batch once;
- the lease epoch travels with every write and the log refuses an epoch below its fence, so a
  host that lost the fragment cannot write after the move is committed.

Fragment outputs are small (alerts per window), so collecting a batch to the driver is cheap.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from spark_jobs.runtime.transport import StreamClient


class SOutput:
    def __init__(self, location: str, stream: str, epoch: int) -> None:
        self.location = location
        self.stream = stream
        self.epoch = epoch
        self.written = 0
        self.skipped = 0

    def holds_boundaries(self) -> bool:
        """True while the output BOUNDARY must not advance (a DPC sink in failure)."""
        return False

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.write(batch, batch_id)

    def write(self, batch: DataFrame, batch_id: int) -> bool:
        """Append one micro-batch; False if the log already had it. Raises FencedError if stale."""
        table = batch.toArrow()
        with StreamClient(self.location) as client:
            fresh = client.append(self.stream, table, batch_id=batch_id, epoch=self.epoch)
        if fresh:
            self.written += 1
        else:
            self.skipped += 1
        return fresh
