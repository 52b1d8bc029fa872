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

DPC (optional, ``delay_budget_ms`` set): a bucket some input has not closed is released
TENTATIVE once the clock passes its end plus the budget (``app.availability.sunion`` decides;
see ``spark_jobs/runtime/dpc.py`` for the rest). Such an offset carries ``tentative_from``, the
first bucket of its range released without every boundary; it lands in Spark's offset log, which
is how the sink learns that a batch is tentative. Extra options: ``bucket_ms`` (the bucket width
in stime milliseconds), ``delay_strategy`` (``delay_each``/``delay_first``), and the clock: an
injected one (``clock_location``/``clock_stream``: "now" in ms is that stream's boundary) or wall
time shifted by ``clock_offset_ms`` (now = wall ms - offset). If the declared schema has a
string column ``kind`` the source fills it with STABLE/TENTATIVE per row. Reconciliation state
that must survive a driver restart comes in two more options: ``first_tentative`` (a node that
restarts in failure: the reader is in failure from that bucket, as if it had released it) and
``ack_limit_file`` (a file holding a bucket number: while it exists, acknowledgements stop there,
so the producers keep what a redo from the all-stable checkpoint reads again, whichever of the
node's queries commits). ``hold_healed=false`` turns off the hold of now-stable buckets in
failure: a node that redoes on a copy of its query keeps serving, and holding would add the
budget to every new bucket.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from app.availability.sunion import DelayStrategy, SUnion
from app.availability.tuples import Message
from spark_jobs.runtime.transport import StreamClient

KIND_COLUMN = "kind"


@dataclass(frozen=True)
class BucketRange(InputPartition):
    """One input's buckets [lo, hi) in one micro-batch: one Spark task."""

    location: str
    stream: str
    lo: int
    hi: int
    # DPC: buckets from here on were released without every input's boundary.
    tentative_from: int | None = None


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
        budget = options.get("delay_budget_ms")
        self.delay_budget_ms = int(budget) if budget is not None else None
        self.bucket_ms = int(options.get("bucket_ms", "1000"))
        self.strategy = DelayStrategy(options.get("delay_strategy", DelayStrategy.DELAY_EACH))
        self.clock_location = options.get("clock_location")
        self.clock_stream = options.get("clock_stream")
        self.clock_offset_ms = int(options.get("clock_offset_ms", "0"))
        if (self.clock_location is None) != (self.clock_stream is None):
            raise ValueError("SUnion: clock_location and clock_stream go together")
        # First bucket this reader released tentatively: the reader is in failure from then on
        # (a new reader, after reconciliation restarts the query, starts stable again).
        self._first_tentative: int | None = (
            int(options["first_tentative"]) if "first_tentative" in options else None
        )
        self.ack_limit_file = options.get("ack_limit_file")
        self.hold_healed = options.get("hold_healed", "true") == "true"

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

    def _now_ms(self) -> int:
        if self.clock_location is not None and self.clock_stream is not None:
            boundary = self._client(self.clock_location).info(self.clock_stream)["boundary"]
            return int(boundary) if boundary is not None else 0
        return int(time.time() * 1000) - self.clock_offset_ms

    def _dpc_offset(self, start: dict[str, int] | None, boundaries: list[int | None]) -> Any:
        # The bucket rules are app.availability.sunion's; this only feeds it the boundaries
        # (rows stay in the logs, read by executors) and asks it which buckets may go now.
        assert self.delay_budget_ms is not None
        begin = start["bucket"] if start else self.initialOffset()["bucket"]
        names = [f"{i['location']}/{i['stream']}" for i in self.inputs]
        rules = SUnion(
            names,
            bucket_ms=self.bucket_ms,
            delay_budget_ms=self.delay_budget_ms,
            strategy=self.strategy,
            start_bucket=begin,
        )
        for name, boundary in zip(names, boundaries, strict=True):
            if boundary is not None:
                rules.receive(name, Message.boundary(boundary * self.bucket_ms))
        now = self._now_ms()
        limit = begin + self.max_buckets if self.max_buckets is not None else None
        tentative_from: int | None = None
        while limit is None or rules.next_bucket < limit:
            if (
                self.hold_healed
                and self._healed(rules)
                and now < rules.due_at(rules.next_bucket) + self.delay_budget_ms
            ):
                # Healed while in failure: reconciliation will redo these buckets stably, so
                # processing them now would only add tentative rows to correct (DPCNode does the
                # same). A bucket whose deadline passes before the redo still goes, tentatively.
                break
            bucket = rules.release(now, in_failure=self._first_tentative is not None)
            if bucket is None:
                break
            if not bucket.stable and tentative_from is None:
                tentative_from = bucket.number
                if self._first_tentative is None:
                    self._first_tentative = bucket.number
        end = rules.next_bucket
        if end == begin and start is not None:
            # Spark sees "no new data" only when the offset is equal to the start, extras too.
            return start
        offset: dict[str, int] = {"bucket": end}
        if tentative_from is not None:
            offset["tentative_from"] = tentative_from
        return offset

    def _healed(self, rules: SUnion) -> bool:
        first = self._first_tentative
        return first is not None and all(
            rules.stable_ready(b) for b in range(first, rules.next_bucket + 1)
        )

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        if self.delay_budget_ms is not None:
            result: dict[str, int] = self._dpc_offset(
                start, [info["boundary"] for info in self._infos()]
            )
            return result
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
        tentative = end.get("tentative_from")
        return [BucketRange(i["location"], i["stream"], lo, hi, tentative) for i in self.inputs]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, BucketRange)
        # Spark checks Arrow batches from read() against the declared schema exactly, nullability
        # included: a stream written by SOutput (Spark's toArrow marks every field nullable) would
        # be refused by a reader declaring non-null fields, so conform each batch. Timestamps are
        # UTC throughout (the session time zone and the generator agree).
        target = to_arrow_schema(self.schema, timezone="UTC")
        kinded = KIND_COLUMN in target.names
        # A fresh client per task: read() runs in executor workers on a pickled copy.
        with StreamClient(partition.location) as client:
            reader = client.read(partition.stream, partition.lo, partition.hi)
            for chunk in reader:
                batch = chunk.data
                if not batch.num_rows:
                    continue
                if kinded and KIND_COLUMN not in batch.schema.names:
                    batch = self._with_kind(batch, partition)
                if batch.schema != target:
                    # With a kind column, match by name (it was appended last here).
                    columns = (
                        [batch.column(field.name) for field in target] if kinded else batch.columns
                    )
                    batch = pa.RecordBatch.from_arrays(
                        [
                            column.cast(field.type)
                            for column, field in zip(columns, target, strict=True)
                        ],
                        schema=target,
                    )
                yield batch

    def _with_kind(self, batch: pa.RecordBatch, partition: BucketRange) -> pa.RecordBatch:
        micros = batch.column("stime").cast(pa.int64()).to_numpy()
        if partition.tentative_from is None:
            tentative = np.zeros(len(micros), dtype=bool)
        else:
            tentative = micros // (self.bucket_ms * 1000) >= partition.tentative_from
        kinds = pa.array(np.where(tentative, "TENTATIVE", "STABLE"), type=pa.string())
        return pa.RecordBatch.from_arrays(
            [*batch.columns, kinds], names=[*batch.schema.names, KIND_COLUMN]
        )

    def commit(self, end: dict[str, int]) -> None:
        # Spark has durably committed every batch up to ``end``: the producers may trim their
        # logs below it. Acknowledging later than this would only cost memory; earlier would
        # lose rows that a restart from the checkpoint must re-read.
        # DPC: buckets released tentatively must stay in the logs, because reconciliation
        # restores the checkpoint taken before the first of them and reads them again.
        bucket = end["bucket"]
        if self._first_tentative is not None:
            bucket = min(bucket, self._first_tentative)
        limit = self._ack_limit()
        if limit is not None:
            bucket = min(bucket, limit)
        for i in self.inputs:
            self._client(i["location"]).ack(i["stream"], self.consumer, bucket)

    def _ack_limit(self) -> int | None:
        if self.ack_limit_file is None:
            return None
        try:
            with open(self.ack_limit_file) as file:
                return int(file.read())
        except FileNotFoundError:
            return None

    def stop(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
