"""SUnion: the streaming source of every fragment, as a Spark 4 Python data source.

SUnion merges a fragment's input streams (same schema) and serialises them by event time. Each
stream lives in its producer's output log (``StreamServer``), grouped in stime buckets of
``bucket_seconds``. The source's offset is a bucket number, ``{"bucket": n}``, meaning "every
bucket below n"; a micro-batch reads the buckets [start, end) of every input. On the stable path a
bucket is released only once every input's BOUNDARY has passed it (``latestOffset`` returns the
minimum of the inputs' boundaries), so a batch never misses a row that arrives later, and the
offset log in Spark's checkpoint says exactly which buckets the state has seen: that is what lets
a restored checkpoint resume anywhere.

Where each method runs (Spark 4): ``initialOffset``/``latestOffset``/``partitions``/``commit`` in
one long-lived Python process beside the driver, ``read`` in executor Python workers, each on an
unpickled copy of the reader. Nothing is shared in memory with the runtime that started the
query, so all coordination is through the Flight endpoints named in the options.

Options: ``inputs`` (JSON list of ``{"location", "stream"}``), ``consumer`` (the fragment name:
acknowledgements belong to the fragment, not to a host, so a moved fragment keeps its place),
``start_bucket`` (replay point when there is no checkpoint), ``max_buckets_per_batch``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from spark_jobs.runtime.transport import StreamClient


@dataclass(frozen=True)
class BucketRange(InputPartition):
    """One input's buckets [lo, hi) in one micro-batch: one Spark task."""

    location: str
    stream: str
    lo: int
    hi: int


class SUnionDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sunion"

    def schema(self) -> str:
        # Fragments always pass their input schema with .schema(); this is only reached if not.
        return str(self.options["schema"])

    def streamReader(self, schema: StructType) -> SUnionReader:
        return SUnionReader(dict(self.options), schema)


class SUnionReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.inputs: list[dict[str, str]] = json.loads(options["inputs"])
        if not self.inputs:
            raise ValueError("SUnion needs at least one input stream")
        self.consumer = options["consumer"]
        self.start_bucket = int(options["start_bucket"]) if "start_bucket" in options else None
        self.max_buckets = int(options.get("max_buckets_per_batch", "0")) or None
        self.schema = schema
        self._clients: dict[str, StreamClient] = {}

    def __getstate__(self) -> dict[str, Any]:
        # gRPC channels cannot be pickled; executors open their own in read().
        state = dict(self.__dict__)
        state["_clients"] = {}
        return state

    def _client(self, location: str) -> StreamClient:
        if location not in self._clients:
            self._clients[location] = StreamClient(location)
        return self._clients[location]

    def _infos(self) -> list[dict[str, Any]]:
        return [self._client(i["location"]).info(i["stream"]) for i in self.inputs]

    def initialOffset(self) -> dict[str, int]:
        # A fresh query (no checkpoint) starts at the replay point, else at the oldest bucket
        # any input still holds; a restarted query never calls this (Spark uses its offset log).
        if self.start_bucket is not None:
            return {"bucket": self.start_bucket}
        firsts = [info["first"] for info in self._infos() if info["first"] is not None]
        boundaries = [info["boundary"] for info in self._infos() if info["boundary"] is not None]
        candidates = firsts or boundaries
        return {"bucket": min(candidates) if candidates else 0}

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        # Stable path: a bucket is released when every input's boundary has passed it. An input
        # that never sent a boundary holds everything back (DPC's tentative path would release
        # after the delay budget instead; not done here).
        infos = self._infos()
        boundaries = [info["boundary"] for info in infos]
        begin = start["bucket"] if start else self.initialOffset()["bucket"]
        if any(b is None for b in boundaries):
            return {"bucket": begin}
        end = max(begin, min(boundaries))
        if self.max_buckets is not None:
            end = min(end, begin + self.max_buckets)
        return {"bucket": end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[BucketRange]:
        lo, hi = start["bucket"], end["bucket"]
        if lo >= hi:
            return []
        return [BucketRange(i["location"], i["stream"], lo, hi) for i in self.inputs]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, BucketRange)
        # Spark checks Arrow batches from read() against the declared schema exactly, nullability
        # included: a stream written by SOutput (Spark's toArrow marks every field nullable) would
        # be refused by a reader declaring non-null fields, so conform each batch. Timestamps are
        # UTC throughout (the session time zone and the generator agree).
        target = to_arrow_schema(self.schema, timezone="UTC")
        # A fresh client per task: read() runs in executor workers on a pickled copy.
        with StreamClient(partition.location) as client:
            reader = client.read(partition.stream, partition.lo, partition.hi)
            for chunk in reader:
                batch = chunk.data
                if not batch.num_rows:
                    continue
                if batch.schema != target:
                    batch = pa.RecordBatch.from_arrays(
                        [
                            column.cast(field.type)
                            for column, field in zip(batch.columns, target, strict=True)
                        ],
                        schema=target,
                    )
                yield batch

    def commit(self, end: dict[str, int]) -> None:
        # Spark has durably committed every batch up to ``end``: the producers may trim their
        # logs below it. Acknowledging later than this would only cost memory; earlier would
        # lose rows that a restart from the checkpoint must re-read.
        for i in self.inputs:
            self._client(i["location"]).ack(i["stream"], self.consumer, end["bucket"])

    def stop(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
